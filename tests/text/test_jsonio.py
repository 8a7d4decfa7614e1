"""The one JSON and one JSON Lines reader every format goes through: values, and one error line per problem."""

from __future__ import annotations

import bz2
import gzip

import pytest

from corefbert.errors import CorefBertError
from corefbert.text.jsonio import read_json, read_jsonl


def _jsonl(path, expected="one JSON value per line expected"):
    return list(read_jsonl(str(path), expected))


def test_jsonl_gives_line_numbers_and_skips_blank_lines(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n  \n[2]\r\n"three"\r4\n')  # BOM, \n, \r\n and a lone \r
    assert _jsonl(path) == [(1, {"a": 1}), (4, [2]), (5, "three"), (6, 4)]


@pytest.mark.parametrize("suffix, opener", [(".gz", gzip.open), (".bz2", bz2.open)])
def test_jsonl_reads_compressed_files(tmp_path, suffix, opener):
    path = tmp_path / f"a.jsonl{suffix}"
    with opener(path, "wb") as handle:
        handle.write(b'{"a": 1}\n{"b": 2}\n')
    assert _jsonl(path) == [(1, {"a": 1}), (2, {"b": 2})]


@pytest.mark.parametrize("content, message", [
    (b'{"a": 1}\n{"a": }\n', r"x\.jsonl:2:7: not valid JSON \(Expecting value\); expected X$"),
    (b'{"a": 1}\n{"a": "caf\xe9"}\n', r"x\.jsonl:2: not UTF-8 text \(invalid continuation byte at byte 19\); "
                                      r"re-encode it as UTF-8$"),
    (b"[" * 100_000 + b"\n", r"x\.jsonl:1: not valid JSON \(nested too deeply\); expected X$"),
    (b"1" * 5000 + b"\n", r"x\.jsonl:1: not valid JSON \(Exceeds the limit \(4300 digits\)"),
])
def test_jsonl_problems_are_one_line_naming_file_and_line(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(CorefBertError, match=message) as err:
        _jsonl(path, "expected X")
    assert "\n" not in str(err.value)


def test_jsonl_missing_and_corrupt_compressed_files(tmp_path):
    with pytest.raises(CorefBertError, match=r"none\.jsonl: file not found; check the path$"):
        _jsonl(tmp_path / "none.jsonl")
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(b'{"a": 1}\n' * 1000)[:60])
    with pytest.raises(CorefBertError, match=r"cut\.jsonl\.gz:\d+: unreadable compressed file \("):
        _jsonl(cut)
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(b'{"a": 1}\n')
    with pytest.raises(CorefBertError, match=r"plain\.jsonl\.gz:1: unreadable compressed file \("):
        _jsonl(plain)


def test_json_values_and_problems(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"data": [1, 2]}')
    assert read_json(str(good)) == {"data": [1, 2]}
    cases = [(b'{"data": [1,\n 2', r"bad\.json:2:3: not valid JSON \(Expecting ',' delimiter\); fix or re-download"),
             (b'["caf\xe9"]', r"bad\.json: not UTF-8 text \(invalid continuation byte at byte 5\)"),
             (b"[" * 100_000, r"bad\.json: not valid JSON \(nested too deeply\)")]
    for content, message in cases:
        (tmp_path / "bad.json").write_bytes(content)
        with pytest.raises(CorefBertError, match=message):
            read_json(str(tmp_path / "bad.json"))
    with pytest.raises(CorefBertError, match=r"none\.json: pass the thing$"):
        read_json(str(tmp_path / "none.json"), missing="pass the thing")
