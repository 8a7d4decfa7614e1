"""corefbert.tasks.pronoun_pairs.builder: the exact pairs of a hand-made fixture, morphology, skips, the CLI's files."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES as ALL_FIXTURES
from helpers import can_mount_tmpfs, run_on_a_small_disk, run_under_memory_cap, shared_data

from corefbert.errors import CorefBertError
from corefbert.tasks.pronoun_pairs.builder import (
    PAIR_TYPES,
    generate_pairs,
    is_pleonastic_it,
    is_possessive,
    main,
    replacement_words,
    split_documents,
)
from corefbert.text.conll import read_conll

FIXTURES = ALL_FIXTURES / "pronoun_pairs"
STORY, HAT = FIXTURES / "story.conll", FIXTURES / "hat.gold_conll"
SCOPE = "Anna met the old gardener . "  # sentence 0; the pronouns are in sentence 1, their scope is both

# (type, pronoun, target) of every pair, in order. story.conll (LitBank layout, no POS):
#   Anna(1) met the old gardener(2) . | He(2) gave her(1) his(2) key . | I(4) saw it . | It was raining .
#   | The bank(5) stood by the river . | She(1) smiled .
# hat.gold_conll (OntoNotes layout, "her" tagged PRP$): Mary(0) lost her(0) hat .
EXPECTED = [
    ("correct", "He", SCOPE + "The old gardener gave her his key ."),
    ("in_scope", "He", SCOPE + "Anna gave her his key ."),
    ("out_of_scope", "He", SCOPE + "The bank gave her his key ."),
    ("correct", "her", SCOPE + "He gave Anna his key ."),  # "her" before "his": object, no 's
    ("in_scope", "her", SCOPE + "He gave the old gardener his key ."),
    ("out_of_scope", "her", SCOPE + "He gave the bank his key ."),  # "The" loses its capital mid-sentence
    ("correct", "his", SCOPE + "He gave her the old gardener 's key ."),  # possessive; "He" is no antecedent
    ("in_scope", "his", SCOPE + "He gave her Anna 's key ."),
    ("out_of_scope", "his", SCOPE + "He gave her the bank 's key ."),
    ("correct", "her", "Mary lost Mary 's hat ."),  # PRP$; "her hat" holds the pronoun: no wrong phrase
]
EXPECTED_SKIPS = {"skipped_first_or_second_person": 1,  # I
                  "skipped_not_a_gold_mention": 1,  # "saw it ." (not annotated, no pleonastic pattern)
                  "skipped_pleonastic": 1,  # "It was raining"
                  "skipped_no_antecedent_in_scope": 1,  # "She": Anna is three sentences back
                  "no_in_scope_phrase": 1, "no_out_of_scope_phrase": 1}


def fixture_documents():
    return read_conll([str(STORY), str(HAT)])


def test_hand_made_fixture_yields_exactly_the_expected_pairs():
    pairs, counts = generate_pairs(fixture_documents(), seed=0)
    assert [(p.type, p.pronoun, p.target) for p in pairs] == EXPECTED
    assert all(p.label == (p.type == "correct") for p in pairs)
    assert {p.source for p in pairs} == {SCOPE + "He gave her his key .", "Mary lost her hat ."}
    for pair in pairs:  # the positions point at the pronoun and the replacement's mention
        words = pair.source.split()
        assert words[pair.pronoun_position] == pair.pronoun
        assert (pair.scope_start, pair.possessive) == ((0, pair.pronoun == "his") if pair.doc_key == "story_brat_0"
                                                       else (0, True))
    assert {(p.replacement_start, p.replacement_end) for p in pairs if p.type == "out_of_scope"} == {(20, 21)}
    assert counts["third_person_pronouns"] == 7
    assert {k: counts[k] for k in EXPECTED_SKIPS} == EXPECTED_SKIPS
    assert [counts[k] for k in PAIR_TYPES] == [4, 3, 3]


def test_the_choice_of_wrong_phrases_is_seeded_and_stable():
    documents = read_conll(str(ALL_FIXTURES / "conll" / "litbank_mini.conll"))
    runs = [generate_pairs(documents, seed=s)[0] for s in (1, 1, 2)]
    assert runs[0] == runs[1]
    # A pair does not depend on which other documents are read alongside it.
    alone = generate_pairs(fixture_documents()[:1], seed=5)[0]
    together = generate_pairs(fixture_documents(), seed=5)[0]
    assert together[: len(alone)] == alone


@pytest.mark.parametrize("words, index, tags, expected", [
    ("I saw her .".split(), 2, None, False),
    ("I saw her hat .".split(), 2, None, True),
    ("gave her the book".split(), 1, None, False),
    ("told her that".split(), 1, None, False),
    ("gave her the book".split(), 1, ["VBD", "PRP$", "DT", "NN"], True),  # POS wins when the file has it
    ("the book is his .".split(), 3, None, True),
    ("they left".split(), 0, None, False),
])
def test_possessive_detection(words, index, tags, expected):
    assert is_possessive(words, index, tags) is expected


@pytest.mark.parametrize("text, expected", [
    ("it is clear that he left", True), ("It was raining .", True), ("it seems that nobody cares", True),
    ("it would not be possible to go", True), ("it is time", True),
    ("it was red .", False), ("it is on the table", False), ("he is clear that", False),
])
def test_pleonastic_it_patterns(text, expected):
    assert is_pleonastic_it(text.split(), 0) is expected


def test_replacement_morphology():
    words = "He saw the Lord Chancellor . Foot passengers slip on the foot paths .".split()
    assert replacement_words(words, (3, 4), "he", False) == ["the", "Lord", "Chancellor"]  # article restored
    assert replacement_words(words, (3, 4), "He", True) == ["The", "Lord", "Chancellor", "'s"]
    # "foot" is written in lower case elsewhere in the text: a sentence-initial "Foot" loses its capital.
    assert replacement_words(words, (6, 7), "their", True, {"foot"}, True) == ["foot", "passengers", "'"]
    assert replacement_words(words, (6, 7), "their", True, set(), True) == ["Foot", "passengers", "'"]
    assert replacement_words(words, (1, 1), "his", True) == ["saw", "'s"]  # not a lower-case plural: 's


def test_documents_split_whole_and_seeded():
    keys = [f"d{i}" for i in range(10)]
    split = split_documents(keys, 3, 20, 10)
    assert sorted(split.values()).count("validation") == 2 and list(split.values()).count("test") == 1
    assert split == split_documents(list(reversed(keys)), 3, 20, 10)
    # A split asked for gets a document even where the percentage rounds to none (held_out_split's rule).
    assert list(split_documents(keys, 3, 1, 0).values()).count("validation") == 1


def test_cli_writes_jsonl_tsv_dataset_and_counts(tmp_path, capsys):
    out = tmp_path / "pairs"
    counts = main(["--input", str(STORY), str(HAT), "--output_dir", str(out), "--seed", "0"])
    printed = capsys.readouterr().out
    assert "correct 4, in_scope 3, out_of_scope 3 (total 10)" in printed and "skipped_pleonastic: 1" in printed
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert [(r["type"], r["pronoun"], r["target"]) for r in rows] == EXPECTED
    assert {"label", "source", "target", "type", "doc_key", "pronoun_index", "replacement_start"} <= set(rows[0])
    tsv = (out / "pairs.tsv").read_text().splitlines()
    assert tsv[0] == "label\tsource\ttarget\ttype\tdoc_key" and tsv[1].split("\t")[::3] == ["1", "correct"]
    assert len(tsv) == 11
    import datasets

    dataset = datasets.load_from_disk(str(out / "dataset"))
    assert dataset.to_list() == rows
    assert json.loads((out / "counts.json").read_text()) == dict(sorted(counts.items()))
    first = (out / "pairs.jsonl").read_bytes()
    main(["--input", str(STORY), str(HAT), "--output_dir", str(out), "--seed", "0"])
    assert (out / "pairs.jsonl").read_bytes() == first  # deterministic


def test_cli_split_files(tmp_path):
    out = tmp_path / "pairs"
    main(["--input", str(STORY), str(HAT), "--output_dir", str(out), "--test_split_percentage", "50"])
    train = (out / "train.jsonl").read_text().splitlines()
    test = (out / "test.jsonl").read_text().splitlines()
    assert len(train) + len(test) == 10 and (out / "validation.jsonl").read_text() == ""
    assert {json.loads(line)["doc_key"] for line in train}.isdisjoint(json.loads(line)["doc_key"] for line in test)


@pytest.mark.parametrize("argv, words", [
    (["--output_dir", "x"], "--input is required"),
    (["--input", "a.conll"], "--output_dir is required"),
    (["--input", str(STORY), "--output_dir", "x", "--test_split_percentage", "70", "--validation_split_percentage",
      "30"], "sum below 100"),
    (["--input", str(STORY), "--output_dir", "x", "--max_phrase_words", "0"], "max_phrase_words"),
    (["--input", str(STORY), "--output_dir", "x", "--max_scope_words", "1"], "--max_scope_words must be >= 2"),
    # The toolkit's one spelling: the old flags name the new ones.
    (["--input", str(STORY), "--output_dir", "x", "--validation_fraction", "0.15"],
     "--validation_fraction is now --validation_split_percentage, a percentage of the documents (0.15 -> 15)"),
    (["--input", str(STORY), "--output_dir", "x", "--test_fraction=0.15"],
     "--test_fraction is now --test_split_percentage"),
])
def test_cli_bad_arguments(argv, words, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and words in capsys.readouterr().err


def test_no_pairs_is_one_line(tmp_path, capsys):
    (tmp_path / "plain.conll").write_text("#begin document (x); part 0\nx\t0\t0\tHello\t-\n#end document\n")
    with pytest.raises(SystemExit):
        main(["--input", str(tmp_path / "plain.conll"), "--output_dir", str(tmp_path / "out")])
    assert "no pronoun pair" in capsys.readouterr().err
    with pytest.raises(CorefBertError):
        read_conll(str(tmp_path / "absent.conll"))


@pytest.mark.shared_data
def test_shared_conll_files_give_all_three_types_deterministically():
    files = sorted(str(p) for p in shared_data("conll2012").glob("*/*conll"))
    documents = read_conll(files)
    pairs, counts = generate_pairs(documents, seed=13)
    assert min(counts[k] for k in PAIR_TYPES) > 500
    assert counts["out_of_scope"] <= counts["correct"] and counts["in_scope"] <= counts["correct"]
    assert generate_pairs(documents, seed=13)[0] == pairs
    for pair in pairs:
        assert pair.source != pair.target and pair.source.split()[pair.pronoun_position] == pair.pronoun
        assert len(pair.target.split()) - len(pair.source.split()) <= 11  # max_phrase_words + 's


def test_phrases_with_a_relative_pronoun_or_too_long_are_not_used():
    from corefbert.text.conll import ConllDocument

    def document(clusters):
        sentences = [["the", "men", "of", "whom", "Ann", "spoke", "left", "."], ["They", "ran", "."]]
        return ConllDocument(doc_key="d_0", name="d", part="0", sentences=sentences,
                             speakers=[["-"] * len(s) for s in sentences], genre="", clusters=clusters)

    pairs, counts = generate_pairs([document([[(0, 5), (8, 8)]])])
    assert not pairs and counts["skipped_antecedent_unusable"] == 1
    pairs, counts = generate_pairs([document([[(0, 1), (8, 8)], [(4, 4)]])])
    assert [(p.type, p.target.split(" . ")[1]) for p in pairs] == [("correct", "The men ran ."),
                                                                   ("in_scope", "Ann ran .")]
    assert generate_pairs([document([[(0, 1), (8, 8)]])], max_phrase_words=1)[1]["skipped_antecedent_unusable"] == 1


def _pairs_of(argv: list[str], out: Path, capsys) -> tuple[list[dict], dict, str]:
    main([*argv, "--output_dir", str(out)])
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    return rows, json.loads((out / "counts.json").read_text(encoding="utf-8")), capsys.readouterr().out


@pytest.mark.parametrize("how", ["named twice", "and a glob matching it", "and a link to it"])
def test_a_file_reached_by_two_input_paths_is_read_once(tmp_path, capsys, how):
    """`--input F F` (or F and a glob matching it) gave every pair twice, and with a split could
    put one document into two split files."""
    story = tmp_path / "in" / "story.conll"
    story.parent.mkdir()
    story.write_bytes(STORY.read_bytes())
    other = {"named twice": str(story), "and a glob matching it": str(tmp_path / "in" / "*.conll"),
             "and a link to it": str(tmp_path / "story_link.conll")}[how]
    if how == "and a link to it":
        Path(other).symlink_to(story)
    once, once_counts, _ = _pairs_of(["--input", str(story), str(HAT)], tmp_path / "once", capsys)
    rows, counts, printed = _pairs_of(["--input", str(story), other, str(HAT), "--test_split_percentage", "50"],
                                      tmp_path / "twice", capsys)
    assert [{k: v for k, v in row.items() if k != "split"} for row in rows] == once
    assert counts["repeated_input_paths"] == 1 and counts["correct"] == once_counts["correct"]
    assert "1 input path(s) led to a file already read" in printed
    assert "read 2 documents from 3 input argument(s)" in printed
    split_of = {}
    for name in ("train", "validation", "test"):
        for line in (tmp_path / "twice" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            assert split_of.setdefault(json.loads(line)["doc_key"], name) == name  # one split per document
    assert sorted(split_of.values()) == ["test", "train"]


def test_a_copy_of_a_file_is_used_once(tmp_path, capsys):
    """Another file with the same document word for word (a copy, not a link) is counted, not paired again."""
    copy = tmp_path / "story_copy.conll"
    copy.write_bytes(STORY.read_bytes())
    once, _, _ = _pairs_of(["--input", str(STORY)], tmp_path / "once", capsys)
    rows, counts, printed = _pairs_of(["--input", str(STORY), str(copy)], tmp_path / "copies", capsys)
    assert rows == once and counts["repeated_documents"] == 1 and counts["repeated_input_paths"] == 0
    assert "1 document(s) repeated word for word" in printed


def _one_sentence_conll(words: int) -> str:
    """One document of one sentence of ``words`` words (LitBank layout), no sentence break: every 50 words
    "Anna met a gardener and she ..." with Anna and "she" one entity, each "a gardener" a second one."""
    filler = ("walked along the path by the old mill while the river ran past the grey stones and the cold wind "
              "came down from the hills over the wide fields near the town where the market stood beside the "
              "long bridge on the old road").split()
    assert len(filler) == 44
    pattern = [("Anna", "(1)"), ("met", ""), ("a", "(2"), ("gardener", "2)"), ("and", ""), ("she", "(1)")]
    pattern += [(word, "") for word in filler]
    lines = ["#begin document (long); part 0"]
    for i in range(words):
        word, coref = pattern[i % len(pattern)]
        lines.append("\t".join(["long", "0", str(i), word] + ["_"] * 8 + [coref]))
    return "\n".join(lines + ["", "#end document", ""])


_PAIRS_UNDER_A_CAP = """
import datasets  # imported before the cap, as are the toolkit's modules: only the run is measured
from corefbert.tasks.pronoun_pairs.builder import main
cap_memory()
main(ARGV)
"""


def test_a_20000_word_sentence_gives_pairs_of_bounded_size_under_a_memory_cap(tmp_path):
    """Without sentence breaks the scope was the whole document, so each pair held two texts as
    long as it (1,200 pairs x 2 x 20,000 words, about 290 MB in memory and 3 files of it on disk). The scope
    is now cut to --max_scope_words (300) around the pronoun: the run fits in 200 MB over its imports and
    every text has at most 300 words."""
    source = tmp_path / "long.conll"
    source.write_text(_one_sentence_conll(20_000), encoding="utf-8")
    out = tmp_path / "pairs"
    argv = ["--input", str(source), "--output_dir", str(out)]
    done = run_under_memory_cap(_PAIRS_UNDER_A_CAP.replace("ARGV", repr(argv)), headroom_mb=200)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads((out / "counts.json").read_text(encoding="utf-8"))
    assert counts["correct"] == counts["in_scope"] == counts["out_of_scope"] == 400  # one "she" per 50 words
    assert counts["scopes_cut_to_max_scope_words"] == 400
    assert (out / "pairs.jsonl").stat().st_size < 8_000_000  # 1,200 pairs of two texts of <= 300 words
    for line in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert len(row["source"].split()) <= 300 and row["scope_end"] - row["scope_start"] < 300
        assert row["source"].split()[row["pronoun_position"]] == "she"
        assert row["type"] != "correct" or row["replacement"] == "Anna"


# --- the builder's own output is never its input; a write the disk refuses is one line ------------------


def test_a_rerun_whose_output_folder_an_input_glob_matches_leaves_its_own_output_out(tmp_path, capsys):
    """``--input 'data/*' --output_dir data/pairs``: the first run's glob matched the CoNLL files only, the
    rerun's also matched the output folder and stopped with "data/pairs: is a directory"."""
    data = tmp_path / "data"
    data.mkdir()
    for source in (STORY, HAT):
        (data / source.name).write_bytes(source.read_bytes())
    out = data / "pairs"
    argv = ["--input", str(data / "*"), "--output_dir", str(out), "--seed", "0"]
    main(argv)
    first = {name: (out / name).read_bytes() for name in ("pairs.jsonl", "pairs.tsv", "counts.json")}
    capsys.readouterr()
    main(argv)
    assert f"left out 1 path(s) an --input glob matched in --output_dir, this builder's own output: {out}" in \
        capsys.readouterr().out
    assert {name: (out / name).read_bytes() for name in first} == first
    main(["--input", str(data / "*"), str(out / "*"), *argv[2:]])  # a glob into the output folder: all its own
    assert {name: (out / name).read_bytes() for name in first} == first
    with pytest.raises(SystemExit):
        main(["--input", str(out / "*"), "--output_dir", str(out)])
    assert capsys.readouterr().err.strip().endswith(f"--input matches only what this builder wrote into "
                                                    f"--output_dir {out}; pass the CoNLL-2012 files")
    assert not list(out.glob(".partial-*"))


