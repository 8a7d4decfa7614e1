"""How the pronoun-coreference task scores a problem's candidates: one strategy, chosen once per run, behind
one interface, so the task never asks which one it holds: :class:`MlmScorer` (the default, and the only one
that trains: :mod:`corefbert.tasks.coref.mlm_scoring`) or :class:`CopyScorer` (``--zero_shot copy``:
CorefBERT's MRP copy head, :mod:`corefbert.tasks.coref.copy_scoring`).
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter

from transformers import AutoModelForMaskedLM

from corefbert.errors import CorefBertError, one_line
from corefbert.pretraining.families import load_quietly
from corefbert.tasks.coref.copy_scoring import (
    CopyHeadScorer,
    collate_copy_queries,
    copy_view,
    encode_copy_query,
    render_copy_html,
)
from corefbert.tasks.coref.mlm_scoring import CandidateScoringModel, collate_candidates, encode_candidates
from corefbert.tasks.coref.readers import PronounExample
from corefbert.tasks.heads import saved_pooler
from corefbert.text.durable import replace_file

logger = logging.getLogger(__name__)


class CandidateScorer:
    """One way to score candidates: ``encode``, ``collate``, ``build_model`` (whose output ``scores`` is
    ``[batch, candidates]``), and what it adds to a file's metrics and to the output folder."""

    def __init__(self, task_args, tokenizer, model_name_or_path: str):
        self.task_args, self.tokenizer, self.model_name_or_path = task_args, tokenizer, model_name_or_path

    def file_metrics(self, path: str, rows: list) -> dict[str, int]:
        """Metrics of one evaluation file beyond accuracy / GAP's (``rows``: ``(example, scores, pick)``)."""
        return {}

    def write_views(self, model, files: list[tuple[str, list[PronounExample]]], folder: str, split: str) -> None:
        """Files that show how evaluation scored (``files``: ``(stem, examples)`` per evaluation file)."""


class MlmScorer(CandidateScorer):
    """Masked-LM candidate scoring (Kocijan et al.): trains with eq. 5, or scores zero-shot (``--zero_shot mlm``)."""

    def encode(self, example):
        return encode_candidates(example, self.tokenizer, self.task_args.max_seq_length)

    def collate(self, features):
        return collate_candidates(features, self.tokenizer.pad_token_id)

    def build_model(self):
        path = self.model_name_or_path
        try:
            # Quietly: the pooler (taken by saved_pooler below) and the copy vector are not UNEXPECTED here.
            mlm, info = load_quietly(AutoModelForMaskedLM, path, unused=("mrp.", "pooler."),
                                     fresh_ok=("cls.", "lm_head."))
        except (OSError, ValueError) as err:
            raise CorefBertError(f"cannot load a masked-LM model ({one_line(err, first_line=True)})", path=path) from None
        if any(k.startswith(("cls.", "lm_head.")) for k in info.get("missing_keys", ())):
            logger.warning("%s has no trained MLM head: a fresh one is initialized, so zero-shot MLM scores are "
                           "close to chance until it is fine-tuned", path)
        d = self.task_args
        return CandidateScoringModel(mlm, d.score_reduction, d.margin_alpha, d.margin_beta, d.loss_variant,
                                     pooler=saved_pooler(path))


class CopyScorer(CandidateScorer):
    """Zero-shot scoring with the MRP copy head (``--zero_shot copy`` or ``copy_untrained``); reports how each
    file's candidates were found and, with ``--copy_html_examples N``, writes the first N copy views."""

    def encode(self, example):
        return encode_copy_query(example, self.tokenizer, self.task_args.max_seq_length, self.task_args.copy_span)

    def collate(self, features):
        return collate_copy_queries(features, self.tokenizer.pad_token_id)

    def build_model(self):
        # copy_untrained, the scorer's control: V at its initial 1/hidden on the checkpoint's own encoder, so
        # trained − untrained on one checkpoint is what training V gave.
        a = self.task_args
        return CopyHeadScorer.from_pretrained(self.model_name_or_path, a.allow_untrained_copy_head,
                                              untrained=a.zero_shot == "copy_untrained")

    def file_metrics(self, path, rows):
        """How the candidates of one file were found; a warning when some were not."""
        tiers = Counter(t for example, _, _ in rows for t in example.candidate_match)
        missing = [(e.id, c) for e, _, _ in rows for c, t in zip(e.candidates, e.candidate_match) if t == "unmatched"]
        undecided = sum(pick < 0 for _, _, pick in rows)
        loose = {t: tiers[t] for t in ("no_determiner", "head_word", "possessor") if tiers[t]}
        if loose:
            logger.info("%s: copy scoring: %d candidates found only loosely %s", path, sum(loose.values()),
                        loose)
        if missing or undecided:
            logger.warning("%s: copy scoring: %d candidates occur nowhere in the text%s; %d problems undecided (a "
                           "candidate with no occurrence in the text or the window; no prediction, counted wrong)",
                           path, len(missing), f" (first: {missing[0][1]!r} of {missing[0][0]})" if missing else "",
                           undecided)
        return {"unmatched_candidates": len(missing), "loosely_matched_candidates": sum(loose.values()),
                "undecided": undecided}

    def write_views(self, model, files, folder, split):
        count = self.task_args.copy_html_examples
        if not count:
            return
        folder = os.path.join(folder, "copy_html")
        os.makedirs(folder, exist_ok=True)
        for stem, examples in files:
            for example in examples[:count]:
                # The example as evaluation scored it: the page's table shows the scores behind the predictions.
                view = copy_view(model, self.tokenizer, example, self.task_args.max_seq_length,
                                 self.task_args.copy_span)
                title = f"{example.id}: answer {example.candidates[example.label]!r}" if example.label is not None \
                    else f"{example.id}: no candidate is the referent"
                name = f"{split}_{stem}_{re.sub(r'[^A-Za-z0-9_.-]', '_', example.id)}.html"
                replace_file(os.path.join(folder, name), render_copy_html(view, title=title), "the copy view")


#: ``--zero_shot`` value -> scorer; no value (fine-tuning) scores with the masked LM.
SCORERS: dict[str | None, type[CandidateScorer]] = {None: MlmScorer, "mlm": MlmScorer, "copy": CopyScorer,
                                                    "copy_untrained": CopyScorer}
