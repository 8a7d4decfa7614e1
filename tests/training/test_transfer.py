"""A collated batch as one buffer (issue 36): :class:`corefbert.training.transfer.DeviceBatch` through pickling,
DataLoader workers and the move to a device keeps every tensor's values, dtype and shape, and a batch from a worker
arrives without a shared-memory file per tensor."""

from __future__ import annotations

import pickle

import pytest
import torch

from corefbert.training.transfer import DeviceBatch


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
