"""One way to declare a task: every task is ``Task(task_args, training_args)`` with its
arguments dataclass and paper defaults on the class, one ``corefbert.tasks.base.main`` is every CLI (each
entry of the task registry passes it its task), and the held-out split is one pair of flags for QA, DocRED and FEVER."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from helpers import ROOT

from corefbert.errors import CorefBertError
from corefbert.tasks.babi.task import BabiTask
from corefbert.tasks.base import FinetuningTask, HeldOutArguments, held_out_split, parse_task_arguments
from corefbert.tasks.coref.task import CorefTask
from corefbert.tasks.coref_e2e.task import CorefE2ETask
from corefbert.tasks.docred import DocredTask
from corefbert.tasks.fever.task import FeverTask
from corefbert.tasks.glue import GlueTask
from corefbert.tasks.pronoun_pairs.task import PronounPairsTask
from corefbert.tasks.qa.mrqa import MRQATask
from corefbert.tasks.qa.quoref import QuorefTask

CLIS = sorted((ROOT / "finetune").glob("run_*.py"))
TASKS = {"run_babi": BabiTask, "run_coref": CorefTask, "run_coref_e2e": CorefE2ETask, "run_docred": DocredTask, "run_fever": FeverTask,
         "run_glue": GlueTask, "run_mrqa": MRQATask, "run_pronoun_pairs": PronounPairsTask, "run_quoref": QuorefTask}


def test_every_finetuning_cli_is_a_few_lines_over_its_registry_entry():
    assert [p.stem for p in CLIS] == sorted(TASKS)
    for path in CLIS:
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) <= 40, f"{path.name}: {len(source.splitlines())} lines"
        tree = ast.parse(source)
        imported = {(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    for alias in node.names}
        # The script runs its task's entry of the one registry (an installed package has no finetune/ folder,
        # and `corefbert finetune <task>` runs that same entry).
        assert imported == {("corefbert.tasks.registry", "TASKS")}, path.name
        name = path.stem.removeprefix("run_").replace("_", "-")
        # No argument classes, defaults, wiring or functions of its own: one name, main, bound to the entry.
        assigned = [ast.unparse(n) for n in tree.body if isinstance(n, ast.ClassDef | ast.Assign | ast.FunctionDef)]
        assert assigned == [f"main = TASKS['{name}'].main"], path.name


@pytest.mark.parametrize("script", sorted(TASKS))
def test_every_registry_entry_is_the_one_main_with_its_task(script, monkeypatch):
    """A registry entry passes its task class, the argv and the script's name to ``tasks.base.main``."""
    from corefbert.tasks import base
    from corefbert.tasks.registry import TASKS as REGISTRY

    calls = []
    monkeypatch.setattr(base, "main", lambda *args, **kwargs: calls.append((args, kwargs)) or {})
    entry = REGISTRY[script.removeprefix("run_").replace("_", "-")]
    assert entry.task() is TASKS[script] and entry.script == f"{script}.py"
    assert entry.main(["--flag"]) == {}
    assert calls == [((TASKS[script], ["--flag"]), {"prog": f"{script}.py"})]


@pytest.mark.parametrize("task", list(TASKS.values()), ids=lambda t: t.__name__)
def test_every_task_declares_its_arguments_and_takes_the_one_constructor(task):
    import inspect

    assert issubclass(task, FinetuningTask) and dataclasses.is_dataclass(task.args_class)
    assert list(inspect.signature(task.__init__).parameters) == ["self", "task_args", "training_args"]


PAPER = {  # CLI -> (extra flags, the settings the paper gives)
    "quoref": (QuorefTask, [], {"learning_rate": 2e-5, "num_train_epochs": 6.0, "per_device_train_batch_size": 32,
                                "max_seq_length": 512, "doc_stride": 128}),
    "mrqa": (MRQATask, [], {"learning_rate": 3e-5, "num_train_epochs": 2.0, "per_device_train_batch_size": 32,
                            "max_seq_length": 512, "doc_stride": 128}),
    "docred": (DocredTask, [], {"learning_rate": 4e-5, "per_device_train_batch_size": 32, "max_seq_length": 512}),
    "fever_concat": (FeverTask, [], {"learning_rate": 2e-5, "num_train_epochs": 3.0, "model_type": "concat"}),
    "fever_kgat": (FeverTask, ["--model_type", "kgat"], {"learning_rate": 5e-5, "gradient_accumulation_steps": 4,
                                                          "per_device_train_batch_size": 8, "max_seq_length": 130}),
    "coref": (CorefTask, [], {"learning_rate": 3e-5, "per_device_train_batch_size": 64, "num_train_epochs": 10.0,
                              "max_seq_length": 128}),
    "glue": (GlueTask, ["--task_name", "rte"], {"learning_rate": 3e-5, "per_device_train_batch_size": 32,
                                                "max_seq_length": 128}),
}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_defaults_come_from_the_task_class_and_flags_override_them(name, tmp_path):
    task, flags, expected = PAPER[name]
    base = ["--model_name_or_path", "m", "--output_dir", str(tmp_path), *flags]
    task_args, args = parse_task_arguments(task, base)
    merged = dataclasses.asdict(args) | dataclasses.asdict(task_args)
    assert {key: merged[key] for key in expected} == expected
    _, args = parse_task_arguments(task, [*base, "--learning_rate", "1e-3"])
    assert args.learning_rate == 1e-3


def test_fever_model_type_in_a_config_file_picks_its_defaults(tmp_path):
    config = tmp_path / "kgat.yaml"
    config.write_text("model_type: kgat\n")
    task_args, args = parse_task_arguments(FeverTask, ["--config", str(config), "--model_name_or_path", "m",
                                                           "--output_dir", str(tmp_path)])
    assert task_args.model_type == "kgat" and args.learning_rate == 5e-5


def test_one_held_out_flag_pair_for_qa_docred_and_fever():
    for task in (QuorefTask, MRQATask, DocredTask, FeverTask):
        names = {f.name for f in dataclasses.fields(task.args_class)}
        assert issubclass(task.args_class, HeldOutArguments), task.__name__
        assert {"validation_split_percentage", "split_seed"} <= names and "validation_fraction" not in names
    with pytest.raises(CorefBertError, match="--validation_split_percentage must be in"):
        HeldOutArguments(validation_split_percentage=100)


def test_held_out_split_is_seeded_keeps_order_and_groups():
    items = list(range(20))
    kept, held = held_out_split(items, 25, seed=3)
    assert len(held) == 5 and sorted(kept + held) == items
    assert kept == sorted(kept) and held == sorted(held)  # input order on both sides
    assert held_out_split(items, 25, seed=3) == (kept, held)
    assert held_out_split(items, 25, seed=4) != (kept, held)
    assert len(held_out_split(items[:3], 1, seed=0)[1]) == 1  # at least one held out
    pairs = [(i, i // 4) for i in range(20)]  # 5 groups of 4
    kept, held = held_out_split(pairs, 40, seed=1, group=lambda pair: pair[1])
    assert len(held) == 8 and not {g for _, g in kept} & {g for _, g in held}


def test_do_eval_without_a_dev_file_needs_a_held_out_percentage(tmp_path, capsys):
    from helpers import FIXTURES, load_cli

    with pytest.raises(SystemExit) as info:
        load_cli("finetune/run_mrqa.py").main([
            "--model_name_or_path", str(tmp_path), "--output_dir", str(tmp_path / "out"), "--do_eval",
            "--train_file", str(FIXTURES / "mrqa" / "squad_tiny.json")])
    assert info.value.code == 2
    assert "--validation_split_percentage" in capsys.readouterr().err
