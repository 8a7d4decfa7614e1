"""The one training loop: pretraining and every fine-tuning task run it (docs/contracts.md, "Training core").

A job (:class:`TrainingJob`) supplies its loss step, its evaluation and the state it wants checkpointed;
:func:`train` does the rest on Accelerate, on one CPU, N GPUs, DeepSpeed or FSDP. What it guarantees, each
backed by the tests docs/guides/hardening.md names:

- one optimizer step = ``gradient_accumulation_steps`` micro-batches on every process, also across an epoch
  boundary (accumulation does not restart with the epoch, so every step sees the same amount of data);
- the LR schedule (``transformers.get_scheduler``) advances once per optimizer step on any number of
  processes, and not on a step that fp16 loss scaling or a non-finite loss skipped;
- a resumed run repeats the uninterrupted run's losses: the seedable sampler + ``set_epoch`` +
  ``skip_first_batches`` give the same data, :class:`PreservedRng` keeps the data iterator from consuming the
  restored RNG state, and the running log window is part of the checkpoint;
- SIGTERM/SIGINT save a checkpoint and exit with 128+signal, also while steps are being skipped; an evaluation
  running at the signal is abandoned within one batch (nothing of it is written), the step's checkpoint is
  saved if it is not yet, and the resume repeats that evaluation;
- an evaluation leaves every RNG as it found it, so training does not depend on when (or whether) it
  evaluates;
- a non-finite loss saves and stops naming the step (``--on_nonfinite stop``) or skips the step (``skip``);
  ``--max_consecutive_skips`` skipped steps in a row (non-finite or fp16 overflow) save and stop.
"""

from __future__ import annotations

import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from corefbert.errors import CorefBertError, out_of_memory_as_error
from corefbert.training.checkpoints.folders import (
    STATE_FILE,
    checkpoints_root,
    list_checkpoints,
    load_checkpoint,
    passed_over,
    read_trainer_state,
    resolve_checkpoint,
    save_checkpoint,
)
from corefbert.training.checkpoints.signals import EvaluationStopped, StopSignal, any_process
from corefbert.training.hub import public_settings
from corefbert.training.loop.compiling import CompileWatch, compile_repeated_layers
from corefbert.training.loop.job import TrainingJob
from corefbert.training.loop.optimization import SCHEDULE_SETTINGS, same_schedule_until
from corefbert.training.loop.rng import epoch_batches, rng_untouched
from corefbert.training.loop.state import LoopState, new_window
from corefbert.training.loop.throughput import peak_flops, training_flops_counter
from corefbert.training.outputs.runlog import RunLog, truncate_log
from corefbert.training.training_args import (
    TrainingArguments,
    changed_settings,
    refuse_changed_settings,
    run_settings,
    start_trackers,
)


def train(job: TrainingJob, args: TrainingArguments, accelerator, model, optimizer, scheduler, train_loader,
          total_steps: int, project: str = "corefbert") -> dict[str, float]:
    """Run the optimizer steps ``job`` needs on the prepared ``model``/``optimizer``/``train_loader``;
    ``scheduler`` is built on the prepared optimizer and not itself prepared. Returns train metrics."""
    if args.torch_compile and args.torch_compile_scope == "layers":
        compile_repeated_layers(accelerator.unwrap_model(model), args.torch_compile_backend, args.torch_compile_mode)
    loop = _Loop(job, args, accelerator, model, optimizer, scheduler, train_loader, total_steps)
    if args.with_tracking:
        config = {k: v if isinstance(v, int | float | str | bool) else str(v)
                  for k, v in public_settings(args).items()}  # no --hub_token
        start_trackers(accelerator, project, config, args.report_to)
    with StopSignal(accelerator) as stop:  # to the end: the final evaluation and save included
        loop.stop = stop
        loop.resume()
        loop.begin()
        model.train()
        # tqdm shows rate and time left; the bar closes on any exit, so an error starts on its own line.
        with tqdm(total=total_steps, initial=loop.step, desc="train", dynamic_ncols=True,
                  disable=args.disable_tqdm or not accelerator.is_local_main_process) as bar:
            loop.bar = bar
            # Resumed from the last step's checkpoint (saved before its evaluation), or from one saved at a
            # signal that abandoned its step's evaluation: that evaluation now, as the uninterrupted run did.
            if loop.step >= total_steps or loop.state.evaluation_pending:
                loop.evaluate_step()
            if loop.step < total_steps:
                loop.run()
        job.on_train_end(model, loop.step)
        if stop.received is not None:  # during the final save: it finished, so nothing is left to do
            accelerator.print(f"{signal.Signals(stop.received).name} came during the final save; the run is complete")
    return loop.results()


