"""Durable writes shared by the corpus and the training core (corefbert/text/durable.py)."""

from __future__ import annotations

import errno
import json

import pytest

from corefbert.errors import CorefBertError
from corefbert.text.durable import os_error_reason, replace_file, replace_folder, write_json_durably, writing


def test_a_refused_write_names_its_reason_and_leaves_no_partial_folder(tmp_path):
    partial = tmp_path / "chunk.tmp"
    with pytest.raises(CorefBertError, match=r"could not write chunk 3 \(disk full\); removed the partial copy, "
                                             r"the finished chunks are kept"):
        with writing(partial, "chunk 3", "the finished chunks are kept", then="rerun"):
            partial.mkdir()
            (partial / "rows.arrow").write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert not partial.exists() and not list(tmp_path.iterdir())
    with pytest.raises(KeyError), writing(partial, "chunk 3", "kept"):  # not a write failure: a bug, unchanged
        raise KeyError("bug")


def test_reasons_and_a_folder_put_in_place_whole(tmp_path):
    assert os_error_reason(OSError(errno.EROFS, "x")) == "read-only file system"
    assert os_error_reason(OSError(errno.EACCES, "x")) == "permission denied"
    final, new = tmp_path / "final", tmp_path / "final.tmp"
    final.mkdir()
    (final / "old").write_text("old")
    new.mkdir()
    write_json_durably(new / "state.json", {"step": 3})
    replace_folder(new, final)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    assert json.loads((final / "state.json").read_text()) == {"step": 3} and not (final / "old").exists()


def test_a_file_is_replaced_whole(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("old")
    replace_file(path, '{"done": true}\n')
    assert path.read_text() == '{"done": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
