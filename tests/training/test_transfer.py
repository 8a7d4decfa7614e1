"""A collated batch as one buffer (issue 36): :class:`corefbert.training.transfer.DeviceBatch` through pickling,
DataLoader workers and the move to a device keeps every tensor's values, dtype and shape, and a batch from a worker
arrives without a shared-memory file per tensor. Where no pinning thread receives workers' batches,
:func:`~corefbert.training.transfer.receive_ahead`'s thread does, in the loader's order, with the loader's errors."""

from __future__ import annotations

import gc
import pickle
import threading
import time

import pytest
import torch
from helpers import receiving_threads

from corefbert.training.transfer import DeviceBatch, ReceivingDataLoader, receive_ahead


def _batch(seed: int) -> DeviceBatch:
    generator = torch.Generator().manual_seed(seed)
    return DeviceBatch(
        input_ids=torch.randint(0, 1000, (4, 24), generator=generator),  # [batch, seq]
        attention_mask=torch.ones(4, 24, dtype=torch.bool),  # [batch, seq]
        mrp_weights=torch.rand(4, 3, generator=generator),  # [batch, mentions] float32
        mrp_positions=torch.empty(0, 2, dtype=torch.int64),  # [0, 2]: a batch without MRP targets
        half=torch.rand(5, generator=generator).to(torch.float16),  # [5] odd byte count: alignment
        name="not a tensor",
    )


def _assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if torch.is_tensor(value):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            assert torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


def test_a_pickled_batch_comes_back_equal_as_views_of_one_writable_buffer():
    batch = _batch(0)
    back = pickle.loads(pickle.dumps(batch))
    assert isinstance(back, DeviceBatch)
    _assert_same(back, batch)
    buffer = back._packed[0]
    for key in ("input_ids", "mrp_weights", "half"):
        assert back[key].untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr(), key
    back["input_ids"][0, 0] = -1  # a writable copy: the collator's caller may edit the batch in place
    assert batch["input_ids"][0, 0] != -1


def test_a_batch_whose_tensor_was_replaced_after_packing_moves_the_replacement():
    packed = _batch(1).packed()
    packed["input_ids"] = torch.zeros(4, 24, dtype=torch.int64)  # the buffer's view no longer holds it
    for batch in (packed.to("cpu"), pickle.loads(pickle.dumps(packed))):
        assert torch.equal(batch["input_ids"], torch.zeros(4, 24, dtype=torch.int64))
        _assert_same({k: v for k, v in batch.items() if k != "input_ids"},
                     {k: v for k, v in _batch(1).items() if k != "input_ids"})


