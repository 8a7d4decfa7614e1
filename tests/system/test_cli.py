"""``corefbert <command>`` (issue 24, item 5): the commands, their help, and that each one runs the same
``main(argv)`` as its script or module (the same one-line error for the same bad input)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT

from corefbert import cli


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        cli.main(argv)
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"]])
def test_help_lists_every_command(argv, capsys):
    code, out, _ = _run(argv, capsys)
    assert code == 0
    for name in cli.COMMANDS:
        assert f"\n  {name} " in out, out
    assert "usage: corefbert <command>" in out


def test_finetune_help_lists_every_task(capsys):
    code, out, _ = _run(["finetune", "--help"], capsys)
    assert code == 0
    for task in cli.FINETUNE_TASKS:
        assert f"\n  {task} " in out, out


def test_every_command_and_task_reaches_a_main():
    """Each entry of the tables loads, and is the very function its script or module runs."""
    for name, command in cli.COMMANDS.items():
        if name == "finetune":
            continue
        main = command.load()
        assert callable(main), name
        if command.module is not None:
            assert main is sys.modules[command.module].main
    for task in cli.FINETUNE_TASKS:
        command = cli.finetune_command(task)
        assert (ROOT / command.script).is_file(), command.script
        # the script's own main: the same source file and function (each load compiles it anew)
        code = command.load().__code__
        assert (code.co_filename, code.co_name) == (str(ROOT / command.script), "main")


def test_finetune_glue_help_is_the_scripts_help(capsys):
    code, out, _ = _run(["finetune", "glue", "--help"], capsys)
    assert code == 0
    assert "--task_name" in out and "--model_name_or_path" in out and "--per_device_train_batch_size" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pretrian"], "error: unknown command 'pretrian'; the commands are prepare, pretrain,"),
        (["finetune", "gleu"], "error: unknown task 'gleu'; the tasks are glue, quoref,"),
    ],
)
def test_a_misspelt_command_is_one_error_line(argv, message, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(message), err


def test_a_command_gives_its_modules_error_for_the_same_bad_input(tmp_path, capsys):
    """``corefbert resolve`` and ``python -m corefbert.tasks.coref_e2e.resolve``: one main, one message."""
    from corefbert.tasks.coref_e2e import resolve

    argv = ["--model", str(tmp_path), "--text", "   "]
    code, _, via_cli = _run(["resolve", *argv], capsys)
    with pytest.raises(SystemExit) as direct:
        resolve.main(argv)
    assert code == direct.value.code == 2
    assert via_cli == capsys.readouterr().err == "error: the text is empty; pass some sentences\n"


def test_a_finetune_task_gives_its_scripts_error(tmp_path, capsys):
    from helpers import load_cli

    argv = [
        "--model_name_or_path",
        str(tmp_path),
        "--task_name",
        "rte",
        "--data_dir",
        str(tmp_path / "none"),
        "--do_train",
        "--output_dir",
        str(tmp_path / "out"),
    ]
    code, _, via_cli = _run(["finetune", "glue", *argv], capsys)
    with pytest.raises(SystemExit) as direct:
        load_cli("finetune/run_glue.py").main(argv)
    assert code == direct.value.code == 2
    assert via_cli == capsys.readouterr().err and via_cli.startswith("error: ") and via_cli.count("\n") == 1


def test_python_dash_m_corefbert_cli(tmp_path):
    """The module runs as ``python -m corefbert.cli`` (what ``accelerate launch -m corefbert.cli`` starts)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "corefbert.cli", "finetune", "glue", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--task_name" in run.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "corefbert.cli", "nonsense"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown command 'nonsense'")
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_accelerate_launch_dash_m_corefbert_cli_pretrain(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ACCELERATE_USE_CPU": "true"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--cpu",
            "--num_processes",
            "1",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "-m",
            "corefbert.cli",
            "pretrain",
            "--help",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--mrp_loss_weight" in run.stdout or "--dataset_dir" in run.stdout, run.stdout[-2000:]
