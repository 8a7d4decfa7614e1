"""One way to add a task: a task is registered once, in ``corefbert/tasks/registry.py``, from
which the CLI's task table, ``corefbert finetune <task>`` and the ``finetune/run_<task>.py`` scripts come; a
family with variants chooses the class in one hook, ``variant_for``; every command parses through
``corefbert.argparser.parse_args`` (dataclass arguments, ``--config``).

Read from the source like the one-home test (``test_one_home.py``), whose module table this reuses. The planted
test writes each second way into a fake module and watches the checker find every one, so a rule that silently
stopped matching would fail too.
"""

from __future__ import annotations

import ast
import importlib

from test_architecture import MODULES

ARGUMENTS = "corefbert.argparser"
BASE = "corefbert.tasks.base"
REGISTRY = "corefbert.tasks.registry"
#: Methods of the second variant hook FEVER and the pronoun pairs had beside ``variant_for``.
OTHER_HOOKS = ("variant", "defaults_for")
PARSERS = ("ArgumentParser", "HfArgumentParser")


def _called(node: ast.AST) -> str | None:
    """The name a call calls (``f`` of ``f(...)`` and of ``x.f(...)``), else None."""
    if isinstance(node, ast.Call):
        return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
    return None


def _picks_by_hand(node: ast.Compare) -> bool:
    """``cls is X`` / ``type(self) is not X`` with ``X`` a class name: a family choosing (or refusing) its class."""
    if not any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
        return False
    sides = [node.left, *node.comparators]
    chooser = any(ast.unparse(side) in ("cls", "type(self)") for side in sides)
    return chooser and any(isinstance(side, ast.Name) and side.id[:1].isupper() for side in sides)


def second_ways(name: str, tree: ast.Module) -> list[str]:
    """What module ``name`` (its parsed source ``tree``) does that only the one way may do."""
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            where = f"{name}:{method.lineno}: {cls.name}.{method.name}"
            calls = {_called(n) for n in ast.walk(method)}
            if method.name in OTHER_HOOKS:
                found.append(f"{where} is a second variant hook (choose the class in variant_for)")
            if method.name == "run" and "run_finetuning" in calls and name != BASE:
                found.append(f"{where} runs one fine-tuning itself (the base run does; choose the class in "
                             "variant_for)")
            if method.name != "variant_for" and "peek_argument" in calls:
                found.append(f"{where} reads an argument before the parse outside variant_for")
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _picks_by_hand(node):
            found.append(f"{name}:{node.lineno}: picks its variant by hand ({ast.unparse(node)}; variant_for "
                         "picks, the base refuses to build a family)")
        elif isinstance(node, ast.ImportFrom) and node.module == BASE and name != REGISTRY \
                and any(alias.name == "main" for alias in node.names):
            found.append(f"{name}:{node.lineno}: imports tasks.base.main (a task's command is its registry entry)")
        elif _called(node) in PARSERS and name != ARGUMENTS:
            found.append(f"{name}:{node.lineno}: builds its own argument parser (parse_args: dataclass arguments "
                         "and --config)")
    return found


def test_each_task_chooses_its_variant_in_one_hook_and_each_command_parses_one_way():
    found = [line for module in MODULES.values() for line in second_ways(module.name, module.tree)]
    assert not found, "\n".join(found)


def _task_classes() -> list[tuple[str, str]]:
    """``(module, class)`` of every subclass of ``FinetuningTask`` defined in the package, read from the source."""
    classes = [(m.name, node) for m in MODULES.values() if m.name.startswith("corefbert.tasks.")
               for node in ast.walk(m.tree) if isinstance(node, ast.ClassDef)]
    known, grew = {"FinetuningTask"}, True
    while grew:  # a subclass of a subclass, to any depth
        before = len(known)
        known |= {node.name for _, node in classes if any(ast.unparse(b).split(".")[-1] in known for b in node.bases)}
        grew = len(known) > before
    return [(module, node.name) for module, node in classes if node.name in known and node.name != "FinetuningTask"]


def test_every_task_class_is_reached_from_the_registry():
    """Each task class is a registered one, a variant below one (``variant_for`` picks it) or a base above one:
    a task the registry does not reach has no command and no script."""
    from corefbert.tasks.registry import TASKS

    registered = [entry.task() for entry in TASKS.values()]
    assert len(set(registered)) == len(registered)
    found = _task_classes()
    assert ("corefbert.tasks.fever.task", "KgatFeverTask") in found and len(found) > len(registered)
    for module, name in found:
        cls = getattr(importlib.import_module(module), name)
        assert any(issubclass(cls, r) or issubclass(r, cls) for r in registered), f"{module}.{name} is not registered"


def test_the_cli_table_and_the_scripts_are_the_registrys():
    from helpers import ROOT

    from corefbert import cli
    from corefbert.tasks.registry import TASKS

    assert cli.FINETUNE_TASKS is TASKS
    assert sorted(p.name for p in (ROOT / "finetune").glob("*.py")) == sorted(e.script for e in TASKS.values())
    for entry in TASKS.values():
        script = MODULES[f"finetune.{entry.script.removesuffix('.py')}"].tree
        assert f"main = TASKS[{entry.name!r}].main" in [ast.unparse(node) for node in script.body], entry.script


PLANTED = '''
import argparse
from corefbert.arguments import peek_argument
from corefbert.tasks.base import FinetuningTask, main as run_task, run_finetuning

class PlantedTask(FinetuningTask):
    @staticmethod
    def variant(model):
        return PlantedTask

    @classmethod
    def defaults_for(cls, argv):
        return dict(cls.variant(peek_argument(argv, "model")).training_defaults)

    @classmethod
    def run(cls, task_args, training_args):
        task_class = cls.variant(task_args.model) if cls is PlantedTask else cls
        return run_finetuning(task_class(task_args, training_args), training_args)

    def __init__(self, task_args, training_args):
        if type(self) is PlantedTask:
            raise TypeError("the family")
        super().__init__(task_args, training_args)

class OneHookTask(FinetuningTask):
    @classmethod
    def variant_for(cls, argv):
        return {"a": OneHookTask}[peek_argument(argv, "model") or "a"]

def main(argv=None):
    return run_task(PlantedTask, argv, prog="run_planted.py")

def parse(argv):
    return argparse.ArgumentParser(prog="planted").parse_args(argv)
'''


def test_a_planted_second_variant_hook_and_parser_are_found():
    found = second_ways("corefbert.tasks.planted", ast.parse(PLANTED))
    for what in ("PlantedTask.variant is a second variant hook", "PlantedTask.defaults_for is a second variant hook",
                 "PlantedTask.run runs one fine-tuning itself", "PlantedTask.defaults_for reads an argument",
                 "(cls is PlantedTask;", "(type(self) is PlantedTask;", "imports tasks.base.main",
                 "builds its own argument parser"):
        assert sum(what in line for line in found) == 1, (what, found)
    assert len(found) == 8 and not any("OneHookTask" in line for line in found), found
    # The homes themselves: the registry runs tasks.base.main, arguments builds the parser.
    assert second_ways(REGISTRY, ast.parse("from corefbert.tasks.base import main\n")) == []
    assert second_ways(ARGUMENTS, ast.parse("import argparse\nargparse.ArgumentParser()\n")) == []
