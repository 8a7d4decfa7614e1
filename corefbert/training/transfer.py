"""A collated batch that travels as one buffer: from a loader worker, into pinned memory and to the GPU.

A pretraining batch is twelve tensors (ids, masks, labels, word and document ids, six MRP target tensors). Sent
from a DataLoader worker, each tensor becomes a shared-memory file: the worker creates it, the training process
(or the loader's pinning thread) fetches its descriptor from a thread of the worker over an authenticated socket (a
round trip each) and later closes it. Then the DataLoader pins each tensor, and accelerate's ``send_to_device``
issues one host-to-device copy per tensor. :class:`DeviceBatch` packs the tensors into one byte buffer wherever the
batch moves: pickled by a worker (:meth:`DeviceBatch.__reduce__`: the one buffer, so one shared-memory file and one
descriptor round trip per batch), pinned (:meth:`DeviceBatch.pin_memory`: one pinned buffer, in the loader's
pinning thread) and moved to the GPU (:meth:`DeviceBatch.to`: one non-blocking copy), and hands out views of that
buffer. The values, dtypes and shapes are the tensors' own; collated in the training process (CPU training),
nothing is packed or copied.

Measured on the loaded 2-core machine (docs/guides/benchmarks.md, "Does the data path hide behind the step"): the
training thread waited 4.8 to 7.5 ms per batch (mean) with twelve files, about as long with the buffer's bytes sent
through the result pipe (1 MB through a 64 KB pipe: a context switch between the two processes per 64 KB), and 2.0
to 2.4 ms with the one shared buffer.
"""

from __future__ import annotations

import torch

#: Each tensor starts at a multiple of this many bytes in the packed buffer (the widest element, int64).
ALIGN = 8


class DeviceBatch(dict):
    """``name -> tensor`` of one collated batch (a plain ``dict`` for every reader); see the module docstring."""

    _packed: tuple[torch.Tensor, list] | None = None  # (uint8 buffer, [(name, offset, dtype, shape)])

    def packed(self, pin: bool = False) -> DeviceBatch:
        """This batch with its tensors as views of one byte buffer (pinned with ``pin``); already packed and
        pinned as asked: itself."""
        if self._views_of_buffer():
            buffer, layout = self._packed
            if pin and not buffer.is_pinned():
                return DeviceBatch._from_buffer(buffer.pin_memory(), layout, self)  # one copy of the whole buffer
            return self
        tensors = {name: value for name, value in self.items() if torch.is_tensor(value)}
        layout, size = [], 0
        for name, value in tensors.items():
            layout.append((name, size, value.dtype, tuple(value.shape)))
            size += -(-value.numel() * value.element_size() // ALIGN) * ALIGN
        buffer = torch.empty(size, dtype=torch.uint8, pin_memory=pin)  # [bytes]
        for name, offset, dtype, shape in layout:
            _view(buffer, offset, dtype, shape).copy_(tensors[name])
        return DeviceBatch._from_buffer(buffer, layout, self)

    @classmethod
    def _from_buffer(cls, buffer: torch.Tensor, layout: list, others: dict) -> DeviceBatch:
        """A batch of the tensors ``layout`` places in ``buffer`` and the non-tensor entries of ``others``."""
        batch = cls({name: value for name, value in others.items() if not torch.is_tensor(value)})
        for name, offset, dtype, shape in layout:
            batch[name] = _view(buffer, offset, dtype, shape)
        batch._packed = (buffer, layout)
        return batch

    def _views_of_buffer(self) -> bool:
        """Whether this batch's tensors are still the views :meth:`packed` made (none was replaced since)."""
        if self._packed is None:
            return False
        buffer, layout = self._packed
        base = buffer.data_ptr()
        return (len(layout) == sum(torch.is_tensor(value) for value in self.values())
                and all(torch.is_tensor(self.get(name)) and self[name].dtype == dtype
                        and tuple(self[name].shape) == shape
                        and (self[name].numel() == 0 or self[name].data_ptr() == base + offset)  # empty: no address
                        for name, offset, dtype, shape in layout))

    def __copy__(self) -> DeviceBatch:
        # copy.copy (torch's default_convert, pin_memory of a mapping) would otherwise go through __reduce__.
        copied = DeviceBatch(self)
        copied._packed = self._packed
        return copied

    def __reduce__(self):
        # Pickled (a DataLoader worker sending it): the one packed buffer, which torch's multiprocessing pickler
        # sends as one shared-memory file (see the module docstring); plain pickle copies its bytes.
        packed = self.packed()
        others = {name: value for name, value in packed.items() if not torch.is_tensor(value)}
        return _unpickle, (packed._packed[0], packed._packed[1], others)

    def pin_memory(self, device=None) -> DeviceBatch:
        """This batch in one pinned buffer (what ``DataLoader(pin_memory=True)`` calls)."""
        return self.packed(pin=True)

    def to(self, device, non_blocking: bool = False) -> DeviceBatch:
        """This batch on ``device``: one copy of the packed buffer when pinned, else one per tensor."""
        device = torch.device(device)
        if not self._views_of_buffer() or device.type == "cpu":
            if all(value.device == device for value in self.values() if torch.is_tensor(value)):
                return self
            return DeviceBatch({name: value.to(device, non_blocking=non_blocking) if torch.is_tensor(value) else value
                                for name, value in self.items()})
        buffer, layout = self._packed
        copied = buffer.to(device, non_blocking=non_blocking)  # the batch's one host-to-device copy
        return DeviceBatch._from_buffer(copied, layout, self)


def _unpickle(buffer: torch.Tensor, layout: list, others: dict) -> DeviceBatch:
    """A pickled :class:`DeviceBatch` back: the tensors as views of ``buffer``."""
    return DeviceBatch._from_buffer(buffer, layout, others)


def _view(buffer: torch.Tensor, offset: int, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    """The tensor of ``dtype`` and ``shape`` stored at byte ``offset`` of the uint8 ``buffer``."""
    nbytes = dtype.itemsize
    for size in shape:
        nbytes *= size
    return buffer[offset:offset + nbytes].view(dtype).view(shape)

