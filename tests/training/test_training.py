"""The one training loop (corefbert/training/loop/core.py) on a model small enough to check by hand.

A literal loop (plain PyTorch: accumulate, clip, AdamW, linear schedule) written out beside the core must
give the same weights; the fault policy (non-finite losses, skips in a row, signals while skipping) and
exact resume across a skipped step are checked on the same toy job.
"""

from __future__ import annotations

import json
import math
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from corefbert.errors import CorefBertError
from corefbert.training.checkpoints.folders import list_checkpoints
from corefbert.training.loop.core import train
from corefbert.training.loop.job import StepOutput, TrainingJob
from corefbert.training.loop.optimization import build_optimizer, build_scheduler, parameter_groups
from corefbert.training.loop.setup import build_accelerator, prepare_output_dir
from corefbert.training.training_args import TrainingArguments

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")

ROWS = 14  # 14 rows / batch 4 = 4 batches per epoch, the last one short


class _Rows(torch.utils.data.Dataset):
    def __init__(self, poison: int | str | None = None):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(ROWS, 5, generator=generator)
        self.y = self.x @ torch.arange(1.0, 6.0) + 0.5
        self.poison = poison  # a row whose loss is NaN, or "all"

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i], "poison": torch.tensor(self.poison in (i, "all"))}


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.hidden = torch.nn.Linear(5, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, x):  # [batch, 5] -> [batch]
        return self.out(torch.tanh(self.norm(self.hidden(x)))).squeeze(-1)


class _Job(TrainingJob):
    def __init__(self, on_step=None):
        self.calls, self.on_step = 0, on_step

    def training_step(self, model, batch) -> StepOutput:
        self.calls += 1
        if self.on_step is not None:
            self.on_step(self.calls)
        error = model(batch["x"]) - batch["y"]  # [batch]
        loss = (error**2).mean()
        if batch["poison"].any():
            loss = loss * float("nan")
        return StepOutput(loss, {"abs_error": error.abs().mean().detach()})


def _args(out: Path, **overrides) -> TrainingArguments:
    values = dict(output_dir=str(out), per_device_train_batch_size=4, learning_rate=0.05, weight_decay=0.1,
                  warmup_ratio=0.3, max_steps=7, max_grad_norm=0.5, logging_steps=1, mixed_precision="no",
                  disable_tqdm=True, seed=3)
    values.update(overrides)
    return TrainingArguments(**values)


def _run(args: TrainingArguments, dataset=None, job=None) -> tuple[_Model, dict]:
    accelerator = build_accelerator(args)
    prepare_output_dir(args, accelerator)
    model = _Model()
    # In order: the literal loop below reads the rows the same way without copying accelerate's sampler.
    loader = torch.utils.data.DataLoader(dataset or _Rows(), batch_size=args.per_device_train_batch_size)
    optimizer = build_optimizer(model, args)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    scheduler = build_scheduler(optimizer, args, args.max_steps)
    results = train(job or _Job(), args, accelerator, model, optimizer, scheduler, loader, args.max_steps)
    return accelerator.unwrap_model(model), results


