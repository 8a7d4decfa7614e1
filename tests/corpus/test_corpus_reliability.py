"""Corpus preparation that cannot hang, mix, silently degrade or lose work.

Each fault is reproduced for real (a symlink loop, a FIFO, a model folder without tokenizer files, a
SIGKILL of a real ``prepare_corpus.py --num_proc 2``, a 20 MB single-line file) and must now end right or
stop with one ``error:`` line and exit status 2.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pytest
from helpers import FIXTURES as ALL_FIXTURES
from helpers import ROOT, load_cli, tiny_config
from test_corpus import TINY, prepare

from corefbert.corpus import prepare as corpus
from corefbert.corpus.readers import document_sources
from corefbert.errors import CorefBertError
from corefbert.pretraining.data import check_corpus_tokenizer
from corefbert.text.positions import max_positions
from corefbert.text.tokenizers import check_tokenizer_vocabulary, load_tokenizer

PREPARE = ROOT / "pretrain" / "prepare_corpus.py"
FIXTURES = ALL_FIXTURES / "corpus_reliability"


def run_cli(argv, capsys) -> tuple[int, list[str]]:
    """``prepare_corpus.py``'s ``main(argv)`` in-process: (exit status, stderr lines)."""
    try:
        load_cli("pretrain/prepare_corpus.py").main([str(a) for a in argv])
        status = 0
    except SystemExit as exit_:
        status = exit_.code
    return status, capsys.readouterr().err.splitlines()


def the_one_error(status, lines) -> str:
    errors = [line for line in lines if line.startswith("error:")]
    assert status == 2 and len(errors) == 1 and "Traceback" not in "\n".join(lines), lines
    return errors[0]


@pytest.fixture
def no_hang():
    """Turn a hang into a failure: SIGALRM after 60 s raises in the test's (main) thread."""
    def expire(signum, frame):
        raise TimeoutError("hung for 60 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def documents_of(tmp_path, n: int) -> list[str]:
    paragraphs = [p for p in TINY.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    # A letter, not a digit, names each document: the test tokenizer's 600 entries hold no digits.
    return [f"Document {chr(97 + i % 26) * 3} about the lighthouse. " + paragraphs[i % len(paragraphs)]
            for i in range(n)]


def documents_in(rows, tokenizer) -> set[int]:
    """The numbers of the ``documents_of`` documents whose opening is in ``rows``."""
    text = " ".join(tokenizer.decode(row) for row in rows["input_ids"])
    return {ord(name) - 97 for name in re.findall(r"document ([a-z])\1\1 about", text)}


# --- item 2: a model folder without tokenizer files ---------------------------------------------------------

def test_model_folder_without_tokenizer_files_is_refused(tmp_path, capsys, tiny_bert_dir):
    bare = tmp_path / "model_without_tokenizer"
    bare.mkdir()
    shutil.copy(tiny_bert_dir / "config.json", bare / "config.json")  # the weights do not matter here
    with pytest.raises(CorefBertError, match=r"only \d vocabulary entries .*lacks the tokenizer files"):
        load_tokenizer(str(bare))
    status, lines = run_cli(["--train_file", TINY, "--model_name_or_path", bare, "--output_dir", tmp_path / "out"],
                            capsys)
    assert "tokenizer files" in the_one_error(status, lines)
    assert not (tmp_path / "out").exists()
    load_tokenizer(str(tiny_bert_dir))  # the real folder passes


def test_tokenizer_that_reads_english_as_unknown_is_refused(tmp_path, bert_tokenizer):
    from transformers import BertTokenizerFast

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(300)]) + "\n")
    digits_only = BertTokenizerFast(vocab=str(vocab))
    assert len(digits_only) > 100
    with pytest.raises(CorefBertError, match=r"maps \d+ of the \d+ tokens of the English probe sentence"):
        check_tokenizer_vocabulary(digits_only, "digits")
    with pytest.raises(CorefBertError, match="probe sentence"):
        prepare(tmp_path, digits_only, [TINY])
    check_tokenizer_vocabulary(bert_tokenizer, "test")  # the 600-entry test vocabulary passes


# --- item 3: corpus and model matched -----------------------------------------------------------------------

def test_corpus_records_its_tokenizer_and_refuses_another_model(tmp_path, bert_tokenizer, roberta_tokenizer):
    data = prepare(tmp_path, bert_tokenizer, [TINY])
    summary = json.loads((tmp_path / "out" / corpus.SUMMARY_FILE).read_text())
    recorded = summary["tokenizer"]
    assert recorded["vocab_size"] == len(bert_tokenizer) and len(recorded["vocab_sha256"]) == 64
    assert recorded["special_token_ids"]["mask"] == bert_tokenizer.mask_token_id
    bert_config, roberta_config = tiny_config("bert", bert_tokenizer), tiny_config("roberta", roberta_tokenizer)

    check_corpus_tokenizer(data, bert_tokenizer, bert_config)  # its own model: fine, folder or splits
    check_corpus_tokenizer(str(tmp_path / "out"), bert_tokenizer, bert_config)
    with pytest.raises(CorefBertError, match=r"prepared with another tokenizer .*vocab_size, vocab_sha256"):
        check_corpus_tokenizer(str(tmp_path / "out"), roberta_tokenizer, roberta_config)
    with pytest.raises(CorefBertError, match="another tokenizer"):
        check_corpus_tokenizer(data, roberta_tokenizer, roberta_config, where="corpus")


