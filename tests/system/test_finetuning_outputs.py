"""What every fine-tuning CLI leaves behind: an output folder that ``AutoModel`` loads with no
missing key and the trained encoder weights, ``eval_samples`` in ``all_results.json``, and a reload of the
saved folder by the CLI itself that predicts exactly what the trained model predicted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import FIXTURES, load_cli

COMMON = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3",
          "--checkpointing_steps", "1", "--save_total_limit", "3", "--disable_tqdm", "true", "--do_train", "--do_eval"]
DOCRED = ["--rel_info_file", str(FIXTURES / "docred" / "rel_info.json"), "--max_seq_length", "256",
          "--train_file", str(FIXTURES / "docred" / "train.json"),
          "--validation_file", str(FIXTURES / "docred" / "dev.json"), "--num_na_pairs", "2"]
KGAT = ["--model_type", "kgat", "--max_seq_length", "32", "--train_file", str(FIXTURES / "fever" / "train.jsonl"),
        "--wiki_pages_dir", str(FIXTURES / "fever" / "wiki-pages"),
        "--validation_file", str(FIXTURES / "fever" / "retrieved_dev.jsonl"),
        "--gradient_accumulation_steps", "1"]

# cli name -> (script, its data flags, how many examples its eval file holds, counted by the test)
CASES = {
    "glue": ("run_glue", ["--task_name", "rte", "--data_dir", str(FIXTURES / "glue" / "RTE"), "--max_seq_length", "48"],
             lambda: len((FIXTURES / "glue" / "RTE" / "dev.tsv").read_text().splitlines()) - 1),
    "quoref": ("run_quoref", ["--train_file", str(FIXTURES / "quoref" / "quoref_tiny.json"),
                              "--validation_file", str(FIXTURES / "quoref" / "quoref_tiny.json"),
                              "--max_seq_length", "64", "--doc_stride", "32"],
               lambda: _squad_questions(FIXTURES / "quoref" / "quoref_tiny.json")),
    "mrqa": ("run_mrqa", ["--train_file", str(FIXTURES / "mrqa" / "squad_tiny.json"),
                          "--validation_file", str(FIXTURES / "mrqa" / "squad_tiny.json"),
                          "--max_seq_length", "64", "--doc_stride", "32"],
             lambda: _squad_questions(FIXTURES / "mrqa" / "squad_tiny.json")),
    "docred": ("run_docred", DOCRED, lambda: len(json.loads((FIXTURES / "docred" / "dev.json").read_text()))),
    "fever_concat": ("run_fever", ["--train_file", str(FIXTURES / "fever" / "pairs.jsonl"),
                                   "--validation_file", str(FIXTURES / "fever" / "pairs.jsonl")],
                     lambda: _lines(FIXTURES / "fever" / "pairs.jsonl")),
    "fever_kgat": ("run_fever", KGAT,
                   lambda: _lines(FIXTURES / "fever" / "retrieved_dev.jsonl")),
    "coref": ("run_coref", ["--train_file", str(FIXTURES / "coref" / "blocks.txt"),
                            "--validation_file", str(FIXTURES / "coref" / "gap.tsv")],
              lambda: _lines(FIXTURES / "coref" / "gap.tsv") - 1),  # a header line
}


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def _squad_questions(path: Path) -> int:
    data = json.loads(path.read_text())["data"]
    return sum(len(p["qas"]) for article in data for p in article["paragraphs"])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_bert_dir):
    """Each CLI fine-tuned once for two updates (lazily, per case): ``name -> (output dir, results)``."""
    done: dict[str, tuple[Path, dict]] = {}

    def run(name: str):
        if name not in done:
            script, flags, _ = CASES[name]
            out = tmp_path_factory.mktemp(name) / "out"
            results = load_cli(f"finetune/{script}.py").main(
                ["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(out), *flags, *COMMON])
            done[name] = (out, results)
        return done[name]

    return run


def _trained_encoder(checkpoint: Path, encoder_keys) -> dict:
    """The encoder tensors of the training state Accelerate saved (any wrapper prefix), by encoder key."""
    from safetensors.torch import load_file

    state = load_file(str(checkpoint / "model.safetensors"))
    found = {}
    for key in encoder_keys:
        matches = [k for k in state if k == key or k.endswith("." + key)]
        if len(matches) == 1:
            found[key] = state[matches[0]]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_output_folders_load_with_automodel(name, trained, tiny_bert_dir):
    import torch
    from transformers import AutoModel

    out, _ = trained(name)
    initial = AutoModel.from_pretrained(str(tiny_bert_dir)).state_dict()
    for folder in ("best", "last"):
        model, info = AutoModel.from_pretrained(str(out / folder), output_loading_info=True)
        assert sorted(info["missing_keys"]) == [], (folder, info)
        encoder = model.state_dict()
        # The training state Accelerate saved after the same update (best may be from update 1).
        step = json.loads((out / "best" / "eval_results.json").read_text())["step"] if folder == "best" else 2
        trained_weights = _trained_encoder(out / "checkpoints" / f"step_{step}", encoder)
        # Every trained encoder tensor came back (the pooler too where the model keeps one) ...
        assert set(trained_weights) >= {k for k in encoder if not k.startswith("pooler.")}, folder
        for key, value in trained_weights.items():
            torch.testing.assert_close(encoder[key], value, rtol=0, atol=0, msg=f"{folder}: {key}")
        # ... and they are the trained ones, not the starting point (the first update runs at the warm-up's
        # learning rate 0, so a best/ from update 1 holds the starting weights by design).
        if step > 1:
            assert any(not torch.equal(encoder[k], initial[k]) for k in trained_weights if k in initial), folder


RELOAD = {  # cli -> (flags to evaluate a saved folder, the predictions file it writes)
    "docred": (["--validation_file", str(FIXTURES / "docred" / "dev.json"), "--max_seq_length", "256"],
               "eval_result.json"),
    "fever_kgat": (["--validation_file", str(FIXTURES / "fever" / "retrieved_dev.jsonl"), "--max_seq_length", "32"],
                   "eval_predictions.jsonl"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RELOAD))
def test_cli_reload_of_a_saved_folder_predicts_the_same(name, trained, tmp_path):
    out, results = trained(name)
    flags, predictions = RELOAD[name]
    again = load_cli(f"finetune/{CASES[name][0]}.py").main(
        ["--model_name_or_path", str(out / "best"), "--do_eval", "--output_dir", str(tmp_path / "again"),
         "--disable_tqdm", "true", *flags])
    assert (tmp_path / "again" / predictions).read_text() == (out / "best" / predictions).read_text()
    assert again["eval_" + ("f1" if name == "docred" else "accuracy")] == results["best_eval_" + (
        "f1" if name == "docred" else "accuracy")]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_all_results_count_the_evaluated_examples(name, trained):
    out, results = trained(name)
    expected = CASES[name][2]()
    assert results["eval_samples"] == expected
    assert json.loads((out / "all_results.json").read_text())["eval_samples"] == expected


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RELOAD))
def test_a_folder_without_its_head_weights_is_one_error_line(name, trained, tmp_path, capsys):
    import shutil

    out, _ = trained(name)
    old = tmp_path / "old"
    shutil.copytree(out / "best", old)
    (old / ("docred_head.safetensors" if name == "docred" else "fever_head.safetensors")).unlink()
    capsys.readouterr()  # drop what training the folder printed (when this test is the first to need it)
    with pytest.raises(SystemExit) as info:
        load_cli(f"finetune/{CASES[name][0]}.py").main(
            ["--model_name_or_path", str(old), "--do_eval", "--output_dir", str(tmp_path / "again"), *RELOAD[name][0]])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {old}") and "_head.safetensors" in err and "\n" not in err


HF_HEAD_CLASSES = {  # cli -> the standard Hugging Face class its folders are saved as
    "glue": "AutoModelForSequenceClassification",
    "fever_concat": "AutoModelForSequenceClassification",
    "mrqa": "AutoModelForQuestionAnswering",
}
SIDECARS = {"quoref": "quoref", "docred": "docred", "fever_kgat": "fever"}  # cli -> its <task>_head.* sidecar


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HF_HEAD_CLASSES))
def test_standard_heads_load_with_their_auto_class(name, trained):
    """QA and sequence classification are saved as their HF class (``pipeline()`` works on them)."""
    import transformers

    out, _ = trained(name)
    auto_class = getattr(transformers, HF_HEAD_CLASSES[name])
    for folder in ("best", "last"):
        _, info = auto_class.from_pretrained(str(out / folder), output_loading_info=True)
        assert sorted(info["missing_keys"]) == [], (folder, info)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SIDECARS))
def test_other_heads_sit_in_one_sidecar_layout(name, trained):
    """The encoder at the top (tested above), the head in ``<task>_head.safetensors`` + ``<task>_head.json``,
    read back by :mod:`corefbert.tasks.heads`."""
    from safetensors.torch import load_file

    from corefbert.tasks.heads import head_weights_file, read_head_config

    out, _ = trained(name)
    task = SIDECARS[name]
    for folder in ("best", "last"):
        assert read_head_config(str(out / folder), task), folder
        weights = load_file(str(out / folder / head_weights_file(task)))
        assert weights and not any(key.startswith("encoder.") for key in weights), folder
