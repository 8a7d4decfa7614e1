"""The README is the product's face: its Quick start and CLI list must stay true."""

from __future__ import annotations

import glob
import re
import shlex

import pytest
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
    """A blank line inside a table starts a second one without a header, which renders as text."""
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


# --- every path a README command names exists ---------------------------------------------------------------

COMMAND_WORDS = ("corefbert", "python", "accelerate", "bash", "pytest")
OUTPUT_FLAGS = {"--output_dir", "-o", "--output", "--local-dir"}
# What the README declares a placeholder: a checkpoint of yours, the folder of a benchmark's official files.
PLACEHOLDERS = ("CKPT", "DATA/", "/path/to/")
PATH_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".conll", ".json", ".jsonl", ".tsv", ".txt", ".gz", ".bz2", ".png")


def readme_commands(text: str) -> list[list[str]]:
    """Every command of ``text`` as words: each line of its bash blocks (continuations joined, comments dropped)
    and each inline code span that starts with a command word (``corefbert``, ``python``, ...)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines += block.replace("\\\n", " ").splitlines()
    lines += [span for span in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
              if span.split(" ", 1)[0] in COMMAND_WORDS]
    commands = []
    for line in lines:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")  # `a && b`, `a; b`, `a | b`: two commands
        lexer.whitespace_split, lexer.commenters = True, "#"
        words: list[str] = []
        for word in [*lexer, ";"]:
            if set(word) <= set(";&|"):
                if words and words[0] in COMMAND_WORDS:
                    commands.append(words)
                words = []
            else:
                words.append(word)
    return commands


def named_paths(commands: list[list[str]]) -> tuple[list[str], set[str]]:
    """``(the input paths and globs the commands name, the folders they write)``: a word is a path when it holds
    a ``/`` or a glob character or ends like a file; the value of an output flag is a folder written."""
    inputs, outputs = [], {"runs"}  # runs/: where pretraining writes by default (runs/corefbert_demo)
    for words in commands:
        for previous, word in zip(["", *words], words):
            if previous in OUTPUT_FLAGS:
                outputs.add(word.split("/", 1)[0])
            elif not word.startswith("-") and ("/" in word or "*" in word or word.endswith(PATH_SUFFIXES)):
                inputs.append(word)
    return inputs, outputs


def missing_paths(text: str, root) -> list[str]:
    """The paths ``text``'s commands read that do not exist under ``root`` (the repository): placeholders
    (:data:`PLACEHOLDERS`), what a README command writes, and ``../shared`` where it is absent are left out."""
    inputs, outputs = named_paths(readme_commands(text))
    shared = (root / ".." / "shared").exists()
    missing = []
    for path in inputs:
        if path.startswith(PLACEHOLDERS) or path.split("/", 1)[0] in outputs or \
                (path.startswith("../shared/") and not shared):
            continue
        if not glob.glob(str(root / path)):
            missing.append(path)
    return missing


def test_every_path_a_readme_command_names_exists_from_the_repository_root():
    """The quick end-to-end command's --train_file 'litbank/*.conll' matched nothing from the root."""
    if not (ROOT / ".." / "shared").exists():
        pytest.skip("../shared is only on developer machines; the paths under it are checked there")
    assert not missing_paths(README, ROOT), f"README.md names paths that do not exist: {missing_paths(README, ROOT)}"


def test_the_path_check_finds_the_quick_commands_old_glob(tmp_path):
    old = "`corefbert finetune coref-e2e --train_file 'litbank/*.conll' --do_train --output_dir out/asl`"
    assert missing_paths(old, ROOT) == ["litbank/*.conll"]
    fixed = old.replace("litbank/", "tests/fixtures/coref_e2e/")
    assert missing_paths(fixed, ROOT) == []
    produced = "```bash\ncorefbert pronoun-pairs --input x.conll --output_dir pairs\ncorefbert finetune pronoun-pairs \\\n" \
               "    --train_file pairs/train.jsonl --model_name_or_path CKPT --output_dir out/da   # a comment/x.py\n```"
    assert missing_paths(produced, ROOT) == ["x.conll"]
