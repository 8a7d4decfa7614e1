"""One home per primitive: each shared piece is defined, and each library call behind it made, in one
module of the package, so a fix to it (an error line, a RoBERTa offset, an fsync) reaches every caller.

Read from the source, like the layer tests. The last test plants a second home of each primitive in a fake
module and watches the checker find every one, so a rule that silently stopped matching would fail too.
"""

from __future__ import annotations

import ast

from test_architecture import MODULES

TOKENIZERS = "corefbert.text.tokenizers"
POSITIONS = "corefbert.text.positions"
DURABLE = "corefbert.text.durable"
ERRORS = "corefbert.errors"
CHECKPOINTING = "corefbert.training.checkpoints.folders"
HEADS = "corefbert.tasks.heads"
SCRATCH = "corefbert.tasks.scratch"
VOCABULARY = "corefbert.text.vocabulary"
# Function name -> the one module that defines it.
PRIMITIVES = {
    "load_tokenizer": TOKENIZERS,
    "check_tokenizer_vocabulary": TOKENIZERS,
    "special_token_frame": TOKENIZERS,
    "word_pieces": TOKENIZERS,
    "span_tokens": TOKENIZERS,
    "joins_next": TOKENIZERS,
    "max_positions": POSITIONS,
    "padding_offset": POSITIONS,
    "check_writable": DURABLE,
    "writing": DURABLE,
    "replace_folder": DURABLE,
    "remove_folder": DURABLE,
    "fsync_dir": DURABLE,
    "write_json_durably": DURABLE,
    "replace_file": DURABLE,
    "os_error_reason": DURABLE,
    "output_path": DURABLE,
    "output_file": DURABLE,
    "append_file": DURABLE,
    "fresh_file": DURABLE,
    "one_line": ERRORS,
    "check_sizes_against_weights": HEADS,
    "weight_shapes": HEADS,
}
# One save/load for every model trained from scratch. Weight files (safetensors) are read and written
# only by the one weight loader and the fine-tuned layout (tasks.heads) and the one save/load of models trained
# from scratch (tasks.scratch); their configs derive from tasks.scratch.ScratchConfig, whose from_dict/to_dict
# (with the vocabulary's) are the only ones; nothing is pickled.
WEIGHT_HOMES = (HEADS, SCRATCH)
#: Module-level functions that save or load a model, each defined in one module only (tasks define methods of
#: these names: the protocol's hooks, which call these).
SAVE_LOAD = {"save_pretrained": SCRATCH, "from_pretrained": SCRATCH, "load_weights": HEADS}
#: Methods that turn a config into JSON values and back: ScratchConfig's and the vocabulary's.
CONFIG_METHODS = {"to_dict", "from_dict"}
#: Readers of weight files outside WEIGHT_HOMES, each with why.
KNOWN_WEIGHT_READERS = {
    # a released checkpoint's files (safetensors or pickles through weights_only) read once to convert them;
    # it sits below tasks/, so it cannot use tasks.heads
    "corefbert.pretraining.convert",
    # accelerate's optimizer, RNG and scaler states (pickles) read through weights_only
    "corefbert.training.checkpoints.files",
}


def _keyword_is(call: ast.Call, name: str, value: object) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is value for k in call.keywords)


# Calls that write a file at a path they are given (safetensors, matplotlib, torch, pathlib).
WRITERS = {"write_text", "write_bytes", "save_file", "savefig"}


