"""GLUE: readers of the official TSV layouts, the task, and finetune/run_glue.py end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, shared_data

from corefbert.errors import CorefBertError
from corefbert.tasks.glue import GlueTask, glue_files, read_glue_tsv

GLUE = FIXTURES / "glue"


def _load_cli():
    spec = importlib.util.spec_from_file_location("run_glue", ROOT / "finetune" / "run_glue.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_glue"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture(scope="module")
def glue_bert_dir(tmp_path_factory):
    """A tiny random BERT with a WordPiece vocabulary of the GLUE fixtures (hidden 32)."""
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    texts = [line for path in sorted(GLUE.rglob("*.tsv")) for line in path.read_text().splitlines()]
    out = tmp_path_factory.mktemp("glue_bert")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(texts, vocab_size=400, min_frequency=1)
    trainer.save_model(str(out))
    tokenizer = BertTokenizerFast.from_pretrained(str(out))  # from vocab.txt (the constructor ignores it in 5.x)
    assert len(tokenizer) > 100
    tokenizer.save_pretrained(str(out))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=130)
    BertModel(config).save_pretrained(str(out))
    return out


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_readers_follow_each_official_layout():
    rte = read_glue_tsv(str(GLUE / "RTE" / "train.tsv"), "RTE", with_labels=True)
    assert len(rte) == 24 and rte[0].label == 0 and rte[1].label == 1 and rte[0].index == "0"
    assert rte[0].texts[1] == "The old teacher sold the blue boat."
    cola = read_glue_tsv(str(GLUE / "CoLA" / "train.tsv"), "cola", with_labels=True)
    assert len(cola) == 16 and cola[0].texts == ("The cat sat on the mat.",) and cola[1].label == 0
    cola_test = read_glue_tsv(str(GLUE / "CoLA" / "test.tsv"), "cola", with_labels=False)
    assert [e.index for e in cola_test] == ["0", "1", "2", "3", "4", "5"] and cola_test[0].label is None
    stsb = read_glue_tsv(str(GLUE / "STS-B" / "train.tsv"), "STS-B", with_labels=True)
    assert [e.label for e in stsb[:3]] == [5.0, 2.4, pytest.approx(0.2)]
    mnli = read_glue_tsv(str(GLUE / "MNLI" / "dev_mismatched.tsv"), "mnli", with_labels=True, subset="mm_")
    assert [e.label for e in mnli[:3]] == [1, 2, 0] and mnli[0].subset == "mm_"


def test_mrpc_byte_order_mark_header(tmp_path):
    path = _write(tmp_path, "train.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tA b.\tB a.\n")
    (example,) = read_glue_tsv(path, "mrpc", with_labels=True)
    assert example.texts == ("A b.", "B a.") and example.label == 1


@pytest.mark.parametrize(
    "task, text, message, position",
    [
        ("rte", "index\tsentence1\tlabel\n0\tA.\tentailment\n", "missing column(s) sentence2", ":1:"),
        ("rte", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailed\n", "unknown label 'entailed'", ":2:"),
        ("rte", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tA.\n", "row has 2 columns", ":3:"),
        ("stsb", "sentence1\tsentence2\tscore\nA.\tB.\thigh\n", "score 'high' is not a number", ":2:"),
        ("cola", "fx\t1\t\n", "row has 3 columns", ":1:"),
    ],
)
def test_bad_tsv_is_one_clear_line(tmp_path, task, text, message, position):
    path = _write(tmp_path, "bad.tsv", text)
    with pytest.raises(CorefBertError, match=re.escape(message)) as err:
        read_glue_tsv(path, task, with_labels=True)
    assert str(err.value).startswith(path + position) and "\n" not in str(err.value)


def test_unknown_task_and_missing_files(tmp_path):
    with pytest.raises(CorefBertError, match="unknown GLUE task 'rte2'"):
        glue_files("rte2", str(GLUE / "RTE"), {}, {"train": True})
    with pytest.raises(CorefBertError, match="dev.tsv: GLUE cola eval file not found"):
        glue_files("cola", str(tmp_path), {}, {"eval": True})
    files = glue_files("mnli", str(GLUE / "MNLI"), {}, {"train": False, "eval": True, "predict": True})
    assert [os.path.basename(p) for p, _ in files["eval"]] == ["dev_matched.tsv", "dev_mismatched.tsv"]
    assert [s for _, s in files["predict"]] == ["", "mm_"]


def test_cli_bad_input_prints_one_line(tmp_path, capsys, glue_bert_dir):
    main = _load_cli()
    with pytest.raises(SystemExit) as exit_info:
        main(["--model_name_or_path", str(glue_bert_dir), "--task_name", "glue9", "--data_dir", str(GLUE / "RTE"),
              "--do_train", "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown GLUE task 'glue9'") and "\n" not in err


def _run(tmp_path, model_dir, task, data_dir, *extra):
    out = tmp_path / task
    args = ["--model_name_or_path", str(model_dir), "--task_name", task, "--data_dir", str(data_dir),
            "--output_dir", str(out), "--do_train", "--do_eval", "--do_predict", "--num_train_epochs", "2",
            "--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--logging_steps", "2",
            "--disable_tqdm", "true", "--max_seq_length", "48", *extra]
    results = _load_cli()(args)
    with open(out / "all_results.json") as handle:
        assert json.load(handle) == pytest.approx(results, nan_ok=True)
    return out, results


def _submission(path):
    lines = Path(path).read_text().splitlines()
    assert lines[0] == "index\tprediction"
    return [line.split("\t") for line in lines[1:]]


@pytest.mark.slow
def test_rte_end_to_end(tmp_path, glue_bert_dir):
    from transformers import AutoModelForSequenceClassification

    out, results = _run(tmp_path, glue_bert_dir, "rte", GLUE / "RTE", "--eval_steps", "3")
    assert results["train_steps"] == 12
    assert results["best_eval_accuracy"] >= results["eval_accuracy"] - 1e-9
    rows = _submission(out / "RTE.tsv")
    assert [r[0] for r in rows] == [str(i) for i in range(6)]
    assert {r[1] for r in rows} <= {"entailment", "not_entailment"}
    dev = (out / "eval_predictions_rte.tsv").read_text().splitlines()
    assert dev[0] == "index\tprediction\tlabel" and dev[1].split("\t")[0] == "100" and len(dev) == 9
    # Percent, as the papers report: 100 x correct / total over the dev file's rows.
    correct = sum(row.split("\t")[1] == row.split("\t")[2] for row in dev[1:])
    assert results["eval_accuracy"] == pytest.approx(100 * correct / (len(dev) - 1))
    assert results["eval_samples"] == len(dev) - 1 and results["predict_samples"] == len(rows)
    model = AutoModelForSequenceClassification.from_pretrained(out / "best")
    assert model.config.id2label == {0: "entailment", 1: "not_entailment"}


@pytest.mark.slow
def test_cola_stsb_mnli_end_to_end(tmp_path, glue_bert_dir):
    _, cola = _run(tmp_path, glue_bert_dir, "cola", GLUE / "CoLA")
    assert "eval_matthews_correlation" in cola
    assert len(_submission(tmp_path / "cola" / "CoLA.tsv")) == 6

    _, stsb = _run(tmp_path, glue_bert_dir, "stsb", GLUE / "STS-B")
    assert {"eval_pearson", "eval_spearmanr"} <= set(stsb)
    scores = [float(r[1]) for r in _submission(tmp_path / "stsb" / "STS-B.tsv")]
    assert len(scores) == 5 and all(0.0 <= s <= 5.0 for s in scores)

    _, mnli = _run(tmp_path, glue_bert_dir, "mnli", GLUE / "MNLI")
    assert {"eval_accuracy", "eval_mm_accuracy"} <= set(mnli)
    matched = _submission(tmp_path / "mnli" / "MNLI-m.tsv")
    mismatched = _submission(tmp_path / "mnli" / "MNLI-mm.tsv")
    assert len(matched) == 4 and len(mismatched) == 3
    assert {r[1] for r in matched + mismatched} <= {"entailment", "neutral", "contradiction"}


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "task, folder, train_rows, dev_rows",
    [("rte", "RTE", 2127, 363), ("mrpc", "MRPC", 3300, 368), ("cola", "CoLA", 7250, 1301),
     ("sst2", "SST-2", 60614, 6735), ("wnli", "WNLI", 518, 117)],
)
def test_real_glue_reads_and_trains(tmp_path, glue_bert_dir, task, folder, train_rows, dev_rows):
    from corefbert.tasks.base import FinetuningArguments, run_finetuning
    from corefbert.tasks.glue import GlueArguments

    data = shared_data("glue", folder)
    args = FinetuningArguments(model_name_or_path=str(glue_bert_dir), output_dir=str(tmp_path / "out"),
                               do_train=True, do_eval=True, max_steps=2, per_device_train_batch_size=4,
                               max_train_samples=8, max_eval_samples=8, disable_tqdm=True)
    glue = GlueTask(GlueArguments(task_name=task, train_file=str(data / "train.tsv"),
                                  validation_file=str(data / "dev_sample.tsv"), max_seq_length=64), args)
    assert len(glue.examples("train")) == train_rows and len(glue.examples("eval")) == dev_rows
    assert all(e.label is not None for e in glue.examples("eval"))
    results = run_finetuning(glue, args)
    assert results["train_steps"] == 2 and f"eval_{glue.main_metric}" in results


def test_corefbert_pretraining_checkpoint_fine_tunes(tmp_path, glue_bert_dir):
    """A checkpoint of CorefBertForPreTraining (extra cls.*/mrp.* weights) loads with no encoder weight
    missing, pooler included, and run_glue trains from it."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from corefbert.pretraining.modeling import CorefBertForPreTraining

    torch.manual_seed(0)
    pretrained = CorefBertForPreTraining(AutoConfig.from_pretrained(glue_bert_dir))
    checkpoint = tmp_path / "corefbert"
    pretrained.save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(glue_bert_dir).save_pretrained(checkpoint)

    model, info = AutoModelForSequenceClassification.from_pretrained(checkpoint, output_loading_info=True)
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    torch.testing.assert_close(model.bert.pooler.dense.weight, pretrained.bert.pooler.dense.weight)
    _, results = _run(tmp_path, checkpoint, "rte", GLUE / "RTE")
    assert results["train_steps"] == 12 and "eval_accuracy" in results


def test_rte_fine_tunes_two_steps_with_every_family(tmp_path, family_dir):
    """RTE (sentence pairs, each tokenizer's own pair framing) for 2 steps on a tiny random checkpoint of
    each encoder family; the best folder loads as the sequence classifier with its labels and as ``AutoModel``."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    out, results = _run(tmp_path, family_dir, "rte", GLUE / "RTE", "--max_steps", "2")
    assert results["train_steps"] == 2 and 0.0 <= results["eval_accuracy"] <= 100.0
    assert {r[1] for r in _submission(out / "RTE.tsv")} <= {"entailment", "not_entailment"}
    model = AutoModelForSequenceClassification.from_pretrained(out / "best")
    assert model.config.id2label == {0: "entailment", 1: "not_entailment"}
    # Every encoder weight is there; RoBERTa's classifier has no pooler, so AutoModel makes a fresh one.
    _, info = AutoModel.from_pretrained(str(out / "best"), output_loading_info=True)
    assert not [key for key in info["missing_keys"] if not key.startswith("pooler.")]
