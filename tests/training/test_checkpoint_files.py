"""The check of a checkpoint's files before a resume (issue 33.2, 33.4): unit cases the CLI suites do not reach.

The CLI-level proofs (a code-running pickle planted in each file of a real checkpoint, a deleted RNG file) are in
tests/system/test_security.py and tests/system/test_crash_safety.py.
"""

from __future__ import annotations

import os

import pytest
import torch
from test_security import _plant

from corefbert.training.checkpoint_files import FILES_KEY, UnusableCheckpoint, check_files, record_files


def _checkpoint(folder):
    """A minimal checkpoint folder: an RNG file as accelerate writes it, recorded."""
    import random

    import numpy as np

    folder.mkdir()
    torch.save({"step": 0, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
                "torch_manual_seed": torch.get_rng_state()}, folder / "random_states_0.pkl")
    return {FILES_KEY: record_files(folder)}


def test_a_pickle_behind_a_link_to_a_folder_is_read_safely_too(tmp_path):
    """DeepSpeed keeps its state in a subfolder (``pytorch_model/``); a link planted there is followed by the
    loader, so the check follows it too (``Path.rglob`` would not), and a link to an ancestor is no loop."""
    checkpoint = tmp_path / "step_1"
    state = _checkpoint(checkpoint)
    assert check_files(checkpoint, state, 0)["torch_manual_seed"].dtype == torch.uint8
    elsewhere, marker = tmp_path / "elsewhere", tmp_path / "ran"
    elsewhere.mkdir()
    (elsewhere / "back").symlink_to(checkpoint)
    _plant(elsewhere / "mp_rank_00_model_states.pt", marker, zip_format=True)
    (checkpoint / "pytorch_model").symlink_to(elsewhere)
    with pytest.raises(UnusableCheckpoint, match=r"^pytorch_model/mp_rank_00_model_states.pt holds a pickle that "
                                                 "would run code or build objects when loaded"):
        check_files(checkpoint, state, 0)
    assert not marker.exists()


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
