"""Pronoun coreference: readers in every format, MLM candidate scoring, eq. 5 loss, the CLI."""

from __future__ import annotations

import math
import re

import pytest
import torch
from helpers import FIXTURES, TOKENIZER_KINDS, fixture_tokenizer, load_cli, shared_data, tiny_config
from references import words_reference

from corefbert.errors import CorefBertError
from corefbert.metrics.gap import gap_metrics, read_gap_system_tsv
from corefbert.tasks.coref.copy_scoring import encode_copy_query
from corefbert.tasks.coref.mlm_scoring import (
    CandidateScoringModel,
    collate_candidates,
    encode_candidates,
    pronoun_margin_loss,
)
from corefbert.tasks.coref.readers import PronounExample, read_pronoun_file

FIX = FIXTURES / "coref"


# ----------------------------------------------------------------------------------------------- readers


def test_gap_reader_offsets_labels_gender():
    examples, skipped = read_pronoun_file(str(FIX / "gap.tsv"))
    assert not skipped
    assert [e.id for e in examples] == ["fixture-1", "fixture-2", "fixture-3", "fixture-4"]
    assert [e.label for e in examples] == [0, 1, None, 1]
    assert [e.gold for e in examples][2] == [False, False]
    assert [e.gender for e in examples] == ["feminine", "masculine", "masculine", "feminine"]
    first = examples[0]
    assert first.pronoun == "She" and first.candidates == ["Mira Holt", "Anna Berg"]
    assert first.candidate_spans[0] == [(0, 9)]
    assert first.text[slice(*first.candidate_spans[1][0])] == "Anna Berg"


def test_gap_reader_offset_mismatch_is_one_clear_line():
    with pytest.raises(CorefBertError, match=r"gap_bad_offset.tsv:3: A-offset 2 points at 'mas Lind h'"):
        read_pronoun_file(str(FIX / "gap_bad_offset.tsv"))


def test_block_reader_pronoun_variants():
    examples, skipped = read_pronoun_file(str(FIX / "blocks.txt"))
    assert not skipped and len(examples) == 4
    # stray spaces around candidates are stripped, answers matched case-insensitively
    assert examples[1].candidates == ["The bee", "the flower"] and examples[1].label == 0
    # a pronoun before punctuation ("him.") is found; Kocijan's ' him ' search would miss it
    assert examples[2].pronoun == "him" and examples[2].text[examples[2].pronoun_end] == "."
    # the "Her" inside the candidate "Her friend" is not taken for the pronoun
    fourth = examples[3]
    assert fourth.pronoun == "her" and fourth.pronoun_start == fourth.text.index("her car")
    assert fourth.candidate_spans[0] == [(0, 10)]


def test_block_reader_masked_variant_and_more_candidates():
    wikicrem, _ = read_pronoun_file(str(FIX / "masked_blocks.txt"))
    assert [e.pronoun for e in wikicrem] == ["[MASK]", "[MASK]"]
    assert wikicrem[0].text[wikicrem[0].pronoun_start - 2:wikicrem[0].pronoun_start] == "- "
    pdp, _ = read_pronoun_file(str(FIX / "pdp.txt"))
    assert pdp[0].candidates == ["Mrs. March", "the mother", "gossip"] and pdp[0].label == 1


def test_block_reader_skips_and_counts_bad_problems():
    examples, skipped = read_pronoun_file(str(FIX / "blocks_bad.txt"))
    assert [e.text for e in examples] == ["When Debbie splashed Tina, she got wet."]
    assert skipped == {"answer_not_a_candidate": 1, "pronoun_not_in_sentence": 1, "fewer_than_two_candidates": 1}
    with pytest.raises(CorefBertError, match=r"blocks_bad.txt:4: answer 'the tree' is not among"):
        read_pronoun_file(str(FIX / "blocks_bad.txt"), strict=True)


def test_block_reader_rejects_a_short_block():
    with pytest.raises(CorefBertError, match=r"blocks_three_lines.txt:6: a problem must be 4 lines"):
        read_pronoun_file(str(FIX / "blocks_three_lines.txt"))


