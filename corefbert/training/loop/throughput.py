"""Model FLOPs of a training step and the card's peak: one formula for the log's ``mfu`` and benchmarks."""

from __future__ import annotations

from collections.abc import Callable

import torch

# Dense bf16 peak (TFLOP/s) of the cards this project's device machines have (vendor data sheets).
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def transformer_training_flops(config, batch: int, length: int) -> float:
    """Training FLOPs of one step of a BERT-style encoder with an MLM head over every position (forward +
    backward = 3x forward), matmuls only (PaLM appendix B)."""
    h, layers, tokens = config.hidden_size, config.num_hidden_layers, batch * length
    per_layer = 2 * (4 * h * h + 2 * h * config.intermediate_size)  # projections + MLP, per token
    attention = 2 * 2 * length * h  # QKᵀ and attention · V, per token
    mlm_head = 2 * (h * h + h * config.vocab_size)
    return 3 * tokens * (layers * (per_layer + attention) + mlm_head)


def training_flops_counter(model) -> Callable[[tuple], float]:
    """``shape -> FLOPs`` of one micro-batch of ``[batch, length]`` for ``model``; 0 for a model without a
    BERT-style config (recurrent readers, ...), whose MFU is then not logged."""
    config = getattr(model, "config", None)
    needed = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")
    if config is None or not all(isinstance(getattr(config, name, None), int) for name in needed):
        return lambda shape: 0.0
    return lambda shape: transformer_training_flops(config, int(shape[0]), int(shape[1]))


def peak_flops(device: torch.device) -> float | None:
    """The dense bf16 peak of a CUDA ``device`` in FLOP/s (from its name); None on CPU or an unknown card."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    tflops = next((value for key, value in PEAK_BF16_TFLOPS.items() if key in name), None)
    return tflops * 1e12 if tflops else None
