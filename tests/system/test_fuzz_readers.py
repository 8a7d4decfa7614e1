"""Property-based fuzzing of every file reader and of the collator.

Each reader gets random bytes, truncated and byte-mutated copies of a valid fixture, and (for JSON and TSV
formats) structure-aware mutations: a field replaced by a value of another type, a column dropped or added,
an offset pushed out of range, non-UTF-8 bytes. The property: the reader either returns or raises
:class:`CorefBertError`; any other exception is a bug (a traceback a user would see).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corefbert.errors import CorefBertError

# ~40 s for the whole file on a loaded 2-core machine; each example is a small file read.
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6)
# Bytes that are not UTF-8 on their own (a lone continuation byte, a truncated lead, an overlong NUL).
BAD_UTF8 = st.sampled_from([b"\x80", b"\xc3", b"\xff\xfe", b"\xe2\x82", b"\xc0\x80", b"\xed\xa0\x80"])


def _paths(node, prefix=()):
    """Every path (tuple of keys/indices) into a parsed JSON value, the root included."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


def _replace(node, path, value):
    if not path:
        return value
    node[path[0]] = _replace(node[path[0]], path[1:], value)
    return node


@st.composite
def json_mutation(draw, document):
    """``document`` (parsed JSON) with one node swapped for a random value (a wrong type, a bad offset)."""
    document = json.loads(json.dumps(document))
    path = draw(st.sampled_from(list(_paths(document))))
    value = draw(st.one_of(JSON_VALUES, st.integers(-5, 10**9)))
    return _replace(document, path, value)


