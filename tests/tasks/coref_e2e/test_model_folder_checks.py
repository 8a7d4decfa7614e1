"""A saved model folder's config is checked against its weights' shapes (the safetensors headers)
before anything is built, so a config that sizes another model costs one line, not gigabytes."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import load_cli, run_under_memory_cap
from test_e2e_coref import FIXTURE, SMALL

RESOLVE_UNDER_A_CAP = """
from corefbert.tasks.coref_e2e import resolve
cap_memory()
resolve.main(["--model", {model!r}, "--spacy_model", "blank", "--text", "Anna met Tom. She smiled."])
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_bert_dir):
    """A one-epoch BiLSTM model and a one-epoch ``bert`` model of the fixture (their shapes are what matters)."""
    from accelerate.state import AcceleratorState, GradientState

    out = tmp_path_factory.mktemp("sized")
    for encoder, extra in (("bilstm", []), ("bert", ["--model_name_or_path", str(tiny_bert_dir),
                                                     "--max_seq_length", "16"])):
        load_cli("finetune/run_coref_e2e.py").main([
            "--encoder", encoder, "--train_file", str(FIXTURE), "--do_train", "--num_train_epochs", "1", *SMALL,
            *extra, "--output_dir", str(out / encoder)])
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    return out


def _edited(trained, tmp_path, encoder: str, file: str, edit) -> str:
    folder = tmp_path / encoder
    shutil.copytree(trained / encoder / "last", folder)
    values = json.loads((folder / file).read_text(encoding="utf-8"))
    edit(values)
    (folder / file).write_text(json.dumps(values), encoding="utf-8")
    return str(folder)


@pytest.mark.parametrize("encoder, file, edit, message", [
    ("bilstm", "coref_e2e_head.json", lambda v: v.update(lstm_size=200_000),
     "coref_e2e_head.json with coref_e2e_vocab.json sizes encoder."),
    ("bilstm", "coref_e2e_head.json", lambda v: v["ranker"].update(ffnn_size=3_000_000),
     "coref_e2e_head.json with coref_e2e_vocab.json sizes ranker."),
    # An enlarged vocabulary sizes the embeddings: the message names the vocabulary beside the config.
    ("bilstm", "coref_e2e_vocab.json", lambda v: v["words"].extend(f"extra{i}" for i in range(1000)),
     "coref_e2e_head.json with coref_e2e_vocab.json sizes "),
    ("bert", "coref_e2e_head.json", lambda v: v["ranker"].update(ffnn_size=3_000_000),
     "coref_e2e_head.json sizes ranker."),
    ("bert", "config.json", lambda v: v.update(vocab_size=400_000_000),
     "config.json sizes embeddings.word_embeddings.weight as [400000000, "),
])
def test_a_config_sizing_another_model_is_one_line_under_a_memory_cap(trained, tmp_path, encoder, file, edit,
                                                                       message):
    folder = _edited(trained, tmp_path, encoder, file, edit)
    done = run_under_memory_cap(RESOLVE_UNDER_A_CAP.format(model=folder), headroom_mb=400)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {folder}: ") and message in last, last
    assert "config and weights are of different models" in last


def test_an_unchanged_folder_loads_under_the_same_cap(trained):
    for encoder in ("bilstm", "bert"):
        done = run_under_memory_cap(RESOLVE_UNDER_A_CAP.format(model=str(trained / encoder / "last")),
                                    headroom_mb=400)
        assert done.returncode == 0, done.stderr[-3000:]
