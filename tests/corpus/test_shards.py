"""A corpus prepared as 2 shards trains exactly as the same corpus prepared whole (corefbert/corpus/shards.py),
and a shard set that is not one corpus is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import tiny_config
from test_corpus import TINY, RegexTagger, tiny_texts

from corefbert.corpus.prepare import PrepareArguments, prepare_corpus
from corefbert.errors import CorefBertError
from corefbert.pretraining.data import load_prepared_corpus


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny BERT whose WordPiece vocabulary is trained on the corpus fixture (so its words are words)."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertModel, BertTokenizerFast

    out = tmp_path_factory.mktemp("shard_bert")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(TINY.read_text().splitlines(), vocab_size=600, min_frequency=1)
    trainer.save_model(str(out))
    tokenizer = BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(out))
    torch.manual_seed(0)
    BertModel(tiny_config("bert", tokenizer)).save_pretrained(str(out))
    return out


def _prepare(model_dir, out, source, **overrides):
    from transformers import AutoTokenizer

    settings = dict(train_file=[str(source)], output_dir=str(out), max_seq_length=64, validation_split_percentage=20,
                    seed=7, short_seq_prob=0.3, packing="single", model_name_or_path=str(model_dir))
    settings.update(overrides)
    return prepare_corpus(PrepareArguments(**settings), tokenizer=AutoTokenizer.from_pretrained(model_dir),
                          nlp=RegexTagger())


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, model_dir):
    """``(whole corpus folder, folder of its 2 shards)``."""
    root = tmp_path_factory.mktemp("shards")
    source = root / "corpus.txt"
    source.write_text("\n\n".join(tiny_texts() * 3))
    _prepare(model_dir, root / "whole", source)
    for index in range(2):
        _prepare(model_dir, root / "parts" / f"part_{index}", source, num_shards=2, shard_index=index)
    return root / "whole", root / "parts"


def test_two_shards_load_as_the_whole_corpus(prepared):
    whole, parts = prepared
    expected = load_prepared_corpus(str(whole))
    for named in (str(parts), str(parts / "part_*")):  # the folder of shards, or a glob over them
        merged = load_prepared_corpus(named)
        for split in ("train", "validation"):
            assert merged[split]["input_ids"] == expected[split]["input_ids"]
            assert merged[split]["mention_groups"] == expected[split]["mention_groups"]
    single = load_prepared_corpus(str(parts / "part_1"))  # one shard alone is still an ordinary corpus
    assert 0 < len(single["train"]) < len(expected["train"])


def test_two_shards_train_identically_to_the_whole_corpus(prepared, model_dir, tmp_path, fresh_accelerate_state):
    from safetensors.torch import load_file

    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import run_pretraining

    whole, parts = prepared
    runs = {}
    for name, corpus in (("whole", whole), ("shards", parts)):
        args = PretrainingArguments(model_name_or_path=str(model_dir), output_dir=str(tmp_path / name),
                                    dataset_dir=str(corpus), max_steps=4, per_device_train_batch_size=2,
                                    per_device_eval_batch_size=4, learning_rate=1e-3, logging_steps=1,
                                    mixed_precision="no", seed=3)
        metrics = run_pretraining(args)
        log = [json.loads(line) for line in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        losses = [(r["step"], r["loss"]) for r in log if r.get("split") == "train"]
        runs[name] = (metrics, losses, load_file(tmp_path / name / "final" / "model.safetensors"))
    (m1, l1, w1), (m2, l2, w2) = runs["whole"], runs["shards"]
    assert len(l1) == 4 and l1 == l2 and m1 == m2
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)


def _copy_set(parts: Path, tmp_path: Path) -> Path:
    out = tmp_path / "set"
    shutil.copytree(parts, out)
    return out


def test_a_broken_shard_set_is_one_line(prepared, model_dir, tmp_path):
    _, parts = prepared
    missing = _copy_set(parts, tmp_path / "a")
    shutil.rmtree(missing / "part_1")
    with pytest.raises(CorefBertError, match=r"shard\(s\) 1 of 2 missing"):
        load_prepared_corpus(str(missing))
    twice = _copy_set(parts, tmp_path / "b")
    shutil.copytree(twice / "part_0", twice / "part_0_copy")
    with pytest.raises(CorefBertError, match="shard 0 of 2 is given twice"):
        load_prepared_corpus(str(twice))
    other = _copy_set(parts, tmp_path / "c")
    summary_path = other / "part_1" / "prepare_summary.json"
    summary = json.loads(summary_path.read_text())
    summary["settings"]["seed"] = 8
    summary_path.write_text(json.dumps(summary))
    with pytest.raises(CorefBertError, match="prepared with seed 8 but .* with 7"):
        load_prepared_corpus(str(other))
    damaged = _copy_set(parts, tmp_path / "d")
    arrow = sorted((damaged / "part_1" / "train").glob("*.arrow"))[0]
    arrow.write_bytes(arrow.read_bytes()[:-100])
    with pytest.raises(CorefBertError) as err:
        load_prepared_corpus(str(damaged))
    assert "part_1" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CorefBertError, match="glob matches no folder"):
        load_prepared_corpus(str(tmp_path / "nothing_*"))