@st.composite
def byte_mutation(draw, seed: bytes):
    """``seed`` with a few bytes overwritten, inserted or deleted (non-UTF-8 bytes among them)."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        piece = draw(st.one_of(BAD_UTF8, st.binary(min_size=1, max_size=4), st.sampled_from([b"\t", b"\n", b"\0"])))
        action = draw(st.sampled_from(["insert", "overwrite", "delete"]))
        if action == "insert":
            data[at:at] = piece
        elif action == "overwrite":
            data[at:at + len(piece)] = piece
        else:
            del data[at:at + len(piece)]
    return bytes(data)


@st.composite
def tsv_mutation(draw, seed: bytes):
    """A TSV ``seed`` with one cell changed (random text, a huge or negative number), dropped or duplicated."""
    rows = [line.split("\t") for line in seed.decode("utf-8").split("\n")]
    r = draw(st.integers(0, len(rows) - 1))
    c = draw(st.integers(0, max(len(rows[r]) - 1, 0)))
    action = draw(st.sampled_from(["cell", "drop", "add"]))
    if action == "drop" and rows[r]:
        del rows[r][c]
    elif action == "add":
        rows[r].insert(c, draw(st.text(max_size=5)))
    else:
        cell = draw(st.one_of(st.text(max_size=8), st.integers(-10, 10**7).map(str), st.sampled_from(
            ["TRUE", "FALSE", "", "-1", "99999", "1e9", "nan", "x.y.z", "a.b.2.male.txt"])))
        if rows[r]:
            rows[r][c] = cell
    return "\n".join("\t".join(row) for row in rows).encode("utf-8", errors="surrogatepass")


def file_contents(seed: bytes, structure=None):
    """Random bytes, a truncated seed, a byte-mutated seed, or a structure-aware mutation of it."""
    options = [
        st.binary(max_size=200),
        st.integers(0, len(seed)).map(lambda n: seed[:n]),
        byte_mutation(seed),
    ]
    if structure is not None:
        options.append(structure)
    return st.one_of(*options)


def _json_seed(path: Path):
    text = path.read_bytes()
    return text, json.loads(text)


def _jsonl_structure(seed: bytes):
    lines = [json.loads(line) for line in seed.decode("utf-8").splitlines() if line.strip()]
    return st.integers(0, len(lines) - 1).flatmap(lambda i: json_mutation(lines[i]).map(
        lambda new: "\n".join(json.dumps(x) for x in lines[:i] + [new] + lines[i + 1:]).encode()))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _write(directory: Path, name: str, data: bytes) -> str:
    path = directory / name
    path.write_bytes(data)
    return str(path)


def _parses_or_refuses(read, *args):
    """The property: ``read(*args)`` returns or raises CorefBertError; anything else propagates (a bug)."""
    try:
        read(*args)
    except CorefBertError as err:
        assert str(err) and "\n" not in str(err), f"error message is not one line: {err!r}"


# --- GLUE TSV ---------------------------------------------------------------------------------------------

GLUE_SEEDS = [("rte", "RTE/train.tsv"), ("cola", "CoLA/train.tsv"), ("stsb", "STS-B/dev.tsv"),
              ("mnli", "MNLI/dev_matched.tsv")]


@pytest.mark.parametrize("task,name", GLUE_SEEDS)
def test_fuzz_glue_tsv(scratch, task, name):
    from corefbert.tasks.glue import read_glue_tsv

    seed = (FIXTURES / "glue" / name).read_bytes()

    @FUZZ
    @given(data=file_contents(seed, tsv_mutation(seed)), with_labels=st.booleans())
    def check(data, with_labels):
        _parses_or_refuses(read_glue_tsv, _write(scratch, f"{task}.tsv", data), task, with_labels)

    check()


# --- SQuAD / Quoref JSON, MRQA JSONL ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["quoref/quoref_tiny.json", "mrqa/squad_tiny.json"])
def test_fuzz_squad_json(scratch, name):
    from corefbert.tasks.qa.data import read_qa_file, read_squad_json

    seed, parsed = _json_seed(FIXTURES / name)
    structure = json_mutation(parsed).map(lambda doc: json.dumps(doc).encode())

    @FUZZ
    @given(data=file_contents(seed, structure), keep=st.booleans())
    def check(data, keep):
        path = _write(scratch, "squad.json", data)
        _parses_or_refuses(read_squad_json, path, keep)
        _parses_or_refuses(read_qa_file, _write(scratch, "squad_noext", data), "auto", keep)

    check()


def test_fuzz_mrqa_jsonl(scratch):
    from corefbert.tasks.qa.data import read_mrqa_jsonl

    seed = (FIXTURES / "mrqa" / "mrqa_tiny.jsonl").read_bytes()

    @FUZZ
    @given(data=file_contents(seed, _jsonl_structure(seed)), keep=st.booleans())
    def check(data, keep):
        _parses_or_refuses(read_mrqa_jsonl, _write(scratch, "mrqa.jsonl", data), keep)

    check()


# --- DocRED JSON ------------------------------------------------------------------------------------------

def test_fuzz_docred(scratch):
    from corefbert.tasks.docred import load_relation_ids, read_docred

    relations = load_relation_ids(str(FIXTURES / "docred" / "rel_info.json"))
    seed, parsed = _json_seed(FIXTURES / "docred" / "dev.json")
    structure = json_mutation(parsed).map(lambda doc: json.dumps(doc).encode())
    rel_seed, rel_parsed = _json_seed(FIXTURES / "docred" / "rel_info.json")
    rel_structure = json_mutation(rel_parsed).map(lambda doc: json.dumps(doc).encode())

    @FUZZ
    @given(data=file_contents(seed, structure), rel=file_contents(rel_seed, rel_structure))
    def check(data, rel):
        _parses_or_refuses(read_docred, _write(scratch, "docred.json", data), relations)
        _parses_or_refuses(load_relation_ids, _write(scratch, "rel_info.json", rel))

    check()


# --- FEVER JSONL variants ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["train.jsonl", "retrieved_dev.jsonl", "pairs.jsonl"])
def test_fuzz_fever_claims(scratch, name):
    from corefbert.tasks.fever.task import attach_retrieved, read_claims

    seed = (FIXTURES / "fever" / name).read_bytes()

    @FUZZ
    @given(data=file_contents(seed, _jsonl_structure(seed)))
    def check(data):
        path = _write(scratch, "fever.jsonl", data)
        try:
            claims, _ = read_claims(path)
        except CorefBertError:
            return
        _parses_or_refuses(attach_retrieved, claims, path)

    check()


def test_fuzz_fever_wiki_pages(scratch):
    from corefbert.tasks.fever.task import attach_wiki_evidence, read_claims

    wiki = FIXTURES / "fever" / "wiki-pages"
    page_file = sorted(wiki.glob("*.jsonl"))[0]
    seed = page_file.read_bytes()
    claims_path = str(FIXTURES / "fever" / "train.jsonl")

    @FUZZ
    @given(data=file_contents(seed, _jsonl_structure(seed)))
    def check(data):
        directory = scratch / "wiki-pages"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        _write(directory, page_file.name, data)
        claims, _ = read_claims(claims_path)
        _parses_or_refuses(attach_wiki_evidence, claims, str(directory), claims_path)

    check()


# --- Pronoun coreference: GAP TSV, 4-line blocks, WSC XML, WinoGender TSV ---------------------------------

COREF_SEEDS = [("gap", "gap.tsv"), ("blocks", "blocks.txt"), ("blocks", "masked_blocks.txt"),
               ("wsc_xml", "wsc.xml"), ("winogender", "winogender.tsv")]


@pytest.mark.parametrize("fmt,name", COREF_SEEDS)
def test_fuzz_coref(scratch, fmt, name):
    from corefbert.tasks.coref.readers import read_pronoun_file

    seed = (FIXTURES / "coref" / name).read_bytes()
    structure = tsv_mutation(seed) if name.endswith(".tsv") else None

    @FUZZ
    @given(data=file_contents(seed, structure), strict=st.booleans(), detect=st.booleans())
    def check(data, strict, detect):
        path = _write(scratch, name, data)
        _parses_or_refuses(read_pronoun_file, path, None if detect else fmt, strict)

    check()


# --- Pretraining corpus inputs: plain text, JSON lines, WikiExtractor (also gzip) -------------------------

CORPUS_SEEDS = {
    "plain.txt": b"Anna met Bob in Oslo.\nAnna liked Oslo.\n\nA second document about Bob.\n",
    "docs.jsonl": b'{"text": "Anna met Bob.", "title": "Anna"}\n{"text": "Oslo is big.", "id": 2}\n',
    "wiki_00": b'<doc id="1" url="u" title="Anna">\nAnna\n\nAnna met Bob &amp; Eve.\n</doc>\n'
               b'<doc id="2" title="Oslo">\nOslo\nOslo is big.\n</doc>\n',
}


@pytest.mark.parametrize("name", sorted(CORPUS_SEEDS))
def test_fuzz_corpus_inputs(scratch, name):
    import gzip

    from corefbert.corpus.readers import document_sources, generate_documents

    seed = CORPUS_SEEDS[name]
    structure = _jsonl_structure(seed) if name.endswith(".jsonl") else None

    @FUZZ
    @given(data=file_contents(seed, structure), compress=st.booleans(), column=st.sampled_from(["text", "body"]))
    def check(data, compress, column):
        directory = scratch / "corpus"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        path = _write(directory, name + (".gz" if compress else ""), gzip.compress(data) if compress else data)
        report = str(scratch / "report.json")

        def read_all():
            docs = list(generate_documents(tuple(document_sources([path])), column, report))
            assert all(isinstance(d["text"], str) and d["text"] for d in docs)

        _parses_or_refuses(read_all)

    check()


def test_fuzz_corpus_corrupt_gzip(scratch):
    """A ``.gz`` whose bytes are not gzip (or are cut short) is skipped or refused, never a crash."""
    import gzip

    from corefbert.corpus.readers import Source, generate_documents

    whole = gzip.compress(CORPUS_SEEDS["plain.txt"])

    @FUZZ
    @given(data=st.one_of(st.binary(max_size=64), st.integers(0, len(whole)).map(lambda n: whole[:n]),
                          byte_mutation(whole)))
    def check(data):
        path = _write(scratch, "corrupt.txt.gz", data)
        sources = (Source(path, "file"),)
        _parses_or_refuses(lambda: list(generate_documents(sources, "text", str(scratch / "r.json"))))

    check()


# --- The collator: random row layouts ---------------------------------------------------------------------

class _Tokenizer:
    """What the collator reads from a tokenizer, nothing more (no file, no vocabulary training)."""

    mask_token_id, pad_token_id, all_special_ids = 3, 0, [0, 1, 2, 3]
    name_or_path = "fuzz"

    def __len__(self):
        return 40


@st.composite
def collator_rows(draw):
    """Rows that follow the contract (valid words, mentions and groups) or break one field of it."""
    n = draw(st.integers(0, 24))
    ids = draw(st.lists(st.integers(0, 39), min_size=n, max_size=n))
    words, word = [], -1
    for i in range(n):
        if i == 0 or i == n - 1 or draw(st.booleans()):
            word += 0 if i in (0, n - 1) else 1
        words.append(-1 if i in (0, n - 1) else max(word, 0))
    starts = draw(st.lists(st.integers(-2, n + 2), max_size=6))
    ends = [s + draw(st.integers(-1, 2)) for s in starts]
    groups = draw(st.lists(st.integers(-1, 3), min_size=len(starts), max_size=len(starts)))
    row = {"input_ids": ids, "word_ids": words, "mention_starts": starts, "mention_ends": ends,
           "mention_groups": groups}
    breakage = draw(st.sampled_from(["none", "none", "word_len", "mention_len", "numpy", "drop_key"]))
    if breakage == "word_len" and words:
        row["word_ids"] = words[:-1]
    elif breakage == "mention_len" and starts:
        row["mention_groups"] = groups[:-1]
    elif breakage == "numpy":
        row = {k: np.asarray(v, dtype=np.int32) for k, v in row.items()}
    elif breakage == "drop_key":
        row.pop(draw(st.sampled_from(["mention_starts", "mention_ends", "mention_groups"])))
    return row


def test_fuzz_collator():
    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction

    @settings(max_examples=150, deadline=None)
    @given(rows=st.lists(collator_rows(), min_size=1, max_size=4), mrp=st.sampled_from([0.0, 0.2, 1.0]),
           mlm=st.sampled_from([0.0, 0.15, 1.0]), flags=st.lists(st.booleans(), min_size=3, max_size=3),
           multiple=st.sampled_from([None, 1, 8]))
    def check(rows, mrp, mlm, flags, multiple):
        collator = DataCollatorForMentionReferencePrediction(
            _Tokenizer(), mlm_probability=mlm, mrp_ratio=mrp, seed=0, pad_to_multiple_of=multiple,
            mrp_share_as_cap=flags[0], replacement_per_token=flags[1], referents_maskable=flags[2])
        try:
            batch = collator(rows)
        except CorefBertError as err:
            assert "\n" not in str(err)
            return
        # Parsed: the output keeps the contract's invariants.
        mask = batch["mrp_mention_mask"]
        assert (batch["mrp_referent_mask"].any(-1) | ~mask).all()
        assert not (batch["copy_mask"] & (batch["labels"] != -100)).any()
        assert (batch["attention_mask"].sum(1) == torch_lengths(rows)).all()

    check()


def torch_lengths(rows):
    import torch

    return torch.tensor([len(r["input_ids"]) for r in rows])


def test_fuzz_seeds_parse():
    """The seeds themselves parse: the mutations start from valid files (else the fuzz proves little)."""
    from corefbert.tasks.coref.readers import read_pronoun_file
    from corefbert.tasks.glue import read_glue_tsv
    from corefbert.tasks.qa.data import read_mrqa_jsonl, read_squad_json

    for task, name in GLUE_SEEDS:
        assert read_glue_tsv(str(FIXTURES / "glue" / name), task, True)
    assert read_squad_json(str(FIXTURES / "quoref" / "quoref_tiny.json"))
    assert read_mrqa_jsonl(str(FIXTURES / "mrqa" / "mrqa_tiny.jsonl"))
    for fmt, name in COREF_SEEDS:
        assert read_pronoun_file(str(FIXTURES / "coref" / name), fmt)[0]
    assert os.path.isdir(FIXTURES / "fever" / "wiki-pages")
