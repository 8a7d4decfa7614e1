"""The loop's state is a dataclass that a checkpoint's trainer state file holds under the
names the loop wrote when the state was a dict: files saved before and after the change read alike."""

from __future__ import annotations

import json

import torch

from corefbert.training.loop.state import LoopState, new_window

# The trainer state keys of the loop, as checkpoints written before the dataclass hold them.
SAVED_NAMES = {"epoch", "batches_in_epoch", "tokens", "overflow_steps", "skipped_in_a_row", "loss_sum",
               "loss_batches", "epoch_end_pending", "evaluation_pending", "window"}


def test_checkpoint_form_keeps_the_names_and_reads_back_equal():
    state = LoopState(epoch=2, batches_in_epoch=5, tokens=1234, overflow_steps=1, skipped_in_a_row=1,
                      loss_sum=7.5, loss_batches=3, epoch_end_pending=True, evaluation_pending=True)
    state.window.update(loss=torch.tensor(1.25), tokens=torch.tensor(40), micro=2, slots=64, flops=3.0)
    state.window["logs"]["mrp_loss"] = torch.tensor(0.5)
    saved = json.loads(json.dumps({**state.to_checkpoint(), "step": 9, "job": {"best_metric": 0.3},
                                   "settings": {"seed": 1}}))
    assert set(saved) - {"step", "job", "settings"} == SAVED_NAMES
    assert saved["window"] == {"loss": 1.25, "logs": {"mrp_loss": 0.5}, "micro": 2, "tokens": 40, "slots": 64,
                               "flops": 3.0}
    restored = LoopState.from_checkpoint(saved)
    assert restored.to_checkpoint() == state.to_checkpoint()
    assert (restored.epoch, restored.batches_in_epoch, restored.evaluation_pending) == (2, 5, True)


def test_a_state_file_of_an_older_checkpoint_loads_with_defaults_for_what_it_lacks():
    older = {"step": 4, "epoch": 1, "batches_in_epoch": 2, "tokens": 0, "overflow_steps": 0, "loss_sum": 3.0,
             "loss_batches": 4, "window": new_window(), "settings": {}}  # before skipped_in_a_row and the flags
    state = LoopState.from_checkpoint(older)
    assert (state.epoch, state.batches_in_epoch, state.loss_sum, state.loss_batches) == (1, 2, 3.0, 4)
    assert (state.skipped_in_a_row, state.epoch_end_pending, state.evaluation_pending) == (0, False, False)


def test_each_state_has_its_own_window():
    first, second = LoopState(), LoopState()
    first.window["micro"] += 1
    assert second.window["micro"] == 0