class _Loop:
    """The state of one training run between optimizer steps (what a checkpoint holds)."""

    def __init__(self, job, args, accelerator, model, optimizer, scheduler, train_loader, total_steps):
        self.job, self.args, self.accelerator = job, args, accelerator
        self.model, self.optimizer, self.scheduler, self.train_loader = model, optimizer, scheduler, train_loader
        self.total_steps = total_steps
        self.output_dir = Path(args.output_dir)
        self.logger = RunLog(self.output_dir, accelerator)
        self.settings = run_settings(args, accelerator.num_processes, str(accelerator.mixed_precision),
                                     job.settings())
        self.saved_at = None  # the loop position of the newest checkpoint this process wrote
        self.bar = None  # the progress bar, once the steps begin
        self.step = 0
        self.state = LoopState()
        self.started = self.window_started = time.perf_counter()
        # The step the run's second log window began at, for the one time-per-step line (None: said, or no run).
        self.timed_from: int | None = None
        self.timing_said = False
        self.bad_loss, self.nonfinite, self.grad_norm, self.overflowed = False, False, None, False
        self.flops_per_batch = training_flops_counter(accelerator.unwrap_model(model))
        self.peak_flops = peak_flops(accelerator.device)
        # Deferred non-finite check (see _defer_nonfinite): the optimizer skips updates on a device flag, and the
        # host reads the flags of the steps since the last read only where it has to wait on the device anyway.
        self.deferred = defers_nonfinite_check(args, accelerator, optimizer)
        self.pending: list[tuple[torch.Tensor, tuple]] = []  # (flag [], snapshot) per step since the last read
        self.skip_updates = None  # [] float32 on the device: 1 once a step since the last read was non-finite
        self.compile_watch = CompileWatch(accelerator.device) if args.torch_compile else None

    def resume(self) -> None:
        args = self.args
        checkpoint = resolve_checkpoint(args.resume_from_checkpoint, self.output_dir, args.overwrite_output_dir)
        if checkpoint is None:
            if args.resume_from_checkpoint == "latest":
                self.accelerator.print(f"no checkpoint under {checkpoints_root(self.output_dir)} yet: starting fresh")
            if self.accelerator.is_main_process:  # a fresh run starts a fresh log (a run killed before its
                Path(self.logger.path).unlink(missing_ok=True)  # first checkpoint may have left one)
            return
        recorded = read_trainer_state(checkpoint)
        changed = changed_settings(recorded.get("settings"), self.settings)
        if changed and all(name in SCHEDULE_SETTINGS for name, _, _ in changed) and same_schedule_until(
                recorded["settings"], args, self.total_steps, recorded["step"]):
            # The LR of every step trained so far is the same: the run continues as the uninterrupted run with
            # this schedule would (a cooldown branched off a constant-LR run).
            self.accelerator.print(f"the LR schedule changes after {checkpoint.name} ("
                                   + ", ".join(f"{n}: {old!r} -> {new!r}" for n, old, new in changed)
                                   + "); the steps trained so far had the same learning rates")
            changed = []
        refuse_changed_settings(changed, checkpoint, args.ignore_changed_settings, self.accelerator.print)
        found = list_checkpoints(self.output_dir)
        if args.resume_from_checkpoint == "latest" and self.accelerator.is_main_process:
            for skipped in passed_over(self.output_dir, found[-1][0]):
                print(f"warning: {skipped}: not a complete checkpoint ({STATE_FILE} is missing or unreadable); "
                      f"passed over for {checkpoint}", file=sys.stderr)
        earlier = [path for _, path in reversed(found) if path != checkpoint]
        checkpoint, saved = load_checkpoint(self.accelerator, checkpoint,
                                            earlier if args.resume_from_checkpoint == "latest" else (), self.scheduler)
        self.step = saved["step"]
        self.state = LoopState.from_checkpoint(saved)
        self.job.load_state_dict(saved.get("job", {}))
        self.accelerator.print(f"resumed from {checkpoint} at step {self.step} (epoch {self.state.epoch})")
        self.saved_at = self._position()
        if self.accelerator.is_main_process:
            # Not evaluated: the last step (saved before its evaluation) or an evaluation a signal abandoned;
            # the resume evaluates again, so a record a killed repetition wrote goes.
            truncate_log(Path(self.logger.path), self.step,
                         evaluated=self.step < self.total_steps and not self.state.evaluation_pending)
        self.logger.log({"split": "resume", "step": self.step, "resumed_from": str(checkpoint)})

    def begin(self) -> None:
        """The job's ``on_train_begin`` (pretraining evaluates the starting weights there); a signal during an
        evaluation in it abandons that evaluation, and the loop exits as at any signal."""
        if self._stopped_evaluation(lambda: self.job.on_train_begin(self.model, self.step), preserve_rng=False):
            self._signal_or_periodic(periodic=False)

    def _evaluate(self) -> None:
        """The job's evaluation of this step, RNG-neutral. ``evaluation_pending`` stays set in the state when a
        signal abandons it, so the checkpoint saved at the signal says that the resume has to repeat it."""
        self._read_deferred()
        self.state.evaluation_pending = True
        if not self._stopped_evaluation(lambda: self.job.evaluate(self.model, self.step, self._epoch_float())):
            self.state.evaluation_pending = False

    def _stopped_evaluation(self, evaluation, preserve_rng: bool = True) -> bool:
        """Run ``evaluation()``; True when a signal abandoned it (:class:`EvaluationStopped`, raised between
        two of its batches). ``preserve_rng``: every RNG is put back as it was, also after an abandoned
        evaluation, so what follows (the checkpoint saved at the signal too) sees the uninterrupted RNG."""
        try:
            with rng_untouched() if preserve_rng else nullcontext():
                evaluation()
        except EvaluationStopped:
            self.model.train()  # the evaluation switched to eval mode and never got to switch back
            return True
        return False

    def run(self) -> None:
        state = self.state
        while self.step < self.total_steps:
            self.job.on_epoch_begin(state.epoch)
            self.train_loader.set_epoch(state.epoch)
            if hasattr(self.train_loader.dataset, "set_epoch"):  # accelerate skips the dataset on N processes
                self.train_loader.dataset.set_epoch(state.epoch)
            for batch in epoch_batches(self.accelerator, self.train_loader, state.batches_in_epoch):
                state.batches_in_epoch += 1
                state.epoch_end_pending |= state.batches_in_epoch >= len(self.train_loader)
                if self._micro_batch(batch) and self._after_update():
                    return
            else:
                state.epoch += 1
                state.batches_in_epoch = 0

    def _micro_batch(self, batch: dict) -> bool:
        """Forward/backward one micro-batch; True when it completed an optimizer step (or a skipped one)."""
        accelerator, window = self.accelerator, self.state.window
        if self.compile_watch is not None:
            self.compile_watch.step_begins()
        # Out of memory: one line naming the flag that bounds a step's memory (the newest checkpoint stays).
        with out_of_memory_as_error(f"in training step {self.step + 1}", self.job.memory_advice()), \
                accelerator.accumulate(self.model):
            out = self.job.training_step(self.model, batch)
            # A device flag, read once per optimizer step (a read per micro-batch would be host time).
            flag = torch.isfinite(out.loss).logical_not_()  # [] bool
            self.nonfinite = flag if self.nonfinite is False else flag.logical_or_(self.nonfinite)
            accelerator.backward(out.loss)
            self.grad_norm = None
            if accelerator.sync_gradients and self.deferred:
                self._defer_nonfinite()
                if self.args.max_grad_norm > 0:  # no fp16 scaler, no DeepSpeed or FSDP here: torch's own clip
                    self.grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
            elif accelerator.sync_gradients:
                self.bad_loss = any_process(accelerator, self.bad_loss or bool(self.nonfinite))
                self.nonfinite = False
                if self.bad_loss and self.args.on_nonfinite == "stop":
                    self._stop_nonfinite()
                if not self.bad_loss and self.args.max_grad_norm > 0:
                    self.grad_norm = accelerator.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
            if not self.bad_loss:
                self._optimizer_step()
            if accelerator.sync_gradients:
                self.optimizer.zero_grad(set_to_none=True)
        window["loss"] = window["loss"] + out.loss.detach().float()
        for name, value in out.logs.items():
            value = value.detach().float() if torch.is_tensor(value) else float(value)
            window["logs"][name] = window["logs"].get(name, 0.0) + value
        window["micro"] += 1
        for number, mask in enumerate(self.job.token_masks(batch)):
            # [batch, length]: real tokens of this process (summed over processes at logging)
            window["tokens"] = window["tokens"] + mask.sum()
            window["slots"] += mask.numel()
            window["flops"] += self.flops_per_batch(mask.shape) if number == 0 else 0.0
        return accelerator.sync_gradients

    def _optimizer_step(self) -> None:
        """The optimizer step; under fp16 loss scaling also whether the scaler skipped it (``overflowed``): a
        fused optimizer is always called and skips on the device, so a step count that did not advance tells
        it (one host read; the scaler reads its scale every step anyway)."""
        if self.accelerator.scaler is None or not self.accelerator.sync_gradients:
            self.optimizer.step()
            return
        inner = self.optimizer.optimizer  # the torch optimizer inside accelerate's wrapper
        probe = next((p for group in inner.param_groups for p in group["params"] if p.grad is not None), None)
        before = _update_count(inner, probe)
        self.optimizer.step()
        after = _update_count(inner, probe)
        self.overflowed = self.accelerator.optimizer_step_was_skipped or (after is not None and after == before)

    def _defer_nonfinite(self) -> None:
        """At an optimizer step in deferred mode: note this step's flag and what the step would stop at, and let
        the fused optimizer skip its update (and every later one until the next read) on the device when a loss
        since the last read was non-finite. Nothing here waits on the device."""
        flag = self.nonfinite  # [] bool: a micro-batch of this step had a non-finite loss
        self.nonfinite = False
        if self.accelerator.num_processes > 1:  # every process skips alike (no host read: a collective)
            flag = self.accelerator.reduce(flag.float(), reduction="sum") > 0
        self.pending.append((flag, self._snapshot()))
        if self.skip_updates is None:
            self.skip_updates = torch.zeros((), dtype=torch.float32, device=self.accelerator.device)
        self.skip_updates = torch.maximum(self.skip_updates, flag.float())
        self.optimizer.optimizer.found_inf = self.skip_updates

    def _snapshot(self) -> tuple:
        """What :meth:`_stop_nonfinite` saves had it stopped here: step, loop state (the window's tensors are
        replaced, never changed in place), schedule, learning rates, RNG, accelerate's micro-batch count."""
        window = {**self.state.window, "logs": dict(self.state.window["logs"])}
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        return (self.step, replace(self.state, window=window), self.scheduler.state_dict(),
                [group["lr"] for group in self.optimizer.param_groups], torch.get_rng_state(), cuda,
                self.accelerator.step)  # accelerate's micro-batch count: which micro-batch ends an accumulation

    def _read_deferred(self) -> None:
        """The non-finite flags of the steps since the last read (one host read): on a non-finite one, the
        loop goes back to where that step would have stopped (the fused optimizer updated nothing since) and
        stops there, as the per-step check does. Called before a log record, evaluation, save or exit."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        flags = torch.stack([flag for flag, _ in pending]).tolist()
        if not any(flags):
            self.skip_updates.zero_()
            return
        step, state, schedule, rates, cpu_rng, cuda_rng, micro_batches = pending[flags.index(True)][1]
        self.step, self.state, self.accelerator.step = step, state, micro_batches
        self.scheduler.load_state_dict(schedule)
        for group, rate in zip(self.optimizer.param_groups, rates):
            group["lr"] = rate
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        self._stop_nonfinite()

    def _stop_nonfinite(self) -> None:
        self._save_and_stop(
            f"non-finite loss at step {self.step + 1} (epoch {self.state.epoch}, batch "
            f"{self.state.batches_in_epoch}); saved the last good weights at "
            f"{checkpoints_root(self.output_dir)}/step_{self.step}, positioned after the bad batch. "
            "Lower --learning_rate, use bf16, or pass --on_nonfinite skip")

    def _after_update(self) -> bool:
        """Bookkeeping after an optimizer step (or a skipped one); True when training is over."""
        state, args = self.state, self.args
        if self.bad_loss:  # --on_nonfinite skip: no update, the step does not count
            self.bad_loss = False
            self.accelerator.print(f"skipped optimizer step {self.step + 1}: non-finite loss")
            state.window = new_window()
            self._count_skip(lambda n: f"the loss was non-finite in {n} optimizer steps in a row (up to step "
                                       f"{self.step + 1})")
            return self._signal_or_periodic(periodic=False)
        if self.overflowed:
            # fp16: the loss scaler found inf/NaN gradients, skipped the update and halved the scale.
            state.overflow_steps += 1
            self._count_skip(lambda n: f"fp16 gradients overflowed in {n} optimizer steps in a row (up to step "
                                       f"{self.step + 1}; loss scale now {self.accelerator.scaler.get_scale():.3g})")
        else:
            state.skipped_in_a_row = 0
            self.scheduler.step()
        self.step += 1
        self.bar.update(1)
        if self.compile_watch is not None and self.compile_watch.step_ended():
            self._log_compile()
        if self.step % args.logging_steps == 0 or self.step == self.total_steps:
            self._log()
        epoch_end = state.epoch_end_pending
        state.epoch_end_pending = False
        every = args.checkpointing_steps
        periodic = (every == "epoch" and epoch_end) or (every not in (None, "epoch") and self.step % int(every) == 0)
        if self.step >= self.total_steps:
            # Save first, then evaluate: a signal or kill in the final evaluation or save costs no step.
            self._signal_or_periodic(every is not None)
            self.evaluate_step()
            return True
        if ((args.eval_steps and self.step % args.eval_steps == 0)
                or (epoch_end and self.job.evaluate_each_epoch and not args.eval_steps)):
            self._evaluate()  # before this step's checkpoint: a signal abandons it and the checkpoint is saved
        return self._signal_or_periodic(periodic)

    def evaluate_step(self) -> None:
        """This step's evaluation outside the periodic ones (the last step's, after its checkpoint); a signal
        during it abandons it, saves (if not saved yet) and exits: the resume evaluates again."""
        self._evaluate()
        self._signal_or_periodic(periodic=False)

    def _count_skip(self, what) -> None:
        """One more skipped step; ``--max_consecutive_skips`` in a row save and stop (``what(n)`` says why)."""
        self.state.skipped_in_a_row += 1
        if self.state.skipped_in_a_row >= self.args.max_consecutive_skips:
            self._save_and_stop(
                f"{what(self.state.skipped_in_a_row)}; saved {checkpoints_root(self.output_dir)}/step_{self.step}. "
                "Use bf16, lower --learning_rate, or raise --max_consecutive_skips")

    def _signal_or_periodic(self, periodic: bool) -> bool:
        """Save when due or asked to stop; a received SIGTERM/SIGINT ends the run (SystemExit 128+signal)."""
        stopping = self.stop.requested()
        if stopping:
            self._read_deferred()  # a non-finite step before the signal stops the run as it would have
        # Before a fresh run has drawn its first batch (pretraining's evaluation of the starting weights) there
        # is nothing to keep: exit at once; the rerun starts afresh, as this run did.
        untouched = self.saved_at is None and self._position() == (0, 0, 0)
        saving = periodic or (stopping and self.saved_at != self._position() and not untouched)
        path = self._checkpoint() if saving else None
        if stopping:
            path = path or checkpoints_root(self.output_dir) / f"step_{self.step}"
            name = signal.Signals(self.stop.received or signal.SIGTERM).name
            if self.saved_at is None:
                done, path = "nothing to save before the first batch", None
            else:
                done = f"saved {path}" + (f" (the evaluation of step {self.step} was stopped; the resume repeats it)"
                                          if self.state.evaluation_pending else "")
            self.accelerator.print(f"\n{name}: {done}; continue with --resume_from_checkpoint latest")
            self.logger.log({"split": "signal", "signal": name, "step": self.step,
                             "checkpoint": None if path is None else str(path)})
            if self.bar is not None:
                self.bar.close()
            raise SystemExit(128 + (self.stop.received or signal.SIGTERM))
        return False

    def _position(self) -> tuple:
        return self.step, self.state.epoch, self.state.batches_in_epoch

    def _checkpoint(self) -> Path:
        self._read_deferred()
        if self.saved_at == self._position():  # this very position is saved (the last step's save, a resume)
            return checkpoints_root(self.output_dir) / f"step_{self.step}"
        trainer_state = {**self.state.to_checkpoint(), "job": self.job.state_dict(), "settings": self.settings}
        path = save_checkpoint(self.accelerator, self.output_dir, self.step, trainer_state, self.args.save_total_limit,
                               self.scheduler)
        self.saved_at = self._position()
        return path

    def _save_and_stop(self, message: str) -> None:
        self._checkpoint()
        raise CorefBertError(message)

    def _epoch_float(self) -> float:
        return round(self.state.epoch + self.state.batches_in_epoch / max(len(self.train_loader), 1), 4)

    def _log(self) -> None:
        self._read_deferred()
        accelerator, window, state = self.accelerator, self.state.window, self.state
        micro = max(window["micro"], 1)
        names = sorted(window["logs"])
        device = accelerator.device
        means = torch.stack([torch.as_tensor(value, dtype=torch.float32, device=device) / micro
                             for value in [window["loss"], *(window["logs"][n] for n in names)]])
        means = accelerator.reduce(means, reduction="mean").tolist()  # the one host read of the window
        counts = torch.tensor([float(window["tokens"]), window["slots"], window["flops"]], device=device,
                              dtype=torch.float32 if device.type == "mps" else torch.float64)  # mps has no float64
        tokens, slots, flops = accelerator.reduce(counts, reduction="sum").tolist()  # summed over processes
        seconds = max(time.perf_counter() - self.window_started, 1e-9)
        state.tokens += int(tokens)
        state.loss_sum += means[0] * window["micro"]
        state.loss_batches += window["micro"]
        record = {"split": "train", "step": self.step, "epoch": self._epoch_float(), "loss": means[0],
                  **dict(zip(names, means[1:])), "lr": self.scheduler.get_last_lr()[0]}
        if state.tokens:  # a job whose batches name their real tokens (token_masks)
            record.update(tokens=state.tokens, tokens_per_s=tokens / seconds)
        if slots:
            record["slot_fill"] = round(tokens / slots, 4)  # non-pad share of the padded batches computed
        if flops and self.peak_flops:
            record["mfu"] = round(flops / seconds / (self.peak_flops * accelerator.num_processes), 4)
        if self.grad_norm is not None:
            record["grad_norm"] = float(self.grad_norm)
        if self.compile_watch is not None:
            record["graphs"] = self.compile_watch.graphs()  # grows only when something compiled again
        if accelerator.scaler is not None:  # fp16: the loss scale tells whether steps are being skipped
            record["loss_scale"] = float(accelerator.scaler.get_scale())
            record["overflow_steps"] = state.overflow_steps
        self.logger.log(record)
        self._say_time_per_step(seconds)
        if self.args.with_tracking:
            accelerator.log({f"train/{k}": v for k, v in record.items() if k != "split"}, step=self.step)
        self.bar.set_postfix(loss=f"{record['loss']:.4f}")
        state.window = new_window()
        self.window_started = time.perf_counter()

    def _say_time_per_step(self, seconds: float) -> None:
        """Once, at the run's second log record (the first window pays the start-up): its time per step and what
        that makes of the steps left, so a run that is slow says so early."""
        if self.timing_said:
            return
        if self.timed_from is None:
            self.timed_from = self.step
            return
        self.timing_said = True
        steps, left = self.step - self.timed_from, self.total_steps - self.step
        if steps > 0 and left > 0:
            per_step = seconds / steps
            self.accelerator.print(f"{per_step:.2f} s per optimizer step over steps {self.timed_from + 1}-{self.step}: "
                                   f"about {_duration(per_step * left)} for the {left:,} steps left")

    def _log_compile(self) -> None:
        """One record after the first optimizer step of a compiled run: that step's wall time (the compilation of
        the training graph) and the graphs compiled so far (an evaluation before it compiles its own)."""
        watch = self.compile_watch
        record = {"split": "compile", "step": self.step, "scope": self.args.torch_compile_scope,
                  "first_step_s": round(watch.first_step_s, 2), "graphs": watch.graphs()}
        self.accelerator.print(f"compiled ({record['scope']}): first step {record['first_step_s']} s, "
                               f"{record['graphs']} graph(s) so far")
        self.logger.log(record)

    def results(self) -> dict[str, float]:
        window = self.state.host_window()
        if window["micro"]:  # the tail after the last log record (a resumed run that had nothing left to do)
            self.state.loss_sum += window["loss"]
            self.state.loss_batches += window["micro"]
        results = {"train_loss": self.state.loss_sum / max(self.state.loss_batches, 1),
                   "train_steps": self.step, "train_runtime": round(time.perf_counter() - self.started, 2)}
        if self.accelerator.scaler is not None:
            results["train_fp16_skipped_updates"] = self.state.overflow_steps
            results["train_fp16_loss_scale"] = self.accelerator.scaler.get_scale()
        return results


def defers_nonfinite_check(args: TrainingArguments, accelerator, optimizer) -> bool:
    """Whether the loop reads its non-finite flags only at log, evaluation, checkpoint and signal points
    instead of at every optimizer step: with ``--on_nonfinite stop`` and a fused optimizer that skips an
    update on a device flag (AdamW on CUDA and CPU), without fp16 loss scaling (the scaler reads its own flag
    every step), on one process or plain data parallelism (DeepSpeed and FSDP step their own optimizer)."""
    from accelerate.utils import DistributedType

    inner = getattr(optimizer, "optimizer", optimizer)  # the torch optimizer inside accelerate's wrapper
    plain = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
    return (args.on_nonfinite == "stop" and accelerator.scaler is None and accelerator.distributed_type in plain
            and bool(getattr(inner, "_step_supports_amp_scaling", False)) and bool(inner.defaults.get("fused")))


def _update_count(optimizer, parameter) -> float | None:
    """The update count ``optimizer`` keeps for ``parameter`` (0 before its first; None: it keeps none)."""
    if parameter is None:
        return None
    state = optimizer.state.get(parameter, {})
    if "step" not in state:
        return 0.0 if getattr(optimizer, "defaults", {}).get("fused") else None
    return float(state["step"])


def _duration(seconds: float) -> str:
    """``1 h 05 min``, ``12 min``, ``40 s``."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{round(seconds / 60)} min" if seconds >= 60 else f"{round(seconds)} s"
