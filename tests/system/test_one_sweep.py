"""One sweep runner: grid points x seeds of training runs go through ``corefbert.training.sweep``.

The ablation study and the bAbI table each had their own: a finished run skipped by hand, its settings compared
with ``changed_settings`` and refused in a message of its own, a run marker written beside it. Read from the source
like the one-home tests (:mod:`test_one_home`): outside the sweep, no module compares a run's recorded settings
(the training loop's resume check aside), writes a run marker or defines the sweep's functions, and both sweeps
call the runner. The last test plants a second sweep in a fake module and watches the checker find it.
"""

from __future__ import annotations

import ast

from test_architecture import MODULES

SWEEP = "corefbert.training.sweep"
# The comparison of recorded settings: defined in arguments, used by a resume (the loop) and by the sweep only.
SETTINGS_CHECKS = {"changed_settings", "refuse_changed_settings"}
CHECKS_SETTINGS = {"corefbert.training.training_args", "corefbert.training.loop.core", SWEEP}
# What only the sweep defines.
SWEEP_FUNCTIONS = {"run_sweep", "run_one", "is_finished", "recorded_settings"}
WRITERS = {"replace_file", "write_json", "write_json_durably", "output_file", "output_path", "write_text"}
# The families that sweep grid points x seeds.
SWEEPS = ("corefbert.ablation.study", "corefbert.tasks.babi.task")


def _names_a_marker(node: ast.AST) -> bool:
    """An expression naming a run marker: a ``*MARKER`` name, or a ``..._run.json`` file name."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name | ast.Attribute) and \
                (inner.id if isinstance(inner, ast.Name) else inner.attr).upper().endswith("MARKER"):
            return True
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and inner.value.endswith("_run.json"):
            return True
    return False


def second_sweeps(name: str, tree: ast.Module) -> list[str]:
    """What module ``name`` (its parsed source ``tree``) does that only the sweep runner may do."""
    if name == SWEEP:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in SWEEP_FUNCTIONS:
            found.append(f"{name}:{node.lineno}: defines {node.name} (the sweep is {SWEEP})")
        if not isinstance(node, ast.Call):
            continue
        called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if called in SETTINGS_CHECKS and name not in CHECKS_SETTINGS:
            found.append(f"{name}:{node.lineno}: compares a run's recorded settings by hand ({called}; the sweep "
                         f"is {SWEEP})")
        if called in WRITERS and any(_names_a_marker(arg) for arg in [*node.args, node.func]):
            found.append(f"{name}:{node.lineno}: writes a run marker by hand ({called}; the sweep writes it)")
    return found


def _calls(tree: ast.Module, function: str) -> bool:
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == function
               for node in ast.walk(tree))


def test_there_is_one_sweep_runner():
    found = [line for module in MODULES.values() if module.name.startswith("corefbert")
             for line in second_sweeps(module.name, module.tree)]
    assert not found, "\n".join(found)


def test_the_ablation_study_and_the_babi_table_run_through_it():
    for name in SWEEPS:
        imported = {alias for _, base, alias in MODULES[name].imports if base == SWEEP}
        assert "run_sweep" in imported and _calls(MODULES[name].tree, "run_sweep"), name
    defined = {n.name for n in ast.walk(MODULES[SWEEP].tree) if isinstance(n, ast.FunctionDef)}
    assert SWEEP_FUNCTIONS <= defined, sorted(SWEEP_FUNCTIONS - defined)


def test_a_planted_second_sweep_is_found():
    planted = ast.parse(
        "import json\n"
        "from corefbert.training.training_args import changed_settings, refuse_changed_settings\n"
        "RUN_MARKER = 'grid_run.json'\n"
        "def run_one(out, settings):\n"
        "    saved = json.loads((out / RUN_MARKER).read_text())\n"
        "    if changed_settings(saved, settings):\n"
        "        raise SystemExit('changed')\n"
        "def keep(out, saved, settings, checkpoint):\n"
        "    refuse_changed_settings(changed_settings(saved, settings), checkpoint, False, print)\n"
        "    replace_file(out / RUN_MARKER, json.dumps(settings))\n"
        "    (out / 'grid_run.json').write_text('{}')\n"
    )
    found = second_sweeps("corefbert.tasks.planted", planted)
    assert sum("compares a run's recorded settings by hand (changed_settings" in f for f in found) == 2, found
    assert sum("(refuse_changed_settings" in f for f in found) == 1, found
    assert sum("writes a run marker by hand" in f for f in found) == 2, found
    assert any("defines run_one" in f for f in found), found
    # the same code is the sweep's own in the sweep, and the resume check's in the training loop
    assert second_sweeps(SWEEP, planted) == []
    assert not any("compares" in f for f in second_sweeps("corefbert.training.loop.core", planted))
