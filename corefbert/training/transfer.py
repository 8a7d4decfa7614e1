"""A collated batch that goes to the GPU in one host-to-device copy instead of one per tensor.

A pretraining batch is twelve tensors (ids, masks, labels, word and document ids, six MRP target tensors). The
DataLoader pins each, and ``send_to_device`` (accelerate) issues one copy per tensor. :class:`DeviceBatch` hooks
into both: :meth:`DeviceBatch.pin_memory` (called by the DataLoader, in its pinning thread when workers collate)
packs every tensor into one pinned byte buffer, and :meth:`DeviceBatch.to` (called by accelerate's
``send_to_device``) copies that buffer once, non-blocking, and hands out views of the copy on the device. The
values, dtypes and shapes are the tensors' own; without pinning (CPU training) nothing is packed or copied.
"""

from __future__ import annotations

import torch

#: Each tensor starts at a multiple of this many bytes in the packed buffer (the widest element, int64).
ALIGN = 8


class DeviceBatch(dict):
    """``name -> tensor`` of one collated batch (a plain ``dict`` for every reader); see the module docstring."""

    _packed: tuple[torch.Tensor, list] | None = None  # (uint8 buffer, [(name, offset, dtype, shape)])

    def pin_memory(self, device=None) -> DeviceBatch:
        """This batch in one pinned buffer (what ``DataLoader(pin_memory=True)`` calls)."""
        tensors = {name: value for name, value in self.items() if torch.is_tensor(value)}
        layout, size = [], 0
        for name, value in tensors.items():
            layout.append((name, size, value.dtype, tuple(value.shape)))
            size += -(-value.numel() * value.element_size() // ALIGN) * ALIGN
        buffer = torch.empty(size, dtype=torch.uint8).pin_memory()  # [bytes]
        pinned = DeviceBatch(self)
        for name, offset, dtype, shape in layout:
            view = _view(buffer, offset, dtype, shape)
            view.copy_(tensors[name])
            pinned[name] = view
        pinned._packed = (buffer, layout)
        return pinned

    def to(self, device, non_blocking: bool = False) -> DeviceBatch:
        """This batch on ``device``: one copy of the packed buffer when pinned, else one per tensor."""
        device = torch.device(device)
        if self._packed is None or device.type == "cpu":
            if all(value.device == device for value in self.values() if torch.is_tensor(value)):
                return self
            return DeviceBatch({name: value.to(device, non_blocking=non_blocking) if torch.is_tensor(value) else value
                                for name, value in self.items()})
        buffer, layout = self._packed
        copied = buffer.to(device, non_blocking=non_blocking)  # the batch's one host-to-device copy
        moved = DeviceBatch(self)
        for name, offset, dtype, shape in layout:
            moved[name] = _view(copied, offset, dtype, shape)
        return moved


def _view(buffer: torch.Tensor, offset: int, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    """The tensor of ``dtype`` and ``shape`` stored at byte ``offset`` of the uint8 ``buffer``."""
    nbytes = dtype.itemsize
    for size in shape:
        nbytes *= size
    return buffer[offset:offset + nbytes].view(dtype).view(shape)
