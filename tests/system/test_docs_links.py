"""The docs are true to the tree, checked on the source:

- every relative link in the README and the docs reaches a file that exists, and every ``#anchor`` a heading of
  that file: a guide moved or a section renamed must not leave a reader at a dead link;
- every dotted name of docs/contracts.md names a module, class, function or attribute the package has (the rule
  is :func:`stale_names`'s);
- docs/layout.md names every folder and module of the package and of its ``tasks/``;
- no source file cites a file outside the repository (what the code relies on is in docs/, e.g. docs/design.md),
  and the docs point outside it only to the papers and the data;
- the docs name no tracker issue number, session or writing machine's path (:func:`private_words`).

Each checker runs on planted files too, and fails there.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import io
import re
import tokenize
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


# ------------------------------------------------------------------------------ the names contracts.md uses

# Objects the contracts name by a variable, and the class each is: ``rules.finished`` is a field of SweepRules.
OBJECTS = {
    "rules": "corefbert.training.sweep.SweepRules",
    "job": "corefbert.training.loop.job.TrainingJob",
    "task": "corefbert.tasks.base.FinetuningTask",
    "mrp": "corefbert.pretraining.modeling.MentionReferenceHead",
}
# Objects of the libraries underneath (a transformers config, an accelerate Accelerator): not ours to check.
FOREIGN_OBJECTS = {"config", "accelerator", "tokenizer"}
# A dotted span whose last part is one of these is a file name (``trainer_state.json``), not a dotted name.
FILE_SUFFIXES = {"json", "jsonl", "safetensors", "pkl", "md", "py", "txt", "tsv", "conll", "html", "tmp", "yaml",
                 "lock", "xml", "csv", "gz", "bz2", "bin", "pt", "png", "sh"}
DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?", flags=re.S)


def dotted_names(text: str) -> list[str]:
    """The dotted names of ``text``'s inline code spans (fenced code left out): identifiers joined by dots,
    optionally called (``corefbert.text.jsonio.read_jsonl(path, expected=...)`` gives the name before the
    parenthesis); file names (``trainer_state.json``) are not dotted names."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    names = []
    for span in re.findall(r"`([^`]+)`", prose):
        match = DOTTED.fullmatch(" ".join(span.split()))
        if match and match.group(1).rpartition(".")[2] not in FILE_SUFFIXES:
            names.append(match.group(1))
    return names