def _literal_loop(args: TrainingArguments) -> _Model:
    """The same training written out: micro-batches in order across epoch ends, gradients averaged over the
    accumulation, clipped, AdamW (no decay on 1-D parameters), linear warm-up then decay."""
    rows, model = _Rows(), _Model()
    batches = [(rows.x[i:i + 4], rows.y[i:i + 4]) for i in range(0, ROWS, 4)]
    decay = [p for p in model.parameters() if p.ndim >= 2]
    plain = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": plain, "weight_decay": 0.0}],
                                  lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-8)
    warmup = math.ceil(args.warmup_ratio * args.max_steps)

    def factor(k):
        return k / warmup if k < warmup else max(0.0, (args.max_steps - k) / (args.max_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    micro = 0
    for _ in range(args.max_steps):
        optimizer.zero_grad()
        for _ in range(args.gradient_accumulation_steps):
            x, y = batches[micro % len(batches)]
            micro += 1
            (((model(x) - y) ** 2).mean() / args.gradient_accumulation_steps).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
    return model


def _records(out: Path, split: str = "train") -> list[dict]:
    lines = (out / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == split]


@pytest.mark.parametrize("accumulation", [1, 3])
def test_the_core_trains_exactly_as_a_literal_loop(tmp_path, accumulation):
    """7 steps over 4-batch epochs: with accumulation 3 steps straddle epoch ends (and the short batch)."""
    args = _args(tmp_path / "core", gradient_accumulation_steps=accumulation)
    model, results = _run(args)
    want = _literal_loop(args)
    for (name, got), reference in zip(model.state_dict().items(), want.state_dict().values()):
        torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-6, msg=name)
    records = _records(tmp_path / "core")
    assert [r["step"] for r in records] == list(range(1, 8)) and results["train_steps"] == 7
    assert records[-1]["lr"] == 0.0 and "abs_error" in records[0]
    assert records[-1]["epoch"] == pytest.approx(7 * accumulation / 4, abs=0.3)


def test_one_decay_rule_no_decay_on_one_dimensional_parameters():
    model = _Model()
    decay, plain = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == ["hidden.weight", "out.weight"]
    assert sorted(names[id(p)] for p in plain["params"]) == ["hidden.bias", "norm.bias", "norm.weight", "out.bias"]
    assert (decay["weight_decay"], plain["weight_decay"]) == (0.1, 0.0)


def adagrad_reference(weights: list[float], grads: list[list[float]], lr: float, decay: float, start: float):
    """Adagrad written out for one weight vector, step by step: g <- g + decay * w (L2), G <- G + g^2,
    w <- w - lr * g / (sqrt(G) + 1e-10), with G starting at ``start`` (Duchi et al. 2011)."""
    w, accumulator = list(weights), [start] * len(weights)
    for step in grads:
        for i, g in enumerate(step):
            g = g + decay * w[i]
            accumulator[i] += g * g
            w[i] -= lr * g / (math.sqrt(accumulator[i]) + 1e-10)
    return w


def test_optim_adagrad_follows_the_update_rule_on_the_one_decay_rule(tmp_path):
    """``--optim adagrad`` (the Decomposable Attention's optimizer) is Adagrad with the accumulator
    starting at 0 (PyTorch's and Hugging Face's), L2 decay on matrices only, as the written-out rule gives;
    adamw_torch stays the default."""
    assert TrainingArguments(output_dir=str(tmp_path)).optim == "adamw_torch"
    assert isinstance(build_optimizer(_Model(), _args(tmp_path)), torch.optim.AdamW)
    model = _Model()
    optimizer = build_optimizer(model, _args(tmp_path, optim="adagrad", learning_rate=0.05, weight_decay=0.1))
    assert isinstance(optimizer, torch.optim.Adagrad)
    start = {n: p.detach().flatten().tolist() for n, p in model.named_parameters()}
    torch.manual_seed(0)
    grads = [{n: torch.randn_like(p) for n, p in model.named_parameters()} for _ in range(3)]
    for step in grads:
        for name, param in model.named_parameters():
            param.grad = step[name].clone()
        optimizer.step()
    for name, param in model.named_parameters():
        decay = 0.1 if param.ndim >= 2 else 0.0
        want = adagrad_reference(start[name], [s[name].flatten().tolist() for s in grads], 0.05, decay, 0.0)
        torch.testing.assert_close(param.detach().flatten(), torch.tensor(want), rtol=1e-5, atol=1e-6)


def test_optim_is_a_setting_a_resume_must_keep(tmp_path):
    from corefbert.training.training_args import changed_settings, run_settings

    saved = run_settings(_args(tmp_path), 1, "no", {})
    now = run_settings(_args(tmp_path, optim="adagrad"), 1, "no", {})
    assert changed_settings(saved, now) == [("optim", "adamw_torch", "adagrad")]


def test_per_prefix_learning_rates_form_their_own_groups_and_share_the_schedule(tmp_path):
    """A task head beside a pretrained encoder (end-to-end coreference with BERT) trains at its own rate; the
    two default groups stay first, so the optimizer-state layout of runs without it is unchanged."""
    model = _Model()
    plain = parameter_groups(model, 0.1)
    groups = parameter_groups(model, 0.1, {"": 1e-3, "hidden.": 1e-5})
    assert [len(g["params"]) for g in plain] == [2, 4] and "lr" not in plain[0]
    assert [len(g["params"]) for g in groups[:2]] == [0, 0]  # every parameter matched a prefix
    rate_of = {id(p): (g["lr"], g["weight_decay"]) for g in groups[2:] for p in g["params"]}
    assert rate_of[id(model.hidden.weight)] == (1e-5, 0.1) and rate_of[id(model.hidden.bias)] == (1e-5, 0.0)
    assert rate_of[id(model.out.weight)] == (1e-3, 0.1) and rate_of[id(model.norm.weight)] == (1e-3, 0.0)
    args = _args(tmp_path, warmup_ratio=0.5, max_steps=4)
    optimizer = build_optimizer(model, args, {"": 1e-3, "hidden.": 1e-5})
    scheduler = build_scheduler(optimizer, args, args.max_steps)
    optimizer.step()
    scheduler.step()
    rates = sorted({g["lr"] for g in optimizer.param_groups if g["params"]})
    assert rates == pytest.approx([1e-5 / 2, 1e-3 / 2])  # step 1 of 2 warm-up steps: both at half their peak


def test_warmup_steps_override_the_ratio_and_any_transformers_schedule_is_accepted(tmp_path):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    scheduler = build_scheduler(optimizer, _args(tmp_path, warmup_ratio=0.5, warmup_steps=2), total_steps=10)
    lrs = []
    for _ in range(10):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[:3] == [0.0, 0.5, 1.0] and lrs[9] == pytest.approx(1 / 8)
    cosine = build_scheduler(torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0),
                             _args(tmp_path, lr_scheduler_type="cosine", warmup_ratio=0.0), total_steps=10)
    assert cosine.get_last_lr()[0] == 1.0
    with pytest.raises(CorefBertError, match="--lr_scheduler_type 'wavy' is not one of step, linear, cosine"):
        _args(tmp_path, lr_scheduler_type="wavy").validate()


