"""Security: no code runs from a file or config value, weights are safetensors, writes stay in output_dir.

The static checks read every Python file of the package, the CLIs and the benchmarks with ``ast`` (so a
comment or a docstring mentioning ``eval(`` does not count, and ``model.eval()`` is not ``eval``).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, save_corpus

SCANNED = sorted(p for d in ("corefbert", "pretrain", "finetune", "benchmarks", "scripts")
                 for p in (ROOT / d).rglob("*.py"))
# Weight-like files that may hold pickles; optimizer/RNG state from accelerator.save_state is the exception
# (read with weights_only=True before a resume loads it). No scheduler or registered-object pickle is written.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
ACCELERATE_STATE = ("optimizer", "random_states", "scaler", "sampler")


def _calls(tree: ast.AST):
    """(dotted name, call node) of every call in ``tree``: ``torch.load``, ``eval``, ``yaml.load`` ..."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, func = [], node.func
            while isinstance(func, ast.Attribute):
                parts.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name):
                parts.append(func.id)
                yield ".".join(reversed(parts)), node


def _findings(path: Path) -> list[str]:
    return _scan(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


def _scan(source: str, where: str) -> list[str]:
    tree = ast.parse(source, filename=where)
    found = []
    for name, node in _calls(tree):
        at = f"{where}:{node.lineno}"
        keywords = {k.arg: k.value for k in node.keywords}
        if name in ("eval", "exec", "compile", "builtins.eval", "builtins.exec"):
            found.append(f"{at}: {name}() runs code from data")
        if name.split(".")[0] in ("pickle", "cPickle", "dill", "joblib", "marshal", "shelve") and (
                name.endswith("load") or name.endswith("loads") or name.endswith("open")):
            found.append(f"{at}: {name} unpickles a file")
        if name == "torch.load":
            weights_only = keywords.get("weights_only")
            if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                found.append(f"{at}: torch.load without weights_only=True")
        if name.endswith("yaml.load") or name in ("yaml.unsafe_load", "yaml.full_load", "yaml.load_all"):
            found.append(f"{at}: {name} (use yaml.safe_load)")
        remote = keywords.get("trust_remote_code")
        if remote is not None and not (isinstance(remote, ast.Constant) and remote.value is False):
            found.append(f"{at}: trust_remote_code passed as {ast.unparse(remote)}")
        if keywords.get("safe_serialization") is not None:
            value = keywords["safe_serialization"]
            if not (isinstance(value, ast.Constant) and value.value is True):
                found.append(f"{at}: safe_serialization={ast.unparse(value)} may write a pickle")
        if name.endswith("torch.save"):
            found.append(f"{at}: torch.save writes a pickle (use safetensors.torch.save_file)")
    return found


def test_scan_covers_the_code():
    names = {p.relative_to(ROOT).as_posix() for p in SCANNED}
    assert {"corefbert/argparser.py", "pretrain/run_mrp.py", "finetune/run_glue.py"} <= names


def test_scanner_catches_what_it_looks_for():
    """The scanner is not vacuous: each forbidden pattern in a planted file is reported."""
    source = (
        "import pickle, torch, yaml\n"
        "eval('1')\nexec('x = 1')\npickle.load(open('f', 'rb'))\ntorch.load('w.pt')\n"
        "torch.load('w.pt', weights_only=False)\nyaml.load('a: 1')\n"
        "from_pretrained('m', trust_remote_code=True)\nm.save_pretrained('d', safe_serialization=False)\n"
        "torch.save({}, 'w.pt')\nmodel.eval()\ntorch.load('w.pt', weights_only=True)\nyaml.safe_load('a')\n"
    )
    found = _scan(source, "planted.py")
    assert len(found) == 9, found
    assert [f.split(":")[1] for f in found] == [str(n) for n in range(2, 11)], found


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_code_execution_or_pickle_loading(path):
    assert _findings(path) == []


def test_yaml_config_cannot_run_code(tmp_path):
    """A config holding a Python object tag is refused (safe_load), not constructed."""
    from corefbert.argparser import load_yaml_config
    from corefbert.errors import CorefBertError

    marker = tmp_path / "ran"
    config = tmp_path / "evil.yaml"
    config.write_text(f"output_dir: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(CorefBertError, match="not valid YAML"):
        load_yaml_config(str(config))
    assert not marker.exists()


def _weight_pickles(directory: Path) -> list[str]:
    bad = []
    for path in directory.rglob("*"):
        if path.is_file() and path.suffix in PICKLE_SUFFIXES:
            if not any(path.name.startswith(state) for state in ACCELERATE_STATE):
                bad.append(str(path.relative_to(directory)))
    return bad


@pytest.mark.slow
def test_pretraining_run_writes_weights_as_safetensors_only(tmp_path):
    """A tiny pretraining run with a mid-run checkpoint: model weights are ``.safetensors``; the only
    pickles are the optimizer/RNG state accelerate's ``save_state`` writes (the LR schedule is JSON)."""
    import torch
    from accelerate.state import AcceleratorState, GradientState
    from helpers import FIXTURES, synthetic_corpus, tiny_config
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertModel, BertTokenizerFast

    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import run_pretraining

    model_dir = tmp_path / "bert"
    model_dir.mkdir()
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator((FIXTURES / "tiny_corpus.txt").read_text().splitlines(), vocab_size=600)
    trainer.save_model(str(model_dir))
    tokenizer = BertTokenizerFast(vocab=str(model_dir / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(0)
    BertModel(tiny_config("bert", tokenizer)).save_pretrained(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))

    out = tmp_path / "run"
    args = PretrainingArguments(
        model_name_or_path=str(model_dir), output_dir=str(out), max_steps=2, per_device_train_batch_size=4,
        per_device_eval_batch_size=8, checkpointing_steps=1, logging_steps=1, mixed_precision="no", seed=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    try:
        run_pretraining(args, splits=synthetic_corpus(tokenizer, n_train=8, n_eval=4))
    finally:
        torch.set_num_threads(threads)
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    weights = list(out.rglob("*.safetensors"))
    assert weights, sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    # The checkpoint was written (so the exception for accelerate's own state was exercised).
    assert any(p.name.startswith("optimizer") for p in out.rglob("*")), sorted(p.name for p in out.rglob("*"))
    assert _weight_pickles(out) == []


def test_prediction_file_names_cannot_escape_output_dir(tmp_path):
    """Prediction files are named from the input file's base name: an input path full of ``..`` (or a
    file literally named ``..``-something) still writes inside ``output_dir``."""
    from corefbert.tasks.coref.readers import PronounExample
    from corefbert.tasks.coref.task import CorefTask

    out = tmp_path / "a" / "out"
    example = PronounExample("x", "Anna met Bea. She left.", 14, 17, ["Anna", "Bea"], 0, [[(0, 4)], [(9, 12)]])
    sneaky = [str(tmp_path / "data" / ".." / ".." / "escape.tsv"), "../../../../escape_too.tsv", "/tmp/.."]
    predictions = [(path, "gap", [(example, [0.0, -1.0], 0)]) for path in sneaky]
    written = CorefTask.write_predictions(object.__new__(CorefTask), predictions, str(out), "eval")
    assert len(written) == 2 * len(sneaky)
    for path in written:
        assert os.path.realpath(path).startswith(os.path.realpath(out) + os.sep), path
        assert json.loads(Path(written[0]).read_text().splitlines()[0])["id"] == "x"
    escaped = [p for p in tmp_path.rglob("*") if p.is_file() and out not in p.parents]
    assert escaped == []


class _Payload:
    """Unpickling this creates a folder: proof that a weights file's code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def _pickle_only_folder(tmp_path: Path, bert_tokenizer) -> tuple[Path, Path]:
    import pickle

    from helpers import tiny_config

    folder, marker = tmp_path / "pickled_model", tmp_path / "the_pickle_ran"
    folder.mkdir()
    tiny_config("bert", bert_tokenizer).save_pretrained(folder)
    bert_tokenizer.save_pretrained(folder)
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(str(marker))))
    return folder, marker


@pytest.mark.parametrize("script", ["finetune/run_glue.py", "pretrain/run_mrp.py"])
def test_a_pickle_only_model_folder_is_refused_before_any_weight_is_read(tmp_path, bert_tokenizer, script, capsys):
    """A benign pickle-only folder used to load (the README promises safetensors only), and a
    malicious one's traceback suggested weights_only=False."""
    from helpers import load_cli

    folder, marker = _pickle_only_folder(tmp_path, bert_tokenizer)
    rte = ROOT / "tests" / "fixtures" / "glue" / "RTE"
    argv = {"finetune/run_glue.py": ["--task_name", "rte", "--data_dir", str(rte), "--do_eval",
                                     "--max_seq_length", "64"],
            "pretrain/run_mrp.py": ["--train_file", str(ROOT / "tests" / "fixtures" / "tiny_corpus.txt"),
                                    "--max_steps", "1", "--max_seq_length", "64"]}[script]
    with pytest.raises(SystemExit) as stopped:
        load_cli(script).main(["--model_name_or_path", str(folder), "--output_dir", str(tmp_path / "out"), *argv])
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {folder}: the weights here are pickle files only (pytorch_model.bin); corefbert "
                      "reads safetensors only, since unpickling can run code from the file. In an environment you "
                      "trust, convert once with transformers (from_pretrained, then save_pretrained, which writes "
                      "model.safetensors) and pass the converted folder"]
    assert not marker.exists()


def _checkpointed_run(tmp_path: Path, script: str) -> tuple[Path, list[str]]:
    """A finished 2-step run of ``script`` with a checkpoint after each step; its argv without --output_dir."""
    from helpers import FIXTURES, load_cli, synthetic_corpus
    from test_pretraining import _save_tiny_bert
    from transformers import AutoTokenizer

    model = _save_tiny_bert(tmp_path / "model")
    common = ["--model_name_or_path", str(model), "--max_steps", "2", "--per_device_train_batch_size", "4",
              "--checkpointing_steps", "1", "--learning_rate", "1e-3", "--mixed_precision", "no", "--seed", "5"]
    if script == "pretrain/run_mrp.py":
        corpus = tmp_path / "corpus"
        save_corpus(synthetic_corpus(AutoTokenizer.from_pretrained(model), n_train=16, n_eval=4), corpus)
        argv = [*common, "--dataset_dir", str(corpus), "--logging_steps", "1"]
    else:
        argv = [*common, "--task_name", "rte", "--train_file", str(FIXTURES / "glue" / "RTE" / "train.tsv"),
                "--do_train", "--max_seq_length", "64"]
    load_cli(script).main([*argv, "--output_dir", str(tmp_path / "run")])
    return tmp_path / "run", argv


def _plant(file: Path, marker: Path, zip_format: bool) -> None:
    """A pickle that creates ``marker`` when unpickled, in torch's zip format (as the real files) or plain."""
    import pickle

    import torch

    if zip_format:
        torch.save(_Payload(str(marker)), file)
    else:
        file.write_bytes(pickle.dumps(_Payload(str(marker))))


@pytest.mark.slow
@pytest.mark.usefixtures("fresh_accelerate_state")
@pytest.mark.parametrize("script", ["pretrain/run_mrp.py", "finetune/run_glue.py"])
def test_a_code_running_pickle_in_any_checkpoint_file_runs_nothing_on_resume(tmp_path, script, capsys):
    """``custom_checkpoint_0.pkl`` (the LR scheduler, registered with accelerate, which unpickles it
    with ``weights_only=False``) ran a planted pickle on ``--resume_from_checkpoint latest``. Now a code-running
    pickle in each file of the newest checkpoint in turn, and under each name a loader of accelerate's may
    unpickle (registered objects, the fp16 scaler, a sampler), runs nothing: the resume passes that checkpoint
    over with one warning naming the file and continues from the one before. The recorded size of a replaced
    file is set to the new one (who can write the file can write the record): the check that stops the pickle
    is the one that reads it without running code, not the size."""
    from helpers import load_cli

    from corefbert.training.checkpoints.folders import STATE_FILE, checkpoints_root

    run, argv = _checkpointed_run(tmp_path, script)
    saved = sorted(p.name for p in (checkpoints_root(run) / "step_2").iterdir())
    # The registered-object file first: the one that ran code before (when it was the scheduler's state).
    planted = {"custom_checkpoint_0.pkl": False} | {name: True for name in saved} | {"scaler.pt": True,
                                                                                   "sampler.bin": True}
    for number, (name, zip_format) in enumerate(planted.items()):
        copy = tmp_path / f"planted_{number}"
        shutil.copytree(run, copy)
        newest, before = checkpoints_root(copy) / "step_2", checkpoints_root(copy) / "step_1"
        marker = tmp_path / f"ran_{number}"
        _plant(newest / name, marker, zip_format)
        state = json.loads((newest / STATE_FILE).read_text()) if name != STATE_FILE else None
        if state is not None and name in state.get("files", {}):
            state["files"][name] = (newest / name).stat().st_size
            (newest / STATE_FILE).write_text(json.dumps(state))
        capsys.readouterr()
        load_cli(script).main([*argv, "--output_dir", str(copy), "--max_steps", "3", "--resume_from_checkpoint",
                               "latest"])
        printed = capsys.readouterr()
        assert not marker.exists(), f"unpickling {name} ran code"
        warnings = [line for line in printed.err.splitlines() if line.startswith(f"warning: {newest}")]
        if name == STATE_FILE:  # not a checkpoint at all without its state: passed over by `latest`
            assert warnings == [f"warning: {newest}: not a complete checkpoint ({STATE_FILE} is missing or "
                                f"unreadable); passed over for {before}"], printed.err
        else:
            assert len(warnings) == 1 and warnings[0].startswith(f"warning: {newest}: checkpoint cannot be loaded (")
            assert warnings[0].endswith(f"); trying {before}"), warnings
            if name != "model.safetensors":  # safetensors reads a header, never a pickle: its own error
                assert f"({name} holds a pickle that would run code or build objects when loaded (" in warnings[0]
        assert f"resumed from {before} at step 1" in printed.out
    assert saved == ["model.safetensors", "optimizer.bin", "random_states_0.pkl", STATE_FILE]  # each one planted


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_a_checkpoint_of_another_version_is_refused_in_one_line(tmp_path, capsys):
    """One checkpoint format: a trainer state without this version's record of the files and the LR schedule
    (as a checkpoint written by another version has it) is refused by name, and nothing of it is unpickled."""
    from helpers import load_cli

    from corefbert.training.checkpoints.folders import STATE_FILE, checkpoints_root

    run, argv = _checkpointed_run(tmp_path, "pretrain/run_mrp.py")
    marker = tmp_path / "ran"
    for name in ("step_1", "step_2"):
        folder = checkpoints_root(run) / name
        state = json.loads((folder / STATE_FILE).read_text())
        (folder / STATE_FILE).write_text(json.dumps({k: v for k, v in state.items()
                                                     if k not in ("files", "lr_scheduler")}))
        _plant(folder / "custom_checkpoint_0.pkl", marker, zip_format=True)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        load_cli("pretrain/run_mrp.py").main([*argv, "--output_dir", str(run), "--max_steps", "3",
                                              "--resume_from_checkpoint", "latest"])
    out = capsys.readouterr()
    assert exit_info.value.code == 2 and not marker.exists() and "Traceback" not in out.out + out.err
    assert "written by another version" in out.err.strip().splitlines()[-1]
