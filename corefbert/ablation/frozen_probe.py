"""The frozen-feature coreference probe: edge probing (Tenney et al. 2019) of an encoder's frozen span
representations on gold coreference mentions, for the ablation curve and for any checkpoint
(``python -m corefbert.ablation.frozen_probe``, ``corefbert frozen-probe``).

What it measures. Every document is cut into encoder windows of ``window`` tokens (``[CLS]``, ``window - 2``
subwords, ``[SEP]``; :mod:`corefbert.ablation.mention_pairs`). A gold mention that lies inside one window is represented at
layer ``l`` by the mean of its subwords' hidden states (layer 0: the embedding layer's output); every pair of
mentions in one window is an example, labelled 1 when both are in the same gold cluster. Per layer, a logistic
regression on ``[a ⊙ b ; |a − b|]`` (standardised on the training pairs, balanced class weights) is fitted on
the training documents' pairs and scored on the test documents': the AUC of its scores and the F1 of its
decisions (score > 0) on the positive class, both as fractions in [0, 1].

Every figure is reported for three subsets of the test pairs (the lesson of a first prototype, measured again
in docs/guides/ablation.md: token identity alone gives a random-weight encoder about 0.80 AUC):
``all``; ``diffstring``, pairs whose mentions differ as (lower-cased) strings; ``pronoun_name``, a personal
pronoun paired with a name (:func:`mention_kind`'s surface rule). Beside each layer's figure stands the gain over
the same model's layer 0 (the lexical floor). Intervals are document-bootstrap percentile intervals
(:mod:`corefbert.ablation.pair_statistics`): pairs within a document are not independent, so documents are
what a resample draws; :func:`frozen_paired_difference` gives the paired interval between two checkpoints (an arm minus
WWM) on the same test documents.

Everything that can vary is fixed by ``seed``: the subsample of training pairs (``max_train_pairs``), the
bootstrap draws (the same for every checkpoint probed with the same seed and test documents), and the random
weights of :func:`load_probe_encoder` (``random_weights``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from corefbert.ablation.mention_pairs import (
    DEFAULT_WINDOW,
    MIN_WINDOW,
    SUBSETS,
    ProbeDocument,
    prepare_document,
)
from corefbert.ablation.pair_statistics import (
    METRICS,
    document_statistics,
    figure_values,
    frozen_paired_difference,
    interval,
)
from corefbert.argparser import load_yaml_config, parse_args
from corefbert.errors import CorefBertError, cli_entry, one_line
from corefbert.metrics.bootstrap import resample_weights
from corefbert.text.conll import ConllDocument, read_conll
from corefbert.text.durable import check_writable, replace_file
from corefbert.text.positions import max_positions, positions_reason
from corefbert.text.tokenizers import load_tokenizer
from corefbert.training.model_folders import (
    check_model_folder,
    check_sizes_against_weights,
    safetensors_files,
)

__all__ = ["frozen_coref_probe", "frozen_paired_difference", "load_probe_encoder", "prepare_document"]

# ------------------------------------------------------------------------------------------------- encoder


def encoder_config(model_name_or_path: str | os.PathLike):
    """The ``AutoConfig`` of a checkpoint, or one error line: read before the weights, so that a window or layer
    the model cannot have is refused in a second."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(model_name_or_path))
    except (OSError, ValueError) as err:
        raise CorefBertError(f"cannot load an encoder ({one_line(err, first_line=True)}); pass a checkpoint folder "
                             "as --model_name_or_path", path=model_name_or_path) from None


def load_probe_encoder(model_name_or_path: str | os.PathLike, random_weights: bool = False, seed: int = 0):
    """The encoder of a checkpoint (``AutoModel``; a pretraining checkpoint's MLM and copy heads are left out,
    quietly), in eval mode. ``random_weights``: the same architecture with fresh weights drawn under ``seed`` (the
    random-weight floor of the probe)."""
    import torch
    from transformers import AutoModel

    from corefbert.pretraining.families import load_quietly

    config = encoder_config(model_name_or_path)
    if random_weights:
        torch.manual_seed(seed)
        return AutoModel.from_config(config).eval()
    path = str(model_name_or_path)
    if os.path.isdir(path):  # a config sizing other tensors than the stored ones: one line, before allocating
        check_sizes_against_weights(lambda: AutoModel.from_config(config), safetensors_files(path), "config.json",
                                    path)
    try:
        model, _ = load_quietly(AutoModel, path)
    except (OSError, ValueError) as err:
        raise CorefBertError(f"cannot load an encoder ({one_line(err, first_line=True)}); pass a checkpoint folder "
                             "as --model_name_or_path", path=model_name_or_path) from None
    return model.eval()


