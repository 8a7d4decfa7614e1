"""finetune/run_pronoun_pairs.py end to end on the 16-pair fixture: every --model, per-type evaluation, the
type filters of the ablation, GloVe-format vectors, a saved folder evaluated again, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, can_mount_tmpfs, load_cli, run_on_a_small_disk

from corefbert.errors import CorefBertError
from corefbert.tasks.pronoun_pairs.task import read_pairs

PAIRS16 = FIXTURES / "pronoun_pairs" / "pairs16.jsonl"
SMALL = ["--hidden_size", "16", "--embedding_dim", "8", "--num_train_epochs", "2", "--per_device_train_batch_size",
         "8", "--disable_tqdm", "true", "--seed", "0"]


def _main(argv):
    return load_cli("finetune/run_pronoun_pairs.py").main(argv)


def _lines(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["da", "lstmn", "bilstm"])
def test_scratch_models_end_to_end_and_reload(tmp_path, fresh_accelerate_state, model):
    out = tmp_path / model
    results = _main(["--model", model, "--train_file", str(PAIRS16), "--validation_file", str(PAIRS16),
                     "--test_file", str(PAIRS16), "--do_train", "--do_eval", "--do_predict",
                     "--output_dir", str(out), *SMALL])
    saved = json.loads((out / "all_results.json").read_text())
    for key in ("eval_accuracy", "eval_f1", "eval_kappa", "eval_tp", "eval_tn", "eval_fp", "eval_fn",
                "eval_correct_accuracy", "eval_in_scope_accuracy", "eval_out_of_scope_accuracy", "predict_accuracy"):
        assert key in saved, key
    assert saved["eval_tp"] + saved["eval_fn"] == 6 and saved["eval_tn"] + saved["eval_fp"] == 10
    assert saved["eval_in_scope_count"] == saved["eval_out_of_scope_count"] == 5
    assert {p.name for p in (out / "best").iterdir()} >= {"model.safetensors", "pair_model.json", "vocab.json"}
    # The log counts the words of both texts (the task's token_masks), never "tokens: 0".
    train = [r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if r.get("split") == "train"]
    assert train and all(r["tokens"] > 0 and 0 < r["slot_fill"] <= 1 for r in train)
    rows = _lines(out / "eval_predictions.jsonl")
    assert len(rows) == 16 and [r["line"] for r in rows] == list(range(1, 17))
    accuracy = 100 * sum(r["prediction"] == r["label"] for r in rows) / 16
    assert results["eval_accuracy"] == pytest.approx(accuracy)
    # The best folder, evaluated again without training, gives the same figures.
    again = _main(["--model", model, "--model_name_or_path", str(out / "best"), "--validation_file", str(PAIRS16),
                   "--do_eval", "--output_dir", str(tmp_path / "again"), "--disable_tqdm", "true"])
    assert again["eval_accuracy"] == pytest.approx(saved["eval_accuracy"])
    assert again["eval_tp"] == saved["eval_tp"]


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", ["tiny_bert_dir", "coref_checkpoint"])
def test_bert_pair_classifier_end_to_end(tmp_path, fresh_accelerate_state, request, checkpoint):
    """From a plain BERT and from a CorefBERT pretraining checkpoint (its MRP head left out)."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    out = tmp_path / "bert"
    model_dir = request.getfixturevalue(checkpoint)
    results = _main(["--model", "bert", "--model_name_or_path", str(model_dir), "--train_file", str(PAIRS16),
                     "--validation_file", str(PAIRS16), "--do_train", "--do_eval", "--output_dir", str(out),
                     "--num_train_epochs", "1", "--per_device_train_batch_size", "8", "--max_seq_length", "64",
                     "--disable_tqdm", "true"])
    assert results["eval_samples"] == 16 and "eval_kappa" in results
    model, info = AutoModelForSequenceClassification.from_pretrained(out / "best", output_loading_info=True)
    assert not info["missing_keys"] and model.config.id2label == {0: "not_entailed", 1: "entailed"}
    AutoModel.from_pretrained(out / "best")


