"""DocRED evaluation figures: Ign F1 only where the training facts are known, and the truncated
entity count of each split its own."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, load_cli

DOCRED = FIXTURES / "docred"


def _truncated(path, tokenizer, max_seq_length: int) -> int:
    """Entities left with no mention inside the first window, counted from the reader's own features."""
    from corefbert.tasks.docred import document_features, load_relation_ids, read_docred

    relations = load_relation_ids(str(DOCRED / "rel_info.json"))
    index = {r: i for i, r in enumerate(relations)}
    return sum(document_features(doc, tokenizer, max_seq_length, False, 256, index)["truncated_entities"]
               for doc in read_docred(str(path), relations))


def _run(tmp_path, model_dir, *flags):
    out = tmp_path / "out"
    results = load_cli("finetune/run_docred.py").main([
        "--model_name_or_path", str(model_dir), "--rel_info_file", str(DOCRED / "rel_info.json"),
        "--max_seq_length", "256",
        "--validation_file", str(DOCRED / "dev.json"), "--do_eval", "--output_dir", str(out),
        "--disable_tqdm", "true", "--threshold", "0.5", *flags])
    assert json.loads((out / "all_results.json").read_text()) == pytest.approx(results)
    return results


def test_each_split_reports_its_own_truncated_entities(tmp_path, tiny_bert_dir, bert_tokenizer):
    # A window short enough that the test file (train.json) loses entities and dev loses fewer.
    length = next(n for n in range(8, 200) if _truncated(DOCRED / "train.json", bert_tokenizer, n)
                  != _truncated(DOCRED / "dev.json", bert_tokenizer, n))
    dev, test = (_truncated(DOCRED / name, bert_tokenizer, length) for name in ("dev.json", "train.json"))
    results = _run(tmp_path, tiny_bert_dir, "--test_file", str(DOCRED / "train.json"), "--do_predict",
                   "--max_seq_length", str(length))
    assert results["eval_truncated_entities"] == dev
    assert results["predict_truncated_entities"] == test


def test_ign_f1_is_left_out_without_training_facts(tmp_path, tiny_bert_dir, capsys):
    results = _run(tmp_path, tiny_bert_dir)
    assert "eval_f1" in results
    assert not any("ign" in key for key in results)
    err = capsys.readouterr().err
    assert "Ign F1 left out" in err and "--train_file" in err


def test_ign_f1_is_reported_when_the_training_file_is_given(tmp_path, tiny_bert_dir):
    from corefbert.metrics.docred import docred_scores, training_facts

    results = _run(tmp_path, tiny_bert_dir, "--train_file", str(DOCRED / "train.json"))
    predictions = json.loads((tmp_path / "out" / "eval_result.json").read_text())
    dev = json.loads((DOCRED / "dev.json").read_text())
    train = json.loads((DOCRED / "train.json").read_text())
    expected = docred_scores(predictions, dev, training_facts(train))
    assert results["eval_ign_f1"] == pytest.approx(expected["ign_f1"])
    assert results["eval_f1"] == pytest.approx(expected["f1"])
