"""The optimizer (AdamW or Adagrad over one decay rule) and the LR schedule every run uses."""

from __future__ import annotations

import math

import torch

from corefbert.errors import CorefBertError
from corefbert.training.training_args import TrainingArguments

__all__ = ["build_optimizer", "build_scheduler", "parameter_groups", "same_schedule_until"]


def parameter_groups(model: torch.nn.Module, weight_decay: float,
                     learning_rates: dict[str, float] | None = None) -> list[dict]:
    """AdamW groups by one rule: decay on matrices, none on 1-D parameters (biases, LayerNorm/norm weights,
    the copy vector V, scalar gates: per-dimension scales that decay would pull towards zero).
    ``learning_rates``: ``{parameter-name prefix: rate}`` for parameters at a rate of their own (task layers
    beside a pretrained encoder, Joshi et al. 2019), grouped after those two; the longest prefix wins."""
    groups: dict[tuple[bool, float | None], list] = {(False, None): [], (True, None): []}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        prefix = max((p for p in learning_rates or {} if name.startswith(p)), key=len, default=None)
        rate = learning_rates[prefix] if prefix is not None else None
        groups.setdefault((param.ndim < 2, rate), []).append(param)
    out = []
    for (no_decay, rate), params in groups.items():
        if params or rate is None:
            out.append({"params": params, "weight_decay": 0.0 if no_decay else weight_decay,
                        **({"lr": rate} if rate is not None else {})})
    return out


def build_scheduler(optimizer, args: TrainingArguments, total_steps: int):
    """``transformers.get_scheduler`` with ``--warmup_steps`` (else ``--warmup_ratio`` of the steps), or
    ``step`` (the Coref-GRU bAbI recipe halves the LR every 120 updates; transformers has no such schedule):
    linear warm-up, then the LR times ``--lr_decay_factor`` every ``--lr_decay_steps`` steps."""
    from transformers import get_scheduler

    warmup = args.warmup_steps if args.warmup_steps > 0 else math.ceil(args.warmup_ratio * total_steps)
    if args.lr_scheduler_type == "step":
        decay_steps, factor = args.lr_decay_steps, args.lr_decay_factor

        def step_decay(step: int) -> float:  # a function: LambdaLR's state_dict leaves it out (step count only)
            if step < warmup:
                return (step + 1) / warmup
            return factor ** ((step - warmup) // decay_steps)

        return torch.optim.lr_scheduler.LambdaLR(optimizer, step_decay)
    # warmup_stable_decay (Hu et al. 2024, "MiniCPM"): warm-up, constant, then a linear decay to 0 over the last
    # --lr_decay_steps steps. The LR before the decay does not depend on the run's length, so a constant-LR run
    # can be cooled down from any of its checkpoints (the ablation curve's annealed points).
    decay = None
    if args.lr_scheduler_type == "warmup_stable_decay":
        if args.lr_decay_steps > total_steps - warmup:
            raise CorefBertError(f"--lr_decay_steps {args.lr_decay_steps} is longer than the {total_steps - warmup} "
                                 "steps after warm-up; lower it or raise --max_steps")
        decay = {"num_decay_steps": args.lr_decay_steps, "decay_type": "linear"}
    return get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=warmup,
                         num_training_steps=total_steps, scheduler_specific_kwargs=decay)


#: The settings that define the LR schedule (beside the run's step count).
SCHEDULE_SETTINGS = ("lr_scheduler_type", "warmup_ratio", "warmup_steps", "lr_decay_steps", "lr_decay_factor")


def schedule_factors(args: TrainingArguments, total_steps: int, steps: int) -> list[float]:
    """The LR multiplier the schedule of ``args`` gives at each of the steps ``0..steps`` (a run of ``total_steps``)."""
    probe = torch.optim.SGD([torch.nn.Parameter(torch.zeros(()))], lr=1.0)
    scheduler = build_scheduler(probe, args, total_steps)
    factors = [scheduler.get_last_lr()[0]]
    for _ in range(steps):
        probe.step()  # torch warns when the schedule steps before the optimizer
        scheduler.step()
        factors.append(scheduler.get_last_lr()[0])
    return factors


def same_schedule_until(saved: dict, args: TrainingArguments, total_steps: int, step: int) -> bool:
    """Whether the schedule of a checkpoint's ``saved`` settings gave the LR of ``args``'s at every step up to
    ``step`` (both with ``total_steps``): a resume may then change the steps to come (a cooldown)."""
    import dataclasses

    try:
        before = dataclasses.replace(args, **{name: saved[name] for name in SCHEDULE_SETTINGS if name in saved})
        past = schedule_factors(before, total_steps, step)
    except (ValueError, TypeError, ZeroDivisionError):  # a schedule this version cannot build: not the same
        return False
    return all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
               for a, b in zip(past, schedule_factors(args, total_steps, step)))


def build_optimizer(model: torch.nn.Module, args: TrainingArguments,
                    learning_rates: dict[str, float] | None = None) -> torch.optim.Optimizer:
    """``--optim`` over :func:`parameter_groups`: AdamW, with the fused kernel on CUDA and CPU (one launch for
    all parameters, 2-6x less CPU time than the per-tensor loop on BERT-base; it can also skip an update on a
    device flag, which the loop's deferred non-finite check needs), or Adagrad."""
    groups = parameter_groups(model, args.weight_decay, learning_rates)
    if args.optim == "adagrad":
        # PyTorch's defaults, as Hugging Face's --optim adagrad: accumulators start at 0, not TensorFlow's 0.1
        # (docs/guides/pronoun_pairs.md, paper <-> code, says why).
        return torch.optim.Adagrad(groups, lr=args.learning_rate)
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate,
                                  betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
                                  fused=True if fused_adamw_supported() else None)
    optimizer.register_load_state_dict_pre_hook(keep_implementation)
    return optimizer


#: Settings of a param group that choose how the update is computed, not what it is: this machine's.
IMPLEMENTATION_KEYS = ("fused", "foreach")


def keep_implementation(optimizer: torch.optim.Optimizer, state_dict: dict) -> dict:
    """Before a saved optimizer state is loaded: keep this optimizer's kernel choice
    (:data:`IMPLEMENTATION_KEYS`). torch copies every saved group setting, so a checkpoint from another
    machine would turn the fused kernel off, and the loop hands that kernel its skip flag; loading with the
    current choice also places each ``step`` count where that kernel keeps it."""
    groups = [{**saved, **{key: current[key] for key in IMPLEMENTATION_KEYS if key in current}}
              for saved, current in zip(state_dict["param_groups"], optimizer.param_groups)]
    return {**state_dict, "param_groups": groups}


def fused_adamw_supported() -> bool:
    """Whether the parameters will live where the fused AdamW kernel runs: CUDA, or the CPU when there is no
    other accelerator (MPS, XPU) that accelerate would move them to."""
    if torch.cuda.is_available():
        return True
    mps = getattr(torch.backends, "mps", None)
    xpu = getattr(torch, "xpu", None)
    return not ((mps is not None and mps.is_available()) or (xpu is not None and xpu.is_available()))
