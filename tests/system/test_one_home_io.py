"""One home for the run log, for parsing JSON, for bootstrap intervals and for the mention span,
read from the source as tests/system/test_one_home.py reads the other primitives:

- ``log.jsonl`` is named, written and read only by ``corefbert.training.outputs.runlog`` (``RunLog``, ``read_log``,
  ``truncate_log``): a second reader broke on the torn last line of a killed run, a second writer skipped the
  full-disk handling;
- JSON is parsed only by ``corefbert.text.jsonio`` (``read_json``, ``read_jsonl``, ``parse_json``: one error line
  for any bad file): any use of the ``json`` module's parsing side (``load``, ``loads``, ``JSONDecoder``, by any
  spelling: an alias of the module, a name imported from it) is found by its name in the module, not one spelling;
- a bootstrap is drawn and its percentile interval taken only in ``corefbert.metrics.bootstrap``, which the
  guides' scripts (``docs/guides/*.py``) import;
- a mention span has one type, ``corefbert.text.spans.Mention`` (first, last; both inclusive): no other module
  names ``tuple[int, int]`` spans again.

The last test plants each second home in a fake module and watches the checker find it.
"""

from __future__ import annotations

import ast

from helpers import ROOT
from test_architecture import MODULES

JSONIO = "corefbert.text.jsonio"
RUNLOG = "corefbert.training.outputs.runlog"
BOOTSTRAP = "corefbert.metrics.bootstrap"
SPANS = "corefbert.text.spans"
DURABLE = "corefbert.text.durable"
JSON_PARSERS = {JSONIO}
#: The json module's parsing side.
JSON_PARSING = {"load", "loads", "JSONDecoder", "raw_decode"}
# Function or class name -> the one module that defines it.
DEFINED_IN = {
    "RunLog": RUNLOG, "read_log": RUNLOG, "truncate_log": RUNLOG, "log_path": RUNLOG,
    "read_json": JSONIO, "read_jsonl": JSONIO, "parse_json": JSONIO, "json_value": JSONIO, "json_safe": JSONIO,
    "resample_indices": BOOTSTRAP, "percentile_interval": BOOTSTRAP, "drawn_members": BOOTSTRAP,
}
SPAN_ALIASES = {"Mention", "Cluster", "TokenSpans"}
GUIDE_SCRIPTS = sorted((ROOT / "docs" / "guides").glob("*.py"))


def _called(node: ast.Call) -> str:
    return ast.unparse(node.func)