def test_token_ids_beyond_the_model_vocabulary_are_refused_without_a_record(tmp_path, bert_tokenizer):
    data = prepare(tmp_path, bert_tokenizer, [TINY])
    # A corpus without the record (prepared before it existed, or built in memory) still gets the id check.
    splits = {name: datasets.Dataset.from_dict(split.to_dict()) for name, split in data.items()}
    top = max(max(row) for row in splits["train"]["input_ids"])
    small = tiny_config("bert", bert_tokenizer).to_dict() | {"vocab_size": top}
    with pytest.raises(CorefBertError, match=rf"token id {top}, outside the model's vocabulary of {top}"):
        check_corpus_tokenizer(splits, bert_tokenizer, small)
    check_corpus_tokenizer(splits, bert_tokenizer, small | {"vocab_size": top + 1})
    with pytest.raises(CorefBertError, match=r"sequences of 64 tokens, more than the 40 positions .*--max_seq_length 40"):
        check_corpus_tokenizer(splits, bert_tokenizer, small | {"vocab_size": top + 1, "max_position_embeddings": 40})


# --- item 10: --max_seq_length against the model's positions -------------------------------------------------

def test_max_positions_of_bert_and_roberta(bert_tokenizer, roberta_tokenizer):
    assert max_positions(tiny_config("bert", bert_tokenizer)) == 258
    assert max_positions(tiny_config("roberta", roberta_tokenizer)) == 256  # 258 - (pad 1 + 1)
    assert max_positions({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}) == 512
    assert max_positions({"model_type": "bert"}) is None


def test_max_seq_length_beyond_the_folder_model_positions_is_one_line(tmp_path, capsys, tiny_roberta_dir):
    argv = ["--train_file", TINY, "--model_name_or_path", tiny_roberta_dir, "--output_dir", tmp_path / "out",
            "--max_seq_length", "257"]
    line = the_one_error(*run_cli(argv, capsys))
    assert "max_seq_length 257 exceeds the 256 positions" in line and "padding offset" in line
    assert not (tmp_path / "out").exists()


# --- item 14: symlink loops, FIFOs, output inside the input, workers of a killed run -------------------------

def test_symlink_loops_under_a_glob_read_each_file_once(tmp_path, bert_tokenizer, no_hang):
    root = tmp_path / "in"
    (root / "a" / "b").mkdir(parents=True)
    texts = documents_of(tmp_path, 6)
    for i, text in enumerate(texts):
        (root / ("a/b" if i % 2 else "a") / f"doc{i}.txt").write_text(text + "\n")
    os.symlink("..", root / "a" / "b" / "up")  # a/b/up -> a
    os.symlink("../..", root / "a" / "b" / "top")  # a/b/top -> in: the second loop made glob hang
    assert len(document_sources([str(root / "**" / "*.txt")])) == 6
    data = prepare(tmp_path, bert_tokenizer, [str(root / "**" / "*.txt"), root / "a" / "b" / "up" / "doc0.txt"],
                   validation_split_percentage=34)
    summary = json.loads((tmp_path / "out" / corpus.SUMMARY_FILE).read_text())
    assert summary["splits"]["train"]["documents"] + summary["splits"]["validation"]["documents"] == 6
    repeated = [s for s in summary["skipped_files"] if s.get("duplicate")]
    assert len(repeated) == 1 and "read once" in repeated[0]["reason"]
    train, validation = (documents_in(data[split], bert_tokenizer) for split in ("train", "validation"))
    assert train | validation == set(range(6)) and not train & validation  # no validation document in train


def test_fifo_in_an_input_folder_is_skipped_and_counted(tmp_path, bert_tokenizer, capsys, no_hang):
    root = tmp_path / "in"
    root.mkdir()
    (root / "docs.txt").write_text("\n\n".join(documents_of(tmp_path, 5)) + "\n")
    os.mkfifo(root / "pipe")  # nobody writes to it: reading it blocks forever
    prepare(tmp_path, bert_tokenizer, [root])
    out = capsys.readouterr().out
    assert "skipped file" in out and "not a regular file (a FIFO)" in out
    summary = json.loads((tmp_path / "out" / corpus.SUMMARY_FILE).read_text())
    assert summary["splits"]["train"]["documents"] + summary["splits"]["validation"]["documents"] == 5
    line = the_one_error(*run_cli(["--train_file", root / "pipe", "--model_name_or_path", _saved(bert_tokenizer,
                                                                                                  tmp_path),
                                   "--output_dir", tmp_path / "out2"], capsys))
    assert "holds no file that can be read" in line and "a FIFO" in line