def test_nonfinite_losses_skip_steps_and_stop_after_too_many_in_a_row(tmp_path):
    """``--on_nonfinite skip`` with a loss that stays NaN used to loop forever."""
    args = _args(tmp_path / "run", on_nonfinite="skip", max_consecutive_skips=5)
    with pytest.raises(CorefBertError, match=r"the loss was non-finite in 5 optimizer steps in a row \(up to step 1\)"):
        _run(args, _Rows(poison="all"))
    assert [s for s, _ in list_checkpoints(args.output_dir)] == [0]


def test_one_poisoned_batch_is_skipped_and_the_schedule_waits(tmp_path):
    args = _args(tmp_path / "run", on_nonfinite="skip")
    _, results = _run(args, _Rows(poison=5))  # row 5 is in batch 2 of every epoch
    records = _records(tmp_path / "run")
    assert [r["step"] for r in records] == list(range(1, 8)) and results["train_steps"] == 7
    assert all(math.isfinite(r["loss"]) for r in records)
    with pytest.raises(CorefBertError, match=r"non-finite loss at step 2 \(epoch 0, batch 2\)"):
        _run(_args(tmp_path / "stop"), _Rows(poison=5))
    assert [s for s, _ in list_checkpoints(tmp_path / "stop")] == [1]


def test_sigterm_while_steps_are_skipped_saves_and_exits(tmp_path):
    """The skip path never reached the signal check; only SIGKILL ended such a run."""
    def term_at_third(calls):
        if calls == 3:
            signal.raise_signal(signal.SIGTERM)

    args = _args(tmp_path / "run", on_nonfinite="skip", max_consecutive_skips=1000)
    with pytest.raises(SystemExit) as exit_info:
        _run(args, _Rows(poison="all"), _Job(on_step=term_at_third))
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert [s for s, _ in list_checkpoints(args.output_dir)] == [0]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


