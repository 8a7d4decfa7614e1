"""SIGTERM during an evaluation of the training loop ends the run within seconds.

Before, the loop noticed a signal only between optimizer steps, so a SIGTERM that came during an evaluation
waited for the whole evaluation (110 s seen) before the promised exit 143, past the ~30 s after which
schedulers kill. Now the evaluation is abandoned between two batches (nothing of it is written), the step's
checkpoint is saved when it is not there yet, and the resume repeats the evaluation, ending like a run that was
never stopped.

Each run here is a real CLI in a subprocess with a real SIGTERM. The evaluations after the first training step
are made slow on purpose by a driver: every evaluation batch of the encoder sleeps 0.5 s, as one of a large
model would take, so a whole evaluation of the 240-example eval set takes 2 minutes. The code under test is
unchanged; the uninterrupted reference runs and the resumes run without the driver.
"""

from __future__ import annotations

import json
import shutil
import signal
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import test_crash_safety
import torch
from helpers import load_cli, save_corpus, synthetic_corpus
from test_crash_safety import GLUE_RTE, _losses, _start, _wait_until
from test_training import _args as _toy_args
from test_training import _Job, _run
from test_training_faults import _assert_same_run, _records

from corefbert.training.checkpoints.folders import checkpoints_root, list_checkpoints, read_trainer_state
from corefbert.training.checkpoints.signals import raise_if_stopping

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")
model_dir = test_crash_safety.model_dir  # the crash tests' tiny BERT (dropout 0.1: the RNG matters)

EVAL_EXAMPLES = 240  # x 0.5 s a batch of one: a 2-minute evaluation where the driver slows it
# "At once": after the signal the evaluation runs at most the batch it is in (the driver counts them). A limit in
# seconds from SIGTERM to exit (20, a checkpoint save included) measured the machine's load as much.
BATCHES_AFTER_THE_SIGNAL = 1

# argv: the CLI script, the marker file, its arguments. The marker is written at the first slow evaluation batch.
DRIVER = textwrap.dedent('''
    import os, runpy, sys, time
    from pathlib import Path
    script, marker, argv = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    from transformers.models.bert import modeling_bert

    real_forward, trained = modeling_bert.BertModel.forward, []
    def forward(self, *args, **kwargs):
        if self.training:
            trained.append(1)
        elif trained:  # an evaluation after the first training step: as slow as a large model's
            if not marker.exists():
                marker.write_text(str(os.getpid()))
            with open(marker.with_suffix(".batches"), "a") as batches:  # one character per evaluation batch
                batches.write(".")
            time.sleep(0.5)
        return real_forward(self, *args, **kwargs)
    modeling_bert.BertModel.forward = forward
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")
''')


@pytest.fixture(scope="module")
def large_eval_corpus(tmp_path_factory, model_dir):
    """The crash tests' synthetic corpus with a held-out split of EVAL_EXAMPLES rows."""
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("signal_corpus") / "corpus"
    save_corpus(synthetic_corpus(AutoTokenizer.from_pretrained(model_dir), n_train=24, n_eval=EVAL_EXAMPLES), out)
    return out


