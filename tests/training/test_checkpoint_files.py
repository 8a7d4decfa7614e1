"""The check of a checkpoint's files before a resume: unit cases the CLI suites do not reach.

The CLI-level proofs (a code-running pickle planted in each file of a real checkpoint, a deleted RNG file) are in
tests/system/test_security.py and tests/system/test_crash_safety.py.
"""

from __future__ import annotations

import os

import pytest
import torch

from corefbert.training.checkpoints.files import FILES_KEY, UnusableCheckpoint, check_files, record_files


def _checkpoint(folder):
    """A minimal checkpoint folder: an RNG file as accelerate writes it, recorded."""
    import random

    import numpy as np

    folder.mkdir()
    torch.save({"step": 0, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
                "torch_manual_seed": torch.get_rng_state()}, folder / "random_states_0.pkl")
    return {FILES_KEY: record_files(folder)}


def test_a_missing_or_resized_file_is_named(tmp_path):
    checkpoint = tmp_path / "step_1"
    state = _checkpoint(checkpoint)
    with open(checkpoint / "random_states_0.pkl", "ab") as handle:
        handle.write(b"\0")
    size = os.path.getsize(checkpoint / "random_states_0.pkl")
    with pytest.raises(UnusableCheckpoint, match=rf"^damaged: random_states_0.pkl has {size} bytes, {size - 1} were "
                                                 "saved$"):
        check_files(checkpoint, state, 0)
    (checkpoint / "random_states_0.pkl").unlink()
    with pytest.raises(UnusableCheckpoint, match="^incomplete: random_states_0.pkl is missing$"):
        check_files(checkpoint, state, 0)
