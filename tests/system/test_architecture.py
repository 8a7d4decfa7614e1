"""The architecture, read from the source: the one reader of the import graph of corefbert/, finetune/ and
pretrain/, every rule on that graph, and the training core's shape.

Layers: dependencies point one way and a task family never imports another. The order, top to
bottom, is docs/layout.md's: ``cli`` -> ``ablation`` -> ``tasks`` -> ``pretraining`` -> ``corpus`` ->
``training`` -> ``text`` -> ``metrics`` -> the base modules (``configs``, ``arguments``, ``errors``,
``known_warnings``); the public face (``corefbert/__init__.py``) sits above everything. Inside ``tasks/`` the
protocol (``base``, ``heads``) sits below the families, each of which is one folder or module. Every import
counts, the ones inside functions included (an import moved into a function to dodge a cycle is still a cycle
in the design); a function-local import of our own code is allowed only where it defers a heavy third-party
import (torch, transformers, ...) that the importing module does not make anyway.

On the same graph: no module (scripts included) imports another's ``_private`` name or reaches one through a
module it bound; a name is imported from the module that defines it (no re-export shims); nothing in the
package imports the user API (``tasks/coref/resolver.py``) back; no import cycle.

The checkers work on any tree, so the planted tests build a tiny fake package holding an upward import, a
crossing between families, a cycle, a needless local import, a private name, a re-export and an import of the
user API, and watch each one fail. ``MODULES`` (every module of the three folders, parsed) is what the other
structure tests (test_one_home, test_one_sweep, test_one_registry) read.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = "corefbert"
PACKAGES = (PACKAGE, "finetune", "pretrain")  # the package and the scripts that import it

# Top to bottom. A module belongs to the first entry that is its name or a package above it.
LAYERS = (
    "cli",
    "ablation",
    "tasks",
    "pretraining",
    "corpus",
    "training",
    "text",
    "metrics",
    "configs",  # its `corefbert config-path` command parses through argparser.parse_args
    "argparser",
    "pronouns",  # the English pronoun lexicon every family and the GAP scorer read; it imports nothing
    "errors",
    "known_warnings",  # the public face installs its filters before anything else loads; it imports nothing
)
PROTOCOL = ("tasks.base", "tasks.heads", "tasks.scratch")  # below every family inside tasks/
# The thin user API over tasks/coref/copy_scoring.py: nothing in the package below the public face imports it.
USER_API = ("tasks.coref.resolver",)
HEAVY = {
    "torch",
    "transformers",
    "datasets",
    "accelerate",
    "evaluate",
    "spacy",
    "matplotlib",
    "scipy",
    "sklearn",
    "safetensors",
    "huggingface_hub",
    "numpy",
    "pyarrow",
    "deepspeed",
    "tokenizers",
}
# Imports of the package root that are allowed from anywhere: its version string (defined before anything
# else in __init__.py, so no cycle can form through it).
ROOT_NAMES = {"__version__"}
# Crossings the move could not remove without changing code, each with why: what is left to move.
KNOWN_CROSSINGS = {
    # bAbI's copy-head clusters reuse the pronoun-coreference copy scorer and its example type; the shared
    # part belongs below the families (tasks/ or pretraining/) once it is split from coref's task code.
    ("tasks.babi.copy_scoring", "tasks.coref.copy_scoring"),
    ("tasks.babi.copy_scoring", "tasks.coref.readers"),
}
# Function-local imports of our own code that defer nothing heavy, found when the house moved. Some keep a
# monkeypatch on the source module effective in tests (the name is looked up at call time), others only
# shorten ``import`` time; each is to be hoisted (or the test changed) and removed from here. The list only
# shrinks: test_every_known_exception_still_exists fails on an entry the code no longer has.
KNOWN_LOCAL_IMPORTS = {
    ("ablation.probes", "tasks.coref.readers"),
    ("ablation.study", "ablation.report"),
    ("corpus.prepare", "corpus.mentions"),
    ("pretraining.data", "corpus.cache"),
    ("pretraining.data", "corpus.shards"),
    ("pretraining.data", "corpus.packing"),
    ("pretraining.data", "text.positions"),
    ("pretraining.data", "pretraining.length_grouping"),
    ("pretraining.report", "pretraining.plotting"),
    ("pretraining.run", "pretraining.collator"),
    ("pretraining.run", "pretraining.report"),
}


# ------------------------------------------------------------------------------------------ the one reader


@dataclass
class Module:
    name: str  # dotted from the tree's root: corefbert.text.vocabulary, finetune.run_glue
    path: Path
    tree: ast.Module
    imports: list[tuple[int, str, str | None]] = field(default_factory=list)  # (line, module, name or None)
    local_lines: set[int] = field(default_factory=set)  # lines of the imports made inside a function
    heavy: set[str] = field(default_factory=set)  # heavy third-party packages imported at module level
    where: str = ""  # its path from the tree's root, for messages


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Module]:
    """Every module of the folders ``packages`` under ``root``, parsed, with every import it makes (relative
    ones resolved; function-local ones marked)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name = _module_name(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            modules[name] = Module(name, path, tree, where=str(path.relative_to(root)))
    for module in modules.values():
        package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
        local_nodes = {id(n) for f in ast.walk(module.tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                       for n in ast.walk(f)}
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                found = [(node.lineno, alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up level - 1 packages from this one
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                found = [(node.lineno, base, alias.name) for alias in node.names]
            else:
                continue
            module.imports += found
            if id(node) in local_nodes:
                module.local_lines.add(node.lineno)
            else:
                module.heavy |= {base.split(".")[0] for _, base, _ in found} & HEAVY
    return modules


MODULES = read_modules(ROOT)


def _is_ours(name: str, package: str = PACKAGE) -> bool:
    return name == package or name.startswith(package + ".")


def _target(modules: dict[str, Module], line_module: str, name: str | None) -> str:
    """The module an import statement loads: ``from pkg import mod`` loads ``pkg.mod`` when that is a module."""
    if name is not None and name != "*" and f"{line_module}.{name}" in modules:
        return f"{line_module}.{name}"
    return line_module


def _short(name: str, package: str) -> str:
    """``corefbert.text.vocabulary`` -> ``text.vocabulary``; the package root is ``""``."""
    return name[len(package) + 1:] if name != package else ""


# ---------------------------------------------------------------------------------------------- the layers


def layer_of(name: str) -> int:
    for index, layer in enumerate(LAYERS):
        if name == layer or name.startswith(layer + "."):
            return index
    raise AssertionError(f"module {name!r} is in no layer of {LAYERS}: add it to one (docs/layout.md's list)")


def family_of(name: str) -> str | None:
    """``tasks.qa.models`` -> ``tasks.qa``; the protocol modules and non-task modules have none."""
    parts = name.split(".")
    if parts[0] != "tasks" or len(parts) < 2 or name in PROTOCOL:
        return None
    return ".".join(parts[:2])


def _edges(modules: dict[str, Module], module: Module, package: str) -> list[tuple[int, str, str | None, bool]]:
    """The imports of our package that ``module`` makes: (line, target module below the package, the name taken
    from it or None, inside a function)."""
    return [(line, _short(target, package), name if target == base else None, line in module.local_lines)
            for line, base, name in module.imports if _is_ours(base, package)
            for target in [_target(modules, base, name)]]


def _transitive_heavy(modules: dict[str, Module], name: str, package: str, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    if name in seen or name not in modules:
        return set()
    seen.add(name)
    heavy = set(modules[name].heavy)
    for _, target, _, local in _edges(modules, modules[name], package):
        if not local:
            heavy |= _transitive_heavy(modules, f"{package}.{target}".rstrip("."), package, seen)
    return heavy


def violations(
    package_dir: Path,
    known: set[tuple[str, str]] = frozenset(),
    known_local: set[tuple[str, str]] = frozenset(),
) -> list[str]:
    """What breaks the layering in the package at ``package_dir``, one line each (empty: none)."""
    package = package_dir.name
    modules = read_modules(package_dir.parent, (package,))
    found = []
    for module in modules.values():
        name = _short(module.name, package)
        if name == "":  # the public face may import anything below it
            continue
        layer_of(name)  # every module has a layer, imported or not
        where = module.where
        for line, target, taken, local in _edges(modules, module, package):
            if target == "":
                if taken is not None and taken not in ROOT_NAMES:
                    found.append(f"{where}:{line}: imports the package root ({taken}); "
                                 "import the module that defines it")
                continue
            if f"{package}.{target}" not in modules or (name, target) in known:
                continue
            src, dst = layer_of(name), layer_of(target)
            if dst < src:
                found.append(f"{where}:{line}: {name} ({LAYERS[src]}) imports {target} ({LAYERS[dst]}), "
                             "a layer above it")
            mine, theirs = family_of(name), family_of(target)
            # above tasks/ (ablation, cli) anything may be used; inside it, only one's own family
            if theirs and mine != theirs and src == LAYERS.index("tasks"):
                found.append(f"{where}:{line}: {name} imports {target}: "
                             + ("across task families" if mine else "a task family from the protocol"))
            needless = not (_transitive_heavy(modules, f"{package}.{target}", package)
                            - _transitive_heavy(modules, module.name, package))
            if local and needless and (name, target) not in known_local:
                found.append(f"{where}:{line}: function-local import of {target} defers no heavy "
                             "third-party import; import it at the top")
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(_import_graph(modules, package))]
    return found


def _import_graph(modules: dict[str, Module], package: str) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (below the package name), local imports included. An
    import of the root that takes only its version string is no edge (the version is defined before anything)."""
    graph = {}
    for module in modules.values():
        if not _is_ours(module.name, package):
            continue
        name = _short(module.name, package)
        graph[name] = {target for _, target, taken, _ in _edges(modules, module, package)
                       if f"{package}.{target}".rstrip(".") in modules and target != name
                       and not (target == "" and taken in ROOT_NAMES)}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# ------------------------------------------------------------- private names, re-exports, the user API


def _bound_modules(modules: dict[str, Module], module: Module, package: str) -> dict[str, str]:
    """Local names bound to one of our modules (``import corefbert.x as y``, ``from corefbert import x``)."""
    bound = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_ours(alias.name, package):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else package
        elif isinstance(node, ast.ImportFrom):
            for line, base, name in module.imports:
                if line == node.lineno and name is not None and f"{base}.{name}" in modules:
                    alias = next(a for a in node.names if a.name == name)
                    bound[alias.asname or name] = f"{base}.{name}"
    return bound


def private_uses(modules: dict[str, Module], package: str = PACKAGE) -> list[str]:
    """Every import of another module's ``_private`` name, and every ``module._private`` reached through a
    module the importer bound (``from corefbert.x import y; y._z``), one line each."""
    found = []
    for module in modules.values():
        where = module.where
        for line, base, name in module.imports:
            if _is_ours(base, package) and name and name.startswith("_") and not name.startswith("__") \
                    and _target(modules, base, name) != f"{base}.{name}":
                found.append(f"{where}:{line}: from {base} import {name}")
        bound = _bound_modules(modules, module, package)
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                owner = ".".join([bound[value.id]] + chain[::-1])
                if owner in modules and owner != module.name:
                    found.append(f"{where}:{node.lineno}: {owner}.{node.attr}")
    return found


def re_exports(modules: dict[str, Module], package: str = PACKAGE) -> list[str]:
    """Names imported from our package and never used in the importing module (a shim left by a split: the
    importers are to name the module that defines the name). Packages' ``__init__`` may gather names."""
    offenders = []
    for module in modules.values():
        if module.path.name == "__init__.py":
            continue
        used = {node.id for node in ast.walk(module.tree) if isinstance(node, ast.Name)}
        for line, base, name in module.imports:
            if _is_ours(base, package) and name and name != "*" and _target(modules, base, name) == base:
                node = next(n for n in ast.walk(module.tree) if isinstance(n, ast.ImportFrom) and n.lineno == line)
                local = next(a.asname or a.name for a in node.names if a.name == name)
                if local not in used:
                    offenders.append(f"{module.where}:{line}: {name} from {base}")
    return offenders


def user_api_imports(modules: dict[str, Module], package: str = PACKAGE) -> list[str]:
    """Modules of the package (the public face and the API itself aside) that import the user API."""
    graph = _import_graph(modules, package)
    return [f"{package}.{name} imports {package}.{api}" for name, targets in sorted(graph.items())
            for api in USER_API if api in targets and name not in ("", api)]


# ------------------------------------------------------------------------------------- on the real tree


def test_the_checks_see_the_package():
    assert {"corefbert.tasks.coref.resolver", "corefbert.tasks.coref.task", "corefbert.tasks.coref.copy_scoring",
            "finetune.run_glue"} <= set(MODULES)
    graph = _import_graph(MODULES, PACKAGE)
    assert "tasks.coref.copy_scoring" in graph["tasks.coref.task"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_package_keeps_its_layers():
    found = violations(ROOT / "corefbert", KNOWN_CROSSINGS, KNOWN_LOCAL_IMPORTS)
    assert not found, "\n".join(found)


def test_every_known_exception_still_exists():
    """An entry of the two lists above that the code no longer needs is removed from its list, not kept."""
    edges = [(_short(m.name, PACKAGE), target, local) for m in MODULES.values() if _is_ours(m.name)
             for _, target, _, local in _edges(MODULES, m, PACKAGE)]
    present = {(name, target) for name, target, _ in edges}
    local = {(name, target) for name, target, is_local in edges if is_local}
    assert KNOWN_CROSSINGS <= present, sorted(KNOWN_CROSSINGS - present)
    assert KNOWN_LOCAL_IMPORTS <= local, sorted(KNOWN_LOCAL_IMPORTS - local)


def test_a_handful_of_modules_at_the_top():
    top = sorted(p.stem for p in (ROOT / "corefbert").glob("*.py"))
    assert len(top) <= 6, top


def test_no_module_imports_a_private_name_of_another():
    offenders = private_uses(MODULES)
    assert not offenders, "private names used across modules (make them public or move the code):\n" + \
        "\n".join(offenders)


def test_tasks_do_not_import_the_user_api():
    """The resolver is a thin API over ``tasks/coref/copy_scoring.py``; nothing below it may import it back."""
    users = user_api_imports(MODULES)
    assert not users, users


def test_no_module_re_exports_names_it_does_not_use():
    """Shims left by splits (``corpus`` re-exporting ``packing``) go: importers name the module that defines."""
    offenders = re_exports(MODULES)
    assert not offenders, "imported and never used (a re-export?):\n" + "\n".join(offenders)


# Folders of tests/ that mirror no package folder: the suites that cross the folders, the benchmark files.
TEST_FOLDERS_OF_THEIR_OWN = {"system", "fixtures"}


def unmirrored_test_folders(tests_dir: Path, package_dir: Path) -> list[str]:
    """Folders of ``tests_dir`` that are no folder of the package at the same path (``tests/metrics/`` holds the
    tests of ``corefbert/metrics/``); the suites of their own and what lies inside them aside."""
    return [f"{folder.relative_to(tests_dir.parent).as_posix()}/" for folder in sorted(tests_dir.rglob("*"))
            if folder.is_dir() and folder.name != "__pycache__"
            and not TEST_FOLDERS_OF_THEIR_OWN & set(folder.relative_to(tests_dir).parts)
            and "__pycache__" not in folder.parts and not (package_dir / folder.relative_to(tests_dir)).is_dir()]


def test_the_tests_mirror_the_package():
    found = unmirrored_test_folders(ROOT / "tests", ROOT / "corefbert")
    assert not found, f"test folders that mirror no folder of corefbert/ (move their tests): {found}"


def test_a_test_folder_that_mirrors_nothing_is_found(tmp_path):
    for folder in ("pkg/metrics", "pkg/tasks/qa", "tests/metrics", "tests/tasks/qa", "tests/system",
                   "tests/fixtures/qa", "tests/stage", "tests/tasks/gone"):
        (tmp_path / folder).mkdir(parents=True)
    assert unmirrored_test_folders(tmp_path / "tests", tmp_path / "pkg") == ["tests/stage/", "tests/tasks/gone/"]


# ---------------------------------------------------------------------------- the training core's shape


def test_no_module_but_the_training_core_steps_an_optimizer():
    """One loop. A ``backward()``, an optimizer's ``step()`` or ``clip_grad_norm_`` anywhere in
    the package outside corefbert/training/loop/core.py is a second training loop in the making."""
    loop_calls = {"backward", "clip_grad_norm_", "zero_grad"}
    offenders = []
    for module in MODULES.values():
        if module.name == "corefbert.training.loop.core" or not module.name.startswith("corefbert"):
            continue
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = ast.unparse(node.func.value)
            if node.func.attr in loop_calls or (node.func.attr == "step" and "optim" in owner):
                offenders.append(f"{module.where}:{node.lineno}: {ast.unparse(node.func)}()")
    assert not offenders, offenders


def test_the_core_and_the_entry_functions_read_on_one_screen():
    """Every function of the training core, and run_pretraining, is at most ~60 lines."""
    too_long = []
    for name, only in (("corefbert.training.loop.core", None), ("corefbert.training.training_args", None),
                       ("corefbert.pretraining.run", {"run_pretraining"})):
        module = MODULES[name]
        for node in ast.walk(module.tree):
            if isinstance(node, ast.FunctionDef) and (only is None or node.name in only):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    too_long.append(f"{module.where}:{node.lineno}: {node.name} ({lines} lines)")
    assert not too_long, too_long


# ------------------------------------------------------------------------ planted in a tiny fake package


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "fakepkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in {p.parent for p in package.rglob("*.py")} | {package}:
        (folder / "__init__.py").touch()
    return package


CLEAN = {
    "errors.py": "class Error(Exception):\n    pass\n",
    "text/vocab.py": "from fakepkg.errors import Error\n",
    "training/loop.py": "import torch\nfrom fakepkg.text.vocab import Error\n",
    "tasks/base.py": "from fakepkg.training import loop\n",
    "tasks/qa/task.py": "from fakepkg.tasks.base import loop\n",
    "tasks/glue.py": "from fakepkg.tasks import base\n",
    "cli.py": "def main():\n    from fakepkg.tasks.qa import task\n",
}


def test_the_checker_passes_a_clean_tree(tmp_path):
    assert violations(_fake_package(tmp_path, CLEAN)) == []


def test_the_checker_fails_on_a_planted_upward_import(tmp_path):
    files = dict(CLEAN)
    files["text/vocab.py"] += "\ndef tokenize():\n    from fakepkg.training.loop import torch\n"
    found = violations(_fake_package(tmp_path, files))
    assert any("text.vocab (text) imports training.loop (training), a layer above it" in f for f in found), (
        found
    )
    assert any("import cycle: text.vocab -> training.loop" in f for f in found), found


def test_the_checker_fails_across_families_and_on_a_needless_local_import(tmp_path):
    files = dict(CLEAN)
    files["tasks/glue.py"] += "from fakepkg.tasks.qa.task import base\n"
    files["tasks/base.py"] += "def run():\n    from fakepkg.text import vocab\n"
    found = violations(_fake_package(tmp_path, files))
    assert any("tasks.glue imports tasks.qa.task: across task families" in f for f in found), found
    assert any("tasks/base.py:3: function-local import of text.vocab defers no heavy" in f for f in found), (
        found
    )
    assert violations(_fake_package(tmp_path / "known", files), {("tasks.glue", "tasks.qa.task")}) == [
        "fakepkg/tasks/base.py:3: function-local import of text.vocab defers no heavy third-party import; "
        "import it at the top"
    ]


def test_the_checker_fails_on_a_module_outside_every_layer(tmp_path):
    files = dict(CLEAN, **{"stray.py": "from fakepkg import errors\n"})
    try:
        violations(_fake_package(tmp_path, files))
    except AssertionError as err:
        assert "module 'stray' is in no layer" in str(err)
    else:
        raise AssertionError("a module outside every layer passed")


def test_the_checker_fails_on_a_planted_private_name_re_export_and_user_api_import(tmp_path):
    files = dict(CLEAN, **{
        "tasks/coref/resolver.py": "from fakepkg.tasks.base import loop\n\nRESOLVE = loop\n",
        # an imported name left unused (a re-export), another module's private function, a private
        # attribute reached through a bound module, the user API imported back from below the public face
        "tasks/qa/models.py": "from fakepkg.text.vocab import Error\nfrom fakepkg.tasks.base import _setup\n"
                              "from fakepkg.training import loop\n\nSTEP = (_setup, loop._inner)\n",
        "tasks/coref/task.py": "from fakepkg.tasks.coref import resolver\n\nUSE = resolver\n",
    })
    modules = read_modules(_fake_package(tmp_path, files).parent, ("fakepkg",))
    assert private_uses(modules, "fakepkg") == ["fakepkg/tasks/qa/models.py:2: from fakepkg.tasks.base import _setup",
                                                "fakepkg/tasks/qa/models.py:5: fakepkg.training.loop._inner"]
    found = re_exports(modules, "fakepkg")
    assert "fakepkg/tasks/qa/models.py:1: Error from fakepkg.text.vocab" in found
    assert user_api_imports(modules, "fakepkg") == ["fakepkg.tasks.coref.task imports fakepkg.tasks.coref.resolver"]
    clean = read_modules(_fake_package(tmp_path / "clean", CLEAN).parent, ("fakepkg",))
    assert private_uses(clean, "fakepkg") == [] and user_api_imports(clean, "fakepkg") == []


def ignored_sources(root: Path) -> list[str]:
    """Files under ``root``'s code folders that git's ignore rules keep out of a commit: present in the working
    tree, absent from every clone (a package's ``__init__.py`` under a rule meant for run outputs)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--", *PACKAGES,
                             "tests", "benchmarks"], cwd=root, capture_output=True, text=True, check=True)
    return sorted(p for p in listed.stdout.splitlines() if not {"__pycache__", ".pytest_cache"} & set(p.split("/"))
                  and not p.endswith(".pyc"))


def test_no_source_file_is_ignored_by_git():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert not ignored_sources(ROOT), "ignored by .gitignore, so missing from every clone: " + \
        ", ".join(ignored_sources(ROOT))


def test_an_ignored_init_file_is_found(tmp_path):
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("outputs/\n")
    (tmp_path / PACKAGE / "outputs").mkdir(parents=True)
    (tmp_path / PACKAGE / "outputs" / "__init__.py").write_text("")
    assert ignored_sources(tmp_path) == [f"{PACKAGE}/outputs/__init__.py"]
