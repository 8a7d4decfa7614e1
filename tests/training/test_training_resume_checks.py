"""A resume checks what it resumes, and the one-line checks of ``TrainingArguments``.

A checkpoint records the settings that decide the result; a resume under another batch size, seed, corpus
or model is refused in one line naming the setting and both values (``--ignore_changed_settings`` resumes
anyway), while ``--max_steps`` and the logging / evaluation / checkpoint cadence may change.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from helpers import FIXTURES, load_cli, save_corpus, synthetic_corpus
from test_pretraining import _save_tiny_bert

from corefbert.errors import CorefBertError
from corefbert.training.checkpoints.folders import checkpoints_root, list_checkpoints, read_trainer_state
from corefbert.training.training_args import TrainingArguments

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return _save_tiny_bert(tmp_path_factory.mktemp("resume_bert"))


def _corpus(model_dir, out: Path, n_train: int = 20) -> Path:
    from transformers import AutoTokenizer

    save_corpus(synthetic_corpus(AutoTokenizer.from_pretrained(model_dir), n_train=n_train, n_eval=8), out)
    return out


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, model_dir):
    return _corpus(model_dir, tmp_path_factory.mktemp("resume_corpus") / "corpus")


def _mrp(model_dir, corpus_dir, out, *extra: str) -> list[str]:
    return ["--model_name_or_path", str(model_dir), "--dataset_dir", str(corpus_dir), "--output_dir", str(out),
            "--max_steps", "2", "--per_device_train_batch_size", "4", "--logging_steps", "1", "--learning_rate",
            "1e-3", "--mixed_precision", "no", "--checkpointing_steps", "1", "--seed", "5", *extra]


def _error_line(capsys, argv) -> str:
    """Run pretraining; it must stop with exit status 2 and exactly one error line (no traceback)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        load_cli("pretrain/run_mrp.py").main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1 and err[-1] == errors[0] and not any("Traceback" in line for line in err), err
    return errors[0]


def _train_steps(out: Path) -> list[int]:
    lines = (out / "log.jsonl").read_text(encoding="utf-8").splitlines()
    return [r["step"] for r in map(json.loads, lines) if r["split"] == "train"]


def test_a_resume_under_changed_settings_is_refused_in_one_line(tmp_path, model_dir, corpus_dir, capsys):
    out = tmp_path / "run"
    load_cli("pretrain/run_mrp.py").main(_mrp(model_dir, corpus_dir, out))
    saved = read_trainer_state(checkpoints_root(out) / "step_2")["settings"]
    assert saved["per_device_train_batch_size"] == 4 and saved["seed"] == 5 and saved["num_processes"] == 1
    assert len(saved["start"]) == 16 and saved["corpus"].startswith("20 train + 8 held-out")
    resume = [*_mrp(model_dir, corpus_dir, out, "--resume_from_checkpoint", "latest"), "--max_steps", "3"]
    step_2 = checkpoints_root(out) / "step_2"

    line = _error_line(capsys, [*resume, "--per_device_train_batch_size", "2"])
    assert line == (f"error: {step_2}: cannot resume: per_device_train_batch_size was 4 in this checkpoint but is 2 "
                    "now; a resumed run would not repeat the run it continues. Use the checkpoint's value, or pass "
                    "--ignore_changed_settings to resume anyway")
    assert "seed was 5 in this checkpoint but is 6 now" in _error_line(capsys, [*resume, "--seed", "6"])
    assert "mrp_ratio was 0.2 in this checkpoint but is 0.5 now" in _error_line(capsys, [*resume, "--mrp_ratio", "0.5"])
    other_corpus = _corpus(model_dir, tmp_path / "other_corpus", n_train=24)
    line = _error_line(capsys, [*resume, "--dataset_dir", str(other_corpus)])
    assert "cannot resume: corpus was '20 train + 8 held-out rows, sha256" in line and "is '24 train" in line
    other_model = tmp_path / "other_model"  # the same files but for one weight: other starting weights
    shutil.copytree(model_dir, other_model)
    from safetensors.torch import load_file, save_file

    weights = load_file(str(other_model / "model.safetensors"))
    first = sorted(weights)[0]
    weights[first] = weights[first] + 1
    save_file(weights, str(other_model / "model.safetensors"), metadata={"format": "pt"})
    assert "cannot resume: start was" in _error_line(capsys, [*resume, "--model_name_or_path", str(other_model)])
    assert _train_steps(out) == [1, 2]  # every refusal came before anything was written
    assert [s for s, _ in list_checkpoints(out)] == [1, 2]

    # What cannot break exactness may change: the step budget, logging, checkpoint cadence, workers, and where
    # the starting weights lie (a copy elsewhere is the same start: a study folder moved with its base inside).
    copied = tmp_path / "moved" / "model"
    shutil.copytree(model_dir, copied)
    load_cli("pretrain/run_mrp.py").main([*resume, "--logging_steps", "2", "--checkpointing_steps", "3",
                                          "--save_total_limit", "5", "--model_name_or_path", str(copied)])
    assert _train_steps(out) == [1, 2, 3]
    # The override resumes and says what changed.
    capsys.readouterr()
    load_cli("pretrain/run_mrp.py").main([*resume, "--max_steps", "4", "--seed", "6", "--ignore_changed_settings"])
    assert "warning: seed changed since the checkpoint (5 -> 6)" in capsys.readouterr().out
    assert _train_steps(out) == [1, 2, 3, 4]