def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    """What a module binds at its top (a function, class, assignment or import; inside a top-level ``if`` or
    ``try`` too)."""
    bound, todo = {}, list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update((t.id, node) for target in targets for t in ast.walk(target) if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update(((a.asname or a.name).split(".")[0], node) for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            todo += node.body + node.orelse + getattr(node, "finalbody", []) + \
                [n for handler in getattr(node, "handlers", []) for n in handler.body]
    return bound


def _class_attributes(node: ast.ClassDef) -> set[str]:
    """A class's attributes: what its body binds (methods, class attributes, dataclass fields) and what its
    methods assign on ``self``."""
    names = set(_top_level_names(ast.Module(body=node.body, type_ignores=[])))
    for method in (n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        for inner in ast.walk(method):
            targets = inner.targets if isinstance(inner, ast.Assign) else \
                [inner.target] if isinstance(inner, ast.AnnAssign | ast.AugAssign) else []
            names |= {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                      and t.value.id == "self"}
    return names


class SourceIndex:
    """The modules of a package, read from the source (no import: the models' modules take seconds to import)."""

    def __init__(self, package_dir: Path):
        self.package = package_dir.name
        self.trees = {}
        for path in sorted(package_dir.rglob("*.py")):
            parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.trees[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.defined = {}  # a class or function name -> the modules that define it at their top
        for name, tree in self.trees.items():
            for top, node in _top_level_names(tree).items():
                if isinstance(node, ast.ClassDef | ast.FunctionDef):
                    self.defined.setdefault(top, []).append(f"{name}.{top}")

    def _has(self, owner: str, rest: list[str]) -> bool:
        """Whether ``owner`` (a module or a module's top-level class) has the attributes ``rest`` in turn."""
        if not rest:
            return owner in self.trees or self._node(owner) is not None
        if f"{owner}.{rest[0]}" in self.trees:
            return self._has(f"{owner}.{rest[0]}", rest[1:])
        node = self._node(owner)
        if isinstance(node, ast.ClassDef):
            return rest[0] in _class_attributes(node) and len(rest) == 1
        if owner in self.trees:
            bound = _top_level_names(self.trees[owner])
            return rest[0] in bound and (len(rest) == 1 or self._has(f"{owner}.{rest[0]}", rest[1:]))
        return False

    def _node(self, name: str) -> ast.AST | None:
        module, _, top = name.rpartition(".")
        return _top_level_names(self.trees[module]).get(top) if module in self.trees else None

    def resolves(self, dotted: str) -> bool | None:
        """True or False for a name of ours; None for one of another library (not checked)."""
        first, *rest = dotted.split(".")
        if first == self.package:
            return self._has(first, rest)
        if first in OBJECTS:
            return self._has(OBJECTS[first].replace("corefbert", self.package, 1), rest)
        if first in FOREIGN_OBJECTS:
            return None
        modules = [m for m in self.trees if m.rpartition(".")[2] == first]
        if modules:
            return any(self._has(m, rest) for m in modules)
        if first in self.defined:
            return any(self._has(d, rest) for d in self.defined[first])
        if importlib.util.find_spec(first) is not None or hasattr(builtins, first):
            return None
        return False


def stale_names(text: str, package_dir: Path) -> list[str]:
    """The dotted names of ``text`` that name nothing of the package at ``package_dir``. The rule: a name's first
    part decides how it must resolve, read from the package's source:

    - the package (``corefbert.text.jsonio.read_jsonl``): the module, then each attribute in turn;
    - an object the contracts name by a variable (``OBJECTS``: ``rules.finished`` is a field of ``SweepRules``):
      the attribute on that class (a method, a class attribute or field, or one its methods set on ``self``);
      one of the libraries underneath (``FOREIGN_OBJECTS``: ``config.model_type``) is not checked;
    - the last name of a module of the package (``packing.SequencePacker``): as the full name, any such module;
    - a class or function defined at the top of a module (``TrainingArguments.validate``): its attribute;
    - an importable module of another library (``torch.load``, ``os.replace``) or a builtin: not checked.

    Anything else fails: a module that moved away (``pretraining_data.check_corpus_tokenizer``), an attribute the
    module or class no longer has, or an object the lists above do not know."""
    index = SourceIndex(package_dir)
    return sorted({name for name in dotted_names(text) if index.resolves(name) is False})


def test_every_dotted_name_in_the_contracts_resolves():
    text = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    assert len(dotted_names(text)) > 20
    stale = stale_names(text, ROOT / "corefbert")
    assert not stale, f"docs/contracts.md names what the package does not have: {stale}"


def test_a_planted_stale_name_in_the_contracts_is_found(tmp_path):
    package = tmp_path / "fakepkg"
    (package / "training").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "training" / "__init__.py").write_text("", encoding="utf-8")
    (package / "training" / "sweep.py").write_text(
        "from dataclasses import dataclass\n\n\n@dataclass\nclass SweepRules:\n    finished: tuple\n\n\n"
        "class Runner:\n    def __init__(self):\n        self.done = 0\n\n    def run(self):\n        pass\n\n\n"
        "def run_sweep(points):\n    return points\n", encoding="utf-8")
    contracts = (
        "Sweeps run through `fakepkg.training.sweep.run_sweep(points)`; `sweep.Runner.run`, `Runner.done`, "
        "`rules.finished` and `config.model_type`, `torch.load(weights_only=True)`, `trainer_state.json`.\n"
        "Stale: `pretraining_data.check_corpus_tokenizer`, `fakepkg.training.sweep.run_one`, `rules.marker`, "
        "`fakepkg.training.loop.train`, `Runner.gone`.\n```python\nnot_checked.in_fenced_code()\n```\n"
    )
    assert stale_names(contracts, package) == [
        "Runner.gone", "fakepkg.training.loop.train", "fakepkg.training.sweep.run_one",
        "pretraining_data.check_corpus_tokenizer", "rules.marker",
    ]


# --------------------------------------------------------------------------- layout.md names every part


def unnamed_parts(layout: str, package_dir: Path) -> list[str]:
    """The folders and modules directly in the package and directly in its ``tasks/`` that ``layout`` does not
    name in an inline code span: by the path from the package's parent (``corefbert/configs/``), from the
    package (``tasks/qa/``, ``known_warnings.py``) or, for what sits in ``tasks/``, by its file name
    (``registry.py``)."""
    spans = {span.strip().rstrip("/") for span in re.findall(r"`([^`\n]+)`", layout)}
    package = package_dir.name
    parts = [p for folder in (package_dir, package_dir / "tasks") if folder.is_dir() for p in sorted(folder.iterdir())
             if (p.is_dir() and p.name != "__pycache__") or (p.suffix == ".py" and not (
                 p.name == "__init__.py" and folder != package_dir))]
    missing = []
    for path in parts:
        below = path.relative_to(package_dir).as_posix()
        names = {f"{package}/{below}", below} | ({path.name} if path.parent.name == "tasks" else set())
        if not names & spans:
            missing.append(f"{package}/{below}" + ("/" if path.is_dir() else ""))
    return missing


def test_the_layout_names_every_folder_and_module_of_the_package():
    missing = unnamed_parts((ROOT / "docs" / "layout.md").read_text(encoding="utf-8"), ROOT / "corefbert")
    assert not missing, f"docs/layout.md does not say where these live: {missing}"


def test_a_part_the_layout_leaves_out_is_found(tmp_path):
    package = tmp_path / "fakepkg"
    for path in ("__init__.py", "errors.py", "notes.py", "tasks/__init__.py", "tasks/base.py", "tasks/qa/task.py",
                 "tasks/glue.py", "resources/demo.txt"):
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text("", encoding="utf-8")
    layout = "| `fakepkg/__init__.py` | | `errors.py` | `fakepkg/tasks/` (`base.py`) | `tasks/qa/` |\n"
    assert unnamed_parts(layout, package) == ["fakepkg/notes.py", "fakepkg/resources/", "fakepkg/tasks/glue.py"]


# ----------------------------------------------------- no source file cites a file outside the repository

SOURCE_FOLDERS = ("corefbert", "benchmarks", "pretrain", "finetune", "tests")
SOURCE_FILES = ("pyproject.toml",)
# What points outside the checkout: ../shared/ anywhere but a data file under ../shared/data/ (a paper, the
# project's notes, a data folder's SOURCE.md), or a machine's absolute path.
OUTSIDE = re.compile(r"\.\./shared/(?!data\b)[^\s'\"`)]*|\.\./shared/data/[^\s'\"`)]*\.md\b|/work/[^\s'\"`)]*")
# A document named by its conventional upper-case name (DESIGN.md, STYLE.md, SOURCE.md) must be one of the
# repository's own; lower-case .md names in the source are files a command writes (study.md, babi_table.md).
NOTE = re.compile(r"(?<![\w./-])[A-Z][A-Z0-9_]*\.md\b")


def _comments_and_docstrings(text: str) -> str:
    """A test module's comments and docstrings: its string literals are planted inputs, not citations."""
    tree = ast.parse(text)
    docstrings = [ast.get_docstring(n, clean=False) or "" for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    return "\n".join(docstrings + comments)


def outside_citations(root: Path, skip: frozenset[Path] = frozenset()) -> list[str]:
    """Every place a source file under ``root`` cites a file outside the repository, one line each. Scanned: the
    whole text of the package, the scripts, the benchmarks and their configs; of a test module (``tests/``), its
    comments and docstrings; ``skip``: files left out. Data paths under ``../shared/data/`` are fine: the tests and
    benchmarks read them."""
    notes = {p.name for p in root.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(root).parts)}
    files = [root / name for name in SOURCE_FILES if (root / name).is_file()]
    files += [p for folder in SOURCE_FOLDERS for p in sorted((root / folder).rglob("*"))
              if p.suffix in {".py", ".yaml", ".yml", ".sh", ".toml"} and p.is_file()
              and not {"fixtures", "__pycache__"} & set(p.relative_to(root).parts) and p not in skip]
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py" and path.relative_to(root).parts[0] == "tests":
            text = _comments_and_docstrings(text)
        where = path.relative_to(root).as_posix()
        found += [f"{where}: {m.group(0).rstrip('.,;:')}" for m in OUTSIDE.finditer(text)]
        found += [f"{where}: {m.group(0)}" for m in NOTE.finditer(text) if m.group(0) not in notes]
    return sorted(found)


def test_no_source_file_cites_a_file_outside_the_repository():
    """What the code relies on is in docs/ (the method, the machines and the pitfalls: docs/design.md), never in
    notes beside the checkout that a user of the package does not have."""
    found = outside_citations(ROOT, skip=frozenset({Path(__file__).resolve()}))  # this checker names what it seeks
    assert not found, "cite docs/ (docs/design.md, a guide) instead:\n" + "\n".join(found)


def test_a_planted_citation_of_a_file_outside_the_repository_is_found(tmp_path):
    (tmp_path / "README.md").write_text("# fake\n", encoding="utf-8")
    (tmp_path / "corefbert").mkdir()
    (tmp_path / "corefbert" / "collator.py").write_text(
        '"""Masking as DESIGN.md says (README.md, docs/design.md)."""\n\n'
        "# formats: ../shared/data/gap/SOURCE.md; eq. 2 in ../shared/papers/corefbert_ye2020.txt\n"
        "DATA = '../shared/data/gap/gap-development.tsv'  # a data path is fine\n"
        "OUT = 'study.md'  # a file a command writes\n", encoding="utf-8")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "run.sh").write_text("# see /work/shared/DESIGN.md\n", encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        '"""The pitfalls of ../shared/DESIGN.md."""\n\n\ndef test_x():\n    planted = "DESIGN.md"\n',
        encoding="utf-8")
    assert outside_citations(tmp_path) == [
        "benchmarks/run.sh: /work/shared/DESIGN.md",
        "corefbert/collator.py: ../shared/data/gap/SOURCE.md",
        "corefbert/collator.py: ../shared/papers/corefbert_ye2020.txt",
        "corefbert/collator.py: DESIGN.md",
        "tests/test_x.py: ../shared/DESIGN.md",
    ]


def note_citations(paths: list[Path], root: Path) -> list[str]:
    """Where the docs point a reader outside the repository to anything but the papers and the data beside the
    checkout (``../shared/papers/``, ``../shared/data/``): notes a user of the repository does not have."""
    notes = {p.name for p in root.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(root).parts)}
    found = []
    for path in paths:
        text, where = path.read_text(encoding="utf-8"), path.relative_to(root).as_posix()
        found += [f"{where}: {m.rstrip('.,;:')}" for m in re.findall(r"\.\./shared/(?!(?:data|papers)\b)[^\s'\"`)]*", text)]
        found += [f"{where}: {m}" for m in NOTE.findall(text) if m not in notes]
    return found


def test_the_docs_cite_no_notes_outside_the_repository():
    found = note_citations(DOCS, ROOT)
    assert not found, "what the docs rely on belongs in docs/ (docs/design.md):\n" + "\n".join(found)


def test_a_planted_note_outside_the_repository_is_found_in_the_docs(tmp_path):
    (tmp_path / "README.md").write_text("# fake\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("The concrete form of `../shared/DESIGN.md`; the paper (`../shared/papers/x.txt`), the data\n"
                    "(`../shared/data/gap/SOURCE.md`), the [README](README.md); STYLE.md says so.\n", encoding="utf-8")
    assert note_citations([page], tmp_path) == ["page.md: ../shared/DESIGN.md", "page.md: STYLE.md"]


#: What the docs' readers cannot see or use: a tracker's issue numbers, how work was split into sessions or how a
#: machine was obtained, and a path of the machine the docs were written on (the docs name paths from the checkout).
PRIVATE = [
    (re.compile(r"\b[Ii]ssues? \d+"), "a tracker's issue number"),
    (re.compile(r"\bsessions?\b", re.IGNORECASE), "a session"),
    (re.compile(r"\blent\b|\bdevice (?:calls?|runs?)\b"), "how a machine was obtained"),
    (re.compile(r"(?<![\w.<>-])/(?:work|home|root|Users|mnt|opt)/"), "an absolute path of the writing machine"),
]


def private_words(paths: list[Path], root: Path) -> list[str]:
    """``file:line: what`` for every line of ``paths`` that tells the reader something only the writers knew."""
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(root).as_posix()}:{number}: {what}: {pattern.search(line).group(0)}"
                      for pattern, what in PRIVATE if pattern.search(line)]
    return found


def test_the_docs_name_no_tracker_issue_session_or_machine_path():
    found = private_words(DOCS, ROOT)
    assert not found, "the docs describe the software and its measurements (by date, machine, command):\n" + \
        "\n".join(found)


def test_a_planted_issue_number_session_and_machine_path_are_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Fixed in issue 35.\nThe next session runs it.\nOn a lent H100.\nsee /work/runs/x and "
                    "/home/me/data\nruns/x, `<tmp>/opt/y`, /dev/stdin and --output_dir out/opt/ are fine.\n",
                    encoding="utf-8")
    assert private_words([page], tmp_path) == [
        "page.md:1: a tracker's issue number: issue 35", "page.md:2: a session: session",
        "page.md:3: how a machine was obtained: lent", "page.md:4: an absolute path of the writing machine: /work/"]