def _writes(call: ast.Call) -> bool:
    """``open(path, "w"...)`` / ``path.open("a")``: a mode that writes, given literally."""
    name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr
    if name != "open":
        return False
    modes = [a for a in call.args[1:2] if isinstance(a, ast.Constant)] + \
        [k.value for k in call.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
    return any(isinstance(m.value, str) and set(m.value) & set("wax+") for m in modes)


def second_homes(name: str, tree: ast.Module) -> list[str]:
    """What module ``name`` (its parsed source ``tree``) does that only a primitive's home may do."""
    found = []
    # A library writer inside ``with output_path(...) as fresh:`` writes at the fresh path: that is the one way.
    fenced = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.With)
              and any(isinstance(item.context_expr, ast.Call) and ast.unparse(item.context_expr.func) == "output_path"
                      for item in node.items)
              for statement in node.body for inner in ast.walk(statement)}

    def outside(home: str, line: int, what: str) -> None:
        if name != home:
            found.append(f"{name}:{line}: {what} (the home is {home})")

    found += second_save_load(name, tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in PRIMITIVES:
            outside(PRIMITIVES[node.name], node.lineno, f"defines {node.name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if node.func.attr == "from_pretrained" and "Tokenizer" in owner:
                outside(TOKENIZERS, node.lineno, f"loads a tokenizer with {owner}.from_pretrained")
            elif node.func.attr == "fsync" and owner == "os":
                outside(DURABLE, node.lineno, "calls os.fsync")
            elif node.func.attr == "replace" and owner == "os" and name != CHECKPOINTING:
                # checkpointing renames its own step_N.tmp into place when it recovers an interrupted save
                outside(DURABLE, node.lineno, "renames into place by hand (replace_file / replace_folder)")
            elif node.func.attr in WRITERS and name != DURABLE and id(node) not in fenced:
                # A write straight at an output name follows a link planted there
                outside(DURABLE, node.lineno, f"writes a file by hand ({node.func.attr}; output_file / output_path)")
            elif node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value == "max_position_embeddings":
                outside(POSITIONS, node.lineno, "reads max_position_embeddings")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute) and _writes(node):
            outside(DURABLE, node.lineno, "opens a file for writing by hand (output_file / append_file)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in WRITERS \
                and id(node) not in fenced:
            outside(DURABLE, node.lineno, f"writes a file by hand ({node.func.id}; output_path)")
        if isinstance(node, ast.Call) and _keyword_is(node, "add_special_tokens", True):
            # Encoders rely on the default; asking for the special tokens explicitly is the frame probe.
            outside(TOKENIZERS, node.lineno, "probes the special-token frame (add_special_tokens=True)")
        if isinstance(node, ast.Attribute) and node.attr == "max_position_embeddings" \
                and isinstance(node.ctx, ast.Load):
            outside(POSITIONS, node.lineno, "reads max_position_embeddings")
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
            if key == "max_position_embeddings":
                outside(POSITIONS, node.lineno, "reads max_position_embeddings")
            elif key == 0 and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
                    and node.value.func.attr == "splitlines":
                outside(ERRORS, node.lineno, "cuts a first line by hand (one_line(..., first_line=True))")
    return found


def second_save_load(name: str, tree: ast.Module) -> list[str]:
    """What module ``name`` does that only the one save/load of weights and configs may do."""
    found = []
    for node in ast.walk(tree):
        imported = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(m.split(".")[0] == "safetensors" for m in imported) and name not in WEIGHT_HOMES \
                and name not in KNOWN_WEIGHT_READERS:
            found.append(f"{name}:{node.lineno}: reads or writes weight files by hand (imports safetensors; the "
                         f"homes are {' and '.join(WEIGHT_HOMES)})")
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("torch.save", "torch.load"):
            if ast.unparse(node.func) == "torch.save" or name not in KNOWN_WEIGHT_READERS:
                found.append(f"{name}:{node.lineno}: pickles ({ast.unparse(node.func)}; weights are safetensors, "
                             f"through {' and '.join(WEIGHT_HOMES)})")
        if isinstance(node, ast.ClassDef):
            methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            if methods & CONFIG_METHODS and name not in (SCRATCH, VOCABULARY):
                found.append(f"{name}:{node.lineno}: {node.name} defines {', '.join(sorted(methods & CONFIG_METHODS))} "
                             f"(a model config derives from ScratchConfig, the home is {SCRATCH})")
            bases = [ast.unparse(b) for b in node.bases]
            if name.startswith("corefbert.tasks.") and name != SCRATCH and node.name.endswith("Config") \
                    and not any(b.endswith("Config") for b in bases):
                found.append(f"{name}:{node.lineno}: {node.name} is a model config that does not derive from "
                             f"ScratchConfig (the home is {SCRATCH})")
    for node in tree.body:  # module-level functions: the task protocol's methods of the same names are hooks
        if isinstance(node, ast.FunctionDef) and node.name in SAVE_LOAD and name != SAVE_LOAD[node.name]:
            found.append(f"{name}:{node.lineno}: defines {node.name} (a second save/load; the home is "
                         f"{SAVE_LOAD[node.name]})")
    return found


def test_each_primitive_has_one_home():
    found = [line for module in MODULES.values() if module.name.startswith("corefbert")
             for line in second_homes(module.name, module.tree)]
    assert not found, "\n".join(found)


def test_each_home_exists_and_defines_its_primitives():
    for function, home in {**PRIMITIVES, **SAVE_LOAD}.items():
        assert home in MODULES, home
        defined = {n.name for n in ast.walk(MODULES[home].tree) if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{home} no longer defines {function}"


def test_the_corpus_writes_durably_without_reaching_into_checkpoints():
    reaching = [f"{m.name}:{line}" for m in MODULES.values() if m.name.startswith("corefbert.corpus")
                for line, base, name in m.imports
                if base == "corefbert.training.checkpoints.folders"
                or (base == "corefbert.training" and name == "checkpointing")]
    assert not reaching, reaching


def test_a_planted_second_home_of_each_primitive_is_found():
    planted = ast.parse(
        "import os\n"
        "from transformers import AutoTokenizer\n"
        "def load_tokenizer(path):\n"
        "    return AutoTokenizer.from_pretrained(path)\n"
        "def frame(tokenizer):\n"
        "    return tokenizer('x', add_special_tokens=True)\n"
        "def usable(config):\n"
        "    return config.max_position_embeddings - 2, config['max_position_embeddings'], "
        "config.get('max_position_embeddings')\n"
        "def save(handle, err):\n"
        "    os.fsync(handle.fileno())\n"
        "    os.replace('a.tmp', 'a')\n"
        "    return str(err).splitlines()[0]\n"
        "def write(path, fig, tensors):\n"
        "    open(path, 'w').write('x')\n"
        "    open(path, mode='ab')\n"
        "    path.write_text('x')\n"
        "    fig.savefig(path)\n"
        "    save_file(tensors, path)\n"
        "    with output_path(path) as fresh:\n"
        "        save_file(tensors, fresh)\n"
        "        fig.savefig(fresh)\n"
    )
    found = second_homes("corefbert.tasks.planted", planted)
    for what in ("defines load_tokenizer", "AutoTokenizer.from_pretrained", "add_special_tokens=True",
                 "calls os.fsync", "renames into place by hand", "cuts a first line"):
        assert any(what in line for line in found), (what, found)
    assert sum("opens a file for writing by hand" in line for line in found) == 2, found
    for what in ("write_text", "savefig", "save_file"):  # once each: the fenced calls are the allowed way
        assert sum(f"by hand ({what}" in line for line in found) == 1, (what, found)
    assert sum("reads max_position_embeddings" in line for line in found) == 3, found
    assert second_homes(TOKENIZERS, ast.parse("def load_tokenizer(p):\n    return AutoTokenizer.from_pretrained(p)\n")) == []


def test_a_planted_second_save_load_of_a_scratch_model_is_found():
    """A family that saves and loads its model by hand (safetensors at its own call, its own config
    class with to_dict/from_dict, a pickle) is found line by line; the one home of each is not."""
    planted = ast.parse(
        "import torch\n"
        "from dataclasses import asdict, dataclass\n"
        "from safetensors.torch import load_file, save_file\n"
        "@dataclass\n"
        "class ReaderConfig:\n"
        "    size: int\n"
        "    def to_dict(self):\n"
        "        return asdict(self)\n"
        "    @classmethod\n"
        "    def from_dict(cls, values):\n"
        "        return cls(**values)\n"
        "def save_pretrained(model, directory):\n"
        "    with output_path(directory + '/model.safetensors') as fresh:\n"
        "        save_file(model.state_dict(), fresh)\n"
        "def from_pretrained(model, directory):\n"
        "    import safetensors\n"
        "    model.load_state_dict(load_file(directory + '/model.safetensors'))\n"
        "def load_weights(model, directory):\n"
        "    return from_pretrained(model, directory)\n"
        "def keep(model, path):\n"
        "    torch.save(model.state_dict(), path)\n"
        "    return torch.load(path)\n"
    )
    found = second_homes("corefbert.tasks.planted.model", planted)
    for what in ("imports safetensors", "ReaderConfig defines from_dict, to_dict",
                 "ReaderConfig is a model config that does not derive from ScratchConfig",
                 "defines save_pretrained (a second save/load", "defines from_pretrained (a second save/load",
                 "defines load_weights (a second save/load",
                 "pickles (torch.save", "pickles (torch.load"):
        assert any(what in line for line in found), (what, found)
    assert sum("imports safetensors" in line for line in found) == 2, found
    # The homes themselves, and a config that derives from the base, are not second homes.
    assert second_save_load(SCRATCH, ast.parse(
        "from safetensors.torch import save_file\nclass ScratchConfig:\n    def to_dict(self): ...\n")) == []
    assert second_save_load("corefbert.tasks.babi.ga_reader", ast.parse(
        "class GAReaderConfig(ScratchConfig):\n    size: int\n")) == []
