"""The run log (corefbert/training/outputs/runlog.py): one reader for the report, the curves, the ablation study and the
resume, which leaves out the torn last line of a killed run and refuses any other unreadable line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import synthetic_corpus

from corefbert.errors import CorefBertError
from corefbert.pretraining.plotting import plot_curves
from corefbert.pretraining.pretraining_args import PretrainingArguments
from corefbert.pretraining.report import best_evaluation
from corefbert.pretraining.run import run_pretraining
from corefbert.training.outputs.runlog import log_path, read_log, truncate_log

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def test_a_real_log_with_a_half_written_last_line_serves_report_plot_and_resume(tmp_path, tiny_bert_dir,
                                                                                 bert_tokenizer):
    """``best_evaluation`` (the pretraining report's) parsed every line and broke on the half line a
    kill leaves; the curves and the resume skipped it, each by its own reader. Now one reader serves all three."""
    corpus = synthetic_corpus(bert_tokenizer, n_train=16, n_eval=8)
    args = PretrainingArguments(model_name_or_path=str(tiny_bert_dir), output_dir=str(tmp_path / "run"), max_steps=4,
                                per_device_train_batch_size=4, per_device_eval_batch_size=8, learning_rate=1e-3,
                                logging_steps=1, eval_steps=2, checkpointing_steps="2", mixed_precision="no", seed=7)
    run_pretraining(args, splits=corpus)
    log = log_path(args.output_dir)
    whole = log.read_text(encoding="utf-8").splitlines(keepends=True)
    evaluations = [json.loads(line) for line in whole if '"split": "eval"' in line]
    assert [r["step"] for r in evaluations] == [0, 2, 4]
    # A kill halfway through appending the record after step 4's evaluation: half of that line, no newline.
    torn = json.dumps({"split": "train", "step": 5, "loss": 1.0, "epoch": 1.25})
    log.write_text("".join(whole) + torn[: len(torn) // 2], encoding="utf-8")

    records = read_log(log)
    assert records == [json.loads(line) for line in whole]  # everything but the torn line
    best = max(evaluations, key=lambda r: (r["mrp_accuracy"], -r["step"]))
    assert best_evaluation(log) == best  # the report
    pytest.importorskip("matplotlib")
    png = plot_curves(log, tmp_path / "curves.png")  # the curves
    assert png.read_bytes()[:4] == b"\x89PNG"

    # The resume: from step 4 to 6, the torn line gone and every step logged once.
    run_pretraining(replace(args, max_steps=6, resume_from_checkpoint="latest"), splits=corpus)
    lines = log.read_text(encoding="utf-8").splitlines()
    resumed = [json.loads(line) for line in lines]  # every line whole
    assert [r["step"] for r in resumed if r["split"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in resumed if r["split"] == "resume"] == [4]


def test_an_unreadable_line_before_the_last_is_one_line_naming_it(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"split": "train", "step": 1}\n{"split": "tr\n{"split": "train", "step": 2}\n', encoding="utf-8")
    with pytest.raises(CorefBertError, match=r"log.jsonl:2: not a record of a run's log .*is this a log.jsonl\?"):
        read_log(log)
    log.write_bytes(b'{"step": 1}\n\xff\xfe\n{"step": 2}\n')  # not UTF-8: another file than a log
    with pytest.raises(CorefBertError, match=r"log.jsonl:2: not a record"):
        read_log(log)
    log.write_text('{"step": 1}\n[1, 2]\n', encoding="utf-8")  # JSON, but no record; last, so left out
    assert read_log(log) == [{"step": 1}]
    with pytest.raises(CorefBertError, match=r"missing.jsonl: log file not found"):
        read_log(tmp_path / "missing.jsonl")


def test_truncation_keeps_the_records_before_the_step_and_drops_a_torn_end(tmp_path):
    log = tmp_path / "log.jsonl"
    records = [{"split": "train", "step": 1, "loss": 0.5}, {"split": "eval", "step": 2, "mrp_accuracy": 0.25},
               {"split": "train", "step": 2, "loss": 0.25}, {"split": "train", "step": 3, "loss": 0.125}]
    text = "".join(json.dumps(r) + "\n" for r in records)
    log.write_text(text + '{"split": "train", "st', encoding="utf-8")
    truncate_log(log, 2)
    assert log.read_text(encoding="utf-8") == "".join(json.dumps(r) + "\n" for r in records[:3])  # the same lines
    truncate_log(log, 2, evaluated=False)  # the step's evaluation is repeated by the resume: its record goes
    assert read_log(log) == [records[0], records[2]]