def test_wsc_xml_reader_iso_8859_1():
    examples, skipped = read_pronoun_file(str(FIX / "wsc.xml"))
    assert not skipped and [e.label for e in examples] == [0, 1, 1]
    assert examples[0].text == "The city councilmen refused the demonstrators a permit because they feared violence."
    assert examples[0].pronoun == "they"
    assert examples[1].text.endswith("so we rescued them.")
    assert examples[2].candidates == ["Renée", "Zoë"] and examples[2].candidate_spans[1]


def test_winogender_reader():
    examples, skipped = read_pronoun_file(str(FIX / "winogender.tsv"))
    assert not skipped
    assert [e.pronoun for e in examples] == ["he", "she", "they", "her"]
    assert examples[0].candidates == ["the technician", "the customer"] and examples[0].label == 1
    assert examples[2].candidates == ["the technician", "someone"]
    assert examples[3].label == 0 and examples[3].gender == "female"


def test_missing_file_and_unknown_format():
    with pytest.raises(CorefBertError, match="file not found"):
        read_pronoun_file(str(FIX / "nope.txt"))
    with pytest.raises(CorefBertError, match="unknown coreference format"):
        read_pronoun_file(str(FIX / "blocks.txt"), format="conll")


# ------------------------------------------------------------------------------------------ eq. 5 loss


def test_eq5_loss_matches_literal_computation():
    scores = torch.tensor([[-1.0, -1.5], [-2.0, -0.5], [-0.3, -3.0]])  # log P per candidate
    labels = torch.tensor([0, 0, 1])
    mask = torch.ones(3, 2, dtype=torch.bool)
    alpha, beta = 10.0, 0.2
    literal = []
    for (s0, s1), y in zip(scores.tolist(), labels.tolist()):
        a, b = (s0, s1) if y == 0 else (s1, s0)
        literal.append(-a + alpha * max(0.0, b - a + beta))
    got = pronoun_margin_loss(scores, labels, mask, alpha, beta)
    assert got.item() == pytest.approx(sum(literal) / 3)
    wrong_mean = sum((s1 if y == 0 else s0) for (s0, s1), y in zip(scores.tolist(), labels.tolist())) / 3
    literal_wc = [-(s0 if y == 0 else s1) + alpha * max(0.0, wrong_mean - (s0 if y == 0 else s1) + beta)
                  for (s0, s1), y in zip(scores.tolist(), labels.tolist())]
    got_wc = pronoun_margin_loss(scores, labels, mask, alpha, beta, variant="wikicrem")
    assert got_wc.item() == pytest.approx(sum(literal_wc) / 3)


