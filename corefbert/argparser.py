"""Dataclass arguments with an optional ``--config file.yaml`` whose values become defaults (flags override
the file, the file the dataclass defaults: the TRL convention). The YAML load is bounded: ``safe_load`` (no
code runs), at most :data:`MAX_CONFIG_BYTES`, no anchors or aliases (which can make a small file a huge or
self-holding value). Every parsing error is one line, not argparse's usage screen.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import glob
import math
import os
import reprlib
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

from corefbert.errors import CorefBertError, note_input, one_line

#: Arguments whose values are secrets: no file, tracker or model card may show them (:mod:`corefbert.training.hub`).
SECRET_ARGUMENTS = ("hub_token",)
#: The largest config file read: a config is a few dozen flags.
MAX_CONFIG_BYTES = 1 << 20


#: The name ``corefbert <command>`` runs a command under, while it runs (:func:`invoked_as`); None for a script.
_INVOKED_AS: contextvars.ContextVar[str | None] = contextvars.ContextVar("invoked_as", default=None)


@contextlib.contextmanager
def invoked_as(name: str) -> Iterator[None]:
    """While the block runs, every usage line names the program ``name`` (``corefbert prepare``)."""
    token = _INVOKED_AS.set(name)
    try:
        yield
    finally:
        _INVOKED_AS.reset(token)


def program(default: str | None) -> str | None:
    """The program name of a usage line: ``corefbert <command>`` under the dispatcher, else ``default``."""
    return _INVOKED_AS.get() or default


def _one_line_errors(parser: argparse.ArgumentParser, path: str | None = None):
    """Make ``parser`` raise one :class:`CorefBertError` line instead of printing its usage screen."""

    def error(message: str):
        raise CorefBertError(f"{message.rstrip('.')}; run with --help for the valid arguments", path=path)

    parser.error = error  # type: ignore[method-assign]


def _yaml_line(path: str, key: str) -> int | None:
    """1-based line of ``key`` in the YAML mapping at ``path`` (the file already parsed once)."""
    with open(path, encoding="utf-8") as handle:
        node = yaml.compose(handle, Loader=yaml.SafeLoader)
    for key_node, _ in getattr(node, "value", []):
        if getattr(key_node, "value", None) == key:
            return key_node.start_mark.line + 1
    return None


def _convert_yaml_values(values: dict[str, Any], dests: dict[str, argparse.Action], path: str) -> dict[str, Any]:
    """YAML strings converted by each flag's argparse type now: a value it cannot convert (``max_steps: ten``)
    is one line naming the file, the key's line and the type, not argparse's usage screen."""
    converted = dict(values)
    for key, value in values.items():
        action = dests[key]
        if not isinstance(value, str) or action.type is None or action.type is str:
            continue  # YAML's own types are checked by the dataclasses (``validate``)
        try:
            converted[key] = action.type(value)
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            kind = getattr(action.type, "__name__", str(action.type))
            words = {t.__name__: w[0] for t, w in _KINDS.items()} | {"string_to_bool": "true or false"}
            raise CorefBertError(f"{key}: {value!r} is not {words.get(kind, kind)}; fix the value in the "
                                 "config", path=path, position=_yaml_line(path, key)) from None
    return converted


def load_yaml_config(path: str) -> dict[str, Any]:
    """Read a flat ``{argument: value}`` YAML mapping, bounded (module docstring); bad files become one line."""
    if not os.path.isfile(path):
        raise CorefBertError("config file not found; check the --config path", path=path)
    if os.path.getsize(path) > MAX_CONFIG_BYTES:
        raise CorefBertError(f"{os.path.getsize(path):,} bytes: larger than a config ({MAX_CONFIG_BYTES:,} at most); "
                             "pass a YAML file of flags", path=path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        alias = next((event for event in yaml.parse(text, Loader=yaml.SafeLoader)
                      if isinstance(event, yaml.AliasEvent)), None)
        if alias is not None:
            raise CorefBertError("anchors and aliases (&name, *name) are not read in a config; write the values "
                                 "out", path=path, position=alias.start_mark.line + 1)
        values = yaml.safe_load(text)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        mark = getattr(err, "problem_mark", None)
        position = f"{mark.line + 1}:{mark.column + 1}" if mark is not None else None
        reason = getattr(err, "problem", None) or type(err).__name__
        raise CorefBertError(f"not valid YAML ({reason}); fix the file", path=path, position=position) from None
    except RecursionError:  # PyYAML composes nested lists recursively: [[[[...]]]] thousands deep
        raise CorefBertError("values nested too deeply; a config holds flat values and lists", path=path) from None
    if not isinstance(values, dict | None):
        raise CorefBertError("a config must be a mapping of argument names to values", path=path)
    return values or {}


_MISFIT = object()
_KINDS = {bool: ("true or false", "true/false values"), int: ("an integer", "integers"),
          float: ("a number", "numbers"), str: ("a string", "strings")}
#: Values in messages, shortened.
_SHOWN = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 2, 4, 4, 60, 60


def _options(annotation) -> tuple:
    """The members of a union type (``str | None``), or the type alone."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return typing.get_args(annotation) if union else (annotation,)