def test_a_finetuning_resume_under_another_batch_size_is_refused(tmp_path, model_dir, capsys):
    """The check is the core's: fine-tuning CLIs get it from the same loop."""
    rte = FIXTURES / "glue" / "RTE"
    out = tmp_path / "glue"
    argv = ["--model_name_or_path", str(model_dir), "--task_name", "rte", "--train_file", str(rte / "train.tsv"),
            "--do_train", "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "4",
            "--checkpointing_steps", "1", "--max_seq_length", "64", "--seed", "3"]
    load_cli("finetune/run_glue.py").main(argv)
    with pytest.raises(SystemExit) as stopped:
        load_cli("finetune/run_glue.py").main([*argv, "--resume_from_checkpoint", "latest",
                                               "--per_device_train_batch_size", "2"])
    assert stopped.value.code == 2
    assert "per_device_train_batch_size was 4 in this checkpoint but is 2 now" in capsys.readouterr().err


def test_resuming_from_a_final_model_folder_names_model_name_or_path(tmp_path, model_dir, corpus_dir, capsys):
    out = tmp_path / "run"
    load_cli("pretrain/run_mrp.py").main(_mrp(model_dir, corpus_dir, out))
    line = _error_line(capsys, _mrp(model_dir, corpus_dir, out, "--resume_from_checkpoint", str(out / "final")))
    assert line == (f"error: {out / 'final'}: a final model folder, not a checkpoint (no trainer state to resume "
                    f"from); to start a new run from its weights pass --model_name_or_path {out / 'final'}, or "
                    "resume from output_dir/checkpoints/step_N or 'latest'")


def test_a_checkpoint_of_another_model_says_it_does_not_match(tmp_path, model_dir, corpus_dir, capsys):
    from transformers import AutoConfig, AutoTokenizer, BertModel

    out = tmp_path / "run"
    load_cli("pretrain/run_mrp.py").main(_mrp(model_dir, corpus_dir, out))
    wider = tmp_path / "wider"
    config = AutoConfig.from_pretrained(model_dir)
    config.intermediate_size *= 2
    BertModel(config).save_pretrained(wider)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(wider)
    line = _error_line(capsys, [*_mrp(wider, corpus_dir, out, "--resume_from_checkpoint", "latest"),
                                "--ignore_changed_settings"])
    assert line.startswith(f"error: {checkpoints_root(out) / 'step_2'}: the checkpoint does not match the model "
                           "(size mismatch for ")
    assert line.endswith("resume with the model it was trained from, or start a new run in another --output_dir")
    assert "delete them" not in line and "interrupted" not in line
    assert [s for s, _ in list_checkpoints(out)] == [1, 2]  # healthy checkpoints are left alone


def test_latest_with_no_complete_checkpoint_left_stops_unless_told_to_start_over(tmp_path, model_dir, corpus_dir,
                                                                                capsys):
    """Only the remains of deleted or damaged checkpoints are left; "starting fresh" would throw the
    run away silently (and its next save used to delete those remains)."""
    out = tmp_path / "run"
    load_cli("pretrain/run_mrp.py").main(_mrp(model_dir, corpus_dir, out))
    root = checkpoints_root(out)
    (root / "step_1").rename(root / "step_1.deleting")
    (root / "step_2" / "trainer_state.json").write_text("{cut sho")
    resume = _mrp(model_dir, corpus_dir, out, "--resume_from_checkpoint", "latest")
    line = _error_line(capsys, resume)
    assert line == (f"error: {root}: --resume_from_checkpoint latest: no complete checkpoint, though earlier ones "
                    "were here (step_1.deleting, step_2); nothing to resume from. Pass --overwrite_output_dir to "
                    "start over (deletes them) or another --output_dir")
    assert sorted(p.name for p in root.iterdir()) == ["step_1.deleting", "step_2"]  # nothing deleted
    load_cli("pretrain/run_mrp.py").main([*resume, "--overwrite_output_dir", "true"])
    assert _train_steps(out) == [1, 2] and [s for s, _ in list_checkpoints(out)] == [1, 2]