def test_a_full_disk_leaves_the_earlier_pairs_whole_and_is_one_line(tmp_path):
    """A real tmpfs holding an earlier run's pairs, filled but for 16 KiB: the rerun (another seed, with split
    files) ran out of space half-way and ended in an ``OSError`` traceback, leaving new pairs.jsonl and
    train.jsonl beside the earlier counts.json and dataset/. Now: one line, and the earlier files as they were."""
    mount = tmp_path / "small_disk"
    if not can_mount_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root and unshare (CI and the dev machines have both)")
    earlier, after = tmp_path / "earlier", tmp_path / "after"
    main(["--input", str(STORY), str(HAT), "--output_dir", str(earlier), "--seed", "0"])
    rerun = f'"$2" -m corefbert.tasks.pronoun_pairs.builder --input "{STORY}" "{HAT}" --output_dir "$1/pairs" --seed 1'
    done = run_on_a_small_disk(mount, f'cp -a "$3" "$1/pairs" && fill_but 16 && {rerun} --test_split_percentage 50; '
                                      'code=$?; cp -a "$1/pairs" "$4"; exit $code', sys.executable, str(earlier),
                               str(after), size_kib=1024)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert re.fullmatch(rf"error: {mount}/pairs/\.partial-\d+: could not write the pronoun pairs \(disk full\); "
                        rf"removed the partial copy, the files in {mount}/pairs are as they were\. Free space or "
                        "choose another --output_dir, then rerun the same command",
                        done.stderr.strip().splitlines()[-1]), done.stderr[-3000:]
    files = sorted(p.relative_to(earlier) for p in earlier.rglob("*"))
    assert sorted(p.relative_to(after) for p in after.rglob("*")) == files  # no split file, no .partial-*
    assert all((after / f).read_bytes() == (earlier / f).read_bytes() for f in files if (earlier / f).is_file())