class _PaddedRows(_Rows):
    """Rows with an ``attention_mask`` of 1..6 real positions out of 6: what the trainer counts as tokens."""

    def __getitem__(self, i):
        return {**super().__getitem__(i), "attention_mask": (torch.arange(6) < 1 + i % 6).long()}


@pytest.mark.parametrize("accumulation", [1, 2])
def test_the_tokens_total_is_the_sum_of_non_pad_tokens_seen(tmp_path, accumulation):
    """The log's "tokens" once over-counted (the running window was added at every step)."""
    args = _args(tmp_path, gradient_accumulation_steps=accumulation, logging_steps=3)
    _run(args, _PaddedRows())
    records = _records(tmp_path)
    per_batch = [sum(1 + i % 6 for i in range(start, min(start + 4, ROWS))) for start in range(0, ROWS, 4)]
    seen = [per_batch[k % len(per_batch)] for k in range(args.max_steps * accumulation)]  # batches in order
    assert [r["step"] for r in records] == [3, 6, 7]
    for record in records:
        assert record["tokens"] == sum(seen[:record["step"] * accumulation]), record["step"]
    slots = [6 * min(4, ROWS - start) for start in range(0, ROWS, 4)]
    last_window = range(6 * accumulation, 7 * accumulation)  # the final log covers step 7 alone
    assert records[-1]["slot_fill"] == pytest.approx(
        sum(seen[k] for k in last_window) / sum(slots[k % len(slots)] for k in last_window), abs=1e-4)
    assert "mfu" not in records[-1]  # no FLOPs formula for this model, and no CUDA peak


@pytest.mark.parametrize("accumulation", [1, 2])
def test_resume_across_a_skipped_step_repeats_the_uninterrupted_run(tmp_path, accumulation):
    """SIGTERM after step 4, resume: the same losses, learning rates and weights as one run, with a
    non-finite batch skipped in every epoch (the skip count and the running log window are checkpointed)."""
    args = _args(tmp_path / "full", on_nonfinite="skip", gradient_accumulation_steps=accumulation, logging_steps=2)
    full_model, full_results = _run(args, _Rows(poison=5))
    expected = _records(tmp_path / "full")

    def term_after(limit):
        def hook(calls):
            if calls == limit:
                signal.raise_signal(signal.SIGTERM)
        return hook

    stopped = replace(args, output_dir=str(tmp_path / "stopped"))
    with pytest.raises(SystemExit):
        _run(stopped, _Rows(poison=5), _Job(on_step=term_after(4 * accumulation + 1)))
    assert len(list_checkpoints(stopped.output_dir)) == 1
    resumed_model, resumed_results = _run(replace(stopped, resume_from_checkpoint="latest"), _Rows(poison=5))
    got = _records(tmp_path / "stopped")
    assert [r["step"] for r in got] == [r["step"] for r in expected]
    for have, want in zip(got, expected):
        assert "tokens" not in want  # this job's batches name no real tokens: no token fields at all
        for key in ("loss", "abs_error", "lr", "epoch"):
            assert have[key] == pytest.approx(want[key], rel=1e-6, abs=1e-9), (want["step"], key)
    for got_tensor, want_tensor in zip(resumed_model.state_dict().values(), full_model.state_dict().values()):
        torch.testing.assert_close(got_tensor, want_tensor, rtol=1e-6, atol=1e-7)
    assert resumed_results["train_loss"] == pytest.approx(full_results["train_loss"], rel=1e-6)


def test_a_second_rank_leaves_the_folder_checks_to_rank_0_whose_first_writes_it_may_meet(tmp_path, monkeypatch):
    """Two processes into a fresh --output_dir: on a loaded machine rank 1 reached its checks after rank 0 had
    taken the lock and written its log, and refused the run ("output directory is not empty")."""
    from corefbert.training.loop.setup import check_training_start

    out = tmp_path / "out"
    out.mkdir()
    (out / "log.jsonl").write_text('{"split": "eval", "step": 0}\n')  # rank 0's first record
    args = _args(out)
    monkeypatch.setenv("RANK", "1")
    check_training_start(args)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(CorefBertError, match="output directory is not empty"):  # rank 0 still refuses it
        check_training_start(args)
