"""The probe suite of the ablation study (:mod:`corefbert.ablation.study`); its paired bootstrap is
:func:`corefbert.metrics.bootstrap.paired_bootstrap`.

Every probe reduces a checkpoint to *per-example count vectors* ``[examples, components]`` and a statistic
over their sum (:func:`statistic`), so one bootstrap serves them all:

- held-out MLM / MRP accuracy: one example per held-out sequence, counts ``(correct, masked)``; the masks
  are drawn once per (probe seed, row) and are the same for every arm and seed (``mrp_ratio`` 0.2 even for
  the WWM arm, so MLM accuracy is measured on the same positions everywhere);
- zero-shot MLM candidate scoring and short eq. 5 fine-tuning on pronoun files (through
  :class:`corefbert.tasks.coref.task.CorefTask` and :func:`corefbert.tasks.base.run_finetuning`, the
  fine-tuning core; no loop of its own): counts ``(correct, 1)`` per problem, or GAP's decision counts
  ``(tp, fp, fn)`` per example, whose pooled F1 ``2tp / (2tp + fp + fn)`` is the official scorer's overall F1.

All statistics are in percent.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corefbert.errors import CorefBertError
from corefbert.tasks.qa.data import read_qa_file
from corefbert.tasks.registry import TASKS
from corefbert.text.conll import read_conll
from corefbert.text.jsonio import read_json, read_jsonl
from corefbert.text.tokenizers import load_tokenizer

RATIO, GAP_F1, COREF_AVG_F1 = "ratio", "gap_f1", "coref_avg_f1"
#: Row names of the held-out probe's parts (:func:`heldout_counts`' keys).
HELDOUT_ROWS = {"mlm": "held-out MLM accuracy", "mlm_repeated": "held-out MLM accuracy: repeated mentions",
                "mlm_other": "held-out MLM accuracy: other masked words", "mrp": "held-out MRP accuracy",
                "same_mlm": "same candidates, masked mentions recovered: MLM head",
                "same_copy": "same candidates, masked mentions recovered: copy head",
                "same_copy_untrained": "same candidates, masked mentions recovered: copy head, untrained V"}


def statistic(kind: str, counts: np.ndarray) -> np.ndarray:
    """The probe's figure (percent) from summed counts ``[..., components]``: a ratio
    ``100 * c0 / c1`` (0 when nothing was counted), GAP's F1 ``100 * 2tp / (2tp + fp + fn)``, or the CoNLL average
    F1 of MUC, B³ and CEAF-φ4 from per-document counts (:func:`corefbert.metrics.coref_metrics.document_counts`,
    summed over documents as the scorer sums them)."""
    counts = np.asarray(counts, dtype=np.float64)
    if kind == RATIO:
        num, den = counts[..., 0], counts[..., 1]
    elif kind == GAP_F1:
        num, den = 2 * counts[..., 0], 2 * counts[..., 0] + counts[..., 1] + counts[..., 2]
    elif kind == COREF_AVG_F1:  # MUC, B³, CEAF-φ4: [recall num, recall den, precision num, precision den] each
        f1s = []
        for metric in range(3):
            rn, rd, pn, pd = (counts[..., 4 * metric + k] for k in range(4))
            recall = np.divide(rn, rd, out=np.zeros_like(rn), where=rd > 0)
            precision = np.divide(pn, pd, out=np.zeros_like(pn), where=pd > 0)
            total = recall + precision
            f1s.append(np.divide(2 * recall * precision, total, out=np.zeros_like(total), where=total > 0))
        return 100.0 * sum(f1s) / 3
    else:
        raise ValueError(kind)
    return np.divide(100.0 * num, den, out=np.zeros_like(num), where=den > 0)


# --------------------------------------------------------------------------------- held-out MLM / MRP


def heldout_counts(model_dir: str, eval_rows, mlm_probability: float, mrp_ratio: float, mask_seed: int,
                   init_seed: int) -> dict[str, list[list[int]]]:
    """Per held-out sequence ``[correct, masked]`` for MLM (all masked tokens, MRP-masked ones included, as
    the loss), split into the tokens of masked repeated mentions (``mlm_repeated``: the positions the MRP
    sampler selects, a noun whose surface form occurs unmasked elsewhere in the row) and every other masked
    token (``mlm_other``), and for MRP (masked mentions whose best copy is a referent).

    Sequences run one at a time: the model's MRP counts are per batch, and per sequence is what the
    bootstrap resamples. ``init_seed`` seeds a fresh MLM head (a backbone without one)."""
    import torch

    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction
    from corefbert.pretraining.data import SeededCollate, pretraining_dataloader
    from corefbert.pretraining.families import load_pretraining_model

    torch.manual_seed(init_seed)
    model = load_pretraining_model(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    collate = SeededCollate(DataCollatorForMentionReferencePrediction(
        tokenizer, mlm_probability=mlm_probability, mrp_ratio=mrp_ratio), mask_seed)
    collate.epoch = "eval"  # the evaluation masks: a function of (mask_seed, row) only
    mlm, repeated, other, mrp = [], [], [], []
    same = {scorer: [] for scorer in SAME_CANDIDATE_SCORERS}
    with torch.no_grad():
        for batch in pretraining_dataloader(eval_rows, collate, 1, train=False):
            out = model(**batch, masked_logits_only=True)
            for scorer, hits in same_candidate_hits(out.logits, out.last_hidden_state, model.mrp.copy_vector,
                                                    batch).items():
                same[scorer].append(hits)
            labels = batch["labels"]
            masked = labels != -100  # [1, L]
            targets = labels[masked]  # [masked]
            hit = out.logits.argmax(-1) == targets  # [masked], logits in the same row-major order
            in_mention = repeated_mention_tokens(batch)[masked]  # [masked]
            mlm.append([int(hit.sum()), int(targets.numel())])
            repeated.append([int(hit[in_mention].sum()), int(in_mention.sum())])
            other.append([int(hit[~in_mention].sum()), int((~in_mention).sum())])
            total = 0 if out.mrp_total is None else int(out.mrp_total)
            mrp.append([int(out.mrp_correct) if total else 0, total])
    return {"mlm": mlm, "mlm_repeated": repeated, "mlm_other": other, "mrp": mrp, **same}


#: The scorers of the same-candidate probe: the MLM head, the copy head with its V, the copy head with V untrained.
SAME_CANDIDATE_SCORERS = ("same_mlm", "same_copy", "same_copy_untrained")


def same_candidate_hits(logits, hidden_states, copy_vector, batch: dict) -> dict[str, list[int]]:
    """Mention recovery with one set of candidates for every scorer, on one collator row: ``{scorer: [hits,
    masked mentions]}``.

    Each masked mention ``w_i`` (first/last subword ``s_i``/``t_i``) chooses among the row's copyable words of its
    document (those the copy head's accuracy ranks, :func:`corefbert.pretraining.modeling.candidate_words`); a
    candidate word ``w`` with first/last subword ``s_w``/``t_w`` scores, in the copy head's start/end form (eq. 3),
    ``same_mlm``: ``log p_MLM(x_{s_w} at s_i) + log p_MLM(x_{t_w} at t_i)``; ``same_copy``: the copy head's
    ``(V ⊙ h_{s_w})ᵀ h_{s_i} + (V ⊙ h_{t_w})ᵀ h_{t_i}``; ``same_copy_untrained``: the same with V at its
    initial value 1/hidden (the scorer's control). A hit: the best candidate is the masked word itself (the same
    subwords); a mention without a candidate is a miss for every scorer.

    ``logits`` ``[masked, vocab]`` (the row's masked positions in order), ``hidden_states`` ``[1, seq, hidden]``."""
    import torch

    from corefbert.pretraining.modeling import candidate_words, copy_scores

    labels, ids = batch["labels"][0], batch["input_ids"][0]  # [L] each
    valid = batch["mrp_mention_mask"][0].bool()  # [M]
    starts, ends = batch["mrp_mention_starts"][0][valid], batch["mrp_mention_ends"][0][valid]  # [m] each
    mentions = len(starts)
    if not mentions:
        return {scorer: [0, 0] for scorer in SAME_CANDIDATE_SCORERS}
    candidates, word_ends = candidate_words(batch["copy_mask"], batch["word_ids"], batch.get("document_ids"),
                                            starts[None])
    candidates = candidates[0].expand(mentions, -1)  # [m, L]
    word_ends = word_ends[0]  # [L]
    order = (labels != -100).long().cumsum(0) - 1  # [L]: the logits row of each masked position
    log_p = torch.log_softmax(logits.float(), dim=-1)  # [masked, vocab]
    scores = {"same_mlm": log_p[order[starts]][:, ids] + log_p[order[ends]][:, ids[word_ends]]}  # [m, L]
    untrained = torch.full_like(copy_vector, 1.0 / copy_vector.numel())
    for scorer, vector in (("same_copy", copy_vector), ("same_copy_untrained", untrained)):
        start_scores, end_scores = copy_scores(hidden_states, vector, starts[None], ends[None])  # [1, m, L] each
        scores[scorer] = start_scores[0] + end_scores[0].gather(1, word_ends.expand(mentions, -1))  # [m, L]
    found = {}
    for scorer, score in scores.items():
        best = score.masked_fill(~candidates, float("-inf")).argmax(dim=-1)  # [m]
        hits = 0
        for i in range(mentions):
            k = int(best[i])
            word, target = ids[k:int(word_ends[k]) + 1], labels[int(starts[i]):int(ends[i]) + 1]
            hits += bool(candidates[i, k]) and torch.equal(word, target)
        found[scorer] = [hits, mentions]
    return found


def repeated_mention_tokens(batch: dict):
    """``[B, L]`` True on the tokens of the masked repeated mentions: the nouns the MRP sampler masked that
    have an unmasked occurrence elsewhere in the row (the collator's ``mrp_mention_*`` spans, inclusive)."""
    import torch

    B, L = batch["input_ids"].shape
    starts, ends, valid = batch["mrp_mention_starts"], batch["mrp_mention_ends"], batch["mrp_mention_mask"]  # [B, M]
    position = torch.arange(L)[None, None, :]  # [1, 1, L]
    inside = (position >= starts[..., None]) & (position <= ends[..., None]) & valid[..., None]  # [B, M, L]
    return inside.any(dim=1) if starts.shape[1] else torch.zeros(B, L, dtype=torch.bool)


# ----------------------------------------------------------------------------------- pronoun probes


@dataclass
class CorefProbe:
    """One pronoun probe: zero-shot scoring of ``eval_files`` (``train_file`` None) or eq. 5 fine-tuning on
    ``train_file`` for ``max_steps`` steps, evaluated on ``eval_files`` with the last model (no selection on
    the dev files the figure is reported on)."""

    eval_files: list[str]
    train_file: str | None = None
    max_steps: int = 100
    batch_size: int = 16
    learning_rate: float = 3e-5
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    zero_shot: str = "mlm"  # without train_file: the scorer, "mlm" (the masked LM) or "copy" (the MRP copy head)

    def settings(self) -> dict:
        settings = {"eval_files": [os.path.abspath(f) for f in self.eval_files], "train_file": self.train_file and
                    os.path.abspath(self.train_file), "max_steps": self.max_steps, "batch_size": self.batch_size,
                    "learning_rate": self.learning_rate, "max_train_samples": self.max_train_samples,
                    "max_eval_samples": self.max_eval_samples}
        if self.zero_shot != "mlm":  # the MLM probes' records keep their form (and stay reusable)
            settings["zero_shot"] = self.zero_shot
        return settings


def run_coref_probe(probe: CorefProbe, model_dir: str, out_dir: Path, seed: int, mixed_precision: str,
                    fresh: bool) -> dict[str, dict]:
    """Run ``probe`` on ``model_dir`` in ``out_dir``; returns ``{file stem: {"kind", "counts"}}`` read from
    the prediction files the task wrote. ``fresh``: start over in ``out_dir`` (else resume its checkpoint)."""
    from corefbert.tasks.base import FinetuningArguments, run_finetuning
    from corefbert.tasks.coref.task import CorefArguments, CorefTask

    training = probe.train_file is not None
    task_args = CorefArguments(train_file=[probe.train_file] if training else None,
                               validation_file=list(probe.eval_files),
                               zero_shot=None if training else probe.zero_shot)
    args = FinetuningArguments(
        model_name_or_path=str(model_dir), output_dir=str(out_dir), do_train=training, do_eval=True, seed=seed,
        max_steps=probe.max_steps if training else -1, per_device_train_batch_size=probe.batch_size,
        per_device_eval_batch_size=32, learning_rate=probe.learning_rate, eval_steps=probe.max_steps,
        load_best_model_at_end=False, save_total_limit=1, max_train_samples=probe.max_train_samples,
        max_eval_samples=probe.max_eval_samples, mixed_precision=mixed_precision, disable_tqdm=True,
        overwrite_output_dir=fresh or not training, resume_from_checkpoint=None if fresh or not training
        else "latest")
    results = run_finetuning(CorefTask(task_args, args), args)
    out = {}
    for path in probe.eval_files:
        stem = file_stem(path)
        kind, counts = prediction_counts(out_dir / f"eval_{stem}_predictions.jsonl", _is_gap(path))
        reported = results.get(f"eval_{stem}_{'f1' if kind == GAP_F1 else 'accuracy'}")
        out[stem] = {"kind": kind, "counts": counts, "reported": reported,
                     "skipped": results.get(f"eval_{stem}_skipped")}  # unreadable problems, counted by the task
    for folder in ("best", "last", "checkpoints"):  # model copies: the probe's figures are all that is kept
        shutil.rmtree(out_dir / folder, ignore_errors=True)
    return out


def prediction_counts(path: Path, gap: bool) -> tuple[str, list[list[int]]]:
    """Per-example counts from a ``eval_<file>_predictions.jsonl`` of the coref task: ``[correct, 1]``, or
    for GAP ``[tp, fp, fn]`` of the A and B decisions (an undecided example predicts FALSE for both)."""
    if not path.is_file():
        raise CorefBertError("the coref probe wrote no predictions here; was the file empty?", path=path)
    counts = []
    for _, row in read_jsonl(str(path)):
        scores = row["scores"]
        pick = -1 if any(s is None for s in scores) else max(range(len(scores)), key=scores.__getitem__)
        if not gap:
            counts.append([int(pick == row["label"]), 1])
            continue
        tp = fp = fn = 0
        for candidate in (0, 1):
            gold, system = row["label"] == candidate, pick == candidate
            tp, fp, fn = tp + (gold and system), fp + (system and not gold), fn + (gold and not system)
        counts.append([tp, fp, fn])
    return (GAP_F1 if gap else RATIO), counts


def file_stem(path: str) -> str:
    """The name the coref task gives a file's metrics (``gap-validation.tsv`` -> ``gap-validation``)."""
    return os.path.splitext(os.path.basename(path))[0].replace(".", "_")


def _is_gap(path: str) -> bool:
    from corefbert.tasks.coref.readers import detect_format

    return detect_format(path) == "gap"


# ----------------------------------------------------------------------------------------- QUOREF probe


@dataclass
class QuorefProbe:
    """Short QUOREF fine-tuning (:class:`corefbert.tasks.qa.quoref.QuorefTask`, the paper's model) on
    ``train_file`` for ``max_steps`` steps, EM/F1 of the last model on ``validation_file``."""

    train_file: str
    validation_file: str
    max_steps: int = 100
    batch_size: int = 8
    learning_rate: float = 5e-5
    max_seq_length: int = 256

    def settings(self) -> dict:
        return {"train_file": os.path.abspath(self.train_file), "validation_file": os.path.abspath(
            self.validation_file), "max_steps": self.max_steps, "batch_size": self.batch_size,
                "learning_rate": self.learning_rate, "max_seq_length": self.max_seq_length}


def run_quoref_probe(probe: QuorefProbe, model_dir: str, out_dir: Path, seed: int, mixed_precision: str,
                     fresh: bool) -> dict:
    """Run ``probe`` on ``model_dir`` in ``out_dir``; returns per-question counts ``{"exact_match": [[em, 1],
    ...], "f1": [[f1, 1], ...]}`` (the bootstrap's examples are the dev questions) and the task's own corpus
    figures under ``"reported"``."""
    from corefbert.metrics.drop import quoref_question_scores
    from corefbert.tasks.base import FinetuningArguments, run_finetuning
    from corefbert.tasks.qa.quoref import QuorefArguments, QuorefTask

    task_args = QuorefArguments(train_file=probe.train_file, validation_file=probe.validation_file,
                                max_seq_length=probe.max_seq_length, doc_stride=probe.max_seq_length // 2)
    args = FinetuningArguments(
        model_name_or_path=str(model_dir), output_dir=str(out_dir), do_train=True, do_eval=True, seed=seed,
        max_steps=probe.max_steps, per_device_train_batch_size=probe.batch_size, per_device_eval_batch_size=32,
        learning_rate=probe.learning_rate, eval_steps=probe.max_steps, load_best_model_at_end=False,
        save_total_limit=1, mixed_precision=mixed_precision, disable_tqdm=True, overwrite_output_dir=fresh,
        resume_from_checkpoint=None if fresh else "latest")
    results = run_finetuning(QuorefTask(task_args, args), args)
    path = out_dir / "eval_predictions.json"
    if not path.is_file():
        raise CorefBertError("the QUOREF probe wrote no predictions here", path=path)
    predictions = read_json(str(path))
    references = {e.qid: e.gold_texts for e in read_qa_file(probe.validation_file) if e.gold_texts}
    scores = quoref_question_scores(predictions, references)
    for folder in ("best", "last", "checkpoints"):  # model copies: the probe's figures are all that is kept
        shutil.rmtree(out_dir / folder, ignore_errors=True)
    return {"exact_match": [[em, 1] for em, _ in scores.values()], "f1": [[f1, 1] for _, f1 in scores.values()],
            "reported": {key: results.get(f"eval_{key}", results.get(key)) for key in ("exact_match", "f1")}}


# --------------------------------------------------------------------------- end-to-end coreference probe


@dataclass
class CorefE2EProbe:
    """End-to-end coreference (:mod:`corefbert.tasks.coref_e2e`, Lee et al. 2017) with the model as its encoder:
    fine-tuned on ``train_files`` for ``max_steps`` steps with the 90-document LitBank MiniLM recipe's settings
    (docs/guides/coref_e2e.md), the last model (no selection) predicting ``eval_files``; per-document counts of
    MUC, B³ and CEAF-φ4, singletons dropped."""

    train_files: list[str]
    eval_files: list[str]
    max_steps: int = 300

    def settings(self, documents: str) -> dict:
        return {"documents": documents, "max_steps": self.max_steps, "recipe": RECIPE_E2E}


#: The MiniLM recipe of the 90-document LitBank runs (docs/guides/coref_e2e.md), as flags.
RECIPE_E2E = ["--encoder", "bert", "--drop_singletons", "--max_training_sentences", "10", "--max_antecedents", "50",
              "--max_span_width", "8", "--ffnn_size", "100", "--max_seq_length", "256", "--learning_rate", "2e-5",
              "--task_learning_rate", "5e-4", "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", "21"]


def run_coref_e2e_probe(probe: CorefE2EProbe, model_dir: str, out_dir: Path, seed: int,
                        mixed_precision: str) -> dict:
    """Run ``probe`` on ``model_dir`` in ``out_dir``; returns ``{"counts": [documents, 12], "documents": [keys],
    "reported": the task's own figures}`` (the counts' avg F1 is the task's ``predict_avg_f1``: tested)."""
    from corefbert.metrics.coref_metrics import METRICS, as_sets, document_counts

    argv = [*RECIPE_E2E, "--model_name_or_path", str(model_dir), "--output_dir", str(out_dir), "--seed", str(seed),
            "--train_file", *probe.train_files, "--test_file", *probe.eval_files, "--do_train", "--do_predict",
            "--max_steps", str(probe.max_steps), "--eval_steps", str(probe.max_steps), "--save_total_limit", "1",
            "--checkpointing_steps", str(max(1, probe.max_steps // 3)), "--mixed_precision", mixed_precision,
            "--disable_tqdm", "true", "--resume_from_checkpoint", "latest", "--overwrite_output_dir"]
    results = TASKS["coref-e2e"].main(argv)
    predicted = {d.doc_key: d.clusters for d in read_conll([str(out_dir / "predict_predictions.conll")])}
    counts, keys = [], []
    for document in read_conll(probe.eval_files):
        gold = as_sets([c for c in document.clusters if len(c) > 1])
        found = document_counts(gold, as_sets(predicted.get(document.doc_key, [])))
        counts.append([float(x) for metric in METRICS for x in found[metric]])
        keys.append(document.doc_key)
    for folder in ("best", "last", "checkpoints"):  # model copies: the probe's figures are all that is kept
        shutil.rmtree(out_dir / folder, ignore_errors=True)
    return {"counts": counts, "documents": keys,
            "reported": {k: results.get(f"predict_{k}") for k in ("avg_f1", "muc_f1", "b3_f1", "ceafe_f1")}}
