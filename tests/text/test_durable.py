"""Durable writes shared by the corpus and the training core (corefbert/text/durable.py)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import can_mount_tmpfs

from corefbert.errors import CorefBertError
from corefbert.text.durable import (
    os_error_reason,
    output_file,
    output_path,
    refuse_writing_inputs,
    replace_file,
    replace_folder,
    write_json_durably,
    writing,
)

ROOT = Path(__file__).resolve().parents[2]


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


# One way a file enters an output folder, never through a link planted there.

def _victim(tmp_path):
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("precious", encoding="utf-8")
    return victim


def test_a_link_planted_at_the_output_name_is_replaced_and_its_target_kept(tmp_path):
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a.json", "b.bin", "c.jsonl"):
        (out / name).symlink_to(victim)
        if name == "c.jsonl":  # streamed: the file appears when the block ends
            with output_file(out / name) as handle:
                handle.write("line\n")
        else:
            replace_file(out / name, "{}" if name == "a.json" else b"\x00")
        assert not (out / name).is_symlink() and (out / name).is_file(), name
    dangling = out / "d.json"
    dangling.symlink_to(tmp_path / "elsewhere" / "created_through_the_link.json")
    replace_file(dangling, "{}")
    assert victim.read_text(encoding="utf-8") == "precious"
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["victim.txt"]
    assert sorted(p.name for p in out.iterdir()) == ["a.json", "b.bin", "c.jsonl", "d.json"]  # no scratch left


def test_a_library_writer_writes_at_the_fresh_path_and_a_failed_block_keeps_the_old_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"old")
    with pytest.raises(KeyError), output_path(path) as fresh:
        fresh.write_bytes(b"half")
        raise KeyError("a bug in the writer")  # not a write failure: raised unchanged
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]
    with output_path(path) as fresh:
        fresh.write_bytes(b"new")
    assert path.read_bytes() == b"new"


def test_a_folder_at_the_output_name_or_an_unwritable_folder_is_one_line(tmp_path):
    (tmp_path / "taken.json").mkdir()
    with pytest.raises(CorefBertError, match=r"taken.json: could not write the results: a folder stands at this name"):
        replace_file(tmp_path / "taken.json", "{}", "the results")
    with pytest.raises(CorefBertError, match=r"missing/x.json: could not write the file \(No such file"):
        replace_file(tmp_path / "missing" / "x.json", "{}")


def test_an_output_that_is_an_input_is_refused_by_any_name(tmp_path):
    source = tmp_path / "data" / "texts.jsonl"
    source.parent.mkdir()
    source.write_text("{}\n", encoding="utf-8")
    (tmp_path / "link").symlink_to(source.parent)
    os.link(source, tmp_path / "hard.jsonl")
    for output in (source, tmp_path / "link" / "texts.jsonl", tmp_path / "hard.jsonl"):
        with pytest.raises(CorefBertError, match=r"would replace the input .*texts.jsonl; choose another --output_dir"):
            refuse_writing_inputs([tmp_path / "other.html", output], [source])
    refuse_writing_inputs([tmp_path / "data" / "texts.html"], [source, tmp_path / "missing.txt"])  # no clash


@pytest.mark.slow
def test_a_real_full_disk_is_one_line_and_keeps_the_earlier_file(tmp_path):
    """A 64 KiB tmpfs in a private mount namespace: the write of 200 KiB fails with ENOSPC; the earlier file
    stays whole and no scratch is left."""
    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root and unshare (CI and the dev machines have both)")
    code = ("import sys\nfrom corefbert.errors import CorefBertError\nfrom corefbert.text.durable import replace_file\n"
            "replace_file(sys.argv[1] + '/r.json', 'old')\n"
            "try:\n    replace_file(sys.argv[1] + '/r.json', 'x' * 200_000, 'the results')\n"
            "except CorefBertError as err:\n    print(err)\n"
            "import os\nprint(open(sys.argv[1] + '/r.json').read(), sorted(os.listdir(sys.argv[1])))\n")
    script = 'mount -t tmpfs -o size=64k tmpfs "$1" || exit 99; "$2" -c "$3" "$1"'
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(mount), sys.executable, code],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    message, kept = done.stdout.splitlines()
    assert message == (f"{mount}/r.json: could not write the results (disk full); nothing was written there and an "
                       "earlier copy, if any, is intact. Free space, fix the permissions or choose another output "
                       "folder")
    assert kept == "old ['r.json']"