class _Batches(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> int:
        return index


def _collate(indices: list[int]) -> DeviceBatch:
    return _batch(indices[0])


def test_batches_from_workers_equal_those_of_no_workers_in_one_shared_memory_file_each():
    """Issue 36: pickled by a worker, each tensor of a batch became a shared-memory file whose descriptor the
    training process fetched from the worker (a round trip each; about 5 ms of its thread per 12-tensor batch on
    a loaded 2-core machine). Packed, the batch travels as one shared buffer whose views are the tensors."""
    batches = {}
    for workers in (0, 2):
        loader = torch.utils.data.DataLoader(_Batches(), batch_size=1, num_workers=workers, collate_fn=_collate)
        batches[workers] = list(loader)
    assert len(batches[2]) == len(batches[0]) == 6
    for got, want in zip(batches[2], batches[0]):
        _assert_same(got, want)
        storages = {value.untyped_storage().data_ptr() for value in got.values() if torch.is_tensor(value)
                    and value.numel()}
        assert len(storages) == 1 and got._packed[0].is_shared()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and a device copy need CUDA")
def test_a_pinned_batch_goes_to_the_gpu_in_one_copy_with_its_values():
    batch = _batch(2)
    pinned = batch.pin_memory()
    assert pinned._packed[0].is_pinned()
    moved = pinned.to("cuda", non_blocking=True)
    assert moved["input_ids"].untyped_storage().data_ptr() == moved["half"].untyped_storage().data_ptr()
    _assert_same({k: v.cpu() if torch.is_tensor(v) else v for k, v in moved.items()}, batch)


# --- receive_ahead: a thread receives workers' batches where no pinning thread does (issue 36) -------------------

RECEIVED_ON: list[str] = []  # threads that rebuilt a _Noted batch, in the training process


class _Noted(dict):
    """A batch that notes which thread of the receiving process unpickles it."""

    def __reduce__(self):
        return _rebuild_noted, (dict(self),)


def _rebuild_noted(items: dict) -> _Noted:
    RECEIVED_ON.append(threading.current_thread().name)
    return _Noted(items)


def _noted(indices: list[int]) -> _Noted:
    return _Noted(index=torch.tensor(indices))


class _EpochShuffled(torch.utils.data.Sampler):
    """The 6 indices in an order seeded by the epoch (the trainer's samplers are)."""

    epoch = 0

    def __len__(self) -> int:
        return 6

    def __iter__(self):
        return iter(torch.randperm(6, generator=torch.Generator().manual_seed(self.epoch)).tolist())


class _FailsAt(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        if index == 7:
            raise ValueError("row 7 is broken")
        return index


def _loader(workers: int, dataset=None, **kwargs) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(dataset or _Batches(), batch_size=1, num_workers=workers, collate_fn=_noted,
                                       **kwargs)


def _indices(batches) -> list[int]:
    return [int(batch["index"][0]) for batch in batches]


def test_receive_ahead_unpickles_workers_batches_on_its_thread_in_the_loaders_order():
    RECEIVED_ON.clear()
    loader = _loader(2)
    assert receive_ahead(loader) and isinstance(loader, ReceivingDataLoader)
    assert receive_ahead(loader)  # again: already receiving, nothing added
    assert _indices(loader) == list(range(6))
    assert RECEIVED_ON == ["corefbert-receive"] * 6  # not the caller's thread: the point of it
    assert receiving_threads() == 0  # a whole epoch ends its thread


def test_receive_ahead_leaves_a_loader_without_workers_or_of_another_class_as_it_is():
    plain = _loader(0)
    assert not receive_ahead(plain) and type(plain) is torch.utils.data.DataLoader

    class Own(torch.utils.data.DataLoader):
        pass

    own = Own(_Batches(), num_workers=1, collate_fn=_noted)
    assert not receive_ahead(own) and type(own) is Own
    RECEIVED_ON.clear()
    assert _indices(plain) == list(range(6)) and RECEIVED_ON == []  # collated on this thread, never pickled


def test_persistent_workers_through_the_receiving_thread_give_the_batches_of_the_same_loader_without_it():
    """Epochs on the same persistent workers, every other one left after 2 batches (max_steps): each epoch's
    batches are those of the same loader without the thread. The sampler is seeded per epoch, as the trainer's are
    (see :class:`~corefbert.training.transfer.ReceivingIterator` on one whose next epoch depends on how far the
    last went)."""
    samplers = [_EpochShuffled(), _EpochShuffled()]
    loaders = [_loader(2, persistent_workers=True, sampler=sampler) for sampler in samplers]
    receive_ahead(loaders[1])
    whole = []
    for epoch in range(4):
        orders = []
        for loader, sampler in zip(loaders, samplers):
            sampler.epoch = epoch
            got = []
            for batch in loader:
                got.append(batch)
                if epoch % 2 and len(got) == 2:
                    break  # the next epoch starts afresh on the same workers
            orders.append(_indices(got))
        assert orders[1] == orders[0], epoch
        assert sorted(orders[0]) == list(range(6)) if epoch % 2 == 0 else len(orders[0]) == 2, epoch
        whole += [] if epoch % 2 else [orders[0]]
        # A left epoch's thread waits, holding what it received, until the next epoch or the loader's end.
        assert receiving_threads() == epoch % 2, epoch
    assert whole[0] != whole[1]  # epochs 0 and 2: reshuffled
    del loaders, loader
    gc.collect()
    assert receiving_threads() == 0


def test_a_workers_error_reaches_the_caller_after_the_batches_before_it():
    loader = _loader(1, dataset=_FailsAt())
    receive_ahead(loader)
    got = []
    with pytest.raises(ValueError, match="row 7 is broken"):
        for batch in loader:
            got.append(batch)
    assert _indices(got) == list(range(7))
    assert receiving_threads() == 0


def test_accelerates_prepared_loader_receives_ahead_and_keeps_its_end_of_epoch_flag_on_the_callers_thread():
    """accelerate iterates its own DataLoader (``base_dataloader``) one batch ahead to know the last one: that
    knowledge (``end_of_dataloader``, which ends a gradient accumulation early at an epoch's end) must come when
    the caller reaches the last batch, not when the receiving thread does."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    accelerator = Accelerator(cpu=True)
    try:
        prepared = accelerator.prepare(_loader(2))
        assert receive_ahead(prepared) and isinstance(prepared.base_dataloader, ReceivingDataLoader)
        ends, got = [], []
        for batch in prepared:
            time.sleep(0.02)  # a step: the receiving thread is at the epoch's end long before the caller
            ends.append(accelerator.gradient_state.end_of_dataloader)
            got.append(batch)
        assert ends == [False] * 5 + [True] and _indices(got) == list(range(6))
        skipped = accelerator.skip_first_batches(prepared, 4)
        assert receive_ahead(skipped)
        assert _indices(skipped) == [4, 5]
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
