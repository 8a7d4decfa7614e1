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

Receiving that one buffer still costs the receiving thread the descriptor's round trip, the unpickling and the
mapping (1 to 2 ms per batch on the 2-core machine). On CUDA torch's pinning thread does it, off the training
thread. Where no pinning thread runs (CPU or an accelerator without pinned memory, with loader workers),
:func:`receive_ahead` gives the training loader a thread of the same role: :class:`ReceivingIterator`.
"""

from __future__ import annotations

import queue
import threading

import torch
from torch.utils.data import DataLoader

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
        if device.type == "cpu" or not self._views_of_buffer():
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


#: Batches the receiving thread holds ready beyond the one it is handing over (on top of the workers' own
#: ``prefetch_factor`` batches each in flight).
RECEIVE_AHEAD = 1

_END = object()  # the receiving thread's sign that the epoch's batches are all handed over


def receive_ahead(loader) -> bool:
    """Let a thread receive ``loader``'s batches from its workers ahead of the caller, as torch's pinning thread
    does on CUDA (the module docstring); True when it does. ``loader``: a torch ``DataLoader`` or accelerate's
    prepared loader around one (its ``base_dataloader``, which accelerate's wrapper iterates, so the wrapper's
    end-of-epoch flags stay on the caller's thread). Nothing changes for a loader without workers (collation
    would move to a thread that competes with the step for the interpreter), for one whose batches torch pins
    (its pinning thread already receives them), or for a ``DataLoader`` subclass (whose iterator is its own).
    The batches and their order are the loader's: the thread only calls ``next`` on the loader's iterator.

    accelerate builds its own ``DataLoader`` from the settings of the one it prepares (and again for
    ``skip_first_batches``), so the receiving is given to the loader it iterates, after the fact: that object
    becomes a :class:`ReceivingDataLoader`, which differs from a ``DataLoader`` only in the iterator it makes."""
    base = getattr(loader, "base_dataloader", loader)
    if type(base) is DataLoader and base.num_workers > 0 and not (base.pin_memory
                                                                  and torch.accelerator.is_available()):
        base.__class__ = ReceivingDataLoader
    return isinstance(base, ReceivingDataLoader)


class ReceivingDataLoader(DataLoader):
    """A ``DataLoader`` whose multi-process iterator is wrapped in a :class:`ReceivingIterator`."""

    def _get_iterator(self):
        # DataLoader.__iter__ calls this once per iteration, or once with persistent workers (then ``_reset``).
        return ReceivingIterator(super()._get_iterator())


class ReceivingIterator:
    """A DataLoader iterator whose batches a thread takes from ``inner`` (the loader's own iterator) one batch
    ahead of the caller, so that receiving a worker's batch (the descriptor's round trip, the unpickling) happens
    while the caller's step runs. An error in a worker or in ``inner`` is raised on the caller's ``next``, as
    ``inner`` would raise it. With persistent workers the DataLoader reuses its iterator through ``_reset`` at the
    start of each epoch: the thread of the epoch before is stopped first (at once when that epoch was left early,
    its batches in hand dropped, as ``inner._reset`` drops the workers' own).

    Taking batches ahead asks the loader's sampler for up to ``RECEIVE_AHEAD + 1`` more batches than the caller
    took. Within an epoch that changes nothing, nor does it for a sampler seeded per epoch (accelerate's seedable
    sampler, :class:`corefbert.pretraining.length_grouping.LengthGroupedSampler`). torch's ``RandomSampler`` with a
    generator draws its next epoch's order from how far the last one went, so there an epoch left early and a
    next one in the same process differ from torch's own; the training loop leaves an epoch early only when the
    run ends (``max_steps``, a signal), and a resume positions by batch count (``skip_first_batches``)."""

    def __init__(self, inner):
        self._inner = inner
        self._thread = None
        self._start()

    def _start(self) -> None:
        self._handed = queue.Queue(maxsize=RECEIVE_AHEAD)  # (batch, error) in the loader's order
        self._stop = threading.Event()
        # The thread refers to the inner iterator and the queue only, never to this object: dropping the
        # iterator stops the thread (__del__), and the thread's end drops the last reference to ``inner``.
        self._thread = threading.Thread(target=_receive, args=(self._inner, self._handed, self._stop),
                                        name="corefbert-receive", daemon=True)
        self._thread.start()

    def __iter__(self) -> ReceivingIterator:
        return self

    def __len__(self) -> int:
        return len(self._inner)

    def __next__(self):
        if self._thread is None:
            raise StopIteration
        batch, error = self._handed.get()
        if batch is _END or error is not None:
            self._thread.join()
            self._thread = None
            if error is not None:
                raise error
            raise StopIteration
        return batch

    def _finish(self) -> None:
        """Stop the thread and wait for it: it may be blocked handing over a batch (the queue is drained until
        it ends) or receiving one (it ends once that batch arrives)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        while thread.is_alive():
            try:
                self._handed.get(timeout=0.05)
            except queue.Empty:
                pass

    def _reset(self, loader, *args, **kwargs) -> None:
        # DataLoader.__iter__ with persistent workers: the next epoch on the same workers.
        self._finish()
        self._inner._reset(loader, *args, **kwargs)
        self._start()

    def __del__(self) -> None:
        try:
            self._finish()
        except Exception:  # interpreter shutdown: the daemon thread goes with the process
            pass


def _receive(inner, handed: queue.Queue, stop: threading.Event) -> None:
    """The receiving thread: ``next(inner)`` into ``handed`` until the epoch ends, an error, or ``stop``."""
    while not stop.is_set():
        try:
            item = (next(inner), None)
        except StopIteration:
            item = (_END, None)
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread, where inner raises it
            item = (None, error)
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.05)
                break
            except queue.Full:
                continue
        if item[0] is _END or item[1] is not None:
            return