def mention_vectors(model, documents: list[ProbeDocument], layers: list[int], batch_size: int = 32) -> list[np.ndarray]:
    """Per document ``[len(layers), M, hidden]`` float32: each mention's mean subword state at each layer
    (``hidden_states[l]``: 0 is the embedding layer's output). ``model`` runs where its weights are, no gradients."""
    import torch

    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for doc in documents:
            vectors = np.zeros((len(layers), len(doc.mention_window), model.config.hidden_size), dtype=np.float32)
            for start in range(0, len(doc.input_ids) if len(doc.mention_window) else 0, batch_size):
                ids = torch.from_numpy(doc.input_ids[start:start + batch_size])  # [B, T]
                mask = torch.arange(ids.shape[1])[None, :] < torch.from_numpy(doc.lengths[start:start + len(ids)])[:, None]
                hidden = model(input_ids=ids.to(device), attention_mask=mask.long().to(device),
                               output_hidden_states=True).hidden_states
                states = torch.stack([hidden[layer] for layer in layers]).float()  # [layers, B, T, H]
                # Prefix sums over positions, one zero row first: a span's sum is two lookups. [layers, B, T + 1, H]
                sums = torch.nn.functional.pad(states.cumsum(dim=2), (0, 0, 1, 0))
                chosen = (doc.mention_window >= start) & (doc.mention_window < start + len(ids))  # [M]
                b = torch.from_numpy(doc.mention_window[chosen] - start).to(device)
                first = torch.from_numpy(doc.mention_first[chosen]).to(device)
                last = torch.from_numpy(doc.mention_last[chosen]).to(device)
                span_sum = sums[:, b, last + 1] - sums[:, b, first]  # [layers, chosen, H]
                vectors[:, chosen] = (span_sum / (last - first + 1)[None, :, None]).cpu().numpy()
            out.append(vectors)
    return out


# ------------------------------------------------------------------------------------------------- the probe


