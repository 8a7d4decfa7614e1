"""No family-specific string rule decides what a word is: words and mention spans come from character
offsets and the tokenizer's own word ids (corefbert/text/tokenizers.py, corefbert/corpus/packing.py), so the package
holds no WordPiece continuation prefix, no byte-level BPE space byte and no SentencePiece space piece in its code.

Read from the source with the import-graph checker's one reader (``test_architecture.MODULES``), as
``test_one_home.py`` reads it; prose (docstrings, comments) may name the markers. The last test plants each kind of
rule in a fake module and watches the checker find every one.
"""

from __future__ import annotations

import ast
import re

from test_architecture import MODULES

# SentencePiece's space piece (U+2581) and byte-level BPE's space byte (U+0120), however the source spells them.
SPACE_MARKS = {"\u2581": "SentencePiece's space piece", "\u0120": "byte-level BPE's space byte"}
# WordPiece's continuation prefix: "##" not followed by a space or another "#" (a Markdown heading is no rule).
WORDPIECE_PREFIX = re.compile(r"##(?![\s#])")
#: (module, marker) -> why it may hold that marker.
ALLOWED = {
    ("corefbert.pretraining.convert", "##"): "a released BERT vocab.txt is WordPiece by definition: its casing check "
                                             "reads each entry without the continuation prefix",
}


def _prose(tree: ast.Module) -> set[int]:
    """The string constants that are statements of their own (docstrings): documentation, not code."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def family_string_rules(name: str, tree: ast.Module) -> list[str]:
    """Where module ``name`` (its parsed source ``tree``) holds a tokenizer family's marker string in code."""
    found = []
    prose = _prose(tree)
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and id(node) not in prose:
            if isinstance(node.value, str):
                text = node.value
            elif isinstance(node.value, bytes):
                text = node.value.decode("utf-8", errors="replace")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "chr" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int):
            text = chr(node.args[0].value)
        if not text:
            continue
        markers = [mark for mark in SPACE_MARKS if mark in text] + (["##"] if WORDPIECE_PREFIX.search(text) else [])
        for marker in markers:
            if (name, marker) not in ALLOWED:
                what = SPACE_MARKS.get(marker, "WordPiece's continuation prefix")
                found.append(f"{name}:{node.lineno}: {what} {marker!r} in code: take words from the tokenizer's offsets "
                             "and word ids (corefbert.text.tokenizers)")
    return found


def test_no_module_decides_words_by_a_familys_marker_string():
    found = [line for module in MODULES.values() for line in family_string_rules(module.name, module.tree)]
    assert not found, "\n".join(found)


def test_each_allowed_rule_is_still_there():
    """An allowance that no longer matches anything is dropped, not kept as a hole."""
    for module, marker in ALLOWED:
        assert module in MODULES, module
        assert family_string_rules(module, MODULES[module].tree) == []
        text = MODULES[module].path.read_text(encoding="utf-8")
        assert f'"{marker}"' in text, (module, marker)


def test_a_planted_string_rule_of_each_family_is_found():
    planted = ast.parse(
        '"""A docstring may say that WordPiece marks continuations with ##s and BPE spaces with \u0120."""\n'
        "def words(pieces, piece, ids):\n"
        '    """Nor is ## in a function docstring a rule."""\n'
        '    starts = [not p.startswith("##") for p in pieces]\n'
        '    bpe = [p.startswith("\\u0120") for p in pieces]\n'
        "    lone = piece == '\u2581'\n"
        "    spm = piece.lstrip(chr(0x2581))\n"
        '    raw = piece.encode() == b"\\xe2\\x96\\x81"\n'
        '    pattern = r"^##\\w+"\n'
        '    heading = "## How to use"\n'
        "    return starts, bpe, lone, spm, raw, pattern, heading\n"
    )
    found = family_string_rules("corefbert.tasks.planted", planted)
    assert sum("WordPiece's continuation prefix" in line for line in found) == 2, found
    assert sum("byte-level BPE's space byte" in line for line in found) == 1, found
    assert sum("SentencePiece's space piece" in line for line in found) == 3, found
    assert not any(":1:" in line or ":3:" in line or ":10:" in line for line in found), found  # prose, a heading
    # The one allowance covers its module and marker only.
    convert = ast.parse('def casing(entries):\n    return [e.removeprefix("##") for e in entries]\n')
    assert family_string_rules("corefbert.pretraining.convert", convert) == []
    assert len(family_string_rules("corefbert.tasks.convert_copy", convert)) == 1
