"""The zero-shot copy-head resolver: scores against a literal computation, the API, the HTML view, the CLI."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from helpers import FIXTURES, load_cli

from corefbert.errors import CorefBertError
from corefbert.tasks.coref.copy_scoring import read_copy_vector
from corefbert.tasks.coref.resolver import CopyResolver, resolve

TEXT = "Marta rowed out to the fishing boat because she saw that the boat was sinking near the harbour."


@pytest.fixture(scope="module")
def resolver(coref_checkpoint):
    return CopyResolver(str(coref_checkpoint))


def _span(word: str, text: str = TEXT) -> tuple[int, int]:
    start = re.search(rf"\b{word}\b", text).start()
    return start, start + len(word)


def test_copy_vector_is_read_from_the_checkpoint(coref_checkpoint, resolver):
    vector = read_copy_vector(str(coref_checkpoint))
    assert vector is not None and vector[0].item() == pytest.approx(-1.0)
    assert torch.equal(resolver.model.copy_vector.detach(), vector)


def test_scores_match_literal_copy_probabilities(resolver):
    tokenizer, encoder = resolver.tokenizer, resolver.model.encoder
    scores = resolver.resolve(TEXT, _span("she"), ["Marta", "the boat", "harbour"])
    masked = TEXT.replace(" she ", f" {tokenizer.mask_token} ")
    enc = tokenizer(masked, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    with torch.no_grad():
        hidden = encoder(input_ids=torch.tensor([ids])).last_hidden_state[0]  # [L, H]
    query = ids.index(tokenizer.mask_token_id)
    vector = resolver.model.copy_vector.detach()
    allowed = [k for k in range(len(ids)) if k not in (0, len(ids) - 1, query)]
    logits = {k: float((vector * hidden[k]) @ hidden[query]) for k in allowed}
    log_norm = math.log(sum(math.exp(v) for v in logits.values()))

    def word_log_prob(char_start, char_end):
        tokens = [i for i, (s, e) in enumerate(offsets) if s < char_end and e > char_start and e > s]
        return logits[tokens[0]] - log_norm + logits[tokens[-1]] - log_norm

    assert scores["Marta"] == pytest.approx(word_log_prob(0, 5), abs=1e-4)
    # scored by its last word, only where the whole phrase occurs ("the fishing boat" is not "the boat")
    boats = [m.start() + 4 for m in re.finditer("the boat", masked)]
    assert len(boats) == 1
    both = resolver.resolve(TEXT, _span("she"), ["boat"])["boat"]  # both boats: log(Pr(#1) + Pr(#2))
    assert both == pytest.approx(math.log(sum(math.exp(word_log_prob(m.start(), m.end()))
                                              for m in re.finditer("boat", masked))), abs=1e-4)
    expected = math.log(sum(math.exp(word_log_prob(b, b + 4)) for b in boats))
    assert scores["the boat"] == pytest.approx(expected, abs=1e-4)
    full = CopyResolver("unused", copy_span="full", model=resolver.model, tokenizer=tokenizer)
    the = [m.start() for m in re.finditer("the boat", masked)]
    # whole span: Pr(start = "the") * Pr(end = "boat"); word_log_prob of a one-token word counts it twice
    expected_full = math.log(sum(math.exp((word_log_prob(t, t + 3) + word_log_prob(t + 4, t + 8)) / 2)
                                 for t in the))
    assert full.resolve(TEXT, _span("she"), ["the boat"])["the boat"] == pytest.approx(expected_full, abs=1e-4)


def test_candidates_as_spans_and_absent_candidates(resolver):
    as_span = resolver.resolve(TEXT, _span("she"), [(0, 5)])
    as_text = resolver.resolve(TEXT, _span("she"), ["Marta"])
    assert as_span["Marta"] == pytest.approx(as_text["Marta"])
    assert resolver.resolve(TEXT, _span("she"), ["Desmond"])["Desmond"] == float("-inf")
    with pytest.raises(CorefBertError, match="outside the text"):
        resolver.resolve(TEXT, (5, 500), ["Marta"])


def test_module_level_resolve_and_missing_copy_head(coref_checkpoint, tmp_path):
    scores = resolve(TEXT, _span("she"), ["Marta", "the boat"], str(coref_checkpoint))
    assert set(scores) == {"Marta", "the boat"} and all(v < 0 for v in scores.values())
    from transformers import AutoConfig, AutoTokenizer, BertModel

    plain = tmp_path / "plain"
    BertModel(AutoConfig.from_pretrained(str(coref_checkpoint))).save_pretrained(str(plain))
    AutoTokenizer.from_pretrained(str(coref_checkpoint)).save_pretrained(str(plain))
    with pytest.raises(CorefBertError, match="no mrp.copy_vector in this checkpoint"):
        CopyResolver(str(plain))
    untrained = CopyResolver(str(plain), allow_untrained=True)
    hidden = untrained.model.encoder.config.hidden_size
    assert torch.allclose(untrained.model.copy_vector, torch.full((hidden,), 1.0 / hidden))


def test_html_view_shades_tokens_by_copy_probability(resolver):
    text = "Marta <b>rowed</b> to the boat because she was brave."
    page = resolver.render_html(text, _span("she", text), ["Marta", "the boat"])
    assert page.startswith("<!DOCTYPE html>") and "<b>" not in page and ">&lt;<" in page  # text escaped
    assert re.search(r'<span class="pronoun"[^>]*>she</span>', page)
    probs = [float(p) for p in re.findall(r'title="Pr\(copy\) = ([0-9.]+)"', page)]
    assert sum(probs) == pytest.approx(1.0, abs=0.01)
    table = re.findall(r"<tr><td>([^<]+)</td><td>(-?[0-9.]+)</td></tr>", page)
    assert [name for name, _ in table] and len(table) == 2
    assert float(table[0][1]) >= float(table[1][1])  # ranked best first


def test_cli_zero_shot_copy_with_html(coref_checkpoint, tmp_path):
    main = load_cli("finetune/run_coref.py").main
    fixtures = FIXTURES / "coref"
    out = tmp_path / "copy"
    results = main(["--model_name_or_path", str(coref_checkpoint), "--zero_shot", "copy", "--do_eval",
                    "--validation_file", str(fixtures / "blocks.txt"), str(fixtures / "gap.tsv"),
                    "--copy_html_examples", "1", "--max_seq_length", "256", "--output_dir", str(out),
                    "--disable_tqdm"])
    assert 0.0 <= results["eval_blocks_accuracy"] <= 100.0 and "eval_gap_f1" in results
    rows = [json.loads(line) for line in (out / "eval_blocks_predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["prediction"] in r["candidates"] for r in rows)
    picks = [r["candidates"].index(r["prediction"]) for r in rows]
    assert results["eval_blocks_accuracy"] == pytest.approx(
        100.0 * sum(p == r["label"] for p, r in zip(picks, rows)) / 4)
    pages = sorted(p.name for p in (out / "copy_html").iterdir())
    assert pages == ["eval_blocks_blocks-0.html", "eval_gap_fixture-1.html"]
    # Each page shows the scores evaluation gave its problem (every occurrence of every candidate).
    table = re.findall(r"<tr><td>([^<]+)</td><td>(-?[0-9.]+|-?inf)</td></tr>",
                       (out / "copy_html" / "eval_blocks_blocks-0.html").read_text())
    scored = dict(zip(rows[0]["candidates"], rows[0]["scores"]))
    assert sorted(name for name, _ in table) == sorted(rows[0]["candidates"])
    assert all(float(value) == pytest.approx(scored[name], abs=1e-3) for name, value in table)


def test_the_toolkits_own_loads_print_no_load_report(coref_checkpoint, capfd, caplog):
    """Loading a CorefBERT checkpoint to use its copy head printed transformers' report calling
    that very head UNEXPECTED. The toolkit's loads are quiet; a user's plain load keeps the (true) report."""
    from transformers import AutoModel, AutoModelForMaskedLM

    from corefbert.pretraining.families import load_quietly
    from corefbert.tasks.coref.copy_scoring import CopyHeadScorer

    def printed() -> str:  # what reached the terminal or a log handler since the last call
        text = caplog.text + "".join(capfd.readouterr())
        caplog.clear()
        return text

    printed()
    AutoModel.from_pretrained(str(coref_checkpoint))  # the control: the report is logged and captured here
    plain = printed()
    assert "LOAD REPORT" in plain and "mrp.copy_vector" in plain and "UNEXPECTED" in plain

    scorer = CopyHeadScorer.from_pretrained(str(coref_checkpoint))
    CopyResolver(str(coref_checkpoint))
    load_quietly(AutoModelForMaskedLM, str(coref_checkpoint), unused=("mrp.", "pooler."), fresh_ok=("cls.",))
    quiet = printed()
    assert "LOAD REPORT" not in quiet and "UNEXPECTED" not in quiet and "WARNING" not in quiet, quiet
    assert scorer.copy_vector[0].item() == -1.0  # the head it loaded quietly is the checkpoint's (a ramp from -1)

    # A weight the caller did not name as unused is still said, in one line.
    load_quietly(AutoModelForMaskedLM, str(coref_checkpoint), unused=("pooler.",))
    assert "1 weight(s) of the checkpoint are not used by BertForMaskedLM (first: mrp.copy_vector)" in caplog.text
