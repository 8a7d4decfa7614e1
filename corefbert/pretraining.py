"""The CorefBERT pretraining loop on Accelerate (one CPU, N GPUs, DeepSpeed, FSDP): MLM + MRP.

``pretrain/run_mrp.py`` only parses arguments and calls :func:`run_pretraining`. What this loop
guarantees, each backed by a test in tests/test_pretraining.py:

- one optimizer step = ``gradient_accumulation_steps`` micro-batches on every process, also across an
  epoch boundary (accumulation does not restart with the epoch);
- the LR schedule (warm-up over ``warmup_ratio`` of ``max_steps``, then linear decay to 0) advances once
  per optimizer step on any number of processes, and not at all on a step fp16 loss scaling skipped;
- a resumed run repeats the uninterrupted run's losses: same data order (seedable sampler +
  ``set_epoch`` + ``skip_first_batches``), same masks (:class:`SeededCollate`), same RNG state;
- SIGTERM/SIGINT save a checkpoint and exit; a non-finite loss saves and stops naming the step.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import asdict
from pathlib import Path

import torch

from corefbert.checkpointing import (
    StopSignal,
    any_process,
    check_writable,
    checkpoints_root,
    list_checkpoints,
    load_checkpoint,
    remove_folder,
    resolve_checkpoint,
    save_checkpoint,
    truncate_log,
)
from corefbert.errors import CorefBertError
from corefbert.pretraining_args import (
    PretrainingArguments,
    resolve_mixed_precision,
    tracking_backends,
    validate_arguments,
)
from corefbert.pretraining_data import (
    PreservedRng,
    SeededCollate,
    check_corpus,
    load_prepared_corpus,
    pretraining_dataloader,
)
from corefbert.pretraining_report import append_log, evaluate

LOG_FILE = "log.jsonl"
# fp16 loss scaling skips a step on overflow and halves its scale; this many skips in a row (a scale 2^25
# smaller) means the gradients overflow at any scale, and training on would only burn steps.
MAX_CONSECUTIVE_OVERFLOWS = 25


def warmup_linear(max_steps: int, warmup_steps: int):
    """LR multiplier for optimizer step ``s``: linear 0 -> 1 over ``warmup_steps``, then linear -> 0."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (max_steps - step) / max(1, max_steps - warmup_steps))

    return factor


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on weight matrices, none on biases, LayerNorm weights or ``V``."""
    decay, no_decay = [], []
    norm_params = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()
    }
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim < 2 or id(param) in norm_params or name.endswith(".bias"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _build_accelerator(args: PretrainingArguments):
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin

    return Accelerator(
        mixed_precision=resolve_mixed_precision(args.mixed_precision),
        # Accumulation counts micro-batches across epoch boundaries: every step sees the same amount of data.
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
        # We step the scheduler once per optimizer step ourselves; the default would step it once per
        # process per step, ending warm-up N times too early on N processes.
        step_scheduler_with_optimizer=False,
        log_with=tracking_backends(args.report_to) if args.with_tracking else None,
        project_dir=args.output_dir,
    )


def run_pretraining(args: PretrainingArguments, data_args=None, splits=None) -> dict[str, float]:
    """Pretrain CorefBERT as ``args`` say; returns the final held-out metrics.

    The corpus comes from ``splits`` (a DatasetDict with train/validation), else ``args.dataset_dir``,
    else ``corefbert.corpus.prepare_corpus(data_args, tokenizer)``.
    """
    from accelerate.utils import set_seed
    from transformers import AutoTokenizer

    from corefbert.collator import DataCollatorForMentionReferencePrediction
    from corefbert.modeling import load_pretraining_model
    from corefbert.pretraining_report import final_save, print_summary

    validate_arguments(args)
    resolve_checkpoint(args.resume_from_checkpoint, args.output_dir)  # a bad path fails before any loading
    check_writable(args.output_dir)
    accelerator = _build_accelerator(args)
    set_seed(args.seed)
    output_dir = Path(args.output_dir)
    log_path = output_dir / LOG_FILE
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        if args.overwrite_output_dir and not args.resume_from_checkpoint:
            # The earlier run's checkpoints would otherwise rotate this run's away and be what "latest" finds.
            remove_folder(checkpoints_root(output_dir))

    model = load_pretraining_model(
        args.model_name_or_path, mrp_loss_weight=args.mrp_loss_weight, mrp_official_loss=args.mrp_official_loss
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    with accelerator.main_process_first():
        where = args.dataset_dir or "corpus"
        if splits is None and args.dataset_dir:
            splits = load_prepared_corpus(args.dataset_dir, verify=getattr(data_args, "verify_corpus", None))
        elif splits is None:
            from corefbert.corpus import prepare_corpus

            splits = prepare_corpus(data_args, tokenizer=tokenizer)
        splits = check_corpus(splits, where)
    train_rows, eval_rows = splits["train"], splits["validation"]
    if args.max_eval_samples is not None:
        eval_rows = eval_rows.select(range(min(args.max_eval_samples, len(eval_rows))))
    eval_batch_size = args.per_device_eval_batch_size
    if accelerator.num_processes > 1:
        # Whole rounds of (batch x processes) only: accelerate pads an uneven last round with repeated
        # rows, which would count twice in the summed metrics.
        eval_batch_size = max(1, min(eval_batch_size, len(eval_rows) // accelerator.num_processes))
        per_round = eval_batch_size * accelerator.num_processes
        eval_rows = eval_rows.select(range(len(eval_rows) // per_round * per_round))

    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    collator = DataCollatorForMentionReferencePrediction(
        tokenizer, mlm_probability=args.mlm_probability, mrp_ratio=args.mrp_ratio
    )
    train_collate, eval_collate = SeededCollate(collator, args.seed), SeededCollate(collator, args.seed)
    eval_collate.epoch = "eval"
    train_dl = pretraining_dataloader(train_rows, train_collate, args.per_device_train_batch_size, train=True,
                                      num_workers=args.num_workers)
    eval_dl = pretraining_dataloader(eval_rows, eval_collate, eval_batch_size, train=False,
                                     num_workers=args.num_workers)
    if len(train_rows) < args.per_device_train_batch_size * accelerator.num_processes:
        raise CorefBertError(
            f"the train split has {len(train_rows)} sequences, fewer than one batch "
            f"({args.per_device_train_batch_size} x {accelerator.num_processes} processes); "
            "give more text or a smaller --per_device_train_batch_size",
            path=where,
        )
    optimizer = torch.optim.AdamW(
        parameter_groups(model, args.weight_decay), lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
    )
    _set_deepspeed_clipping(accelerator, args.max_grad_norm)
    _register_zero3_external_parameters(accelerator, model)
    model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
    # Built on the prepared optimizer: DeepSpeed ZeRO-3 regroups the parameters it was handed, and a
    # scheduler made on the original groups then fails at its first step.
    warmup_steps = math.ceil(args.warmup_ratio * args.max_steps)
    scheduler = accelerator.prepare_scheduler(
        torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_linear(args.max_steps, warmup_steps))
    )

    state = {"epoch": 0, "batches_in_epoch": 0, "tokens": 0}
    step = 0
    checkpoint = resolve_checkpoint(args.resume_from_checkpoint, output_dir)
    before = None
    if checkpoint is not None:
        earlier = [path for _, path in reversed(list_checkpoints(output_dir)) if path != checkpoint]
        checkpoint, state = load_checkpoint(
            accelerator, checkpoint, earlier if args.resume_from_checkpoint == "latest" else ()
        )
        step = state["step"]
        before = state.get("before")
        accelerator.print(f"resumed from {checkpoint} at step {step} (epoch {state['epoch']})")
        if accelerator.is_main_process:
            truncate_log(log_path, step)
    elif args.resume_from_checkpoint == "latest":
        accelerator.print(f"no checkpoint under {output_dir}/checkpoints yet: starting from scratch")
    if before is None:
        before = evaluate(model, eval_dl, accelerator)
        state["before"] = before
        if accelerator.is_main_process:
            if log_path.exists() and checkpoint is None:
                log_path.unlink()  # a fresh run starts a fresh log
            append_log(log_path, {"split": "eval", "step": step, **before})
    if args.with_tracking:
        accelerator.init_trackers("corefbert_pretraining", config=_flat_config(args))

    def checkpoint_now(at_step: int) -> Path:
        return save_checkpoint(accelerator, output_dir, at_step, state, args.save_total_limit)

    metrics = dict(before)
    model.train()  # from_pretrained leaves eval mode (no dropout); a resumed run skips the first evaluate
    window = {"loss": 0.0, "mlm_loss": 0.0, "mrp_loss": 0.0, "micro": 0, "tokens": 0, "t0": time.perf_counter()}
    bad_loss = False
    # The bar closes on any exit, so an error line starts on a line of its own.
    with _progress(accelerator, args.max_steps, step) as progress, StopSignal() as stop:
        while step < args.max_steps:
            train_dl.set_epoch(state["epoch"])
            train_collate.epoch = state["epoch"]
            skip = state["batches_in_epoch"]
            batches = accelerator.skip_first_batches(train_dl, skip) if skip else train_dl
            for batch in PreservedRng(batches):
                state["batches_in_epoch"] += 1
                with accelerator.accumulate(model):
                    out = model(**batch, masked_logits_only=True)
                    loss = out.loss
                    bad_loss |= not bool(torch.isfinite(loss.detach()))
                    accelerator.backward(loss)
                    grad_norm = None
                    if accelerator.sync_gradients:
                        bad_loss = any_process(accelerator, bad_loss)
                        if bad_loss and args.on_nonfinite == "stop":
                            checkpoint_now(step)
                            raise CorefBertError(
                                f"non-finite loss at step {step + 1} (epoch {state['epoch']}, batch "
                                f"{state['batches_in_epoch']}); saved the last good weights at "
                                f"{output_dir}/checkpoints/step_{step}, positioned after the bad batch. "
                                "Lower --learning_rate, use bf16, or pass --on_nonfinite skip"
                            )
                        if not bad_loss and args.max_grad_norm > 0:
                            grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                    if not bad_loss:
                        optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                window["loss"] += loss.detach().float().item()
                window["mlm_loss"] += out.mlm_loss.detach().float().item() if out.mlm_loss is not None else 0.0
                window["mrp_loss"] += out.mrp_loss.detach().float().item() if out.mrp_loss is not None else 0.0
                window["micro"] += 1
                window["tokens"] += int(batch["attention_mask"].sum()) * accelerator.num_processes
                if not accelerator.sync_gradients:
                    continue
                if bad_loss:
                    accelerator.print(f"skipped optimizer step {step + 1}: non-finite loss")
                    bad_loss = False
                    window.update(loss=0.0, mlm_loss=0.0, mrp_loss=0.0, micro=0, tokens=0)
                    continue
                if accelerator.optimizer_step_was_skipped:
                    # fp16: the loss scaler found inf/NaN gradients, skipped the update and halved the scale.
                    state["overflow_steps"] = state.get("overflow_steps", 0) + 1
                    state["overflow_run"] = state.get("overflow_run", 0) + 1
                    if state["overflow_run"] >= MAX_CONSECUTIVE_OVERFLOWS and args.on_nonfinite == "stop":
                        checkpoint_now(step)
                        raise CorefBertError(
                            f"fp16 gradients overflowed in {state['overflow_run']} optimizer steps in a row (up to "
                            f"step {step + 1}; loss scale now {accelerator.scaler.get_scale():.3g}); saved "
                            f"{output_dir}/checkpoints/step_{step}. Use bf16, lower --learning_rate, or pass "
                            "--on_nonfinite skip"
                        )
                else:
                    state["overflow_run"] = 0
                    scheduler.step()
                step += 1
                state["tokens"] += window["tokens"]
                if step % args.logging_steps == 0 or step == args.max_steps:
                    record = _train_record(accelerator, window, step, state, scheduler, grad_norm)
                    if accelerator.is_main_process:
                        append_log(log_path, record)
                    if args.with_tracking:
                        accelerator.log({f"train/{k}": v for k, v in record.items() if k != "split"}, step=step)
                    progress.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
                    window.update(loss=0.0, mlm_loss=0.0, mrp_loss=0.0, micro=0, tokens=0, t0=time.perf_counter())
                progress.update(1)
                if args.eval_steps and step % args.eval_steps == 0 and step < args.max_steps:
                    metrics = evaluate(model, eval_dl, accelerator)
                    _log_eval(accelerator, args, log_path, step, metrics)
                stopping = any_process(accelerator, stop.received is not None)
                if stopping or (args.checkpointing_steps and step % args.checkpointing_steps == 0):
                    path = checkpoint_now(step)
                if stopping:
                    name = signal.Signals(stop.received or signal.SIGTERM).name
                    accelerator.print(f"\n{name}: saved {path}; continue with --resume_from_checkpoint latest")
                    progress.close()
                    raise SystemExit(128 + (stop.received or signal.SIGTERM))
                if step >= args.max_steps:
                    break
            else:
                state["epoch"] += 1
                state["batches_in_epoch"] = 0
    progress.close()
    metrics = evaluate(model, eval_dl, accelerator)
    _log_eval(accelerator, args, log_path, step, metrics)
    if args.checkpointing_steps and not any(s == step for s, _ in list_checkpoints(output_dir)):
        checkpoint_now(step)
    if accelerator.scaler is not None:
        accelerator.print(f"fp16: {state.get('overflow_steps', 0)} of {step} optimizer steps skipped for gradient "
                          f"overflow; final loss scale {accelerator.scaler.get_scale():.3g}")
    final_dir = final_save(accelerator, model, tokenizer, args, before, metrics)
    if args.with_tracking:
        accelerator.end_training()
    print_summary(accelerator, args, before, metrics, final_dir)
    return metrics


def _set_deepspeed_clipping(accelerator, max_grad_norm: float) -> None:
    """DeepSpeed clips inside its engine: hand it --max_grad_norm when the config leaves it on auto."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and plugin.deepspeed_config.get("gradient_clipping", "auto") == "auto":
        plugin.deepspeed_config["gradient_clipping"] = max_grad_norm


