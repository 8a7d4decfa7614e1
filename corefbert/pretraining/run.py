"""CorefBERT pretraining (MLM + MRP) as a job of the one training loop (:mod:`corefbert.training.loop.core`).

The loop's guarantees (exact resume, signals, non-finite losses, schedule steps on N processes) are the
core's; this module adds pretraining's own: the corpus and its masking, the held-out MLM/MRP evaluation
before, during and after training, and ``final/`` with its model card.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from corefbert.errors import CorefBertError
from corefbert.pretraining.data import (
    SeededCollate,
    check_corpus,
    check_corpus_tokenizer,
    load_or_prepare_corpus,
    pretraining_dataloader,
)
from corefbert.pretraining.families import load_pretraining_model
from corefbert.pretraining.pretraining_args import PretrainingArguments
from corefbert.pretraining.report import evaluate
from corefbert.text.tokenizers import load_tokenizer
from corefbert.training.checkpoints.folders import resolve_checkpoint
from corefbert.training.hub import push_pretrained
from corefbert.training.loop.core import train
from corefbert.training.loop.job import StepOutput, TrainingJob
from corefbert.training.loop.optimization import build_optimizer, build_scheduler
from corefbert.training.loop.setup import build_accelerator, check_training_start, prepare_output_dir
from corefbert.training.model_folders import folder_identity
from corefbert.training.outputs import lock as run_lock
from corefbert.training.outputs.runlog import RunLog
from corefbert.training.training_args import resolve_num_workers


class PretrainingJob(TrainingJob):
    """MLM + MRP loss per micro-batch; held-out MLM/MRP metrics at the start and every ``--eval_steps``."""

    def __init__(self, train_collate: SeededCollate, eval_loader, accelerator, output_dir: Path, with_tracking: bool,
                 run_settings: dict | None = None, final=None):
        self.train_collate, self.eval_loader = train_collate, eval_loader
        self.accelerator, self.with_tracking = accelerator, with_tracking
        self.logger = RunLog(output_dir, accelerator)
        self.run_settings = run_settings or {}
        self.final = final  # final(model, before, after) -> the final/ folder, at the end of training
        self.final_dir: Path | None = None
        self.before: dict | None = None  # held-out metrics of the starting weights (kept across resumes)
        self.metrics: dict | None = None  # the latest held-out metrics

    def training_step(self, model, batch) -> StepOutput:
        out = model(**batch, masked_logits_only=True)  # MLM logits of the masked rows only
        logs = {name: part.detach().float() for name, part in (("mlm_loss", out.mlm_loss), ("mrp_loss", out.mrp_loss))
                if part is not None}
        return StepOutput(out.loss, logs)

    def on_epoch_begin(self, epoch: int) -> None:
        self.train_collate.epoch = epoch  # masks are drawn per (seed, epoch, row): a resumed epoch repeats them

    def on_train_begin(self, model, step: int) -> None:
        if self.before is None:
            self.before = self.metrics = self._evaluate_and_log(model, step)

    def evaluate(self, model, step: int, epoch: float) -> None:
        self.metrics = self._evaluate_and_log(model, step)

    def _evaluate_and_log(self, model, step: int) -> dict:
        metrics = evaluate(model, self.eval_loader, self.accelerator)
        self.logger.log({"split": "eval", "step": step, **metrics})
        if self.with_tracking:
            self.accelerator.log({f"eval/{k}": v for k, v in metrics.items()}, step=step)
        self.accelerator.print(f"step {step}: held-out MRP accuracy {metrics['mrp_accuracy']:.3f}, MLM accuracy "
                               f"{metrics['mlm_accuracy']:.3f}")
        return metrics

    def on_train_end(self, model, step: int) -> None:
        if self.final is not None:
            self.final_dir = self.final(model, self.before, self.metrics)

    def settings(self) -> dict:
        return self.run_settings

    def state_dict(self) -> dict:
        return {"before": self.before}

    def load_state_dict(self, state: dict) -> None:
        self.before = state.get("before")


def run_pretraining(args: PretrainingArguments, data_args=None, splits=None) -> dict[str, float]:
    """Pretrain CorefBERT as ``args`` say on ``splits`` (a DatasetDict with train/validation), else
    ``args.dataset_dir``, else the corpus ``data_args`` name, prepared once; returns the held-out metrics."""
    args.validate()
    check_training_start(args)
    accelerator = build_accelerator(args)
    try:
        return _run(args, data_args, splits, accelerator)
    finally:
        run_lock.release(args.output_dir)


def _run(args: PretrainingArguments, data_args, splits, accelerator) -> dict[str, float]:
    from accelerate.utils import set_seed

    from corefbert.pretraining.report import final_save, print_summary

    set_seed(args.seed)
    output_dir = prepare_output_dir(args, accelerator)
    # A resume restores every weight from its checkpoint: a head the starting folder lacks is no news then.
    resuming = resolve_checkpoint(args.resume_from_checkpoint, args.output_dir, args.overwrite_output_dir) is not None
    model = load_pretraining_model(
        args.model_name_or_path, mrp_loss_weight=args.mrp_loss_weight, mrp_official_loss=args.mrp_official_loss,
        mrp_copy_candidates=args.mrp_copy_candidates, mrp_attention_within_documents=args.attention_within_documents,
        report_fresh_heads=not resuming)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    tokenizer = load_tokenizer(args.model_name_or_path)  # refuses a fallback tokenizer that maps text to [UNK]
    train_rows, eval_rows, where = _corpus(args, data_args, splits, tokenizer, accelerator)
    # The corpus' ids must be this model's: same tokenizer, ids below its vocabulary, rows within its positions.
    check_corpus_tokenizer({"train": train_rows, "validation": eval_rows}, tokenizer, model.config, where)
    train_collate, train_dl, eval_dl = pretraining_loaders(args, train_rows, eval_rows, tokenizer, accelerator)
    if len(train_rows) < args.per_device_train_batch_size * accelerator.num_processes:
        raise CorefBertError(
            f"the train split has {len(train_rows)} sequences, fewer than one batch ({args.per_device_train_batch_size}"
            f" x {accelerator.num_processes} processes); give more text or a smaller --per_device_train_batch_size",
            path=where)
    optimizer = build_optimizer(model, args)
    _prepare_deepspeed(accelerator, model, args.max_grad_norm)
    model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
    # Built on the prepared optimizer: DeepSpeed ZeRO-3 regroups the parameters it was handed, and a
    # scheduler made on the original groups then fails at its first step.
    scheduler = build_scheduler(optimizer, args, args.max_steps)
    job = PretrainingJob(train_collate, eval_dl, accelerator, output_dir, args.with_tracking,
                         run_settings=pretraining_settings(args, train_rows, eval_rows),
                         final=lambda model, before, after: final_save(accelerator, model, tokenizer, args, before,
                                                                      after))
    accelerator.print(training_shape(args, train_rows, accelerator))
    results = train(job, args, accelerator, model, optimizer, scheduler, train_dl, args.max_steps,
                    project="corefbert_pretraining")
    metrics = job.metrics
    if accelerator.scaler is not None:
        accelerator.print(f"fp16: {results['train_fp16_skipped_updates']} of {results['train_steps']} optimizer "
                          f"steps skipped for gradient overflow; final loss scale {results['train_fp16_loss_scale']:.3g}")
    if args.with_tracking:
        accelerator.end_training()
    print_summary(accelerator, args, job.before, metrics, job.final_dir)
    push_pretrained(args, job.final_dir, accelerator)  # --push_to_hub: stage output_dir/hub and upload it
    return metrics


def pretraining_loaders(args: PretrainingArguments, train_rows, eval_rows, tokenizer, accelerator,
                        device_type: str | None = None) -> tuple[SeededCollate, object, object]:
    """``(train collate, train loader, evaluation loader)`` of a run, not yet prepared. ``device_type``: whose
    data-path defaults apply (``--num_workers auto``, pinning; a benchmark simulates a GPU's on CPU)."""
    import torch

    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction

    device_type = device_type or accelerator.device.type
    workers = resolve_num_workers(args.num_workers, device_type)
    pin = device_type == "cuda" and torch.cuda.is_available()
    # Batches padded to their own longest row, rounded up to a multiple of 8 (tensor-core friendly shapes).
    collator = DataCollatorForMentionReferencePrediction(
        tokenizer, mlm_probability=args.mlm_probability, mrp_ratio=args.mrp_ratio, pad_to_multiple_of=8)
    train_collate, eval_collate = SeededCollate(collator, args.seed), SeededCollate(collator, args.seed)
    eval_collate.epoch = "eval"  # fixed eval masks: before and after are comparable
    train_dl = pretraining_dataloader(train_rows, train_collate, args.per_device_train_batch_size, train=True,
                                      num_workers=workers, group_by_length=args.group_by_length, seed=args.seed,
                                      pin_memory=pin)
    eval_dl = pretraining_dataloader(eval_rows, eval_collate, _eval_batch_size(args, eval_rows, accelerator),
                                     train=False, num_workers=workers, pin_memory=pin)
    return train_collate, train_dl, eval_dl


#: Pretraining flags that decide the result besides the shared ones (docs: "Resume checks what it resumes").
PRETRAINING_SETTINGS = ("mlm_probability", "mrp_ratio", "mrp_loss_weight", "mrp_official_loss",
                        "mrp_copy_candidates", "group_by_length", "attention_within_documents", "max_eval_samples")


def pretraining_settings(args: PretrainingArguments, train_rows, eval_rows) -> dict:
    """What a pretraining checkpoint records beyond the shared settings: the starting weights (by content, so a
    study folder moved or copied elsewhere, its start inside it, still resumes and extends), the masking and MRP
    flags, and a fingerprint of the corpus (row counts and a hash of sampled rows: another corpus, sequence
    length or tokenizer changes it; moving the same corpus does not)."""
    return {"start": folder_identity(args.model_name_or_path),
            **{name: getattr(args, name) for name in PRETRAINING_SETTINGS},
            "corpus": f"{len(train_rows)} train + {len(eval_rows)} held-out rows, sha256 "
                      f"{rows_digest(train_rows)}/{rows_digest(eval_rows)}"}


def training_shape(args: PretrainingArguments, train_rows, accelerator) -> str:
    """What the run trains with, in one line: steps, rows a step, their length and the tokens that makes (a corpus
    prepared at 512 trains four times the tokens a step of one prepared at 128)."""
    sample = train_rows.select(range(min(1000, len(train_rows))))
    lengths = [len(ids) for ids in sample["input_ids"]]
    rows = args.per_device_train_batch_size * args.gradient_accumulation_steps * accelerator.num_processes
    per_step = rows * sum(lengths) / max(len(lengths), 1)
    return (f"training {args.max_steps:,} optimizer steps of {rows} rows of up to {max(lengths, default=0)} tokens "
            f"(≈ {per_step:,.0f} tokens a step, ≈ {per_step * args.max_steps:,.0f} in all) at learning rate "
            f"{args.learning_rate:g} on {accelerator.device.type}")


def rows_digest(rows) -> str:
    """SHA-256 (12 hex digits) of the input_ids of up to 8 rows spread over ``rows``."""
    picks = sorted({round(i * (len(rows) - 1) / 7) for i in range(8)}) if len(rows) else []
    digest = hashlib.sha256()
    for index in picks:
        digest.update(json.dumps([index, list(rows[index]["input_ids"])]).encode())
    return digest.hexdigest()[:12]


def _corpus(args, data_args, splits, tokenizer, accelerator):
    """The train/validation rows (prepared once, on the main process first) and where they came from."""
    with accelerator.main_process_first():
        if splits is None:
            splits, where = load_or_prepare_corpus(args.dataset_dir, data_args, tokenizer)
        else:
            where = args.dataset_dir or "corpus"
            splits = check_corpus(splits, where)
    eval_rows = splits["validation"]
    if args.max_eval_samples is not None:
        eval_rows = eval_rows.select(range(min(args.max_eval_samples, len(eval_rows))))
    if accelerator.num_processes > 1:
        # Whole rounds of (batch x processes) only: accelerate pads an uneven last round with repeated
        # rows, which would count twice in the summed metrics.
        per_round = _eval_batch_size(args, eval_rows, accelerator) * accelerator.num_processes
        eval_rows = eval_rows.select(range(len(eval_rows) // per_round * per_round))
    return splits["train"], eval_rows, where


def _eval_batch_size(args, eval_rows, accelerator) -> int:
    if accelerator.num_processes == 1:
        return args.per_device_eval_batch_size
    return max(1, min(args.per_device_eval_batch_size, len(eval_rows) // accelerator.num_processes))


def _prepare_deepspeed(accelerator, model, max_grad_norm: float) -> None:
    """DeepSpeed clips inside its engine: hand it --max_grad_norm when the config leaves it on auto. Under
    ZeRO-3 a parameter read outside its own module's forward is an empty shard unless registered: the model's
    forward adds ``0 * V.sum()`` (V in the graph when a batch has no MRP target) outside the MRP head's."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    if plugin.deepspeed_config.get("gradient_clipping", "auto") == "auto":
        plugin.deepspeed_config["gradient_clipping"] = max_grad_norm
    if plugin.zero_stage == 3:
        import deepspeed

        deepspeed.zero.register_external_parameter(model, model.mrp.copy_vector)