def pair_features(vectors: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """``[P, 2H]``: ``[a ⊙ b ; |a − b|]`` of each pair's mention vectors (``vectors`` [M, H], ``pairs`` [P, 2])."""
    a, b = vectors[pairs[:, 0]], vectors[pairs[:, 1]]
    return np.concatenate([a * b, np.abs(a - b)], axis=1)


def score_pairs(train: list[tuple[np.ndarray, np.ndarray, np.ndarray]], test: list[tuple[np.ndarray, np.ndarray]],
                seed: int = 0, max_train_pairs: int | None = None, max_iter: int = 1000) -> list[np.ndarray]:
    """Fit the pair classifier on ``train`` (per document: mention vectors [M, H], pairs [P, 2], labels [P]) and
    return its scores (decision function; > 0 decides "same cluster") for each ``test`` document's pairs.
    ``max_train_pairs``: fit on that many training pairs drawn under ``seed`` (None: all)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    features = np.concatenate([pair_features(v, p) for v, p, _ in train])
    labels = np.concatenate([np.asarray(y, dtype=bool) for _, _, y in train])
    if max_train_pairs is not None and len(labels) > max_train_pairs:
        keep = np.sort(np.random.default_rng(seed).choice(len(labels), max_train_pairs, replace=False))
        features, labels = features[keep], labels[keep]
    if labels.all() or not labels.any():
        raise CorefBertError(f"the training documents give {len(labels)} mention pairs, all of one class; the probe "
                             "needs pairs in the same cluster and pairs in different ones: pass more documents")
    classifier = make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=max_iter,
                                                                    random_state=seed))
    classifier.fit(features, labels)
    return [classifier.decision_function(pair_features(v, p)) if len(p) else np.zeros(0) for v, p in test]


def frozen_coref_probe(model, tokenizer, train_docs: list[ConllDocument | ProbeDocument],
                       test_docs: list[ConllDocument | ProbeDocument],
                       layers: list[int] | None = None, seed: int = 0, window: int = DEFAULT_WINDOW,
                       bootstrap_samples: int = 1000, max_train_pairs: int | None = None, batch_size: int = 32,
                       level: float = 0.95) -> dict:
    """Probe the frozen encoder ``model`` (a checkpoint folder or a loaded ``PreTrainedModel``; ``tokenizer`` None:
    the folder's) on ``train_docs`` / ``test_docs`` at ``layers`` (None: every layer, 0 to the last). The documents
    may come prepared (:func:`prepare_document`, same ``tokenizer`` and ``window``): a caller probing many
    checkpoints of one tokenizer tokenizes them once.

    Returns a JSON-ready dict of flat figures, fractions in [0, 1]: ``frozen_{auc,f1}[_{subset}]_l{layer}`` with
    ``..._ci`` ``[low, high]`` (``level`` document-bootstrap interval of ``bootstrap_samples`` draws),
    ``frozen_gain_over_l0_{auc,f1}[_{subset}]_l{layer}`` (+ ``_ci``, paired over documents) when layer 0 is
    probed, counts (documents, mentions, pairs per subset, mentions skipped and why), the settings, and the wall and
    CPU seconds it took (loading a model from a folder included); plus
    ``frozen_test_documents`` and ``frozen_per_document`` (per test document statistics) that
    :func:`frozen_paired_difference` reads to compare two checkpoints. A figure whose pairs are all of one class is
    None.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    if not isinstance(model, (str, os.PathLike)) and tokenizer is None:
        raise ValueError("pass the tokenizer with a loaded model")
    tokenizer = load_tokenizer(str(model)) if tokenizer is None else tokenizer
    model = load_probe_encoder(model) if isinstance(model, (str, os.PathLike)) else model
    layers = check_settings(model.config, train_docs, test_docs, layers, window)
    train, test = ([d if isinstance(d, ProbeDocument) else prepare_document(d, tokenizer, window) for d in docs]
                   for docs in (train_docs, test_docs))
    if any(d.input_ids.shape[1] != window for d in train + test):
        raise ValueError(f"documents prepared for another window than {window}")
    was_training = model.training
    model.eval()
    try:
        train_vectors = mention_vectors(model, train, layers, batch_size)
        test_vectors = mention_vectors(model, test, layers, batch_size)
    finally:
        model.train(was_training)
    per_document = {}
    for k, layer in enumerate(layers):
        scores = score_pairs([(v[k], d.pairs, d.labels) for v, d in zip(train_vectors, train)],
                             [(v[k], d.pairs) for v, d in zip(test_vectors, test)], seed, max_train_pairs)
        for subset in SUBSETS:
            chosen = [d.subsets[subset] for d in test]
            stats = document_statistics([s[c] for s, c in zip(scores, chosen)],
                                        [d.labels[c] for d, c in zip(test, chosen)])
            for metric in METRICS:
                per_document[figure_name(metric, subset, layer)[len("frozen_"):]] = stats[metric]
    result = {**counts(train, test), "frozen_layers": list(layers), "frozen_window": window, "frozen_seed": seed,
              "frozen_max_train_pairs": max_train_pairs, "frozen_bootstrap_samples": bootstrap_samples,
              "frozen_test_documents": [d.doc_key for d in test], "frozen_per_document": per_document}
    result.update(figures(result, layers, bootstrap_samples, seed, level))
    result["frozen_seconds"] = round(time.perf_counter() - started, 1)
    result["frozen_cpu_seconds"] = round(time.process_time() - cpu_started, 1)  # all threads: compare across loads
    return result


def figure_name(metric: str, subset: str, layer: int, gain: bool = False) -> str:
    """``frozen_auc_l4``, ``frozen_f1_diffstring_l2``, ``frozen_gain_over_l0_auc_pronoun_name_l6``."""
    return f"frozen_{'gain_over_l0_' if gain else ''}{metric}{'' if subset == 'all' else '_' + subset}_l{layer}"


def figures(result: dict, layers: list[int], samples: int, seed: int, level: float) -> dict:
    """Each figure of ``result``'s per-document statistics with its interval, and each layer's gain over layer 0."""
    out = {}
    weights = resample_weights(len(result["frozen_test_documents"]), samples, seed)  # [R, D]
    for metric in METRICS:
        for subset in SUBSETS:
            for layer in layers:
                name = figure_name(metric, subset, layer)
                stats = result["frozen_per_document"][name[len("frozen_"):]]
                observed = figure_values(metric, stats, np.ones((1, len(weights[0]))))[0]
                out[name] = None if np.isnan(observed) else float(observed)
                out[name + "_ci"] = interval(figure_values(metric, stats, weights), level)
                if layer != 0 and 0 in layers:
                    gain = frozen_paired_difference(result, result, name, figure_name(metric, subset, 0), samples, seed,
                                                   level)
                    gained = figure_name(metric, subset, layer, gain=True)
                    out[gained] = gain["difference"]
                    out[gained + "_ci"] = None if gain["ci_low"] is None else [gain["ci_low"], gain["ci_high"]]
    return out


def counts(train: list[ProbeDocument], test: list[ProbeDocument]) -> dict:
    """How many documents, mentions and pairs the probe saw, and how many mentions it skipped and why."""
    out = {}
    for split, docs in (("train", train), ("test", test)):
        out[f"frozen_documents_{split}"] = len(docs)
        out[f"frozen_mentions_{split}"] = sum(len(d.mention_window) for d in docs)
        out[f"frozen_skipped_mentions_window_edge_{split}"] = sum(d.skipped_edge for d in docs)
        out[f"frozen_skipped_mentions_duplicate_{split}"] = sum(d.skipped_duplicate for d in docs)
        out[f"frozen_documents_without_pairs_{split}"] = sum(not len(d.pairs) for d in docs)
        for subset in SUBSETS:
            suffix = "" if subset == "all" else f"_{subset}"
            out[f"frozen_pairs_{split}{suffix}"] = int(sum(d.subsets[subset].sum() for d in docs))
            out[f"frozen_positive_pairs_{split}{suffix}"] = int(sum(d.labels[d.subsets[subset]].sum() for d in docs))
    return out


def check_settings(config, train_docs, test_docs, layers: list[int] | None, window: int) -> list[int]:
    """The layers to probe; one error line for a window the model cannot embed, a layer it does not have,
    an empty split or a document in both splits."""
    usable = max_positions(config)
    if window < MIN_WINDOW or (usable is not None and window > usable):
        raise CorefBertError(f"--window {window}: the probe's windows must hold at least {MIN_WINDOW} tokens and at "
                             f"most {usable} ({positions_reason(config)}); pass a window in that range")
    deepest = config.num_hidden_layers
    layers = list(range(deepest + 1)) if not layers else sorted(set(int(x) for x in layers))
    if layers[0] < 0 or layers[-1] > deepest:
        raise CorefBertError(f"--layers {layers}: the model has layers 0 (the embedding output) to {deepest}")
    if not train_docs or not test_docs:
        raise CorefBertError("the probe needs training and test documents; pass --train_file and --test_file "
                             "(or --split_config)")
    shared = sorted({d.doc_key for d in train_docs} & {d.doc_key for d in test_docs})
    if shared:
        raise CorefBertError(f"{len(shared)} document(s) are in both the training and the test files (first: "
                             f"{shared[0]}); the probe would be scored on what it was fitted on: split them")
    return layers


# ------------------------------------------------------------------------------------------------ command line


@dataclass
class FrozenProbeArguments:
    """``python -m corefbert.ablation.frozen_probe`` (``corefbert frozen-probe``)."""

    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Checkpoint folder to probe: any encoder AutoModel loads (a pretraining checkpoint, a backbone)."})
    split_config: str | None = field(default=None, metadata={
        "help": "YAML file whose train_file and test_file lists are the split (its other keys are ignored), e.g. "
                "docs/guides/coref_e2e_litbank90.yaml; its paths are read from the current folder, as the "
                "end-to-end command reads them. --train_file / --test_file override it."})
    train_file: list[str] | None = field(default=None, metadata={"help": "CoNLL-2012 files or globs to fit on."})
    test_file: list[str] | None = field(default=None, metadata={"help": "CoNLL-2012 files or globs to score."})
    output_file: str | None = field(default=None, metadata={
        "help": "Write the whole result (figures, counts, per-document statistics) here as JSON."})
    layers: list[int] | None = field(default=None, metadata={
        "help": "Layers to probe (0: the embedding output); default every layer."})
    window: int = field(default=DEFAULT_WINDOW, metadata={"help": "Encoder window in tokens, [CLS] and [SEP] included."})
    seed: int = field(default=0, metadata={
        "help": "The probe's seed: training-pair subsample, bootstrap draws, --random_weights."})
    bootstrap_samples: int = field(default=1000, metadata={"help": "Document-bootstrap samples of each interval."})
    max_train_pairs: int | None = field(default=None, metadata={
        "help": "Fit on at most this many training pairs, drawn under --seed (default: all)."})
    batch_size: int = field(default=32, metadata={"help": "Windows per forward pass."})
    random_weights: bool = field(default=False, metadata={
        "help": "Probe the checkpoint's architecture with fresh random weights (the probe's floor)."})


def split_files(config_path: str, root: str | os.PathLike | None = None) -> tuple[list[str], list[str]]:
    """The ``train_file`` and ``test_file`` lists of the YAML file ``config_path`` (another command's config, such
    as ``docs/guides/coref_e2e_litbank90.yaml``), relative paths joined to ``root`` (None: as written)."""
    values = load_yaml_config(config_path)
    split = []
    for key in ("train_file", "test_file"):
        files = values.get(key)
        files = [files] if isinstance(files, str) else files
        if not files or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise CorefBertError(f"no {key} list of CoNLL files here; the probe reads its split from train_file and "
                                 "test_file", path=config_path)
        split.append([f if root is None or os.path.isabs(f) else os.path.join(str(root), f) for f in files])
    return split[0], split[1]


def summary(result: dict) -> str:
    """A table of AUC and F1 per layer and subset with their intervals, for the terminal."""
    def cell(name: str) -> str:
        value, bounds = result.get(name), result.get(name + "_ci")
        return "-" if value is None else f"{value:.3f}" + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")

    lines = [f"test pairs: {result['frozen_pairs_test']} ({result['frozen_positive_pairs_test']} positive) in "
             f"{result['frozen_documents_test']} documents; {result['frozen_seconds']} s "
             f"({result['frozen_cpu_seconds']} CPU s)",
             "| layer | " + " | ".join(f"{m} {s}" for m in METRICS for s in SUBSETS) + " |",
             "|---" * (1 + len(METRICS) * len(SUBSETS)) + "|"]
    for layer in result["frozen_layers"]:
        lines.append(f"| {layer} | " + " | ".join(cell(figure_name(m, s, layer)) for m in METRICS for s in SUBSETS)
                     + " |")
    return "\n".join(lines)


@cli_entry
def main(argv: list[str] | None = None) -> dict:
    """Probe the checkpoint of the command line ``argv`` (default ``sys.argv[1:]``); prints a table, writes JSON."""
    (args,) = parse_args([FrozenProbeArguments], argv, prog="python -m corefbert.ablation.frozen_probe")
    if not args.model_name_or_path:
        raise CorefBertError("pass --model_name_or_path (the checkpoint folder to probe)")
    for name, value, least in (("bootstrap_samples", args.bootstrap_samples, 1), ("batch_size", args.batch_size, 1),
                               ("max_train_pairs", args.max_train_pairs or 2, 2)):
        if value < least:
            raise CorefBertError(f"--{name} {value}: must be at least {least}")
    train_files, test_files = split_files(args.split_config) if args.split_config else (None, None)
    train_files, test_files = args.train_file or train_files, args.test_file or test_files
    if not train_files or not test_files:
        raise CorefBertError("no split: pass --split_config docs/guides/coref_e2e_litbank90.yaml (the 90-document "
                             "LitBank split) or --train_file and --test_file")
    if args.output_file:
        check_writable(os.path.dirname(os.path.abspath(args.output_file)), "--output_file")
    train_docs, test_docs = read_conll(train_files), read_conll(test_files)
    check_model_folder(args.model_name_or_path)  # pickle-only weights, a config of another model: before any read
    tokenizer = load_tokenizer(args.model_name_or_path)
    check_settings(encoder_config(args.model_name_or_path), train_docs, test_docs, args.layers, args.window)
    model = load_probe_encoder(args.model_name_or_path, args.random_weights, args.seed)
    result = frozen_coref_probe(model, tokenizer, train_docs, test_docs, args.layers, args.seed, args.window,
                                args.bootstrap_samples, args.max_train_pairs, args.batch_size)
    result["frozen_model"] = os.path.abspath(args.model_name_or_path)
    result["frozen_random_weights"] = args.random_weights
    print(summary(result))
    if args.output_file:
        replace_file(args.output_file, json.dumps(result, indent=1) + "\n", "the probe's result")
        print(f"wrote {args.output_file}")
    return result


if __name__ == "__main__":
    main()