def _register_zero3_external_parameters(accelerator, model) -> None:
    """Under ZeRO-3 a parameter read outside its own module's forward is an empty shard unless registered.

    The pretraining model's forward adds ``0 * V.sum()`` (keeps V in the graph when a batch has no MRP
    target) outside the MRP head's forward; after a resume that read hit the empty shard.
    """
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None or plugin.zero_stage != 3:
        return
    import deepspeed

    deepspeed.zero.register_external_parameter(model, model.mrp.copy_vector)


def _train_record(accelerator, window, step, state, scheduler, grad_norm) -> dict:
    micro = max(window["micro"], 1)
    means = torch.tensor(
        [window["loss"] / micro, window["mlm_loss"] / micro, window["mrp_loss"] / micro], device=accelerator.device
    )
    means = accelerator.reduce(means, reduction="mean").tolist()
    seconds = max(time.perf_counter() - window["t0"], 1e-9)
    record = {
        "split": "train", "step": step, "epoch": state["epoch"], "loss": means[0], "mlm_loss": means[1],
        "mrp_loss": means[2], "lr": scheduler.get_last_lr()[0], "tokens_per_s": window["tokens"] / seconds,
        "tokens": state["tokens"],
    }
    if grad_norm is not None:
        record["grad_norm"] = float(grad_norm)
    if accelerator.scaler is not None:  # fp16: the loss scale tells whether steps are being skipped
        record["loss_scale"] = float(accelerator.scaler.get_scale())
        record["overflow_steps"] = state.get("overflow_steps", 0)
    return record


def _log_eval(accelerator, args, log_path, step, metrics) -> None:
    if accelerator.is_main_process:
        append_log(log_path, {"split": "eval", "step": step, **metrics})
    if args.with_tracking:
        accelerator.log({f"eval/{k}": v for k, v in metrics.items()}, step=step)
    accelerator.print(
        f"step {step}: held-out MRP accuracy {metrics['mrp_accuracy']:.3f}, MLM accuracy "
        f"{metrics['mlm_accuracy']:.3f}"
    )


def _progress(accelerator, total: int, initial: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="pretraining", disable=not accelerator.is_local_main_process)


def _flat_config(args: PretrainingArguments) -> dict:
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in asdict(args).items()}


