"""``corefbert <command>``: the commands, their help, and that each one runs the same
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


def test_every_command_and_task_runs_a_main_of_the_package():
    """Each entry of the tables loads a ``main`` of the package, never a file of the checkout: an installed
    (non-editable) package has no ``pretrain/`` or ``finetune/`` folder."""
    assert cli.COMMANDS["finetune"].module is None
    for name, command in cli.COMMANDS.items():
        if name != "finetune":
            assert command.module.startswith("corefbert."), name
            assert command.load() is sys.modules[command.module].main, name
    from corefbert.tasks.base import FinetuningTask
    from corefbert.tasks.registry import TASKS

    assert cli.FINETUNE_TASKS is TASKS  # the one registry, not a table of the CLI's own
    for task, entry in cli.FINETUNE_TASKS.items():
        command, _, _ = cli.resolve_command(["finetune", task, "--help"])
        assert command is entry and command.load() == entry.main, task
        assert entry.task_class.startswith("corefbert.tasks.") and issubclass(entry.task(), FinetuningTask), task


# Each script of the checkout and the command that runs the same main.
SCRIPTS = {
    "pretrain/prepare_corpus.py": ["prepare"],
    "pretrain/run_mrp.py": ["pretrain"],
    "pretrain/run_ablation.py": ["ablation"],
    **{f"finetune/run_{task.replace('-', '_')}.py": ["finetune", task] for task in cli.FINETUNE_TASKS},
}


def test_every_script_is_a_shim_over_its_commands_main():
    """``pretrain/*.py`` hold a docstring, one import of ``main`` from the package and the ``__main__`` guard;
    ``finetune/run_<task>.py`` bind ``main`` to the task's registry entry instead: the code lives in the package,
    and the script runs the very same function as its command."""
    import ast

    from helpers import load_cli

    scripts = sorted(p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("pretrain/*.py"), *ROOT.glob("finetune/*.py")])
    assert scripts == sorted(SCRIPTS)
    for script, argv in SCRIPTS.items():
        tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
        kinds = [type(node).__name__ for node in tree.body]
        docstring, imported, *bound, guard = tree.body
        assert "python " in ast.get_docstring(tree) or "accelerate launch" in ast.get_docstring(tree) \
            or "corefbert " in ast.get_docstring(tree), script
        if argv[0] == "finetune":
            assert kinds == ["Expr", "ImportFrom", "Assign", "If"], (script, kinds)
            assert ast.unparse(imported) == "from corefbert.tasks.registry import TASKS", script
            assert ast.unparse(bound[0]) == f"main = TASKS['{argv[1]}'].main", script
        else:
            assert kinds == ["Expr", "ImportFrom", "If"], (script, kinds)
            assert imported.module.startswith("corefbert.") and [a.name for a in imported.names] == ["main"], script
        assert ast.unparse(guard) == "if __name__ == '__main__':\n    main()", script
        command, _, _ = cli.resolve_command([*argv, "--help"])
        assert load_cli(script).main == command.load(), script


# Each command's help names the command: `corefbert prepare --help` said prepare_corpus.py, `corefbert slot-fill
# --help` cli.py (or corefbert)
EVERY_COMMAND = [[name] for name in cli.COMMANDS if name != "finetune"] + [["finetune", task] for task in cli.FINETUNE_TASKS]


@pytest.mark.parametrize("argv", EVERY_COMMAND, ids=" ".join)
def test_every_commands_help_names_it_as_typed(argv, capsys):
    """Every command of the CLI table (every fine-tuning task too): ``usage: corefbert <command> ...``."""
    code, out, err = _run([*argv, "--help"], capsys)
    assert code == 0, err[-2000:]
    assert out.startswith(f"usage: corefbert {' '.join(argv)} "), out[:300]


@pytest.mark.parametrize("argv", EVERY_COMMAND, ids=" ".join)
def test_every_command_takes_a_config_file(argv, capsys, tmp_path):
    """Every command of the CLI table parses through ``parse_args`` (``resolve``, ``config-path``,
    ``plot`` and ``slot-fill`` had argparse of their own): its help lists ``--config``, and it reads the file, so a
    name the command does not take is refused in one line naming the file."""
    code, out, err = _run([*argv, "--help"], capsys)
    assert code == 0 and "--config" in out, (err[-2000:], out[-2000:])
    config = tmp_path / "run.yaml"
    config.write_text("no_such_argument: 1\n", encoding="utf-8")
    code, out, err = _run([*argv, "--config", str(config)], capsys)
    assert code == 2 and err == f"error: {config}: unknown argument(s) no_such_argument; run with --help for the " \
                                "valid names\n", err[-2000:]


@pytest.mark.parametrize(("argv", "yaml", "expected"), [
    (["config-path"], "name: demo\n", "demo.yaml"),
    (["plot"], "log: {tmp}/none/log.jsonl\n", "error: {tmp}/none/log.jsonl: log file not found"),
    (["slot-fill"], "dataset_dir: {tmp}/none\n", "error: {tmp}/none: no such folder"),
    (["resolve"], "model: {tmp}\ntext: '   '\n", "error: the text is empty"),
], ids=lambda v: v[0] if isinstance(v, list) else None)
def test_the_commands_that_had_argparse_read_their_values_from_a_config(argv, yaml, expected, capsys, tmp_path):
    """A config gives what the command line would, a positional included (``config-path NAME``, ``plot LOG``)."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.format(tmp=tmp_path), encoding="utf-8")
    code, out, err = _run([*argv, "--config", str(config)], capsys)
    assert expected.format(tmp=tmp_path) in out + err and code == (0 if argv == ["config-path"] else 2), err


@pytest.mark.parametrize(("argv", "message"), [
    (["plot"], "error: the following arguments are required: LOG (or --log); run with --help for the valid arguments"),
    (["plot", "a.jsonl", "b.jsonl"], "error: unrecognized argument(s): b.jsonl; run with --help"),
    (["resolve", "--model", "m"], "error: pass the text with --text or --input_file, one of them"),
    (["resolve", "--model", "m", "--text", "x", "--input_file", "y"],
     "error: pass the text with --text or --input_file, one of them"),
])
def test_the_commands_that_had_argparse_answer_bad_arguments_in_one_line(argv, message, capsys):
    """argparse's own errors printed a usage screen above the line; through ``parse_args`` they are one line."""
    code, out, err = _run(argv, capsys)
    assert code == 2 and err == message + "\n", err


def test_a_positional_may_come_after_the_flags(tmp_path, capsys):
    code, _, err = _run(["plot", "-o", str(tmp_path / "c.png"), str(tmp_path / "log.jsonl")], capsys)
    assert code == 2 and err.startswith(f"error: {tmp_path / 'log.jsonl'}: log file not found"), err


@pytest.mark.parametrize(("script", "prog"), [("pretrain/prepare_corpus.py", "prepare_corpus.py"),
                                              ("finetune/run_glue.py", "run_glue.py")])
def test_a_script_run_as_itself_keeps_its_name(script, prog, capsys):
    from helpers import load_cli

    with pytest.raises(SystemExit):
        load_cli(script).main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} ")


@pytest.mark.parametrize(
    ("command", "flag"), [("prepare", "--num_shards"), ("pretrain", "--mrp_ratio"), ("ablation", "--preset")],
)
def test_the_pretraining_commands_give_their_scripts_help(command, flag, capsys):
    code, out, _ = _run([command, "--help"], capsys)
    assert code == 0
    assert flag in out, out[:300]


def test_convert_help_shows_the_positional_form_the_readme_uses(capsys):
    code, out, _ = _run(["convert", "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: corefbert convert [-h] OFFICIAL_DIR OUTPUT_DIR [options]\n"
                          "       corefbert convert [-h] --official_dir OFFICIAL_DIR --output_dir OUTPUT_DIR"), out[:400]
    assert "--allow_non_finite" in out


def _docstring_examples() -> list[list[str]]:
    """The ``corefbert ...`` lines of cli.py's docstring that are whole commands (no ``...``), without comments."""
    import shlex

    lines = [line.strip() for line in cli.__doc__.splitlines()]
    return [shlex.split(line.split("  ")[0])[1:] for line in lines
            if line.startswith("corefbert ") and "..." not in line and "--help" not in line]


@pytest.mark.parametrize("argv", _docstring_examples(), ids=" ".join)
def test_the_docstrings_commands_parse(argv, capsys, tmp_path, monkeypatch):
    """``corefbert convert --model_dir released/ --output_dir converted/`` (the docstring's) was an argument error
    (exit 2, "required: --official_dir"); each example must get past its parser, to the missing folders."""
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(argv, capsys)
    assert code == 2 and "run with --help" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("error: "), err[-2000:]


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
