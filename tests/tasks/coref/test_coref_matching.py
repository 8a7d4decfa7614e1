"""Pronoun coreference: one candidate matcher for every scoring path (copy scoring never decides a
problem by a candidate's absence), the WSC273 subset of WSCollection.xml, skip warnings only for real skips,
no per-gender WinoGender accuracies that are equal by construction, files of other tasks named as such."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from helpers import FIXTURES, load_cli

from corefbert.errors import CorefBertError
from corefbert.tasks.coref.mlm_scoring import encode_candidates
from corefbert.tasks.coref.readers import read_pronoun_file
from corefbert.tasks.coref.resolver import CopyResolver

FIX = FIXTURES / "coref"

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def _texts(example, i):
    return [example.text[s:e] for s, e in example.candidate_spans[i]]


# ------------------------------------------------------------------------------ item 1: candidate matching


def test_reader_finds_determiner_case_longer_and_possessive_candidates():
    examples, skipped = read_pronoun_file(str(FIX / "wsc273_style.txt"))
    assert not skipped and len(examples) == 4
    lamp, baker, painting, kettle = examples
    # "The Lamp" against "The lamp" (case); "the desk" against "the small oak desk" (determiner)
    assert lamp.candidate_match == ["exact", "no_determiner"]
    assert _texts(lamp, 0) == ["The lamp"] and _texts(lamp, 1) == ["desk"]
    # a candidate longer than the text repeats: "the baker at the corner shop" -> its head word "baker"
    assert baker.candidate_match == ["head_word", "exact"] and _texts(baker, 0) == ["baker"]
    # "Omar's painting": "painting" belongs to "Maya's painting", so the possessor "Omar" is found
    assert painting.candidate_match == ["exact", "possessor"]
    assert _texts(painting, 0) == ["Maya's painting"] and _texts(painting, 1) == ["Omar"]
    # a candidate that truly is not in the text stays unmatched (no span is invented)
    assert kettle.candidate_match == ["exact", "unmatched"] and kettle.candidate_spans[1] == []


def test_copy_cli_scores_every_found_candidate_and_reports_the_unmatched(coref_checkpoint, tmp_path, caplog):
    out = tmp_path / "copy"
    with caplog.at_level(logging.INFO):
        results = load_cli("finetune/run_coref.py").main(["--model_name_or_path", str(coref_checkpoint), "--zero_shot", "copy", "--do_eval",
                              "--validation_file", str(FIX / "wsc273_style.txt"), "--output_dir", str(out),
                              "--disable_tqdm"])
    rows = [json.loads(line) for line in (out / "eval_wsc273_style_predictions.jsonl").read_text().splitlines()]
    # the three problems whose candidates occur in some form are scored by the model and decided
    for row in rows[:3]:
        assert all(s is not None and math.isfinite(s) for s in row["scores"]) and row["prediction"] is not None
    # the loose occurrence is what the model scored: the same as naming that span directly
    resolver = CopyResolver(str(coref_checkpoint), max_length=128)
    text = "The lamp would not fit on the small oak desk because [MASK] was too wide."
    mask = (text.index("[MASK]"), text.index("[MASK]") + 6)
    desk = (text.index("desk"), text.index("desk") + 4)
    direct = resolver.resolve(text, mask, [(0, 8), desk])
    assert rows[0]["scores"] == pytest.approx(list(direct.values()), abs=1e-4)
    # the truly absent "the teapot": no decision by absence, counted and reported
    assert rows[3]["scores"][1] is None and rows[3]["prediction"] is None
    assert results["eval_wsc273_style_unmatched_candidates"] == 1
    assert results["eval_wsc273_style_undecided"] == 1
    assert results["eval_wsc273_style_loosely_matched_candidates"] == 3
    assert json.loads((out / "all_results.json").read_text())["eval_wsc273_style_unmatched_candidates"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("1 candidates occur nowhere" in w and "'the teapot'" in w and "1 problems undecided" in w
               for w in warnings)
    picks = [r["prediction"] == (r["candidates"][r["label"]]) for r in rows]
    assert results["eval_wsc273_style_accuracy"] == pytest.approx(100.0 * sum(picks) / 4)


# ------------------------------------------------------------------------------- item 8: WSC273 from XML


def _collection(path: Path, count: int) -> str:
    """A WSCollection.xml-shaped file of ``count`` schemas, ISO-8859-1, correctAnswer as A, B, A., B."""
    letters = ["A", "B", " A. ", "B."]
    schemas = "".join(
        f"<schema>\n<text>\n<txt1>Schema {i}: the robin chased the sparrow because</txt1>\n<pron> it </pron>\n"
        f"<txt2> was angry.</txt2>\n</text>\n<answers>\n<answer>the robin </answer>\n<answer> the sparrow</answer>"
        f"\n</answers>\n<correctAnswer>{letters[i % 4]}</correctAnswer>\n<source>corefbert tests (café)</source>\n"
        "</schema>\n" for i in range(count))
    path.write_bytes(f'<?xml version="1.0" encoding="ISO-8859-1"?>\n<collection>\n{schemas}</collection>\n'
                     .encode("latin-1"))
    return str(path)


def test_wsc_xml_official_collection_reads_wsc273(tmp_path, caplog, bert_tokenizer):
    official = _collection(tmp_path / "WSCollection.xml", 285)
    with caplog.at_level(logging.INFO):
        examples, skipped = read_pronoun_file(official)
    assert len(examples) == 273 and not skipped
    assert "285 <schema> elements, reading the first 273 (WSC273" in caplog.text
    assert [e.label for e in examples[:4]] == [0, 1, 0, 1]  # A, B, A., B.
    assert len(read_pronoun_file(official, wsc_schemas="all")[0]) == 285
    renamed = _collection(tmp_path / "my_schemas.xml", 285)
    assert len(read_pronoun_file(renamed)[0]) == 285
    assert len(read_pronoun_file(renamed, wsc_schemas="wsc273")[0]) == 273
    with pytest.raises(CorefBertError, match="unknown WSC schema selection"):
        read_pronoun_file(renamed, wsc_schemas="wsc285")
    # the CLI's --wsc_schemas reaches the reader
    for flag, count in (("auto", 273), ("all", 285)):
        task = _task(tmp_path, bert_tokenizer, "--do_eval", "--validation_file", official, "--wsc_schemas", flag)
        assert len(task.eval_dataset()) == count


def _task(tmp_path, bert_tokenizer, *argv):
    """A CorefTask as run_coref.py builds it (the tokenizer is all it loads before reading data)."""
    from corefbert.argparser import parse_args
    from corefbert.tasks.base import FinetuningArguments
    from corefbert.tasks.coref.task import CorefArguments, CorefTask

    model = tmp_path / "tok"
    bert_tokenizer.save_pretrained(str(model))
    data_args, args = parse_args([CorefArguments, FinetuningArguments], [
        "--model_name_or_path", str(model), "--output_dir", str(tmp_path / "out"), *argv], prog="run_coref.py")
    return CorefTask(data_args, args)


# ------------------------------------------------------------------------ item 11: no warning about zero


def test_no_skip_warning_when_nothing_was_skipped(bert_tokenizer, tmp_path, caplog):
    task = _task(tmp_path, bert_tokenizer, "--do_train", "--train_file", str(FIX / "blocks.txt"), str(FIX / "pdp.txt"))
    with caplog.at_level(logging.WARNING):
        task.train_dataset()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # blocks.txt: every problem has a referent and two candidates -> nothing to say about it
    assert not any("blocks.txt" in w for w in warnings)
    # pdp.txt: one 3-candidate problem is left out of training -> said, with its count
    assert any("pdp.txt: skipped {'no_referent_or_not_two_candidates': 1}" in w for w in warnings)


# --------------------------------------------------------------------- item 12: WinoGender gender split


def test_winogender_gender_split_not_reported_when_equal_by_construction(bert_tokenizer, coref_checkpoint,
                                                                          tmp_path, caplog):
    examples, _ = read_pronoun_file(str(FIX / "winogender.tsv"))
    male, female = examples[0], examples[1]
    assert (male.gender, female.gender) == ("male", "female")
    # the scored input of the male and the female sentence is the same: the pronoun is what gets masked
    assert encode_candidates(male, bert_tokenizer) == encode_candidates(female, bert_tokenizer)
    with caplog.at_level(logging.INFO):
        results = load_cli("finetune/run_coref.py").main(["--model_name_or_path", str(coref_checkpoint), "--zero_shot", "copy", "--do_eval",
                              "--validation_file", str(FIX / "winogender.tsv"), "--output_dir",
                              str(tmp_path / "wg"), "--disable_tqdm"])
    assert "eval_winogender_accuracy" in results
    assert not [k for k in results if k.startswith("eval_winogender_accuracy_")]
    assert "no per-gender accuracy" in caplog.text and "equal by construction" in caplog.text


# ------------------------------------------------------------------ item 15a: files of another task


@pytest.mark.parametrize("name, message", [
    ("templates.tsv", r"templates.tsv:1: this is WinoGender's templates.tsv .* reads the filled-in "
                      r"all_sentences.tsv"),
    ("sample.gold_conll", r"sample.gold_conll:1: this is a CoNLL-2012 coreference file .* run_coref.py .* reads GAP "
                          r"TSV, 4-line blocks, WSC XML.* CoNLL files are read by finetune/run_coref_e2e.py .* and "
                          r"python -m corefbert.tasks.pronoun_pairs.builder"),
])
def test_files_of_other_tasks_are_named(name, message, coref_checkpoint, tmp_path, capsys):
    with pytest.raises(CorefBertError, match=message):
        read_pronoun_file(str(FIX / name))
    with pytest.raises(CorefBertError, match=message):  # a forced format does not hide what the file is
        read_pronoun_file(str(FIX / name), format="blocks")
    with pytest.raises(SystemExit) as exit_info:
        load_cli("finetune/run_coref.py").main(["--model_name_or_path", str(coref_checkpoint), "--zero_shot", "mlm", "--do_eval",
                    "--validation_file", str(FIX / name), "--output_dir", str(tmp_path / "bad")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "this block has" not in err[-1]


def test_wsc_xml_with_an_unknown_declared_encoding_is_one_line(tmp_path):
    """Found by the reader fuzzer: a mutated declaration made the XML parser raise LookupError."""
    from corefbert.errors import CorefBertError
    from corefbert.tasks.coref.readers import read_wsc_xml

    path = tmp_path / "wsc.xml"
    path.write_bytes(b'<?xml version="1.0" encoding="ISO-8859-99"?>\n<collection></collection>\n')
    with pytest.raises(CorefBertError, match="unknown encoding"):
        read_wsc_xml(str(path))


# ----------------------------------------------------------------------- the scorer is a strategy, chosen once


@pytest.mark.parametrize("zero_shot, scorer", [(None, "MlmScorer"), ("mlm", "MlmScorer"), ("copy", "CopyScorer")])
def test_zero_shot_picks_one_scorer_whose_features_and_batches_the_task_uses(zero_shot, scorer, tmp_path,
                                                                             bert_tokenizer):
    blocks = str(FIXTURES / "coref" / "blocks.txt")
    flags = ["--zero_shot", zero_shot] if zero_shot else []
    task = _task(tmp_path, bert_tokenizer, "--do_eval", "--validation_file", blocks, *flags)
    assert type(task.scorer).__name__ == scorer
    features = [task.eval_dataset()[i] for i in range(2)]
    example = task.sources["eval"][0][2][0]
    assert {k: v for k, v in features[0].items() if k not in ("index", "label")} == task.scorer.encode(example)
    batch = task.collate(features)
    assert batch.keys() == task.scorer.collate(features).keys()
    # Copy scoring's batches carry the query and the mention spans; the masked LM's the candidate targets.
    assert ("query_position" in batch) == (scorer == "CopyScorer")
    assert ("target_ids" in batch) == (scorer == "MlmScorer")


def test_only_copy_scoring_adds_candidate_match_counts(tmp_path, bert_tokenizer):
    from corefbert.tasks.coref.scorers import CopyScorer, MlmScorer

    blocks = str(FIXTURES / "coref" / "blocks.txt")
    task = _task(tmp_path, bert_tokenizer, "--do_eval", "--validation_file", blocks, "--zero_shot", "copy")
    rows = [(e, [0.0, -1.0], 0) for e in task._read("eval", [blocks], False)[0][2]]
    counts = CopyScorer(task.data_args, task.tokenizer, "unused").file_metrics(blocks, rows)
    assert set(counts) == {"unmatched_candidates", "loosely_matched_candidates", "undecided"}
    assert counts["undecided"] == 0
    assert MlmScorer(task.data_args, task.tokenizer, "unused").file_metrics(blocks, rows) == {}