@pytest.mark.slow
def test_ablation_filters_training_and_evaluation_types(tmp_path, fresh_accelerate_state):
    results = _main(["--model", "da", "--train_file", str(PAIRS16), "--validation_file", str(PAIRS16),
                     "--train_types", "correct,out_of_scope", "--eval_types", "correct,in_scope", "--do_train",
                     "--do_eval", "--output_dir", str(tmp_path / "ablation"), "--selection_metric", "kappa", *SMALL])
    assert results["eval_samples"] == 11  # 6 correct + 5 in-scope
    assert "best_eval_kappa" in results and "best_eval_accuracy" not in results
    assert results["eval_in_scope_count"] == 5 and "eval_out_of_scope_count" not in results
    assert results["train_steps"] == 2 * 2  # 11 training pairs, batch 8: 2 steps per epoch


@pytest.mark.slow
def test_glove_format_vectors_and_hashed_unknown_words(tmp_path, fresh_accelerate_state):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("john 0.1 0.2 0.3 0.4\nmary 0.5 0.6 0.7 0.8\nthe 1 1 1 1\n", encoding="utf-8")
    out = tmp_path / "glove"
    _main(["--model", "bilstm", "--embeddings_file", str(vectors), "--train_file", str(PAIRS16), "--do_train",
           "--output_dir", str(out), *SMALL])
    vocab = json.loads((out / "last" / "vocab.json").read_text())
    assert vocab["words"][:5] == ["<pad>", "<unk>", "john", "mary", "the"] and vocab["oov_buckets"] == 100
    config = json.loads((out / "last" / "pair_model.json").read_text())
    assert config["embedding_dim"] == 4 and config["freeze_embeddings"] is True
    from safetensors.torch import load_file

    weights = load_file(str(out / "last" / "model.safetensors"))["embed.embeddings.weight"]
    # unit L2 norm and fixed, as Parikh et al. keep them: 0.1..0.4 / sqrt(0.3)
    assert weights[2].tolist() == pytest.approx([v / 0.3 ** 0.5 for v in (0.1, 0.2, 0.3, 0.4)])


def test_reader_checks_every_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = '{"label": 1, "source": "a b", "target": "a c", "type": "correct"}\n'
    for text, message in [
        ('{"label": 2, "source": "a", "target": "b", "type": "correct"}\n', ":2: label 2 is not 0 or 1"),
        ('{"label": 0, "source": "a", "target": "b", "type": "wrong"}\n', ":2: type 'wrong' is not one of"),
        ('{"label": 1, "source": "a", "target": "b", "type": "in_scope"}\n', ":2: a in_scope pair with label 1"),
        ('{"label": 1, "source": "a", "type": "correct"}\n', ":2: pair without target"),
        ('{"label": 1, "source": "", "target": "b", "type": "correct"}\n', ":2: source and target must be"),
        ("[1, 2]\n", ":2: a pair is a JSON object"),
    ]:
        bad.write_text(good + text, encoding="utf-8")
        with pytest.raises(CorefBertError, match=message):
            read_pairs(str(bad))
    bad.write_text(good, encoding="utf-8")
    with pytest.raises(CorefBertError, match="no pairs of types in_scope in the file"):
        read_pairs(str(bad), ["in_scope"])
    assert len(read_pairs(str(PAIRS16), ["correct"])) == 6


