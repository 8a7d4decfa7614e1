"""The README is the product's face: its Quick start and CLI list must stay true."""

from __future__ import annotations

import re

from helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_quick_start_has_exactly_two_commands():
    commands = _quick_start_commands()
    assert len(commands) == 2, commands
    assert "accelerate launch pretrain/run_mrp.py" in commands[0]
    assert "pytest" in commands[1] and ".[test]" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _quick_start_commands()[1] in ci.splitlines()


def test_every_cli_and_accelerate_config_is_documented():
    scripts = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "finetune").glob("run_*.py"))
    scripts += sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pretrain").glob("*.py"))
    # Configs may be named within a sentence that names their folder once.
    configs = sorted(f"`{p.name}`" for p in (ROOT / "accelerate_configs").glob("*.yaml"))
    assert "`accelerate_configs/`" in README
    missing = [name for name in scripts + configs if name not in README]
    assert not missing, f"not mentioned in README.md: {missing}"


def _survival_table() -> list[str]:
    hardening = (ROOT / "docs" / "guides" / "hardening.md").read_text(encoding="utf-8")
    section = hardening.split("## What survives what, and the bad-input table", 1)[1]
    return [line for line in section.split("\n\n")[2].splitlines() if line.startswith("| **")]


def test_every_survival_claim_names_tests_that_exist():
    """Each "what survives what" row cites `tests/file.py::test` (a bare `::test` continues the last file);
    every one must be a test function defined in that file, and every row must cite at least one."""
    import ast

    rows = _survival_table()
    assert len(rows) >= 10, rows
    for row in rows:
        cited = re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", row)
        assert cited, f"no test backs this row: {row[:80]}"
        current = None
        for path, name in cited:
            current = path or current
            tree = ast.parse((ROOT / current).read_text(encoding="utf-8"))
            defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            assert name in defined, f"{current}::{name} (cited in docs/guides/hardening.md) does not exist"


def test_every_table_has_a_header_row():
    """Issue 11.13: a blank line inside a table starts a second one without a header, which renders as text."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = doc.read_text(encoding="utf-8").splitlines()
        in_code = False
        for number, line in enumerate(lines):
            in_code ^= line.lstrip().startswith("```")
            starts_table = line.startswith("|") and (number == 0 or not lines[number - 1].startswith("|"))
            if in_code or not starts_table:
                continue
            separator = lines[number + 1] if number + 1 < len(lines) else ""
            assert re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", separator.strip()), (
                f"{doc.relative_to(ROOT)}:{number + 1}: a table row with no header and separator row above it "
                "(a blank line inside a table?)"
            )


def test_console_scripts_exit_zero_after_a_run():
    """``[project.scripts]`` wrappers call ``sys.exit(target())``: a target that returns a report object would
    make every successful run exit with status 1."""
    import importlib
    import inspect

    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("scripts", {})
    assert scripts, "no console scripts declared"
    for name, target in scripts.items():
        module, function = target.split(":")
        signature = inspect.signature(getattr(importlib.import_module(module), function))
        assert signature.return_annotation in (None, "None"), f"{name} -> {target} returns {signature.return_annotation}"
