"""``corefbert <command>`` from a real, non-editable install: a wheel of the tree installed
into a fresh virtual environment, run from a folder outside the checkout, must find every command and the
shipped configs without the repository's ``pretrain/`` and ``finetune/`` folders."""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.slow

# What the wheel is built from: the package and the files pyproject.toml reads (its readme).
SOURCES = ("corefbert", "pyproject.toml", "README.md")


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """(the venv's bin folder, an environment without the checkout on PYTHONPATH, a folder to run in)."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed here, and offline no build isolation can fetch it")
    tmp = tmp_path_factory.mktemp("installed")
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    source = tmp / "source"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheel = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "-w", str(tmp / "dist"), str(source)])
    assert wheel.returncode == 0, wheel.stdout[-3000:] + wheel.stderr[-3000:]
    (built,) = (tmp / "dist").glob("corefbert-*.whl")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr[-2000:]
    python = venv / "bin" / "python"
    install = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    str(built)])
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # The dependencies (torch, transformers, ...) come from this environment. ``venv --system-site-packages``
    # would only see the base interpreter's packages, not this virtual environment's, so a .pth file lists
    # our site-packages instead. It is written after the install, so pip never saw the editable corefbert
    # there; and a directory a .pth names is not scanned for .pth files, so the editable install's import
    # hook stays out: ``corefbert`` can only come from the wheel.
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "_parent_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return venv / "bin", env, elsewhere


def _corefbert(installed, *argv: str) -> subprocess.CompletedProcess:
    bin_dir, env, cwd = installed
    return _run([str(bin_dir / "corefbert"), *argv], env=env, cwd=cwd)


def test_the_package_comes_from_the_wheel(installed):
    bin_dir, env, cwd = installed
    where = _run([str(bin_dir / "python"), "-c", "import corefbert; print(corefbert.__file__)"], env=env, cwd=cwd)
    assert where.returncode == 0, where.stderr[-2000:]
    location = Path(where.stdout.strip())
    assert bin_dir.parent in location.parents and ROOT not in location.parents, location


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], ["usage: corefbert <command>", "\n  prepare ", "\n  finetune ", "\n  config-path "]),
        (["finetune", "glue", "--help"], ["usage: corefbert finetune glue ", "--task_name", "--model_name_or_path"]),
        (["pretrain", "--help"], ["usage: corefbert pretrain ", "--mrp_ratio", "--dataset_dir"]),
        (["prepare", "--help"], ["usage: corefbert prepare ", "--train_file", "--num_shards"]),
        (["ablation", "--help"], ["usage: corefbert ablation ", "--preset"]),
        (["finetune", "fever", "--help"], ["usage: corefbert finetune fever ", "--model_type", "--config"]),
        (["resolve", "--help"], ["usage: corefbert resolve ", "--input_file", "--config"]),
        (["plot", "--help"], ["usage: corefbert plot [-h] LOG ", "--output", "--config"]),
        (["slot-fill", "--help"], ["usage: corefbert slot-fill [-h] DATASET_DIR ", "--batch_size", "--config"]),
        (["config-path", "--help"], ["usage: corefbert config-path [-h] [NAME] ", "--config"]),
    ],
    ids=["help", "finetune-glue", "pretrain", "prepare", "ablation", "finetune-fever", "resolve", "plot", "slot-fill",
         "config-path"],
)
def test_each_command_runs_from_the_installed_package(installed, argv, expected):
    run = _corefbert(installed, *argv)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    for text in expected:
        assert text in run.stdout, (text, run.stdout[-2000:])


def test_the_installed_package_finds_its_configs(installed):
    bin_dir = installed[0]
    for name, kind in (("demo", "pretraining"), ("corefbert_base", "pretraining"), ("deepspeed_zero3", "accelerate")):
        run = _corefbert(installed, "config-path", name)
        assert run.returncode == 0, run.stderr[-2000:]
        path = Path(run.stdout.strip())
        assert path.is_file() and path.parent.name == kind and bin_dir.parent in path.parents, path


def test_the_spacy_component_and_copy_scorer_come_from_the_entry_points(installed, tmp_path, coref_checkpoint):
    """After installing, spaCy finds ``corefbert_coref`` (``spacy_factories``) and the copy scorer
    (``spacy_misc``) with nothing of corefbert imported by the script."""
    from accelerate.state import AcceleratorState, GradientState
    from helpers import FIXTURES, load_cli

    load_cli("finetune/run_coref_e2e.py").main([
        "--encoder", "lsl", "--train_file", str(FIXTURES / "coref_e2e" / "two_docs.conll"), "--do_train",
        "--num_train_epochs", "20", "--learning_rate", "1e-2", "--embedding_dim", "32", "--lstm_size", "32",
        "--ffnn_size", "32", "--char_filters", "8", "--dropout", "0", "--lexical_dropout", "0",
        "--max_span_width", "3", "--top_span_ratio", "3", "--allow_crossing_spans", "--disable_tqdm",
        "--output_dir", str(tmp_path / "model")])
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    script = f"""
import sys, spacy
from spacy.tokens import Doc
nlp = spacy.blank("en")
nlp.add_pipe("sentencizer")
nlp.add_pipe("corefbert_coref", config={{"model": {str(tmp_path / "model" / "last")!r}}})
doc = nlp("Anna met Tom at the station. She gave him a letter.")
print("CLUSTERS", [[span.text for span in cluster] for cluster in doc._.coref_clusters])
print("RESOLVED", doc._.resolved_text)
copy = spacy.blank("en").add_pipe("corefbert_coref", config={{"model": {str(coref_checkpoint)!r}, "scorer": "copy"}})
tagged = Doc(nlp.vocab, words=["The", "farmer", "slept", ".", "He", "woke", "."],
             pos=["DET", "NOUN", "VERB", "PUNCT", "PRON", "VERB", "PUNCT"],
             sent_starts=[True, False, False, False, True, False, False])
print("COPY", [[span.text for span in cluster] for cluster in copy(tagged)._.coref_clusters])
print("FROM", "corefbert" in sys.modules and sys.modules["corefbert"].__file__)
"""
    bin_dir, env, cwd = installed
    run = _run([str(bin_dir / "python"), "-c", script], env=env, cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    assert "'Anna', 'She'" in lines["CLUSTERS"] and lines["RESOLVED"].startswith("Anna met Tom at the station. Anna")
    assert lines["COPY"] == "[['The farmer', 'He']]"
    assert str(bin_dir.parent) in lines["FROM"], lines["FROM"]