def _stop_in_evaluation(tmp_path: Path, script: str, argv: list[str]) -> tuple[int, str]:
    """Start ``script`` under the driver, SIGTERM it a few batches into its first slow evaluation; returns how
    many evaluation batches ran after the signal (asserting exit 143) and what it printed."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    marker, printed = tmp_path / "slow_eval.marker", tmp_path / "stopped.out"
    batches = marker.with_suffix(".batches")

    def counted() -> int:
        return len(batches.read_text()) if batches.exists() else 0

    proc = _start(str(driver), [script, str(marker), *argv], printed)
    assert _wait_until(proc, lambda: counted() >= 2), printed.read_text()[-3000:]  # the evaluation is under way
    before = counted()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=300)  # the whole evaluation alone would take 120 s
    except BaseException:
        proc.kill()
        raise
    text = printed.read_text()
    assert code == 128 + signal.SIGTERM, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    return counted() - before, text


@pytest.mark.slow
def test_sigterm_in_a_pretraining_evaluation_exits_at_once_saving_first_and_the_resume_is_exact(
        tmp_path, model_dir, large_eval_corpus):
    """The evaluation at step 2 precedes step 2's checkpoint: the signal abandons it, saves step_2 (marked as
    not evaluated) and exits; the resume evaluates step 2 and ends like the run never stopped."""
    def args(out: Path) -> list[str]:
        return ["--model_name_or_path", str(model_dir), "--dataset_dir", str(large_eval_corpus), "--output_dir",
                str(out), "--max_steps", "4", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size",
                "1", "--eval_steps", "2", "--checkpointing_steps", "2", "--logging_steps", "1", "--learning_rate",
                "1e-3", "--mixed_precision", "no", "--seed", "5"]

    reference = tmp_path / "reference"
    load_cli("pretrain/run_mrp.py").main(args(reference))
    assert [r["step"] for r in _records(reference) if r["split"] == "eval"] == [0, 2, 4]

    out = tmp_path / "stopped"
    after_the_signal, printed = _stop_in_evaluation(tmp_path, "pretrain/run_mrp.py", args(out))
    assert after_the_signal <= BATCHES_AFTER_THE_SIGNAL, printed[-3000:]
    step_2 = checkpoints_root(out) / "step_2"
    assert f"SIGTERM: saved {step_2} (the evaluation of step 2 was stopped; the resume repeats it)" in printed
    assert [step for step, _ in list_checkpoints(out)] == [2]
    assert read_trainer_state(step_2)["evaluation_pending"] is True
    # Nothing of the abandoned evaluation was written as if it were complete.
    assert [r["step"] for r in _records(out) if r["split"] == "eval"] == [0]

    load_cli("pretrain/run_mrp.py").main([*args(out), "--resume_from_checkpoint", "latest"])
    _assert_same_run(out, reference)


@pytest.mark.slow
def test_sigterm_in_a_finetuning_evaluation_exits_at_once_and_the_resume_keeps_the_same_best_and_last(
        tmp_path, model_dir):
    """GLUE RTE with a 240-example dev set, evaluated every 2 steps, no periodic checkpoint: the signal in the
    evaluation at step 2 saves step_2 and exits; best/ is not touched by the abandoned evaluation. The tiny
    model has dropout, so the resume matches only if neither the abandoned evaluation nor its repetition moved
    the RNG."""
    data = tmp_path / "RTE"
    shutil.copytree(GLUE_RTE, data)
    header, *rows = (GLUE_RTE / "dev.tsv").read_text(encoding="utf-8").splitlines()
    copies = [row.split("\t", 1)[1] for _ in range(EVAL_EXAMPLES // len(rows) + 1) for row in rows][:EVAL_EXAMPLES]
    (data / "dev.tsv").write_text("\n".join([header, *(f"{i}\t{row}" for i, row in enumerate(copies))]) + "\n",
                                  encoding="utf-8")

    def args(out: Path) -> list[str]:
        return ["--model_name_or_path", str(model_dir), "--task_name", "rte", "--data_dir", str(data),
                "--output_dir", str(out), "--do_train", "--do_eval", "--num_train_epochs", "2",
                "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
                "--per_device_eval_batch_size", "1", "--eval_steps", "2", "--learning_rate", "1e-3",
                "--logging_steps", "1", "--checkpointing_steps", "1000", "--max_seq_length", "48",
                "--disable_tqdm", "true", "--seed", "3"]

    reference = tmp_path / "reference"
    load_cli("finetune/run_glue.py").main(args(reference))
    want = _losses(reference)

    out = tmp_path / "stopped"
    after_the_signal, printed = _stop_in_evaluation(tmp_path, "finetune/run_glue.py", args(out))
    assert after_the_signal <= BATCHES_AFTER_THE_SIGNAL, printed[-3000:]
    assert f"SIGTERM: saved {checkpoints_root(out) / 'step_2'} (the evaluation of step 2 was stopped" in printed
    assert [step for step, _ in list_checkpoints(out)] == [2]
    assert not (out / "best").exists() and not (out / "all_results.json").exists()

    load_cli("finetune/run_glue.py").main([*args(out), "--resume_from_checkpoint", "latest"])
    got = _losses(out)
    assert sorted(got) == sorted(want)
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-6), step
    from safetensors.torch import load_file

    for name in ("last", "best"):
        a, b = load_file(str(reference / name / "model.safetensors")), load_file(str(out / name / "model.safetensors"))
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
    assert json.loads((out / "best" / "eval_results.json").read_text()) == pytest.approx(
        json.loads((reference / "best" / "eval_results.json").read_text()), rel=1e-6)


class _EvaluatingJob(_Job):
    """test_training's toy job with an evaluation of 50 batches every ``--eval_steps`` (and, ``before``, of the
    starting weights, as pretraining does); a real SIGTERM arrives at its ``signal_at``-th evaluation batch."""

    def __init__(self, signal_at: int | None = None, before: bool = False):
        super().__init__()
        self.signal_at, self.before, self.evaluated = signal_at, before, []  # evaluated: the step of each batch

    def _evaluation(self, step: int) -> None:
        for _ in range(50):
            raise_if_stopping()  # what every evaluation loader does before a batch
            self.evaluated.append(step)
            if len(self.evaluated) == self.signal_at:
                signal.raise_signal(signal.SIGTERM)

    def on_train_begin(self, model, step: int) -> None:
        if self.before and step == 0:
            self._evaluation(0)

    def evaluate(self, model, step: int, epoch: float) -> None:
        self._evaluation(step)


def test_a_sigterm_in_the_evaluation_before_the_first_batch_exits_at_once_with_nothing_to_save(tmp_path, capsys):
    args = _toy_args(tmp_path / "run", eval_steps=2)
    job = _EvaluatingJob(signal_at=3, before=True)
    with pytest.raises(SystemExit) as exit_info:
        _run(args, job=job)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert job.evaluated == [0, 0, 0] and job.calls == 0  # stopped before its 4th batch; no training step
    assert list_checkpoints(args.output_dir) == []
    assert "SIGTERM: nothing to save before the first batch; continue with --resume_from_checkpoint latest" in (
        capsys.readouterr().out)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_sigterm_mid_evaluation_saves_that_step_and_the_resume_evaluates_it_first(tmp_path):
    """In process, on the toy job: the evaluation at step 4 is abandoned at its 5th batch, step 4 is saved
    with the evaluation pending, and the resume evaluates step 4 before training on; the weights end equal."""
    reference_job = _EvaluatingJob()
    reference, _ = _run(_toy_args(tmp_path / "reference", eval_steps=2), job=reference_job)
    assert reference_job.evaluated == [2] * 50 + [4] * 50 + [6] * 50 + [7] * 50

    args = _toy_args(tmp_path / "run", eval_steps=2)
    stopped = _EvaluatingJob(signal_at=55)
    with pytest.raises(SystemExit) as exit_info:
        _run(args, job=stopped)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert stopped.evaluated == [2] * 50 + [4] * 5
    assert [step for step, _ in list_checkpoints(args.output_dir)] == [4]
    assert read_trainer_state(checkpoints_root(args.output_dir) / "step_4")["evaluation_pending"] is True

    resumed_job = _EvaluatingJob()
    resumed, _ = _run(replace(args, resume_from_checkpoint="latest"), job=resumed_job)
    assert resumed_job.evaluated == [4] * 50 + [6] * 50 + [7] * 50
    for (name, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