def _saved(tokenizer, tmp_path) -> Path:
    folder = tmp_path / "tokenizer"
    if not folder.exists():
        tokenizer.save_pretrained(str(folder))
    return folder


def test_output_inside_the_input_folder_is_one_line(tmp_path, bert_tokenizer, capsys):
    root = tmp_path / "in"
    root.mkdir()
    (root / "docs.txt").write_text("\n\n".join(documents_of(tmp_path, 5)) + "\n")
    tokenizer_dir = _saved(bert_tokenizer, tmp_path)
    line = the_one_error(*run_cli(["--train_file", root, "--model_name_or_path", tokenizer_dir,
                                   "--output_dir", root / "prepared"], capsys))
    assert "is inside the --train_file folder" in line
    # A corpus prepared elsewhere and then moved into the input folder: named, not "pass --text_column".
    prepare(tmp_path, bert_tokenizer, [root], output_dir=str(tmp_path / "prepared"))
    shutil.move(str(tmp_path / "prepared"), str(root / "prepared"))
    line = the_one_error(*run_cli(["--train_file", root, "--model_name_or_path", tokenizer_dir,
                                   "--output_dir", tmp_path / "again"], capsys))
    assert "a corpus written by prepare_corpus.py" in line and "--text_column" not in line


def test_a_file_name_with_a_newline_is_one_error_line(tmp_path, bert_tokenizer, capsys):
    bad = tmp_path / "two\nlines.txt"
    bad.write_bytes(b"\0binary")
    line = the_one_error(*run_cli(["--train_file", bad, "--model_name_or_path", _saved(bert_tokenizer, tmp_path),
                                   "--output_dir", tmp_path / "out"], capsys))
    assert "two\\nlines.txt" in line


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_sigkill_of_prepare_corpus_takes_its_pool_workers_along(tmp_path, bert_tokenizer):
    n_docs = 600
    corpus_file = tmp_path / "docs.txt"
    corpus_file.write_text("\n\n".join(documents_of(tmp_path, n_docs)) + "\n")
    out = tmp_path / "out"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, str(PREPARE), "--train_file", str(corpus_file), "--model_name_or_path",
         str(_saved(bert_tokenizer, tmp_path)), "--output_dir", str(out), "--num_proc", "2",
         "--validation_split_percentage", "0", "--preprocessing_batch_size", "1", "--max_seq_length", "64"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Wait until both workers have packed a batch (a stats file from each half of the chunk).
        stats_dir = tmp_path / f"out.work-{proc.pid}" / "stats-train-0"
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            ids = [int(p.stem) for p in stats_dir.glob("*.json")] if stats_dir.is_dir() else []
            if any(i < n_docs // 2 for i in ids) and any(i >= n_docs // 2 for i in ids):
                break
            time.sleep(0.2)
        workers = _children(proc.pid)
        assert proc.poll() is None and len(workers) >= 2, "the workers finished before the kill; use more text"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 20
        while time.time() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.2)
        survivors = [w for w in workers if _alive(w)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for pid in survivors:  # leave no stray process behind, then fail
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"pool workers {survivors} outlived their SIGKILLed parent"


# --- item 7: one 20 MB line in bounded memory ------------------------------------------------------------

@pytest.mark.slow
def test_a_20_mb_single_line_file_prepares_within_a_fixed_rss(tmp_path, bert_tokenizer):
    """One document of 20 MB with no line break, prepared by a fresh process with a fast regex tagger
    (spaCy tags ~12k words/s here: 20 MB would take ~5 minutes; its pieces are bounded by
    ``tests/corpus/test_corpus_long_documents.py``). Growth over the process's start, this test's tokenizer,
    ~15 s: +256 MB for 20 MB (+127 MB for 2 MB, +95 MB for the same 20 MB as 9,794 documents). Before the
    tokenizer got pieces of 100k characters and the rows int32 buffers: +485 MB (+413 MB with only the
    rows fixed); before documents were cut into segments, tens of GB."""
    sentence = " ".join(line.strip() for line in TINY.read_text(encoding="utf-8").splitlines() if line.strip())
    size = 20_000_000
    long_line = tmp_path / "one_line.txt"
    long_line.write_text(((sentence + " ") * (size // len(sentence) + 1))[:size].rstrip() + "\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    started = time.time()
    proc = subprocess.run([sys.executable, str(FIXTURES / "prepare_rss.py"), str(long_line), str(tmp_path / "out"),
                           str(_saved(bert_tokenizer, tmp_path))], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report), f"{time.time() - started:.1f} s")
    assert report["train_tokens"] > 4_000_000  # it really prepared the whole line
    assert report["peak_mb"] - report["start_mb"] <= 350, report
