"""One save/load for every model trained from scratch (corefbert/tasks/scratch.py): folders saved by
each family's own saver before it still load and compute what they computed; a config that is not one, weights
of another model, a missing or pickled weight file are each one CorefBertError line naming the file."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers import FIXTURES, run_under_memory_cap
from safetensors.torch import load_file, save_file

from corefbert.errors import CorefBertError
from corefbert.tasks.babi.task import READER_FOLDER, load_babi_reader
from corefbert.tasks.coref_e2e.documents import featurize
from corefbert.tasks.coref_e2e.model import RECURRENT_FOLDER, load_model
from corefbert.tasks.heads import load_weights
from corefbert.tasks.pronoun_pairs.models import PAIR_FOLDER, build_pair_model
from corefbert.text.conll import read_conll

OLD = FIXTURES / "scratch_folders"
# family folder -> (its ScratchFolder, its config file, the key of the model's config in it, a sized key)
FAMILIES = {
    "babi_ga_cgru": (READER_FOLDER, "babi_reader.json", "reader", "hidden_size"),
    "coref_e2e_lsl": (RECURRENT_FOLDER, "coref_e2e_head.json", None, "lstm_size"),
    "pairs_da": (PAIR_FOLDER, "pair_model.json", None, "hidden_size"),
}


def _copy(name: str, tmp_path):
    folder = tmp_path / name
    shutil.copytree(OLD / name, folder)
    return folder


def _edit_config(folder, name: str, edit) -> None:
    _, config_file, key, _ = FAMILIES[name]
    values = json.loads((folder / config_file).read_text(encoding="utf-8"))
    edit(values if key is None else values[key])
    (folder / config_file).write_text(json.dumps(values), encoding="utf-8")


def _babi_scores(folder):
    reader, saved = load_babi_reader(str(folder))
    expected = json.loads((folder / "expected.json").read_text())
    vocab = saved["vocabulary"]
    ids, query = torch.tensor([vocab.encode(expected["story"])]), torch.tensor([vocab.encode(expected["question"])])
    with torch.no_grad():
        scores = reader(doc_ids=ids, doc_mask=ids != 0, clusters=torch.tensor([expected["clusters"]]), query_ids=query,
                        query_mask=query != 0).scores  # [1, V]
    return scores[0], torch.tensor(expected["scores"])


def _coref_scores(folder):
    model, vocab, tokenizer = load_model(str(folder))
    assert tokenizer is None and not model.training
    document = read_conll([str(FIXTURES / "coref_e2e" / "two_docs.conll")])[0]
    with torch.no_grad():
        out = model(**featurize(document, model.config, vocab))
    expected = json.loads((folder / "expected.json").read_text())
    assert out.top_starts.tolist() == expected["top_starts"] and out.top_ends.tolist() == expected["top_ends"]
    return out.scores, torch.tensor(expected["scores"])  # [k, K + 1]


def _pair_logits(folder):
    model, config, vocab, settings = PAIR_FOLDER.from_pretrained(str(folder))
    assert config.model_type == "da" and config.intra_attention and settings == {}
    expected = json.loads((folder / "expected.json").read_text())
    source, target = torch.tensor([vocab.encode(expected["source"])]), torch.tensor([vocab.encode(expected["target"])])
    with torch.no_grad():
        logits = model(source, torch.ones_like(source), target, torch.ones_like(target)).logits  # [1, 2]
    return logits[0], torch.tensor(expected["logits"])


COMPUTE = {"babi_ga_cgru": _babi_scores, "coref_e2e_lsl": _coref_scores, "pairs_da": _pair_logits}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_folder_saved_before_the_one_save_load_loads_and_computes_what_it_did(name):
    got, expected = COMPUTE[name](OLD / name)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_each_family_saves_what_it_loads_in_the_layout_it_always_had(tmp_path):
    for name, (folder, config_file, _, _) in FAMILIES.items():
        model, config, vocabulary, settings = folder.from_pretrained(str(OLD / name))
        folder.save_pretrained(str(tmp_path / name), model, vocabulary, settings=settings)
        old_files = {p.name for p in (OLD / name).iterdir()} - {"expected.json"}
        assert {p.name for p in (tmp_path / name).iterdir()} == old_files
        assert json.loads((tmp_path / name / config_file).read_text()) == \
            json.loads((OLD / name / config_file).read_text())
        for key, tensor in load_file(str(OLD / name / "model.safetensors")).items():
            assert torch.equal(load_file(str(tmp_path / name / "model.safetensors"))[key], tensor), (name, key)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("edit, reason", [
    (lambda v: v.update(colour=1), r"unknown keys \['colour'\]"),
    (lambda v: v.pop(next(k for k in ("vocab_size", "encoder") if k in v)), "missing keys"),
    (lambda v: v.update({"lexical_dropout" if "lexical_dropout" in v else "dropout": "high"}),
     "dropout must be a number"),
    (lambda v: v.update(embedding_dim=[8]), "embedding_dim must be an integer"),
])
def test_a_config_that_is_not_one_is_one_line_naming_its_file(tmp_path, name, edit, reason):
    folder = _copy(name, tmp_path)
    _edit_config(folder, name, edit)
    config_file = FAMILIES[name][1]
    with pytest.raises(CorefBertError, match=f"^{folder / config_file}: not an? .*config .*{reason}"):
        FAMILIES[name][0].from_pretrained(str(folder))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_config_that_sizes_another_model_is_one_line_before_anything_is_built(tmp_path, name):
    folder = _copy(name, tmp_path)
    sized = FAMILIES[name][3]
    _edit_config(folder, name, lambda v: v.update({sized: v[sized] * 2}))
    # The sizes come from the config and, where a vocabulary file sizes the embeddings, from it too: both named.
    with pytest.raises(CorefBertError, match=f"^{folder}: {FAMILIES[name][1]}( with [a-z0-9_]+\\.json)? sizes .* config "
                                             "and weights are of different models"):
        FAMILIES[name][0].from_pretrained(str(folder))


HUGE_UNDER_A_CAP = """
from corefbert.errors import CorefBertError
from corefbert.tasks.babi.task import READER_FOLDER
from corefbert.tasks.coref_e2e.model import RECURRENT_FOLDER
from corefbert.tasks.pronoun_pairs.models import PAIR_FOLDER
cap_memory()
for loader, folder in ((READER_FOLDER, {babi!r}), (RECURRENT_FOLDER, {coref!r}), (PAIR_FOLDER, {pairs!r})):
    try:
        loader.from_pretrained(folder)
    except CorefBertError as err:
        print(err)
