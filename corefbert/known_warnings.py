"""Warnings of the libraries underneath that a correct run prints anyway, silenced one message at a time.

A newcomer reads every warning as a fault, so the two that this toolkit causes on every run, and
knows to be harmless, are dropped where they are true and nowhere else:

- DeepSpeed's "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect
  it." With DeepSpeed installed (the ``deepspeed`` extra, and the test install), accelerate and transformers
  import it whenever they unwrap a model, and its import probes for an accelerator. Dropped only while
  ``torch.cuda.is_available()`` is false: then the CPU is what the run uses and what accelerate reports.
  On a machine with a GPU that torch cannot see, the message stays, since there it points at a real problem.
- accelerate's "Removed shared tensor {...} while saving. This should be OK, ..." at every checkpoint. The
  MLM decoder of every encoder family is tied to the word embeddings (one tensor under two names); safetensors
  stores it once and ``load_state`` ties it again on resume (the resume tests compare every weight).
  Dropped only when every name it lists is such a tied decoder weight; any other shared tensor is still
  reported.

:func:`install` (called by ``import corefbert``) adds the filters to those two loggers; it imports neither
library. transformers' loading report is not filtered here: the toolkit's own loads that use the MRP head
silence it themselves (:func:`corefbert.pretraining.families.load_quietly`), and a user's plain load keeps it.
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
    """Add each filter to its logger once (the loggers are created here if the library has not made them yet;
    the library later configures the same object, and a logger's filters survive that)."""
    for name, expected in FILTERS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropExpected) and f.expected is expected for f in logger.filters):
            logger.addFilter(DropExpected(expected))