def test_eq5_loss_ignores_unanswerable_and_padding():
    scores = torch.tensor([[-1.0, -1.2, -0.1], [-5.0, -6.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    # row 0 has three candidates: the wrong term is the best-scored wrong one (-0.1); row 1 has none
    loss = pronoun_margin_loss(scores, torch.tensor([0, -1]), mask, alpha=1.0, beta=0.0)
    assert loss.item() == pytest.approx(1.0 + (-0.1 + 1.0))
    all_none = pronoun_margin_loss(scores, torch.tensor([-1, -1]), mask)
    assert all_none.item() == 0.0 and not math.isnan(all_none.item())
    all_none.backward()  # still a graph


# ----------------------------------------------------------------------------------- MLM candidate scoring


def _tiny_mlm(bert_tokenizer):
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    return BertForMaskedLM(tiny_config("bert", bert_tokenizer)).eval()


def test_encode_candidates_masks_as_many_tokens_as_the_candidate(bert_tokenizer):
    example = PronounExample("x", "Marta met Desmond because she liked the harbour.", 26, 29,
                             ["Marta", "the harbour master"], 0)
    features = encode_candidates(example, bert_tokenizer, max_length=64)
    for candidate, ids, targets in zip(example.candidates, features["input_ids"], features["target_ids"]):
        cand_ids = bert_tokenizer(candidate, add_special_tokens=False)["input_ids"]
        assert ids.count(bert_tokenizer.mask_token_id) == len(cand_ids)
        assert [t for t in targets if t != -100] == cand_ids
        assert ids[0] == bert_tokenizer.cls_token_id and ids[-1] == bert_tokenizer.sep_token_id
        restored = [i if t == -100 else t for i, t in zip(ids, targets)]
        assert restored == bert_tokenizer(example.text.replace("she", candidate))["input_ids"]
    short = encode_candidates(example, bert_tokenizer, max_length=8)
    assert all(len(ids) <= 8 and bert_tokenizer.mask_token_id in ids for ids in short["input_ids"])


@torch.no_grad()
def _score_examples(model: CandidateScoringModel, tokenizer, examples: list[PronounExample]) -> list[list[float]]:
    """Zero-shot scores (log P per candidate) of ``examples``, in order, with no training loop."""
    batch = collate_candidates([encode_candidates(e, tokenizer) for e in examples], tokenizer.pad_token_id)
    out = model.eval()(**batch)
    return [row[:len(e.candidates)] for e, row in zip(examples, out.scores.tolist())]


def test_mlm_scoring_picks_the_candidate_the_model_is_rigged_to_prefer(bert_tokenizer):
    mlm = _tiny_mlm(bert_tokenizer)
    examples = [
        PronounExample("a", "Marta rowed to the boat because she was brave.", 32, 35, ["Marta", "the boat"], 0),
        PronounExample("b", "Marta rowed to the boat because it was sinking.", 32, 34, ["Marta", "the boat"], 1),
    ]
    favoured = bert_tokenizer("the boat", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        mlm.cls.predictions.bias.zero_()
        mlm.cls.predictions.bias[favoured] = 25.0
    model = CandidateScoringModel(mlm)
    scores = _score_examples(model, bert_tokenizer, examples)
    assert all(row[1] > row[0] for row in scores)
    with torch.no_grad():
        mlm.cls.predictions.bias.zero_()
        mlm.cls.predictions.bias[bert_tokenizer.convert_tokens_to_ids(bert_tokenizer.tokenize("Marta"))] = 25.0
    assert all(row[0] > row[1] for row in _score_examples(model, bert_tokenizer, examples))


def test_scores_equal_full_logits_computation_and_sum_reduction(bert_tokenizer):
    mlm = _tiny_mlm(bert_tokenizer)
    example = PronounExample("a", "Desmond pulled on his boots while Marta ran.", 16, 19,
                             ["Desmond", "the harbour master", "Marta"], 0)
    batch = collate_candidates([encode_candidates(example, bert_tokenizer)], bert_tokenizer.pad_token_id)
    with torch.no_grad():
        mean = CandidateScoringModel(mlm)(**batch).scores[0]
        total = CandidateScoringModel(mlm, reduction="sum")(**batch).scores[0]
        for n in range(3):
            logits = mlm(input_ids=batch["input_ids"][0, n:n + 1],
                         attention_mask=batch["attention_mask"][0, n:n + 1]).logits[0].log_softmax(-1)  # [L, V]
            targets = batch["target_ids"][0, n]
            picked = [logits[i, t].item() for i, t in enumerate(targets.tolist()) if t != -100]
            assert total[n].item() == pytest.approx(sum(picked), abs=1e-4)
            assert mean[n].item() == pytest.approx(sum(picked) / len(picked), abs=1e-4)


def test_scoring_model_pads_candidates_and_trains(bert_tokenizer):
    mlm = _tiny_mlm(bert_tokenizer).train()
    examples, _ = read_pronoun_file(str(FIX / "pdp.txt"))
    features = [dict(encode_candidates(e, bert_tokenizer), label=e.label) for e in examples]
    batch = collate_candidates(features, bert_tokenizer.pad_token_id)
    assert batch["input_ids"].shape[:2] == (2, 3) and batch["candidate_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    out = CandidateScoringModel(mlm)(**batch)
    assert out.scores[1, 2].item() == float("-inf") and torch.isfinite(out.loss)
    out.loss.backward()
    assert mlm.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------- real data


@pytest.mark.shared_data
def test_real_data_reads_completely():
    for parts, count, labels in [
        (("gap", "gap-validation.tsv"), 454, {0: 187, 1: 205, None: 62}),
        (("dpr", "train.c.txt"), 1316, None),
        (("dpr", "dpr_dev_small.txt"), 131, None),
        (("wikicrem", "WikiCREM_dev.txt"), 10000, None),
    ]:
        examples, skipped = read_pronoun_file(str(shared_data(*parts)), strict=True)
        assert len(examples) == count and not skipped
        assert all(e.candidate_spans and all(e.candidate_spans) for e in examples)
        if labels is not None:
            assert {k: sum(e.label == k for e in examples) for k in labels} == labels


# ------------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory, bert_tokenizer):
    from transformers import BertForMaskedLM

    out = tmp_path_factory.mktemp("tiny_mlm")
    torch.manual_seed(0)
    BertForMaskedLM(tiny_config("bert", bert_tokenizer)).save_pretrained(str(out))
    bert_tokenizer.save_pretrained(str(out))
    return out


@pytest.mark.slow
def test_cli_trains_and_evaluates_every_format(tiny_mlm_dir, tmp_path):
    import json

    out = tmp_path / "run"
    evals = ["blocks.txt", "gap.tsv", "pdp.txt", "masked_blocks.txt", "wsc.xml", "winogender.tsv"]
    results = load_cli("finetune/run_coref.py").main([
        "--model_name_or_path", str(tiny_mlm_dir), "--do_train", "--do_eval",
        "--train_file", str(FIX / "blocks.txt"), str(FIX / "gap.tsv"), str(FIX / "masked_blocks.txt"),
        "--validation_file", *[str(FIX / name) for name in evals],
        "--per_device_train_batch_size", "4", "--max_steps", "3", "--learning_rate", "1e-3",
        "--output_dir", str(out), "--disable_tqdm"])
    assert results["train_steps"] == 3 and math.isfinite(results["train_loss"]) and results["train_loss"] > 0
    for stem in ("blocks", "pdp", "masked_blocks", "wsc", "winogender"):
        assert 0.0 <= results[f"eval_{stem}_accuracy"] <= 100.0
    assert results["eval_pdp_examples"] == 2 and results["eval_winogender_examples"] == 4
    # the pronoun is masked, so male/female accuracies would be equal by construction: not reported
    assert not [k for k in results if k.startswith("eval_winogender_accuracy_")]
    # the GAP submission file scores to exactly what the run reported
    examples, _ = read_pronoun_file(str(FIX / "gap.tsv"))
    gold = {e.id: (e.gold[0], e.gold[1], e.pronoun) for e in examples}
    system = read_gap_system_tsv(str(out / "eval_gap_gap.tsv"))
    assert gap_metrics(gold, system)["f1"] == pytest.approx(results["eval_gap_f1"])
    mains = [results[f"eval_{s}_accuracy"] for s in ("blocks", "pdp", "masked_blocks", "wsc", "winogender")]
    assert results["eval_score"] == pytest.approx((sum(mains) + results["eval_gap_f1"]) / 6)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert any("loss" in record for record in log)
    # the best model is an ordinary masked-LM checkpoint again
    from transformers import AutoModelForMaskedLM

    AutoModelForMaskedLM.from_pretrained(str(out / "best"))


def test_cli_bad_input_is_one_line(tiny_mlm_dir, tmp_path, capsys):
    main = load_cli("finetune/run_coref.py").main
    with pytest.raises(SystemExit) as exit_info:
        main(["--model_name_or_path", str(tiny_mlm_dir), "--do_eval", "--validation_file",
              str(FIX / "gap_bad_offset.tsv"), "--output_dir", str(tmp_path / "bad")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "gap_bad_offset.tsv:3: A-offset" in err[-1]
    with pytest.raises(SystemExit):
        main(["--model_name_or_path", str(tiny_mlm_dir), "--do_train", "--zero_shot", "mlm", "--train_file",
              str(FIX / "blocks.txt"), "--output_dir", str(tmp_path / "bad2")])
    assert "drop --do_train or --zero_shot" in capsys.readouterr().err


@pytest.mark.shared_data
@pytest.mark.slow
def test_cli_real_data_few_steps(tiny_mlm_dir, tmp_path):
    gap, dpr = shared_data("gap"), shared_data("dpr")
    wikicrem = shared_data("wikicrem", "WikiCREM_dev.txt")
    results = load_cli("finetune/run_coref.py").main([
        "--model_name_or_path", str(tiny_mlm_dir), "--do_train", "--do_eval",
        "--train_file", str(dpr / "dpr_train_small.txt"), str(gap / "gap-development.tsv"), str(wikicrem),
        "--validation_file", str(dpr / "dpr_dev_small.txt"), str(gap / "gap-validation.tsv"),
        "--per_device_train_batch_size", "8", "--max_steps", "2", "--max_eval_samples", "40",
        "--loss_variant", "wikicrem", "--output_dir", str(tmp_path / "real"), "--disable_tqdm"])
    assert results["train_steps"] == 2 and math.isfinite(results["train_loss"])
    assert results["eval_dpr_dev_small_examples"] == 40 and "eval_gap-validation_f1" not in results


def test_cli_counts_skipped_problems_per_file(tiny_mlm_dir, tmp_path):
    results = load_cli("finetune/run_coref.py").main(["--model_name_or_path", str(tiny_mlm_dir), "--zero_shot", "mlm", "--do_eval",
                          "--validation_file", str(FIX / "blocks_bad.txt"), str(FIX / "blocks.txt"),
                          "--output_dir", str(tmp_path / "skips"), "--disable_tqdm"])
    assert results["eval_blocks_bad_skipped"] == 3 and results["eval_blocks_bad_examples"] == 1
    assert results["eval_blocks_skipped"] == 0 and results["eval_blocks_examples"] == 4


def _thanks_example() -> PronounExample:
    text = "Marta met Zygmunt at the harbour, and Zygmunt thanked her."
    pronoun = text.index("her.")
    zygmunt = [m.span() for m in re.finditer("Zygmunt", text)]
    return PronounExample("x", text, pronoun, pronoun + 3, ["Marta", "Zygmunt"], 0, [[(0, 5)], zygmunt])


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_mlm_candidates_are_read_in_running_text_for_every_kind(kind):
    """The text is tokenized with the candidate in the pronoun's place. Tokenized apart, SentencePiece
    gave the "." after the pronoun a space piece of its own, which the running text does not have."""
    tokenizer = fixture_tokenizer(kind)
    example = _thanks_example()
    features = encode_candidates(example, tokenizer, max_length=64)
    for candidate, ids, targets in zip(example.candidates, features["input_ids"], features["target_ids"]):
        text = example.text[:example.pronoun_start] + candidate + example.text[example.pronoun_end:]
        restored = [i if t == -100 else t for i, t in zip(ids, targets)]
        assert restored[1:-1] == tokenizer(text, add_special_tokens=False)["input_ids"]
        scored = tokenizer.decode([t for t in targets if t != -100]).strip()
        normalizer = tokenizer.backend_tokenizer.normalizer
        assert scored == (normalizer.normalize_str(candidate) if normalizer else candidate)


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_copy_scoring_reads_a_candidate_as_pretraining_reads_the_mention(kind):
    """Each occurrence the copy head scores spans the tokens pretraining's mention of that word would
    (references.words_reference), a lone space token the tokenizer joins to it included (SentencePiece's before
    "Zygmunt"); by character overlap alone it started one token late."""
    tokenizer = fixture_tokenizer(kind)
    feature = encode_copy_query(_thanks_example(), tokenizer, max_length=64)
    text = feature["masked_text"]
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    chars = [m.span() for m in re.finditer(r"\w+|[^\w\s]", text)]
    word_of_token = words_reference(text, chars, [tuple(o) for o in encoding["offset_mapping"]],
                                    encoding.word_ids())[0]
    for occurrences in feature["mention_spans"]:
        for start, end in occurrences:
            word = word_of_token[start - 1]  # the window starts at the text's first token, after one special token
            tokens = [t + 1 for t, w in enumerate(word_of_token) if w == word]
            assert (start, end) == (tokens[0], tokens[-1])
    assert [len(occurrences) for occurrences in feature["mention_spans"]] == [1, 2]


def test_encode_candidates_byte_level_bpe_keeps_the_space_with_the_candidate(roberta_tokenizer):
    """RoBERTa's BPE is space-sensitive: the masked candidate must be tokenized as in running text."""
    tokenizer = roberta_tokenizer
    text = "Marta met Desmond because she liked the harbour."
    example = PronounExample("x", text, 26, 29, ["Marta", "the harbour master"], 0)
    features = encode_candidates(example, tokenizer, max_length=64)
    for candidate, ids, targets in zip(example.candidates, features["input_ids"], features["target_ids"]):
        restored = [i if t == -100 else t for i, t in zip(ids, targets)]
        assert restored == tokenizer(text.replace("she", candidate))["input_ids"]
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