def test_a_dataset_folder_that_is_a_link_is_replaced_on_every_rerun(tmp_path):
    """The pairs' ``dataset/`` a link to a folder of the user's: a rerun replaces the link by its own folder (the
    folder it pointed to keeps its files) and leaves nothing beside it, and so does the rerun after it (before, every
    rerun ended in a traceback)."""
    out = tmp_path / "pairs"
    main(["--input", str(STORY), str(HAT), "--output_dir", str(out), "--seed", "0"])
    elsewhere = tmp_path / "elsewhere"
    (out / "dataset").rename(elsewhere)
    (out / "dataset").symlink_to(elsewhere, target_is_directory=True)
    kept = sorted(p.name for p in elsewhere.iterdir())
    for seed in ("1", "2"):
        main(["--input", str(STORY), str(HAT), "--output_dir", str(out), "--seed", seed])
        assert (out / "dataset").is_dir() and not (out / "dataset").is_symlink()
        assert not [p.name for p in out.iterdir() if p.name.endswith(".deleting") or p.name.startswith(".partial")]
    assert sorted(p.name for p in elsewhere.iterdir()) == kept


def test_a_full_disk_while_putting_the_pairs_in_place_is_one_line_and_removes_the_partial_copy(
        tmp_path, capsys, monkeypatch):
    """The disk filled as the finished files were put in place (a rename that needs space: the dataset folder):
    an ``OSError`` traceback, and ``.partial-<pid>/`` left behind for good (no later run removed it)."""
    import errno

    import corefbert.text.durable as durable

    out = tmp_path / "pairs"

    def full_disk(tmp, final):
        raise OSError(errno.ENOSPC, "No space left on device", str(final))

    monkeypatch.setattr(durable, "replace_folder", full_disk)
    with pytest.raises(SystemExit) as exit_:
        main(["--input", str(STORY), "--output_dir", str(out), "--seed", "0"])
    assert exit_.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "Traceback" in line or line.startswith("error:")]
    assert len(err) == 1 and "could not write the pronoun pairs (disk full)" in err[0] and "rerun" in err[0]
    assert not list(out.glob(".partial-*"))


def test_a_later_run_removes_the_partial_copies_of_killed_runs(tmp_path):
    import subprocess

    out = tmp_path / "pairs"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a process that has ended
    for name in (f".partial-{dead}", f".partial-{dead}.deleting"):
        (out / name / "dataset").mkdir(parents=True)
        (out / name / "pairs.jsonl").write_text("{}\n")
    alive = out / f".partial-{os.getppid()}"  # a running process's: left alone
    alive.mkdir()
    main(["--input", str(STORY), "--output_dir", str(out), "--seed", "0"])
    assert sorted(p.name for p in out.glob(".partial-*")) == [alive.name]
    assert (out / "pairs.jsonl").is_file()
