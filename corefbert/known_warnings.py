"""Warnings of the libraries underneath that a correct run prints anyway, silenced one message at a time.

A newcomer reads every warning as a fault, so the two every run causes are dropped where true, nowhere else:

- DeepSpeed's "Setting accelerator to CPU ...", printed whenever accelerate or transformers import it to
  unwrap a model: dropped only while ``torch.cuda.is_available()`` is false (on a machine with a GPU torch
  cannot see, it points at a real problem).
- accelerate's "Removed shared tensor {...} while saving" at every checkpoint (the MLM decoder is tied to the
  word embeddings): dropped only when every name it lists is such a tied decoder weight.

:func:`install` (called by ``import corefbert``) imports neither library. transformers' loading report is not
filtered here (:func:`corefbert.pretraining.families.load_quietly`).
"""

from __future__ import annotations

import logging
import re

#: The tied MLM decoder weights of BERT and DeBERTa (``cls.``), RoBERTa (``lm_head.``), ModernBERT (``decoder.``),
#: ELECTRA (``generator_lm_head.``) and DistilBERT (``vocab_projector.``): the keys of every pretraining class's
#: ``_tied_weights_keys`` (a test checks they are the same), under any wrapper prefix.
TIED_DECODER = re.compile(r"((module|_orig_mod)\.)*((cls\.predictions|lm_head)\.decoder\.(weight|bias)|decoder\.weight"
                          r"|generator_lm_head\.weight|vocab_projector\.weight)")
SHARED_TENSOR = re.compile(r"(\[RANK \d+\] )?Removed shared tensor \{(?P<names>[^}]*)\} while saving")
DEEPSPEED_CPU = "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it."


def _only_tied_decoder_weights(message: str) -> bool:
    match = SHARED_TENSOR.match(message)
    if match is None:
        return False
    names = [name.strip().strip("'\"") for name in match.group("names").split(",")]
    return bool(names) and all(TIED_DECODER.fullmatch(name) for name in names)


def _cpu_is_the_device(message: str) -> bool:
    if message != DEEPSPEED_CPU:
        return False
    import torch

    return not torch.cuda.is_available()


class DropExpected(logging.Filter):
    """Drops a record when ``expected(message)`` says it is the known, harmless message."""

    def __init__(self, expected):
        super().__init__()
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.expected(record.getMessage())


#: logger name -> test of the one message dropped there
FILTERS = {
    "accelerate.utils.other": _only_tied_decoder_weights,  # accelerate.utils.other.clean_state_dict_for_safetensors
    "DeepSpeed": _cpu_is_the_device,  # deepspeed.accelerator.real_accelerator.get_accelerator
}


def install() -> None:
    """Add each filter to its logger once (created here if need be: a logger's filters survive its library's
    configuration)."""
    for name, expected in FILTERS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropExpected) and f.expected is expected for f in logger.filters):
            logger.addFilter(DropExpected(expected))
