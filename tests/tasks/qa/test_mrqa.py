"""MRQA / SQuAD: readers (JSONL with and without header, SQuAD JSON), loss, n-best decoding, CLI end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers import FIXTURES as ALL_FIXTURES
from test_quoref import bert_dir, bpe_tokenizer, roberta_dir, run_cli, wp_tokenizer  # noqa: F401

from corefbert.errors import CorefBertError
from corefbert.tasks.qa.data import detect_format, read_mrqa_jsonl, read_qa_file
from corefbert.tasks.qa.windows import build_windows, span_loss, window_candidates

FIXTURES = ALL_FIXTURES / "mrqa"
MRQA = FIXTURES / "mrqa_tiny.jsonl"
SQUAD = FIXTURES / "squad_tiny.json"


def test_mrqa_reader_skips_header_and_keeps_every_detected_span():
    examples = {ex.qid: ex for ex in read_mrqa_jsonl(str(MRQA))}
    assert list(examples) == ["m1", "m2", "m3"]
    marta = examples["m2"]
    assert [a.text for a in marta.answers] == ["Marta", "Marta"] and marta.answers[0].start == 0
    assert marta.answers[1].start == marta.context.index("Marta", 1)
    assert examples["m3"].gold_texts == ["gulls and puffins", "gulls"]


def test_formats_are_detected_and_bad_lines_named(tmp_path):
    assert detect_format(str(MRQA)) == "mrqa" and detect_format(str(SQUAD)) == "squad"
    assert [ex.qid for ex in read_qa_file(str(SQUAD))] == ["s1", "s2", "s3"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"header": {}}\n{"context": "x", "qas": []}\nnot json\n')
    with pytest.raises(CorefBertError, match=r"bad.jsonl:3:1: not valid JSON \(Expecting value\); expected MRQA JSONL"):
        read_mrqa_jsonl(str(bad))
    bad.write_text('{"header": {}}\n{"text": "x"}\n')
    with pytest.raises(CorefBertError, match=r"bad.jsonl:2: a line without a \"context\""):
        read_qa_file(str(bad))


def test_span_outside_the_context_is_realigned_by_text_or_skipped(tmp_path, caplog):
    line = {"context": "Anna met Bert.", "qas": [
        {"qid": "a", "question": "who?", "answers": ["Bert"],
         "detected_answers": [{"text": "Bert", "char_spans": [[40, 43]]}]},
        {"qid": "b", "question": "who?", "answers": ["Carl"],
         "detected_answers": [{"text": "Carl", "char_spans": [[40, 43]]}]}]}
    path = tmp_path / "off.jsonl"
    path.write_text(json.dumps(line) + "\n")
    examples = read_mrqa_jsonl(str(path))
    assert [a.start for a in examples[0].answers] == [9] and examples[1].answers == []
    assert "1 answer offset(s) did not match" in caplog.text and "1 answer(s) not found" in caplog.text


def test_marginal_loss_by_hand():
    start = torch.tensor([[0.0, 1.0, 2.0, -1e30]])  # [batch, seq], the last position is padding
    end = torch.tensor([[1.0, 0.0, 0.0, -1e30]])
    starts, ends = torch.tensor([[1, 2]]), torch.tensor([[0, 2]])
    z_start, z_end = math.log(1 + math.e + math.e**2), math.log(math.e + 2)
    p_start = (math.e + math.e**2) / math.exp(z_start)
    p_end = (math.e + 1) / math.exp(z_end)
    expected = -(math.log(p_start) + math.log(p_end)) / 2
    assert span_loss(start, end, starts, ends, reduction="marginal").item() == pytest.approx(expected, rel=1e-6)
    summed = -((1 - z_start) + (1 - z_end) + (2 - z_start) + (0 - z_end)) / 2
    assert span_loss(start, end, starts, ends, reduction="sum").item() == pytest.approx(summed, rel=1e-6)
    padded = span_loss(start, end, torch.tensor([[1, -100]]), torch.tensor([[0, -100]]), reduction="marginal")
    assert padded.item() == pytest.approx(-((1 - z_start) + (1 - z_end)) / 2, rel=1e-6)


def test_nbest_decoding_respects_order_and_max_length():
    offsets = [[-1, -1], [0, 4], [5, 8], [9, 13], [-1, -1]]
    start = np.array([9.0, 1.0, 0.0, 3.0, 9.0])
    end = np.array([9.0, 4.0, 0.0, 0.0, 9.0])
    candidates = window_candidates(start, end, offsets, n_best=3, max_answer_length=30)
    assert max(candidates)[1:] == (0, 4)  # never a special token, never end before start
    assert all(s <= e for _, s, e in candidates)
    short = window_candidates(start, end, offsets, n_best=3, max_answer_length=1)
    assert {(s, e) for _, s, e in short} == {(0, 4), (5, 8), (9, 13)}


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_up_to_four_answers_per_window(request, model_type):
    tokenizer = request.getfixturevalue({"bert": "wp_tokenizer", "roberta": "bpe_tokenizer"}[model_type])
    examples = read_mrqa_jsonl(str(MRQA))
    windows = build_windows(examples, tokenizer, max_seq_length=128, max_answers=4, max_count=None)
    marta = [w for w in windows if examples[w["example_index"]].qid == "m2"][0]
    texts = [examples[1].context[marta["offsets"][s][0] : marta["offsets"][e][1]]
             for s, e in zip(marta["answer_starts"], marta["answer_ends"])]
    assert texts == ["Marta", "Marta"]


@pytest.mark.slow
@pytest.mark.parametrize("data", ["mrqa", "squad"])
def test_cli_end_to_end_and_saved_model_is_a_plain_qa_checkpoint(tmp_path, bert_dir, data):  # noqa: F811
    from transformers import AutoModelForQuestionAnswering

    path = MRQA if data == "mrqa" else SQUAD
    out = tmp_path / "out"
    results = run_cli(
        "run_mrqa.py", "--model_name_or_path", str(bert_dir), "--train_file", str(path), "--validation_file",
        str(path), "--do_train", "--do_eval", "--max_seq_length", "64", "--doc_stride", "32", "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--output_dir", str(out), "--disable_tqdm",
    )
    assert 0.0 <= results["eval_exact_match"] <= results["eval_f1"] <= 100.0 and results["eval_total"] == 3
    predictions = json.loads((out / "eval_predictions.json").read_text())
    assert set(predictions) == ({"m1", "m2", "m3"} if data == "mrqa" else {"s1", "s2", "s3"})
    assert all(isinstance(answer, str) for answer in predictions.values())
    _, info = AutoModelForQuestionAnswering.from_pretrained(str(out / "best"), output_loading_info=True)
    assert not info["missing_keys"]


def test_validation_split_is_seeded_and_by_context(tmp_path, bert_dir):  # noqa: F811
    from corefbert.tasks.base import FinetuningArguments
    from corefbert.tasks.qa.mrqa import MRQATask
    from corefbert.tasks.qa.task import QADataArguments

    def split(seed):
        data = QADataArguments(train_file=str(SQUAD), validation_split_percentage=50, split_seed=seed,
                               max_seq_length=64)
        task = MRQATask(data, FinetuningArguments(model_name_or_path=str(bert_dir), output_dir=str(tmp_path)))
        return [ex.qid for ex in task._examples("train")], [ex.qid for ex in task._examples("eval")]

    train, held_out = split(1)
    assert split(1) == (train, held_out)
    assert sorted(train + held_out) == ["s1", "s2", "s3"] and held_out
    assert {"s1", "s2"} <= set(train) or {"s1", "s2"} <= set(held_out)  # one context stays on one side


def test_too_long_windows_for_the_model_are_one_clear_error(tmp_path, bert_dir):  # noqa: F811
    from corefbert.tasks.base import FinetuningArguments
    from corefbert.tasks.qa.mrqa import MRQATask
    from corefbert.tasks.qa.task import QADataArguments

    args = FinetuningArguments(model_name_or_path=str(bert_dir), output_dir=str(tmp_path))
    with pytest.raises(CorefBertError, match="--max_seq_length 512 exceeds the model's 258 positions"):
        MRQATask(QADataArguments(train_file=str(SQUAD), max_seq_length=512), args)


@pytest.mark.shared_data
def test_real_mrqa_and_squad_samples(tmp_path, bert_dir, caplog):  # noqa: F811
    from helpers import shared_data

    newsqa = read_qa_file(str(shared_data("mrqa", "mrqa_newsqa_sample.jsonl")))  # no header line
    assert len(newsqa) == 17 and all(ex.answers for ex in newsqa)
    squad2 = read_qa_file(str(shared_data("mrqa", "squad2_dev_sample.json")))
    assert len(squad2) == 293 and "333 unanswerable question(s)" in caplog.text
    squad1 = shared_data("mrqa", "squad_v1_format_sample.json")
    results = run_cli(
        "run_mrqa.py", "--model_name_or_path", str(bert_dir), "--train_file", str(squad1), "--do_train",
        "--max_seq_length", "128", "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--output_dir", str(tmp_path / "out"), "--disable_tqdm",
    )
    assert results["train_steps"] == 2


def test_cli_fine_tunes_two_steps_with_every_family(tmp_path, family_dir):
    """MRQA (``AutoModelForQuestionAnswering``) on a tiny random checkpoint of each encoder family; the
    saved folder loads as the QA class and as ``AutoModel`` with no key missing or left over (no pooler is carried
    for a family whose encoder has none)."""
    from transformers import AutoModel, AutoModelForQuestionAnswering

    out = tmp_path / "out"
    results = run_cli(
        "run_mrqa.py", "--model_name_or_path", str(family_dir), "--train_file", str(MRQA), "--validation_file",
        str(MRQA), "--do_train", "--do_eval", "--max_seq_length", "64", "--doc_stride", "32", "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--output_dir", str(out), "--disable_tqdm",
    )
    assert results["train_steps"] == 2 and results["eval_total"] == 3
    predictions = json.loads((out / "eval_predictions.json").read_text())
    assert set(predictions) == {"m1", "m2", "m3"} and all(p == p.strip() for p in predictions.values())
    for model_class in (AutoModelForQuestionAnswering, AutoModel):
        _, info = model_class.from_pretrained(str(out / "best"), output_loading_info=True)
        assert not info["missing_keys"]
    _, info = AutoModel.from_pretrained(str(out / "best"), output_loading_info=True)
    assert not [k for k in info["unexpected_keys"] if "pooler" in k]
