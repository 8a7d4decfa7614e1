"""``--with_tracking --report_to``: every tracker accelerate knows, and a tracker that cannot start as one line
before the first step (corefbert/training/arguments.py, on the toy job of test_training.py)."""

from __future__ import annotations

import pytest
from test_training import _args, _Job, _records, _run

from corefbert.errors import CorefBertError

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def _installed(monkeypatch, *names: str, available: bool = True) -> None:
    import accelerate.utils

    for name in names:
        monkeypatch.setattr(accelerate.utils, f"is_{name}_available", lambda: available)


def test_report_to_takes_every_tracker_accelerate_knows(tmp_path):
    """``--report_to`` took only tensorboard, wandb and all, while accelerate 1.15 knows nine trackers."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    assert {"mlflow", "trackio", "comet_ml", "aim", "clearml", "dvclive", "swanlab"} <= set(LOGGER_TYPE_TO_CLASS)
    for name in [*LOGGER_TYPE_TO_CLASS, "all", "tensorboard,mlflow"]:
        _args(tmp_path, report_to=name).validate()
    with pytest.raises(CorefBertError, match=r"--report_to 'neptune' is not one of aim, clearml, .*, all \(several"):
        _args(tmp_path, report_to="neptune").validate()


def test_a_tracker_that_is_not_installed_is_one_line_naming_the_package(tmp_path, monkeypatch):
    _installed(monkeypatch, "mlflow", available=False)
    _installed(monkeypatch, "tensorboard")
    with pytest.raises(CorefBertError, match=r"--report_to tensorboard,mlflow: mlflow not installed; pip install "
                                             r"mlflow, or drop --with_tracking"):
        _args(tmp_path, with_tracking=True, report_to="tensorboard,mlflow").validate()
    _installed(monkeypatch, "tensorboard", available=False)
    with pytest.raises(CorefBertError, match=r"pip install tensorboard \(the offline one: pip install 'corefbert\[tracking\]'\)"):
        _args(tmp_path, with_tracking=True).validate()


def test_wandb_without_a_login_is_one_line_before_training(tmp_path, monkeypatch):
    """wandb without a login stopped the run in init_trackers with a traceback (or waited on a prompt)."""
    _installed(monkeypatch, "wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))  # none there
    args = _args(tmp_path / "out", with_tracking=True, report_to="wandb")
    with pytest.raises(CorefBertError) as err:
        args.validate()
    assert "wandb has no login here" in str(err.value) and "WANDB_MODE=offline" in str(err.value)
    netrc.write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    netrc.chmod(0o600)
    args.validate()  # `wandb login` wrote this
    netrc.unlink()
    monkeypatch.setenv("WANDB_MODE", "offline")
    args.validate()


@pytest.mark.filterwarnings("ignore:`log_with=:UserWarning")  # tensorboard itself is not installed here
def test_a_tracker_that_cannot_start_is_one_line_before_the_first_step(tmp_path, monkeypatch):
    """A tracker whose start fails (a server that does not answer, a refused API key) was a traceback."""
    from accelerate import Accelerator

    _installed(monkeypatch, "tensorboard")

    def refuse(self, project_name, config=None, init_kwargs=None):
        raise ConnectionError("\nCould not reach the tracking server at http://localhost:5000\nretry later")

    monkeypatch.setattr(Accelerator, "init_trackers", refuse)
    job = _Job()
    with pytest.raises(CorefBertError) as err:
        _run(_args(tmp_path / "out", with_tracking=True), job=job)
    text = str(err.value)
    assert text.startswith("--with_tracking --report_to tensorboard: a tracker could not start (Could not reach the "
                           "tracking server at http://localhost:5000)") and "\n" not in text
    assert job.calls == 0  # before the first step


def test_tensorboard_logs_offline_under_the_output_dir(tmp_path):
    """The tracking extra's tracker, with no network and no account: event files under --output_dir."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "out"
    _run(_args(out, with_tracking=True, report_to="tensorboard", max_steps=3))
    accumulator = EventAccumulator(str(out / "corefbert"))  # the project's folder: train()'s project name
    accumulator.Reload()
    assert [e.step for e in accumulator.Scalars("train/loss")] == [1, 2, 3]
    logged = [r["loss"] for r in _records(out)]  # the same losses as log.jsonl's
    assert [e.value for e in accumulator.Scalars("train/loss")] == pytest.approx(logged, rel=1e-6)