"""


@pytest.mark.slow
def test_a_config_sizing_a_huge_model_costs_one_line_under_a_memory_cap(tmp_path):
    """For every family: ``vocab_size: 400000000`` (bAbI, pairs) or ``embedding_dim`` (coreference)
    would allocate gigabytes; the sizes are compared with the weights' headers on the meta device first."""
    folders = {}
    for name in FAMILIES:
        folders[name] = _copy(name, tmp_path)
        key = "embedding_dim" if name == "coref_e2e_lsl" else "vocab_size"
        _edit_config(folders[name], name, lambda v: v.update({key: 400_000_000}))  # noqa: B023 - called at once
    done = run_under_memory_cap(HUGE_UNDER_A_CAP.format(babi=str(folders["babi_ga_cgru"]),
                                                        coref=str(folders["coref_e2e_lsl"]),
                                                        pairs=str(folders["pairs_da"])), headroom_mb=400)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3, done.stdout
    for line, name in zip(lines, FAMILIES):
        assert line.startswith(f"{folders[name]}: {FAMILIES[name][1]}") and " sizes " in line, line
        assert "4000000" in line, line
        assert "config and weights are of different models" in line


@pytest.mark.parametrize("change, reason", [
    (lambda state: state.pop(next(iter(state))), "missing"),
    (lambda state: state.update(extra=torch.zeros(2)), r"unexpected \['extra'\]"),
])
def test_weights_of_another_model_are_one_line_of_the_one_loader(tmp_path, change, reason):
    folder = _copy("pairs_da", tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    change(state)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CorefBertError, match=f"^{folder}: the weights do not match the model .*{reason}"):
        PAIR_FOLDER.from_pretrained(str(folder))


def test_loading_into_a_model_of_other_sizes_is_one_line_not_a_runtime_error(tmp_path):
    """The best model reloaded at the end of training goes through the same loader (FinetuningTask.load_weights)."""
    config = PAIR_FOLDER.read(str(OLD / "pairs_da"))[0]
    other = build_pair_model(type(config)(**{**config.to_dict(), "hidden_size": 5}))
    with pytest.raises(CorefBertError, match=f"^{OLD / 'pairs_da'}: the model sizes .* config and weights are of "
                                             "different models"):
        load_weights(other, str(OLD / "pairs_da"))


def test_a_folder_without_safetensors_is_refused_and_a_pickle_beside_it_is_never_read(tmp_path):
    folder = _copy("babi_ga_cgru", tmp_path)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(CorefBertError, match=f"^{folder}: no model.safetensors .*weights"):
        load_babi_reader(str(folder))


@pytest.mark.parametrize("name, missing, message", [
    ("pairs_da", "pair_model.json", "no pair_model.json: not a model folder written by run_pronoun_pairs.py"),
    ("pairs_da", "vocab.json", "no vocab.json: not a model folder written by run_pronoun_pairs.py"),
    ("coref_e2e_lsl", "coref_e2e_vocab.json", "no coref_e2e_vocab.json: not a model folder written by "
                                              "finetune/run_coref_e2e.py"),
    ("babi_ga_cgru", "babi_reader.json", "no babi_reader.json: not a model folder written by finetune/run_babi.py"),
])
def test_a_missing_file_is_one_line_naming_it(tmp_path, name, missing, message):
    folder = _copy(name, tmp_path)
    (folder / missing).unlink()
    with pytest.raises(CorefBertError, match=f"^{folder / missing}: {message}"):
        FAMILIES[name][0].from_pretrained(str(folder))