def second_homes(name: str, tree: ast.Module) -> list[str]:
    """What module ``name`` (its parsed source ``tree``) does that only the home of the run log, of JSON parsing,
    of bootstrap intervals or of the span type may do."""
    found = []

    def outside(home: str | set[str], line: int, what: str) -> None:
        homes = {home} if isinstance(home, str) else home
        if name not in homes:
            found.append(f"{name}:{line}: {what} (the home is {' / '.join(sorted(homes))})")

    # The names the json module goes by in this module (``import json``, ``import json as j``) and the parsing
    # names imported from it (``from json import loads as parse``).
    json_names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                  if a.name == "json"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "json":
            for alias in node.names:
                if alias.name in JSON_PARSING:
                    outside(JSON_PARSERS, node.lineno, f"imports json.{alias.name}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in json_names \
                and node.attr in JSON_PARSING:
            outside(JSON_PARSERS, node.lineno, f"parses JSON by hand ({ast.unparse(node)}; read_json / read_jsonl / "
                                               "parse_json)")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name in DEFINED_IN:
                outside(DEFINED_IN[node.name], node.lineno, f"defines {node.name}")
            elif "bootstrap" in node.name.lower():
                outside(BOOTSTRAP, node.lineno, f"defines {node.name}")
        elif isinstance(node, ast.Call):
            called = _called(node)
            if called.endswith("percentile") or called.endswith("quantile"):
                outside(BOOTSTRAP, node.lineno, f"takes an interval by hand ({called}; percentile_interval)")
            elif called == "append_file" and name != DURABLE:
                outside(RUNLOG, node.lineno, "appends to a file: the run log is the one appended file (RunLog)")
        elif isinstance(node, ast.Constant) and node.value == "log.jsonl":
            outside(RUNLOG, node.lineno, "names log.jsonl (log_path / LOG_FILE)")
    for node in tree.body:  # module-level type aliases of a span
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        value = getattr(node, "value", None)
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if names & SPAN_ALIASES or (isinstance(value, ast.Subscript) and "tuple[int, int]" in ast.unparse(value)):
            outside(SPANS, node.lineno, f"defines a span type {', '.join(sorted(names))} (text.spans.Mention)")
    return found


def test_the_log_json_bootstrap_and_span_each_have_one_home():
    found = [line for module in MODULES.values() if module.name.startswith("corefbert")
             for line in second_homes(module.name, module.tree)]
    assert not found, "\n".join(found)


def test_the_guides_scripts_take_their_intervals_from_the_package():
    found = []
    for path in GUIDE_SCRIPTS:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found += second_homes(f"docs/guides/{path.name}", tree)
        if "bootstrap" in path.read_text(encoding="utf-8").lower() or "resample" in path.read_text(encoding="utf-8"):
            imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
            if BOOTSTRAP not in imported:
                found.append(f"docs/guides/{path.name}: resamples without {BOOTSTRAP}")
    assert not found, "\n".join(found)
    assert {"coref_e2e_bootstrap.py", "pronoun_pairs_intervals.py"} <= {p.name for p in GUIDE_SCRIPTS}


def test_each_home_exists_and_defines_its_names():
    for function, home in DEFINED_IN.items():
        assert home in MODULES, home
        defined = {n.name for n in ast.walk(MODULES[home].tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert function in defined, f"{home} no longer defines {function}"
    spans = {t.id for node in MODULES[SPANS].tree.body if isinstance(node, ast.Assign) for t in node.targets}
    assert {"Mention", "Cluster"} <= spans


def test_a_planted_second_home_of_each_is_found():
    planted = ast.parse(
        "import json\n"
        "import json as serial\n"
        "import numpy as np\n"
        "from json import loads\n"
        "from json import load as parse_file\n"
        "from pathlib import Path\n"
        "Mention = tuple[int, int]\n"
        "Spans = list[list[tuple[int, int]]]\n"
        "class JsonlLogger:\n"
        "    def log(self, path, record):\n"
        "        with append_file(path) as handle:\n"
        "            handle.write(json.dumps(record))\n"
        "def read_log(output_dir):\n"
        "    return [json.loads(line) for line in (Path(output_dir) / 'log.jsonl').read_text().splitlines()]\n"
        "def read_answers(path):\n"
        "    return [json.JSONDecoder().decode(line) for line in open(path)]\n"
        "def read_config(path):\n"
        "    with open(path) as handle:\n"
        "        return serial.load(handle)\n"
        "def bootstrap_interval(values):\n"
        "    return np.percentile(values, [2.5, 97.5])\n"
    )
    found = second_homes("corefbert.tasks.planted", planted)
    for what in ("parses JSON by hand (json.loads", "parses JSON by hand (json.JSONDecoder",
                 "parses JSON by hand (serial.load", "imports json.loads", "imports json.load",
                 "defines read_log", "names log.jsonl", "appends to a file",
                 "defines bootstrap_interval", "takes an interval by hand (np.percentile"):
        assert sum(what in line for line in found) == 1 or what == "imports json.load", (what, found)
    assert sum("imports json.load" in line for line in found) == 2, found
    assert sum("defines a span type" in line for line in found) == 2, found
    # The homes themselves may: the JSON module parses, the log's module reads the log (through it).
    assert second_homes(JSONIO, ast.parse("import json\ndef read_json(p):\n    return json.load(p)\n")) == []
    assert second_homes(RUNLOG, ast.parse("import json\ndef read_log(p):\n    return json.loads(p)\n")) != []