def _expected(annotation) -> str:
    """What a field typed ``annotation`` takes, in words: ``a string or a list of strings``."""
    words = []
    for option in _options(annotation):
        if typing.get_origin(option) is list:
            (item_type,) = typing.get_args(option) or (str,)
            single, plural = _KINDS.get(item_type, (str(item_type), f"{item_type} values"))
            words += [single, f"a list of {plural}"]
        elif option is not type(None):
            words.append(_KINDS.get(option, (str(option),))[0])
    return " or ".join(words)


def _as_type(name: str, value, option):
    """``value`` as type ``option`` (not None) takes it, or ``_MISFIT``."""
    if typing.get_origin(option) is list:
        (item_type,) = typing.get_args(option) or (str,)
        items = [_MISFIT if item is None else _as_type(name, item, item_type)
                 for item in (value if isinstance(value, list) else [value])]  # one value: a list of one
        return _MISFIT if any(item is _MISFIT for item in items) else items
    if option is bool:
        return value if isinstance(value, bool) else _MISFIT
    if isinstance(value, bool) or option not in _KINDS:
        return _MISFIT if option in _KINDS else value  # a type this does not know is the dataclass's to check
    if option is int:
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            value = int(value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        return value if isinstance(value, int) else _MISFIT
    if option is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return _MISFIT
        if isinstance(value, int | float) and not math.isfinite(value):
            raise CorefBertError(f"--{name} must be a finite number (got {value!r})")
        return float(value) if isinstance(value, int | float) else _MISFIT
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else _MISFIT


def conform_value(name: str, value, annotation):
    """``value`` as the dataclass field ``name`` of type ``annotation`` must hold it, or one line saying what it
    must be: the one home of these rules (every ``--config`` value, and ``TrainingArguments.validate``).

    YAML's own spellings are read as meant: ``1e-5`` (a string to YAML 1.1) as a float, ``4.0`` as an integer,
    ``500`` for a string flag, ``mixed_precision: no`` (false to YAML) as "no"; one value for a list flag is a
    list of one. Nested lists, mappings and nulls are refused; other types than ``bool``, ``int``, ``float``,
    ``str``, their lists and ``| None`` pass unchanged.
    """
    options = _options(annotation)
    if value is None:
        if type(None) in options:
            return None
        raise CorefBertError(f"--{name} needs a value (got null)")
    if value is False and name == "mixed_precision":
        return "no"  # YAML 1.1 reads a bare no as false
    for option in options:
        converted = _MISFIT if option is type(None) else _as_type(name, value, option)
        if converted is not _MISFIT:
            return converted
    yes_no = " (YAML reads a bare yes, no, on or off as true/false: quote it)" if isinstance(value, bool) else ""
    # A secret's value is never echoed, even a malformed one (a token pasted into a list is still a token).
    got = (f"a {type(value).__name__}; its value is not shown" if name in SECRET_ARGUMENTS
           else one_line(_SHOWN.repr(value)))
    raise CorefBertError(f"--{name} must be {_expected(annotation)} (got {got}){yes_no}")


def _field_types(dataclass_types: Sequence[type]) -> dict[str, Any]:
    """The type of every field the parser sets, by name (string annotations resolved)."""
    types_by_name = {}
    for dtype in dataclass_types:
        hints = typing.get_type_hints(dtype)
        types_by_name.update({f.name: hints[f.name] for f in dataclasses.fields(dtype) if f.init})
    return types_by_name


def peek_argument(args: Sequence[str], name: str) -> Any:
    """The value of ``--name`` on the command line ``args``, else in its ``--config`` file, else None: for a
    setting that decides other defaults (FEVER's ``--model_type``) before the full parse."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(f"--{name}", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(list(args))
    value = getattr(known, name)
    if value is None and known.config is not None:
        value = _conform_yaml_value(name, load_yaml_config(known.config).get(name), str | None, known.config)
    return value


def _conform_yaml_value(key: str, value, annotation, path: str):
    """:func:`conform_value` for a config's ``key``, its one line naming the file and the key's line."""
    try:
        return conform_value(key, value, annotation)
    except CorefBertError as err:
        raise CorefBertError(f"{err}; fix the value in the config", path=path,
                             position=_yaml_line(path, key)) from None


def parse_args(
    dataclass_types: Sequence[type],
    args: Sequence[str] | None = None,
    prog: str | None = None,
    defaults: dict[str, Any] | None = None,
    usage: str | None = None,
    positionals: Sequence[str] = (),
    description: str | None = None,
):
    """Parse ``args`` (default ``sys.argv[1:]``) into one instance per dataclass type.

    Precedence, lowest first: dataclass defaults, ``defaults`` (a CLI's own, e.g. a benchmark's paper learning
    rate), the ``--config`` YAML file, command-line flags. Unknown names are an error. ``prog``: the script's
    name for the usage line (:func:`program`); ``usage`` replaces argparse's usage line, ``description`` opens
    the help. ``positionals``: fields that may also be given as bare words, in order (``corefbert plot LOG`` =
    ``corefbert plot --log LOG``).
    """
    args = list(sys.argv[1:] if args is None else args)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    _one_line_errors(pre)
    known, rest = pre.parse_known_args(args)
    values = load_yaml_config(known.config) if known.config is not None else {}

    from transformers import HfArgumentParser  # here: `corefbert --help` imports this module for invoked_as

    parser = HfArgumentParser(list(dataclass_types), prog=program(prog), usage=usage, description=description)
    parser.add_argument("--config", default=None, help="YAML file of argument values; flags override it.")
    _one_line_errors(parser)
    if defaults:
        parser.set_defaults(**defaults)
    if known.config is not None:
        dests = {action.dest: action for action in parser._actions}
        unknown = sorted(set(values) - set(dests))
        if unknown:
            raise CorefBertError(f"unknown argument(s) {', '.join(unknown)}; run with --help for the valid "
                                 "names", path=known.config)
        fields = _field_types(dataclass_types)
        values = {key: _conform_yaml_value(key, value, fields[key], known.config) if key in fields else value
                  for key, value in _convert_yaml_values(values, dests, known.config).items()}
        for key in values:
            dests[key].required = False
        parser.set_defaults(**values)

    required = {name: parser_action(parser, name).required for name in positionals}
    for name in positionals:  # given as a word or by the config, too: checked once the words are placed
        parser_action(parser, name).required = False
    parsed, remaining = parser.parse_known_args(rest)
    if any(word.startswith("-") for word in remaining):
        raise CorefBertError(f"unrecognized argument(s): {' '.join(remaining)}; run with --help")
    namespace = vars(parsed)
    _place_positionals(parser, namespace, rest, remaining, required)
    outputs = []
    for dtype in dataclass_types:
        names = {f.name for f in dataclasses.fields(dtype) if f.init}
        outputs.append(dtype(**{k: v for k, v in namespace.items() if k in names}))
    note_file_arguments(namespace)
    return tuple(outputs)


def parser_action(parser: argparse.ArgumentParser, name: str) -> argparse.Action:
    """The action of the field ``name`` in ``parser``."""
    return next(action for action in parser._actions if action.dest == name)


def _place_positionals(parser, namespace: dict[str, Any], args: list[str], words: list[str],
                       required: dict[str, bool]) -> None:
    """Give the bare ``words`` of the command line ``args`` (what the parser left) to the ``required`` fields
    (positionals, in order) whose flag ``args`` does not give, anywhere on the line (``plot -o out.png LOG``);
    then each positional a field needs without a default is one line, named both ways."""
    open_names = []
    for name in required:
        flags = parser_action(parser, name).option_strings
        if not any(arg in flags or arg.split("=", 1)[0] in flags for arg in args):
            open_names.append(name)
    if len(words) > len(open_names):
        extra = " ".join(words[len(open_names):])
        raise CorefBertError(f"unrecognized argument(s): {extra}; run with --help")
    for name, word in zip(open_names, words):
        namespace[name] = word
    missing = [f"{name.upper()} (or --{name})" for name, needed in required.items() if needed and namespace[name] is None]
    if missing:
        raise CorefBertError(f"the following arguments are required: {', '.join(missing)}; run with --help for the "
                             "valid arguments")


def note_file_arguments(values: dict[str, Any]) -> None:
    """Every file a ``*_file`` argument names (a path, a glob or a list of them) is one of the command's inputs,
    which none of its writes may replace (:func:`corefbert.errors.note_input`)."""
    for name, value in values.items():
        if not name.endswith("_file") or not value:
            continue
        for pattern in [value] if isinstance(value, str) else value if isinstance(value, list | tuple) else []:
            if isinstance(pattern, str):
                for path in glob.glob(pattern, recursive=True) if glob.has_magic(pattern) else [pattern]:
                    note_input(path)
