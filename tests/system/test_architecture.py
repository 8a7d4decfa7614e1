"""Dependencies point down: the import graph of corefbert/, finetune/ and pretrain/, read from the source.

Every ``import``/``from ... import`` counts, the ones inside functions included: an import moved into a
function to dodge a cycle is still a cycle in the design.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from helpers import ROOT

PACKAGES = ("corefbert", "finetune", "pretrain")


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: list[tuple[int, str, str | None]] = field(default_factory=list)  # (line, module, name or None)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Module]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = _module_name(path)
            modules[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    for module in modules.values():
        package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                module.imports += [(node.lineno, alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up level - 1 packages from this one
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                module.imports += [(node.lineno, base, alias.name) for alias in node.names]
    return modules


MODULES = _modules()


def _is_ours(name: str) -> bool:
    return name == "corefbert" or name.startswith("corefbert.")


def _target(line_module: str, name: str | None) -> str:
    """The module an import statement loads: ``from pkg import mod`` loads ``pkg.mod`` when that is a module."""
    if name is not None and f"{line_module}.{name}" in MODULES:
        return f"{line_module}.{name}"
    return line_module


def _bound_modules(module: Module) -> dict[str, str]:
    """Local names bound to one of our modules (``import corefbert.x as y``, ``from corefbert import x``)."""
    bound = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_ours(alias.name):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "corefbert"
        elif isinstance(node, ast.ImportFrom):
            for line, base, name in module.imports:
                if line == node.lineno and name is not None and f"{base}.{name}" in MODULES:
                    alias = next(a for a in node.names if a.name == name)
                    bound[alias.asname or name] = f"{base}.{name}"
    return bound


def _private_uses(module: Module) -> list[str]:
    found = []
    for line, base, name in module.imports:
        if _is_ours(base) and name and name.startswith("_") and _target(base, name) != f"{base}.{name}":
            found.append(f"{module.path.relative_to(ROOT)}:{line}: from {base} import {name}")
    bound = _bound_modules(module)
    for node in ast.walk(module.tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            owner = ".".join([bound[value.id]] + chain[::-1])
            if owner in MODULES and owner != module.name:
                found.append(f"{module.path.relative_to(ROOT)}:{node.lineno}: {owner}.{node.attr}")
    return found


def _import_graph() -> dict[str, set[str]]:
    graph = {}
    for module in MODULES.values():
        targets = {_target(base, name) for _, base, name in module.imports if _is_ours(base)}
        graph[module.name] = {t for t in targets if t in MODULES and t != module.name}
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


def test_the_checks_see_the_package():
    assert {"corefbert.tasks.coref.resolver", "corefbert.tasks.coref.task", "corefbert.tasks.coref.copy_scoring"} <= set(MODULES)
    graph = _import_graph()
    assert "corefbert.tasks.coref.copy_scoring" in graph["corefbert.tasks.coref.task"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_a_private_name_of_another():
    offenders = [use for module in MODULES.values() for use in _private_uses(module)]
    assert not offenders, "private names used across modules (make them public or move the code):\n" + \
        "\n".join(offenders)


def test_no_import_cycles_between_corefbert_modules():
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles (function-local imports included): " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles)


def test_tasks_do_not_import_the_user_api():
    """The resolver is a thin API over ``tasks/coref/copy_scoring.py``; nothing below it may import it back."""
    users = [name for name, targets in _import_graph().items()
             if "corefbert.tasks.coref.resolver" in targets and name.startswith("corefbert.")
             and name not in ("corefbert", "corefbert.tasks.coref.resolver")]
    assert not users, f"modules that import corefbert.tasks.coref.resolver: {users}"


def test_no_module_re_exports_names_it_does_not_use():
    """Shims left by splits (``corpus`` re-exporting ``packing``) go: importers name the module that defines."""
    offenders = []
    for module in MODULES.values():
        if module.path.name == "__init__.py":
            continue
        used = {node.id for node in ast.walk(module.tree) if isinstance(node, ast.Name)}
        for line, base, name in module.imports:
            if _is_ours(base) and name and name != "*" and _target(base, name) == base:
                node = next(n for n in ast.walk(module.tree) if isinstance(n, ast.ImportFrom) and n.lineno == line)
                local = next(a.asname or a.name for a in node.names if a.name == name)
                if local not in used:
                    offenders.append(f"{module.path.relative_to(ROOT)}:{line}: {name} from {base}")
    assert not offenders, "imported and never used (a re-export?):\n" + "\n".join(offenders)


def test_no_module_but_the_training_core_steps_an_optimizer():
    """Issue 12: one loop. A ``backward()``, an optimizer's ``step()`` or ``clip_grad_norm_`` anywhere in
    the package outside corefbert/training/loop.py is a second training loop in the making."""
    loop_calls = {"backward", "clip_grad_norm_", "zero_grad"}
    offenders = []
    for module in _modules().values():
        if module.name == "corefbert.training.loop" or not module.name.startswith("corefbert"):
            continue
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = ast.unparse(node.func.value)
            if node.func.attr in loop_calls or (node.func.attr == "step" and "optim" in owner):
                offenders.append(f"{module.path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node.func)}()")
    assert not offenders, offenders


def test_the_core_and_the_entry_functions_read_on_one_screen():
    """Issue 12: every function of the training core, and run_pretraining, is at most ~60 lines."""
    too_long = []
    for name, only in (("corefbert.training.loop", None), ("corefbert.training.arguments", None),
                       ("corefbert.pretraining.run", {"run_pretraining"})):
        module = _modules()[name]
        for node in ast.walk(module.tree):
            if isinstance(node, ast.FunctionDef) and (only is None or node.name in only):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    too_long.append(f"{module.path.relative_to(ROOT)}:{node.lineno}: {node.name} ({lines} lines)")
    assert not too_long, too_long
