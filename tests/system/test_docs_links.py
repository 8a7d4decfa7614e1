"""Every relative link in the README and the docs reaches a file that exists, and every ``#anchor`` a heading
of that file: a guide moved or a section renamed must not leave a reader at a dead link."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(path: Path) -> str:
    """The file's text without fenced code (a ``](x)`` inside code is not a link)."""
    return re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the file's headings: lower case, punctuation dropped, spaces to hyphens, a
    repeated heading suffixed -1, -2, ..."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(path), flags=re.M):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def dead_links(paths: list[Path], root: Path = ROOT) -> list[str]:
    dead = []
    for path in paths:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(path)):
            if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file) if file else path
            where = f"{path.relative_to(root)}: ({target})"
            if not linked.exists():
                dead.append(f"{where}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
                dead.append(f"{where}: no such heading")
    return dead


def test_every_relative_link_and_anchor_in_the_docs_resolves():
    assert len(DOCS) > 10
    assert not dead_links(DOCS), "\n".join(dead_links(DOCS))


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "guide.md").write_text("# Paper ↔ code\n\n## Results (issue 26)\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](guide.md#paper--code) [ok](guide.md#results-issue-26) [gone](old/guide.md) "
        "[renamed](guide.md#results) [web](https://example.org/x.md)\n```\n[code](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert dead_links([page], root=tmp_path) == [
        "page.md: (old/guide.md): no such file",
        "page.md: (guide.md#results): no such heading",
    ]
