"""The warnings every correct run printed: accelerate's "Removed shared tensor" at each
checkpoint of a model with a tied MLM decoder, DeepSpeed's "Setting accelerator to CPU" whenever a model is
unwrapped with DeepSpeed installed. A real process saves a real checkpoint; the same process with the
toolkit's filters taken off is the control that shows both messages are really caused there."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT

SAVE_AND_RESUME = textwrap.dedent("""
    import logging, sys
    import torch
    from accelerate import Accelerator
    from transformers import BertConfig
    from corefbert import known_warnings
    from corefbert.pretraining.modeling import CorefBertForPreTraining

    if sys.argv[2] == "without_filters":  # the control: what accelerate and DeepSpeed print on their own
        for name in known_warnings.FILTERS:
            logging.getLogger(name).filters.clear()
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(CorefBertForPreTraining(config))
    accelerator.save_state(sys.argv[1])
    accelerator.unwrap_model(model)
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.zero_()
    accelerator.load_state(sys.argv[1])
    decoder = model.cls.predictions.decoder.weight
    assert decoder.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()  # still tied
    assert decoder.abs().sum() > 0  # and restored from the checkpoint, under its one stored name
    print("saved and resumed")
""")


def _save_and_resume(tmp_path: Path, mode: str) -> str:
    done = subprocess.run([sys.executable, "-c", SAVE_AND_RESUME, str(tmp_path / mode), mode], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "saved and resumed" in done.stdout, done.stderr[-3000:]
    return done.stdout + done.stderr


def test_a_checkpoint_save_prints_neither_the_shared_tensor_nor_the_deepspeed_warning(tmp_path):
    printed = _save_and_resume(tmp_path, "with_filters")
    assert "Removed shared tensor" not in printed and "Setting accelerator to CPU" not in printed, printed

    control = _save_and_resume(tmp_path, "without_filters")
    assert "Removed shared tensor {" in control, control
    if importlib.util.find_spec("deepspeed") is not None:  # the DeepSpeed message exists only where it is installed
        assert "Setting accelerator to CPU" in control, control


def test_the_filters_drop_only_the_known_messages():
    from corefbert.known_warnings import _cpu_is_the_device, _only_tied_decoder_weights
    from corefbert.pretraining.families import PRETRAINING_CLASSES

    families = ("bert", "roberta", "modernbert", "deberta-v2", "electra", "distilbert")  # the classes of our own
    tied = [key for family in families for key in PRETRAINING_CLASSES[family]._tied_weights_keys]
    assert {"decoder.weight", "generator_lm_head.weight", "vocab_projector.weight"} <= set(tied)  # every family
    message = "[RANK 0] Removed shared tensor {%s} while saving. This should be OK, but check ..."
    assert _only_tied_decoder_weights(message % ", ".join(repr(name) for name in tied))
    assert _only_tied_decoder_weights(message % "'module.cls.predictions.decoder.weight'")  # a DDP wrapper
    # Any other shared tensor is still worth a warning.
    assert not _only_tied_decoder_weights(message % "'cls.predictions.decoder.weight', 'bert.encoder.x.weight'")
    assert not _only_tied_decoder_weights("Removed something else")
    import torch

    cpu = "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it."
    assert _cpu_is_the_device(cpu) is (not torch.cuda.is_available())
    assert not _cpu_is_the_device("Setting accelerator to CUDA")


@pytest.mark.parametrize("name", ["accelerate.utils.other", "DeepSpeed"])
def test_importing_corefbert_installs_each_filter_once(name):
    import logging

    import corefbert  # noqa: F401
    from corefbert import known_warnings

    known_warnings.install()  # a second call adds nothing
    assert sum(isinstance(f, known_warnings.DropExpected) for f in logging.getLogger(name).filters) == 1
