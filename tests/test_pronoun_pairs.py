"""corefbert.pronoun_pairs: the exact pairs of a hand-made fixture, morphology, skips, the CLI's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import shared_data

from corefbert.conll import read_conll
from corefbert.errors import CorefBertError
from corefbert.pronoun_pairs import (
    PAIR_TYPES,
    generate_pairs,
    is_pleonastic_it,
    is_possessive,
    main,
    replacement_words,
    split_documents,
)

FIXTURES = Path(__file__).parent / "fixtures" / "pronoun_pairs"
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
    documents = read_conll(str(Path(__file__).parent / "fixtures" / "conll" / "litbank_mini.conll"))
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
    split = split_documents(keys, 3, 0.2, 0.1)
    assert sorted(split.values()).count("validation") == 2 and list(split.values()).count("test") == 1
    assert split == split_documents(list(reversed(keys)), 3, 0.2, 0.1)


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
    main(["--input", str(STORY), str(HAT), "--output_dir", str(out), "--test_fraction", "0.5"])
    train = (out / "train.jsonl").read_text().splitlines()
    test = (out / "test.jsonl").read_text().splitlines()
    assert len(train) + len(test) == 10 and (out / "validation.jsonl").read_text() == ""
    assert {json.loads(line)["doc_key"] for line in train}.isdisjoint(json.loads(line)["doc_key"] for line in test)


@pytest.mark.parametrize("argv, words", [
    (["--output_dir", "x"], "--input is required"),
    (["--input", "a.conll"], "--output_dir is required"),
    (["--input", str(STORY), "--output_dir", "x", "--test_fraction", "0.7", "--validation_fraction", "0.3"],
     "sum below 1"),
    (["--input", str(STORY), "--output_dir", "x", "--max_phrase_words", "0"], "max_phrase_words"),
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
    from corefbert.conll import ConllDocument

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
