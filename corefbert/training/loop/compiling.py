"""``--torch_compile``: regional compilation of the repeated encoder layer, and what the log says about it.

Compiling a whole BERT traces every layer and both heads, whose MRP mention and referent dimensions change
from batch to batch (docs/design.md, "Known pitfalls"): minutes before the first step, and more at each new
shape. The encoder's layers (``BertLayer`` x 12), compiled in place one by one, share one compiled graph and
see ``[batch, length, hidden]`` alone; ``dynamic=True`` keeps a new batch or length from compiling again. The
heads, embeddings and loss run eager. ``--torch_compile_scope model`` compiles the whole model through
accelerate.
"""

from __future__ import annotations

import time

import torch


def compile_repeated_layers(model: torch.nn.Module, backend: str = "inductor",
                            mode: str | None = None) -> None:
    """Compile, in place, every layer of each repeated block of ``model`` (a ``ModuleList`` whose children
    share one class, outermost only); a model without one is compiled whole, in place. In place
    (``module.compile``) keeps the modules' hooks, so DDP, FSDP and DeepSpeed wrap them as before."""
    from accelerate.utils.other import is_repeated_blocks

    blocks: dict[str, torch.nn.Module] = {}
    for name, module in model.named_modules():
        if is_repeated_blocks(module) and not any(name.startswith(f"{outer}.") for outer in blocks):
            blocks[name] = module
    if not blocks:
        model.compile(backend=backend, mode=mode, dynamic=True)
    for block in blocks.values():
        for layer in block:
            layer.compile(backend=backend, mode=mode, dynamic=True)


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process so far (recompilations included)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompileWatch:
    """The log's view of a compiled run: the wall time of its first optimizer step (the training graph's
    compilation) and the graphs compiled since the run began (a count that keeps growing means recompilations)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.graphs_at_start = compiled_graphs()
        self.started: float | None = None
        self.first_step_s: float | None = None

    def step_begins(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    def step_ended(self) -> bool:
        """At the end of an optimizer step; True once, at the first (waits for the device then, once)."""
        if self.first_step_s is not None or self.started is None:
            return False
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.first_step_s = time.perf_counter() - self.started
        return True

    def graphs(self) -> int:
        return compiled_graphs() - self.graphs_at_start
