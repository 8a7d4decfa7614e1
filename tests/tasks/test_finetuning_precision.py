"""Fine-tuning takes the launcher's precision: ``accelerate launch --config_file`` exports
ACCELERATE_MIXED_PRECISION, and the default ``--mixed_precision auto`` must not override it."""

from __future__ import annotations

import pytest

from corefbert.argparser import parse_args
from corefbert.tasks.base import FinetuningArguments
from corefbert.training.loop.setup import build_accelerator


def _args(tmp_path, *flags: str) -> FinetuningArguments:
    (args,) = parse_args([FinetuningArguments], ["--model_name_or_path", "unused", "--output_dir", str(tmp_path),
                                                 "--do_eval", *flags])
    return args


def test_default_follows_the_launchers_bf16(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what accelerate launch sets from multi_gpu.yaml
    args = _args(tmp_path)
    assert args.mixed_precision == "auto"
    assert build_accelerator(args).mixed_precision == "bf16"


@pytest.mark.parametrize("flag", ["no", "bf16"])
def test_an_explicit_flag_wins_over_the_launcher(tmp_path, monkeypatch, flag):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16" if flag == "bf16" else "bf16")
    assert build_accelerator(_args(tmp_path, "--mixed_precision", flag)).mixed_precision == flag


def test_default_without_a_launcher_on_cpu_is_full_precision(tmp_path, monkeypatch):
    import torch

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert build_accelerator(_args(tmp_path)).mixed_precision == "no"
