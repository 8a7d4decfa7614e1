"""The ablation study from a trained starting point (``--base_mlm_steps``), the held-out MLM probe
split into masked repeated mentions and other masked words, and the QUOREF probe."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from helpers import FIXTURES, load_cli, run_cli_main

from corefbert.ablation.probes import repeated_mention_tokens, statistic

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")
ARMS = ("corefbert", "mrm", "wwm")
SEEDS = (7, 8)
QUOREF = FIXTURES / "quoref" / "quoref_tiny.json"
QUESTIONS = sum(len(p["qas"]) for a in json.loads(QUOREF.read_text())["data"] for p in a["paragraphs"])


def _argv(model_dir, corpus_dir, out, *extra) -> list[str]:
    return ["--model_name_or_path", str(model_dir), "--dataset_dir", str(corpus_dir), "--output_dir", str(out),
            "--arms", ",".join(ARMS), "--seeds", str(len(SEEDS)), "--seed", str(SEEDS[0]), "--max_steps", "2",
            "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8", "--learning_rate", "1e-3",
            "--eval_steps", "2", "--checkpointing_steps", "2", "--logging_steps", "1", "--max_eval_samples", "6",
            "--probe_sequences", "6", "--bootstrap_samples", "100", "--base_mlm_steps", "3",
            "--quoref_train_file", str(QUOREF), "--quoref_validation_file", str(QUOREF), "--quoref_max_steps", "2",
            "--quoref_batch_size", "2", "--quoref_max_seq_length", "64",
            # Dense masks, so the 6 short held-out rows have masked repeated mentions to split off.
            "--mlm_probability", "0.3", "--mrp_ratio", "0.5", *extra]


def _run(argv):
    return run_cli_main("pretrain/run_ablation.py", argv)


def _digest(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def based_study(tmp_path_factory, tiny_bert_dir, corpus_dir):
    """The study with a 3-step base, recording every model pretraining starts from (path, weights digest)."""
    import corefbert.pretraining.run as run

    out = tmp_path_factory.mktemp("based") / "study"
    loads = []
    load = run.load_pretraining_model

    def recording_load(path, **overrides):
        model = load(path, **overrides)
        loads.append((str(path), _digest(model)))
        return model

    patch = pytest.MonkeyPatch()
    patch.setattr(run, "load_pretraining_model", recording_load)
    try:
        result = _run(_argv(tiny_bert_dir, corpus_dir, out))
    finally:
        patch.undo()
    return out, result, loads


def test_every_arm_of_every_seed_starts_from_the_same_trained_base(based_study, tiny_bert_dir):
    from corefbert.pretraining.families import load_pretraining_model

    out, result, loads = based_study
    base_final = out / "base" / "final"
    assert loads[0][0] == str(tiny_bert_dir)  # the base itself continues the backbone ...
    assert len(loads) == 1 + len(ARMS) * len(SEEDS)  # ... once; then each arm x seed
    assert {path for path, _ in loads[1:]} == {str(base_final)}
    assert len({digest for _, digest in loads[1:]}) == 1  # identical parameters at step 0 everywhere
    assert loads[1][1] == _digest(load_pretraining_model(base_final))
    assert loads[1][1] != loads[0][1]  # and the base did train
    base_log = [json.loads(line) for line in (out / "base" / "log.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in base_log if r.get("split") == "train") == 3
    assert all("mrp_loss" not in r or r["mrp_loss"] == 0 for r in base_log if r.get("split") == "train")
    assert result["runs"]["base"] == "trained"
    assert json.loads((out / "study_settings.json").read_text())["base_mlm_steps"] == 3
    assert result["study"]["base_mlm_steps"] == 3
    assert (out / "curves.png").stat().st_size > 10_000  # the base drawn before the arms that continue it


def test_a_rerun_reuses_the_base_and_a_changed_base_is_refused(based_study, tmp_path, tiny_bert_dir, corpus_dir,
                                                              capsys):
    out, first, _ = based_study
    copy = tmp_path / "study"
    shutil.copytree(out, copy)
    again = _run(_argv(tiny_bert_dir, corpus_dir, copy))
    assert again["runs"]["base"] == "finished_before" and again["runs"]["trained"] == 0
    assert again["runs"]["probes_run"] == 0
    assert again["probes"] == first["probes"]
    for changed in ("5", "0"):
        with pytest.raises(SystemExit) as exit_info:
            _run(_argv(tiny_bert_dir, corpus_dir, copy, "--base_mlm_steps", changed))
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and f"--base_mlm_steps {changed} differs from the 3" in err[-1], err


def test_the_study_reports_repeated_mentions_other_words_and_quoref_for_every_arm(based_study):
    out, result, _ = based_study
    probes = result["probes"]
    rows = ["held-out MLM accuracy: repeated mentions", "held-out MLM accuracy: other masked words",
            "QUOREF dev EM", "QUOREF dev F1"]
    table = (out / "study.md").read_text()
    for row in rows:
        assert sorted(probes[row]["arms"]) == sorted(["backbone", *ARMS]), row  # the base is probed too
        assert probes[row]["ci"]["seeds"] == len(SEEDS) and row in table
    for heldout in out.glob("*/seed_*/probes/heldout.json"):
        counts = {k: np.array(v) for k, v in json.loads(heldout.read_text())["results"].items()}
        # The two parts partition the masked tokens of every sequence.
        assert (counts["mlm_repeated"] + counts["mlm_other"] == counts["mlm"]).all(), heldout
        assert counts["mlm_repeated"][:, 1].sum() > 0 and counts["mlm_other"][:, 1].sum() > 0
    for path in out.glob("*/seed_*/probes/quoref.json"):
        saved = json.loads(path.read_text())
        assert saved["settings"]["base_mlm_steps"] == 3
        results = saved["results"]
        for key in ("exact_match", "f1"):  # per-question counts give the task's own corpus figure
            assert len(results[key]) == QUESTIONS
            assert statistic("ratio", np.array(results[key]).sum(axis=0)) == pytest.approx(results["reported"][key])


def test_repeated_mention_tokens_match_a_literal_reading_of_the_collator_spans(tiny_bert_dir, corpus_dir):
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction

    rows = load_from_disk(str(corpus_dir))["train"]
    collator = DataCollatorForMentionReferencePrediction(AutoTokenizer.from_pretrained(tiny_bert_dir),
                                                         mlm_probability=0.3, mrp_ratio=0.5)
    batch = collator([rows[i] for i in range(8)], np.random.default_rng(3))
    fast = repeated_mention_tokens(batch)
    literal = np.zeros(tuple(batch["input_ids"].shape), dtype=bool)
    for b in range(literal.shape[0]):
        for m in range(batch["mrp_mention_starts"].shape[1]):
            if batch["mrp_mention_mask"][b, m]:
                for t in range(int(batch["mrp_mention_starts"][b, m]), int(batch["mrp_mention_ends"][b, m]) + 1):
                    literal[b, t] = True
    assert literal.any()
    assert (fast.numpy() == literal).all()
    assert (batch["labels"].numpy()[literal] != -100).all()  # every repeated-mention token is masked


@pytest.mark.parametrize("extra, message", [
    (["--base_mlm_steps", "-1"], "--base_mlm_steps must be 0 or more"),
    (["--quoref_validation_file", "nowhere.json"], "QUOREF probe file not found"),
])
def test_bad_base_and_quoref_flags_are_one_line(tmp_path, tiny_bert_dir, corpus_dir, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        _run(_argv(tiny_bert_dir, corpus_dir, tmp_path / "out", *extra))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_the_cli_help_shows_the_new_flags(capsys):
    with pytest.raises(SystemExit):
        load_cli("pretrain/run_ablation.py").main(["--help"])
    out = capsys.readouterr().out
    for flag in ("--base_mlm_steps", "--quoref_train_file", "--quoref_validation_file", "--quoref_max_steps"):
        assert flag in out


def test_the_same_candidate_probe_equals_a_literal_loop_over_mentions(tiny_bert_dir, corpus_dir):
    """Every scorer of the same-candidate probe (the MLM head in the copy head's start/end form, the copy head, the
    copy head with V untrained) against the literal reading, row by row of real collator batches; a trained-looking
    V (random) keeps the two copy scorers apart."""
    import torch
    from datasets import load_from_disk
    from references import same_candidate_reference
    from transformers import AutoTokenizer

    from corefbert.ablation.probes import same_candidate_hits
    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction
    from corefbert.pretraining.families import load_pretraining_model

    rows = load_from_disk(str(corpus_dir))["train"]
    collator = DataCollatorForMentionReferencePrediction(AutoTokenizer.from_pretrained(tiny_bert_dir),
                                                         mlm_probability=0.3, mrp_ratio=0.5)
    torch.manual_seed(0)
    model = load_pretraining_model(str(tiny_bert_dir)).eval()
    with torch.no_grad():
        model.mrp.copy_vector.normal_()
    totals = {}
    for i in range(len(rows)):
        batch = collator([rows[i]], np.random.default_rng(i))
        with torch.no_grad():
            out = model(**batch, masked_logits_only=True)
        log_p = torch.log_softmax(out.logits.double(), -1)
        positions = torch.nonzero(batch["labels"][0] != -100).flatten().tolist()
        log_p_at = {p: log_p[n].tolist() for n, p in enumerate(positions)}
        fast = same_candidate_hits(out.logits, out.last_hidden_state, model.mrp.copy_vector, batch)
        assert fast == same_candidate_reference(log_p_at, out.last_hidden_state, model.mrp.copy_vector, batch), i
        for name, (hits, total) in fast.items():
            totals[name] = [a + b for a, b in zip(totals.get(name, [0, 0]), (hits, total))]
    assert totals["same_mlm"][1] > 10  # the rows have masked mentions to recover
    assert any(hits for hits, _ in totals.values())


def test_the_pooled_per_document_counts_give_the_scorers_avg_f1():
    """The end-to-end probe's statistic: summed per-document MUC / B³ / CEAF-φ4 counts give coref_scores' avg F1
    (the CoNLL scorer's sums over documents), on real LitBank-style documents with a degraded prediction."""
    from helpers import FIXTURES

    from corefbert.ablation.probes import statistic
    from corefbert.metrics.coref_metrics import METRICS, as_sets, coref_scores, document_counts
    from corefbert.text.conll import read_conll

    documents = read_conll([str(FIXTURES / "coref_e2e" / "two_docs.conll"), str(FIXTURES / "conll" / "mini.gold_conll")])
    gold = [[list(c) for c in d.clusters if len(c) > 1] for d in documents]
    # Merge each document's first two clusters, cut the last mention off the others of 3+ mentions, drop the rest.
    predicted = [([g[0] + g[1]] if len(g) > 1 else g[:1]) + [c[:-1] for c in g[2:] if len(c) > 2] for g in gold]
    counts = np.array([[x for m in METRICS for x in document_counts(as_sets(k), as_sets(r))[m]]
                       for k, r in zip(gold, predicted)])
    expected = coref_scores(predicted, gold)["avg_f1"]
    assert 0 < expected < 100
    assert statistic("coref_avg_f1", counts.sum(axis=0)) == pytest.approx(expected)