@pytest.mark.parametrize("argv,message", [
    (["--model", "gru"], "--model 'gru' is not one of"),
    (["--model", "lstmn", "--intra_attention"], "--intra_attention is an option of --model da"),
    (["--model", "bert"], "--model bert fine-tunes a checkpoint: pass --model_name_or_path"),
    (["--train_types", "correct,typo"], "--train_types 'correct,typo': pair types are"),
    (["--embeddings_file", "/nonexistent/glove.txt"], "embeddings file not found"),
    (["--selection_metric", "loss"], "--selection_metric 'loss' is not accuracy, f1 or kappa"),
])
def test_bad_flags_are_one_line(tmp_path, capsys, fresh_accelerate_state, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        _main(["--train_file", str(PAIRS16), "--do_train", "--output_dir", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_help():
    done = subprocess.run([sys.executable, str(ROOT / "finetune" / "run_pronoun_pairs.py"), "--help"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "--train_types" in done.stdout and "--embeddings_file" in done.stdout


def test_long_texts_are_cut_around_the_replaced_pronoun():
    from corefbert.tasks.pronoun_pairs.task import replacement_window

    source, target = "w0 w1 w2 w3 w4 he w6 w7 w8 w9", "w0 w1 w2 w3 w4 the man w6 w7 w8 w9"
    assert replacement_window(source, target, 4) == ("w3 w4 he w6", "w3 w4 the man", True)
    # near the end, the window ends with the text; short texts are kept whole
    assert replacement_window("a b c d e f g he", "a b c d e f g Tom", 4) == ("e f g he", "e f g Tom", True)
    assert replacement_window("a he", "a Tom", 4) == ("a he", "a Tom", False)


@pytest.mark.shared_data
@pytest.mark.slow
def test_pairs_generated_from_shared_conll_train_a_model(tmp_path, fresh_accelerate_state):
    """The contract with the generator: its pairs.jsonl of real OntoNotes text reads and trains here."""
    from helpers import shared_data

    conll = shared_data("conll2012", "ontonotes_excerpts", "coref.gold_conll")
    generator = pytest.importorskip("corefbert.tasks.pronoun_pairs.builder")
    counts = generator.main(["--input", str(conll), "--output_dir", str(tmp_path / "pairs"), "--seed", "13"])
    pairs = tmp_path / "pairs" / "pairs.jsonl"
    examples = read_pairs(str(pairs))
    assert {kind: sum(e.type == kind for e in examples) for kind in ("correct", "in_scope", "out_of_scope")} == \
        {kind: counts[kind] for kind in ("correct", "in_scope", "out_of_scope")}
    results = _main(["--model", "da", "--train_file", str(pairs), "--validation_file", str(pairs), "--do_train",
                     "--do_eval", "--output_dir", str(tmp_path / "da"), *SMALL])
    assert results["eval_samples"] == len(examples)
    assert results["eval_tp"] + results["eval_fn"] == counts["correct"]


@pytest.mark.slow
def test_scratch_model_resumes_exactly(tmp_path, fresh_accelerate_state):
    """A run killed after its step-2 checkpoint and resumed from ``latest`` ends with the uninterrupted run's
    weights and losses (dropout on: the resumed RNG state matters)."""
    import shutil

    import torch
    from safetensors.torch import load_file

    def run(out, *more):
        return _main(["--model", "da", "--intra_attention", "--train_file", str(PAIRS16), "--do_train",
                      "--output_dir", str(out), "--hidden_size", "16", "--embedding_dim", "8", "--dropout", "0.3",
                      "--num_train_epochs", "2", "--per_device_train_batch_size", "6", "--checkpointing_steps", "1",
                      "--save_total_limit", "0", "--logging_steps", "1", "--disable_tqdm", "true", "--seed", "5",
                      *more])

    full = tmp_path / "full"
    want = run(full)
    assert want["train_steps"] == 6
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    for name in ("step_3", "step_4", "step_5", "step_6"):
        shutil.rmtree(next(resumed.rglob(name)))
    shutil.rmtree(resumed / "last")
    (resumed / "all_results.json").unlink()
    got = run(resumed, "--resume_from_checkpoint", "latest")
    records = [json.loads(line) for line in (resumed / "log.jsonl").read_text().splitlines()]
    assert [r["resumed_from"].rsplit("/", 1)[-1] for r in records if "resumed_from" in r] == ["step_2"]
    assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-6)
    a, b = load_file(str(full / "last" / "model.safetensors")), load_file(str(resumed / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-6, atol=1e-7)


def test_input_embeddings_of_a_model_as_word_vectors(tmp_path, tiny_bert_dir):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from corefbert.text.word_vocab import read_word_vectors, write_input_embeddings

    path = tmp_path / "vectors.txt"
    assert write_input_embeddings(str(tiny_bert_dir), ["The cat sat", "the dog"], str(path)) == 4
    vectors, dimension = read_word_vectors(str(path), {"cat", "dog", "the", "sat"}, lowercase=True)
    assert dimension == 32 and sorted(vectors) == ["cat", "dog", "sat", "the"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    table = AutoModel.from_pretrained(tiny_bert_dir).get_input_embeddings().weight.detach()
    want = table[tokenizer("cat", add_special_tokens=False)["input_ids"]].mean(0)
    torch.testing.assert_close(torch.tensor(vectors["cat"]), want, atol=1e-5, rtol=0)


def test_scratch_models_get_their_defaults_and_bert_keeps_berts(tmp_path):
    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.pronoun_pairs.task import PronounPairsTask

    base = ["--output_dir", str(tmp_path)]
    _, scratch = parse_task_arguments(PronounPairsTask, [*base, "--model", "lstmn"])
    assert (scratch.learning_rate, scratch.weight_decay, scratch.num_train_epochs) == (1e-3, 0.0, 30.0)
    _, bert = parse_task_arguments(PronounPairsTask, [*base, "--model", "bert"])
    assert (bert.learning_rate, bert.num_train_epochs, bert.optim) == (3e-5, 3.0, "adamw_torch")
    _, chosen = parse_task_arguments(PronounPairsTask, [*base, "--model", "da", "--learning_rate", "0.01"])
    assert chosen.learning_rate == 0.01


# The paper-exact recipe of each classifier (docs/guides/pronoun_pairs.md, the paper <-> code table), written out
# here once more so that a change to MODEL_DEFAULTS or SCRATCH_DEFAULTS has to be a change to this table too.
PAPER_RECIPES = {
    "da": {"optim": "adagrad", "learning_rate": 0.05, "per_device_train_batch_size": 4, "dropout": 0.2,
           "intra_attention": True},
    "lstmn": {"optim": "adamw_torch", "learning_rate": 1e-3, "per_device_train_batch_size": 32, "dropout": 0.0},
    "bilstm": {"optim": "adamw_torch", "learning_rate": 1e-3, "per_device_train_batch_size": 32, "dropout": 0.0},
}


@pytest.mark.parametrize("model", ["da", "lstmn", "bilstm"])
def test_each_scratch_model_defaults_to_the_papers_recipe(model, tmp_path):
    """Table 2's budget and sizes (30 epochs, H 450, 300-d words, constant rate, no decay) and each
    model's optimizer, rate, batch and dropout, from a flag or a --config file alike; a flag still wins."""
    import dataclasses

    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.pronoun_pairs.task import PronounPairsTask

    config = tmp_path / "pairs.yaml"
    config.write_text(f"model: {model}\n")
    for argv in (["--model", model], ["--config", str(config)]):
        task_args, args = parse_task_arguments(PronounPairsTask, ["--output_dir", str(tmp_path), *argv])
        values = {**dataclasses.asdict(task_args), **dataclasses.asdict(args)}
        want = {**PAPER_RECIPES[model], "num_train_epochs": 30.0, "hidden_size": 450, "embedding_dim": 300,
                "weight_decay": 0.0, "warmup_ratio": 0.0, "lr_scheduler_type": "constant"}
        assert {k: values[k] for k in want} == want
    task_args, args = parse_task_arguments(PronounPairsTask, ["--output_dir", str(tmp_path), "--model", model,
                                                              "--optim", "adamw_torch", "--dropout", "0.3"])
    assert (args.optim, task_args.dropout) == ("adamw_torch", 0.3)
    if model == "da":
        task_args, _ = parse_task_arguments(PronounPairsTask, ["--output_dir", str(tmp_path), "--model", model,
                                                               "--intra_attention", "false"])
        assert task_args.intra_attention is False


@pytest.mark.parametrize("model", ["da", "lstmn", "bilstm", "bert"])
def test_each_classifier_recipe_is_a_class_whose_defaults_a_flag_and_a_config_give_alike(model, tmp_path):
    """The BERT and the from-scratch recipes are task classes with their own ``training_defaults``;
    ``--model`` on the command line and in a ``--config`` YAML pick the same one."""
    import dataclasses

    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.pronoun_pairs.task import BertPairsTask, PronounPairsTask, ScratchPairsTask

    variant = PronounPairsTask.variant_for(["--model", model])
    assert issubclass(variant, BertPairsTask if model == "bert" else ScratchPairsTask) and variant.models == (model,)
    config = tmp_path / "pairs.yaml"
    config.write_text(f"model: {model}\n")
    base = ["--output_dir", str(tmp_path)]
    parsed = [parse_task_arguments(PronounPairsTask, [*base, "--model", model]),
              parse_task_arguments(PronounPairsTask, [*base, "--config", str(config)]),
              parse_task_arguments(variant, [*base, "--model", model])]
    flags, yaml_file, direct = [dataclasses.asdict(args) for _, args in parsed]
    assert flags == yaml_file == direct
    assert flags["learning_rate"] == {"bert": 3e-5, "da": 0.05}.get(model, 1e-3)
    assert variant.uses_model_folder == (model == "bert")


def test_the_family_is_not_a_task_and_a_variant_refuses_the_other_recipe(tmp_path):
    from corefbert.errors import CorefBertError
    from corefbert.tasks.base import FinetuningArguments
    from corefbert.tasks.pronoun_pairs.task import (
        BertPairsTask,
        LstmnPairsTask,
        PronounPairsArguments,
        PronounPairsTask,
        ScratchPairsTask,
    )

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"label": 1, "source": "he sat", "target": "Tom sat", "type": "correct"}\n')
    args = FinetuningArguments(output_dir=str(tmp_path / "out"), do_train=True)
    with pytest.raises(TypeError, match="PronounPairsTask is a family of variants"):
        PronounPairsTask(PronounPairsArguments(train_file=str(pairs)), args)
    with pytest.raises(CorefBertError, match="--model da is not BertPairsTask's, which fine-tunes bert"):
        BertPairsTask(PronounPairsArguments(model="da", train_file=str(pairs)), args)
    with pytest.raises(CorefBertError, match="--model bert is not ScratchPairsTask's"):
        ScratchPairsTask(PronounPairsArguments(model="bert", train_file=str(pairs)), args)
    with pytest.raises(CorefBertError, match="--model da is not LstmnPairsTask's, which trains lstmn"):
        LstmnPairsTask(PronounPairsArguments(model="da", train_file=str(pairs)), args)
    assert ScratchPairsTask(PronounPairsArguments(model="da", train_file=str(pairs)), args).train_dataset()


def test_the_probability_spread_and_the_collapse_line():
    from corefbert.tasks.pronoun_pairs.task import collapse_warning, probability_spread

    assert probability_spread([0.2, 0.4]) == pytest.approx(0.1) and probability_spread([0.3438] * 5) == 0.0
    line = collapse_warning("eval", probability_spread([0.3438] * 5), 0.3438)
    assert line.startswith("eval: every pair gets P(entailed) 0.3438") and "collapsed" in line
    assert collapse_warning("eval", 0.02, 0.3) is None


@pytest.mark.slow
def test_a_model_that_answers_every_pair_alike_is_named_collapsed(tmp_path, fresh_accelerate_state, caplog):
    """Parikh et al.'s Adagrad recipe left the Decomposable Attention with one output for every pair on the 90
    LitBank documents; the figures of such a model are the majority answer's, so evaluation says so in one line and logs
    the spread of P(entailed). Forced here: the trained model's output layer zeroed, so only its bias is left."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path / "da"
    trained = _main(["--model", "da", "--train_file", str(PAIRS16), "--validation_file", str(PAIRS16),
                     "--do_train", "--do_eval", "--output_dir", str(out), *SMALL])
    assert trained["eval_p_entailed_std"] > 0
    weights = load_file(str(out / "best" / "model.safetensors"))
    last = [name for name, w in weights.items() if w.dim() == 2 and w.shape[0] == 2][-1]  # [2, hidden]: the output layer
    weights[last] = torch.zeros_like(weights[last])
    save_file(weights, str(out / "best" / "model.safetensors"))
    with caplog.at_level("WARNING"):
        again = _main(["--model", "da", "--model_name_or_path", str(out / "best"), "--validation_file", str(PAIRS16),
                       "--do_eval", "--output_dir", str(tmp_path / "again"), "--disable_tqdm", "true"])
    assert again["eval_p_entailed_std"] == 0.0 and again["eval_tp"] + again["eval_fp"] in (0, 16)
    assert any("every pair gets P(entailed)" in r.getMessage() and "collapsed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("free_kib", [4, 12])
def test_an_evaluation_on_a_full_disk_is_one_line(tmp_path, fresh_accelerate_state, free_kib):
    """A real tmpfs filled but for a few KiB; the evaluation's log line (4 KiB free) or its
    predictions and ``all_results.json`` (12 KiB) found the disk full and ended in an ``OSError`` traceback."""
    mount = tmp_path / "small_disk"
    if not can_mount_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root and unshare (CI and the dev machines have both)")
    trained = tmp_path / "trained"
    _main(["--train_file", str(PAIRS16), "--do_train", "--max_steps", "2", "--output_dir", str(trained), *SMALL])
    done = run_on_a_small_disk(mount, f'fill_but {free_kib} && "$2" finetune/run_pronoun_pairs.py --model_name_or_path '
                                      f'"$3" --validation_file "$4" --test_file "$4" --do_eval --do_predict '
                                      '--disable_tqdm true --output_dir "$1/out"', sys.executable,
                               str(trained / "last"), str(PAIRS16))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    if free_kib == 4:  # the log line, appended by the run log's one writer, as in training
        assert last == (f"error: {mount}/out/log.jsonl: could not append to the log (disk full); no checkpoint was "
                        "written yet. Free space or choose another --output_dir, then rerun with "
                        "--resume_from_checkpoint latest")
    else:  # a result file, named by the one writer (corefbert.text.durable.output_file)
        assert last.startswith(f"error: {mount}/out/") and ": could not write the " in last, last
        assert "(disk full); nothing was written there and an earlier copy, if any, is intact" in last, last


def test_bert_pair_classifier_fine_tunes_two_steps_with_every_family(tmp_path, fresh_accelerate_state, family_dir):
    """``--model bert`` (a sequence-pair classifier) on a tiny random checkpoint of each encoder family."""
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "pairs"
    results = _main(["--model", "bert", "--model_name_or_path", str(family_dir), "--train_file", str(PAIRS16),
                     "--validation_file", str(PAIRS16), "--do_train", "--do_eval", "--output_dir", str(out),
                     "--max_steps", "2", "--per_device_train_batch_size", "8", "--max_seq_length", "64",
                     "--disable_tqdm", "true"])
    assert results["train_steps"] == 2 and results["eval_samples"] == 16 and "eval_kappa" in results
    model = AutoModelForSequenceClassification.from_pretrained(out / "best")
    assert model.config.id2label == {0: "not_entailed", 1: "entailed"}