def test_a_partial_first_save_alone_still_starts_fresh(tmp_path):
    """A kill inside the very first save lost nothing: `latest` starts from scratch as before."""
    from corefbert.training.checkpoints.folders import resolve_checkpoint

    (checkpoints_root(tmp_path) / "step_1.tmp").mkdir(parents=True)
    assert resolve_checkpoint("latest", tmp_path) is None


def _valid(**changes) -> TrainingArguments:
    return TrainingArguments(**{"output_dir": "out", **changes})


@pytest.mark.parametrize(("changes", "message"), [
    ({"max_steps": None}, "--max_steps needs a value (got null)"),
    ({"max_steps": [1, 2]}, "--max_steps must be an integer (got [1, 2])"),
    ({"max_steps": 3.7}, "--max_steps must be an integer (got 3.7)"),
    ({"per_device_train_batch_size": 2.5}, "--per_device_train_batch_size must be an integer (got 2.5)"),
    ({"seed": -1}, "--seed must be >= 0 (got -1)"),
    ({"num_workers": -1}, "--num_workers must be >= 0 (got -1)"),
    ({"adam_beta1": 1.5}, "--adam_beta1 must be within [0, 1) (got 1.5)"),
    ({"adam_epsilon": -1.0}, "--adam_epsilon must be > 0 (got -1.0)"),
    ({"optim": "sgd"}, "--optim 'sgd' is not one of adamw_torch, adagrad"),
    ({"learning_rate": math.nan}, "--learning_rate must be a finite number (got nan)"),
    ({"learning_rate": -1.0}, "--learning_rate must be > 0 (got -1.0)"),
    ({"logging_steps": 0}, "--logging_steps must be at least 1 (got 0)"),
    ({"per_device_eval_batch_size": 0}, "--per_device_eval_batch_size must be at least 1 (got 0)"),
    ({"output_dir": ""}, "--output_dir is empty; pass the folder the run should write to"),
    ({"disable_tqdm": "yes please"}, "--disable_tqdm must be true or false (got 'yes please')"),
])
def test_a_bad_training_argument_is_one_line(changes, message):
    with pytest.raises(CorefBertError) as error:
        _valid(**changes).validate()
    assert str(error.value) == message


def test_yaml_spellings_are_read_as_meant():
    """``mixed_precision: no`` is false to YAML 1.1, ``1e-5`` a string, ``checkpointing_steps: 500`` an int."""
    args = _valid(mixed_precision=False, learning_rate="1e-5", checkpointing_steps=500, max_steps=4.0)
    args.validate()
    assert (args.mixed_precision, args.learning_rate, args.checkpointing_steps, args.max_steps) == ("no", 1e-5,
                                                                                                    "500", 4)


def test_yaml_max_steps_null_through_the_cli_is_one_line(tmp_path, model_dir, corpus_dir, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("max_steps: null\nmixed_precision: no\n")
    line = _error_line(capsys, ["--config", str(config), "--model_name_or_path", str(model_dir), "--dataset_dir",
                                str(corpus_dir), "--output_dir", str(tmp_path / "out")])
    assert line == f"error: {config}:1: --max_steps needs a value (got null); fix the value in the config"


def test_a_finetuning_resume_on_another_training_file_is_refused(tmp_path, model_dir, capsys):
    """The fine-tuning job's settings: the model, the task's flags and the size of every file they name. The line
    names the changed key of those dict settings, old and new (it printed both dicts, 1,166
    characters)."""
    rte = FIXTURES / "glue" / "RTE"
    shorter = tmp_path / "train.tsv"
    shorter.write_text("".join((rte / "train.tsv").read_text().splitlines(keepends=True)[:-1]))
    out = tmp_path / "glue"
    argv = ["--model_name_or_path", str(model_dir), "--task_name", "rte", "--do_train", "--output_dir", str(out),
            "--max_steps", "2", "--per_device_train_batch_size", "4", "--checkpointing_steps", "1",
            "--max_seq_length", "64", "--seed", "3"]
    load_cli("finetune/run_glue.py").main([*argv, "--train_file", str(rte / "train.tsv")])
    with pytest.raises(SystemExit) as stopped:
        load_cli("finetune/run_glue.py").main([*argv, "--train_file", str(shorter), "--resume_from_checkpoint",
                                               "latest"])
    assert stopped.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (f"error: {checkpoints_root(out) / 'step_2'}: cannot resume: task_args.train_file was "
                    f"'{rte / 'train.tsv'}' in this checkpoint but is '{shorter}' now (also changed: file_sizes); a "
                    "resumed run would not repeat the run it continues. Use the checkpoint's value, or pass "
                    "--ignore_changed_settings to resume anyway")
