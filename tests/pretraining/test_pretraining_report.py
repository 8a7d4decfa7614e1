"""What a pretraining run tells its user: the held-out MRP result as counts with an
interval, said to be a smoke test at the demo's size, and that ``final/`` is the last step, not the best."""

from __future__ import annotations

import json

import pytest

from corefbert.pretraining.pretraining_args import PretrainingArguments
from corefbert.pretraining.report import mrp_counts, print_summary, wilson_interval


def _metrics(correct: int, total: int = 45, mlm: float = 0.1) -> dict:
    return {"mrp_accuracy": correct / total, "mrp_mentions": total, "mrp_loss": 8.0, "mlm_accuracy": mlm,
            "mlm_loss": 7.0}


class _Printer:  # the one Accelerator method print_summary uses
    def __init__(self):
        self.text = ""

    def print(self, text):
        self.text += text


def test_wilson_interval_against_hand_computed_values():
    # 8 of 45, z = 1.96: centre (p + z²/2n) / (1 + z²/n), half-width z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n)
    assert wilson_interval(8, 45) == pytest.approx((0.09294, 0.31330), abs=1e-5)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_the_summary_shows_counts_intervals_and_that_final_is_the_last_step(tmp_path):
    # The demo's run: 8 -> 11 of 45, with a better evaluation at step 80 than at the end (step 120).
    log = [{"split": "eval", "step": step, **_metrics(correct)} for step, correct in ((0, 8), (80, 12), (120, 11))]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log), encoding="utf-8")
    args = PretrainingArguments(output_dir=str(tmp_path), max_steps=120)
    printer = _Printer()
    print_summary(printer, args, _metrics(8), _metrics(11), tmp_path / "final")
    text = printer.text
    assert "held-out MRP: 8 of 45 (0.178, 95% CI 0.09-0.31) masked mentions copied right before -> " \
           "11 of 45 (0.244, 95% CI 0.14-0.39) after" in text
    assert "a smoke test that the pipeline trains, not a measurement" in text
    assert "final/ holds the model after the last step (step 120), not the best evaluation (step 80 had 12 of 45" \
           in text
    # What to do next: the curves, the copy head on a pronoun benchmark, the other tasks and the guides.
    assert f"corefbert plot {tmp_path / 'log.jsonl'} -o " in text and "--zero_shot copy" in text
    assert "docs/README.md" in text
    # The last step the best: said so, not "not the best evaluation".
    printer = _Printer()
    print_summary(printer, args, _metrics(8), _metrics(12), tmp_path / "final")
    assert "final/ holds the model after the last step (step 120), the best held-out evaluation too" in printer.text
    assert "not the best" not in printer.text


def test_the_model_card_says_the_counts_and_the_last_step(tmp_path):
    from corefbert.pretraining.report import pretraining_card

    args = PretrainingArguments(output_dir=str(tmp_path / "demo"), max_steps=120)
    card = str(pretraining_card(args, _metrics(8), _metrics(11), 1, "no"))
    assert "8 of 45 (0.178, 95% CI 0.09-0.31) before" in card and "11 of 45 (0.244, 95% CI 0.14-0.39) after" in card
    assert "after the last training step\n(step 120), not the best evaluation" in card
    assert mrp_counts(_metrics(11)) in card
