"""Dataclass arguments with an optional ``--config file.yaml`` whose values become defaults.

Every CLI parses through :func:`parse_args`: flags on the command line override the YAML file, the
YAML file overrides the dataclass defaults (the TRL convention). YAML is read with ``safe_load``,
so a config can never run code.

Every parsing error is one line (``error: ...``, exit status 2 through ``cli_entry``), not argparse's usage
screen, and never shows a secret: the value of ``--hub_token`` (flag or YAML) and anything shaped like a
Hugging Face token are replaced by ``<redacted>`` in every message this module raises.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from transformers import HfArgumentParser

from corefbert.errors import CorefBertError

#: Arguments whose values are secrets: no message, file, tracker or model card may show them.
SECRET_ARGUMENTS = ("hub_token",)
#: A Hugging Face access token wherever it appears in a message: typed into another flag
#: (``--push_to_hub hf_...``) or after a misspelt one (``--hub_tokn hf_...``), where no name says it is one.
HUB_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")
REDACTED = "<redacted>"


def redact(text: str, secrets=()) -> str:
    """``text`` with every value of ``secrets`` and every Hub-token-shaped word replaced by ``<redacted>``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):  # longest first: no partial leak
        text = text.replace(secret, REDACTED)
    return HUB_TOKEN.sub(REDACTED, text)


def _secret_strings(value) -> list[str]:
    """Every string inside a YAML value (a token given as a list or a mapping is still a token)."""
    if isinstance(value, dict):
        return [s for item in value.items() for part in item for s in _secret_strings(part)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _secret_strings(item)]
    return [str(value)] if value is not None and not isinstance(value, bool) else []


def _one_line_errors(parser: argparse.ArgumentParser, secrets: list[str], path: str | None = None):
    """Make ``parser`` raise one :class:`CorefBertError` line instead of printing its usage screen and
    exiting: 60 lines of usage hid the one that matters, and argparse echoes the offending value."""

    def error(message: str):
        raise CorefBertError(f"{redact(message, secrets).rstrip('.')}; run with --help for the valid arguments",
                             path=path)

    parser.error = error  # type: ignore[method-assign]


def _expected_type(action: argparse.Action) -> str:
    """What a flag's value must be, in words: ``an integer``, ``a number``, ``true or false``."""
    kind = getattr(action.type, "__name__", str(action.type))
    words = {"int": "an integer", "float": "a number", "string_to_bool": "true or false", "str": "a string"}
    return words.get(kind, kind)


def _yaml_line(path: str, key: str) -> int | None:
    """1-based line of ``key`` in the YAML mapping at ``path`` (the file already parsed once)."""
    with open(path, encoding="utf-8") as handle:
        node = yaml.compose(handle, Loader=yaml.SafeLoader)
    for key_node, _ in getattr(node, "value", []):
        if getattr(key_node, "value", None) == key:
            return key_node.start_mark.line + 1
    return None


def _convert_yaml_values(values: dict[str, Any], dests: dict[str, argparse.Action], path: str) -> dict[str, Any]:
    """YAML strings converted by each flag's argparse type now, so a value argparse cannot convert
    (``max_steps: ten``) is one line naming the file, the line, the key and the type; argparse would
    convert it only after parsing and answer with its usage screen, the file never named."""
    converted = dict(values)
    for key, value in values.items():
        action = dests[key]
        if not isinstance(value, str) or action.type is None or action.type is str:
            continue  # YAML's own types are checked by the dataclasses (``validate``)
        try:
            converted[key] = action.type(value)
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            shown = REDACTED if key in SECRET_ARGUMENTS else repr(value)
            raise CorefBertError(f"{key}: {shown} is not {_expected_type(action)}; fix the value in the config",
                                 path=path, position=_yaml_line(path, key)) from None
    return converted


def load_yaml_config(path: str) -> dict[str, Any]:
    """Read a flat ``{argument: value}`` YAML mapping; bad files become one clear line."""
    if not os.path.isfile(path):
        raise CorefBertError("config file not found; check the --config path", path=path)
    try:
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        mark = getattr(err, "problem_mark", None)
        position = f"{mark.line + 1}:{mark.column + 1}" if mark is not None else None
        reason = getattr(err, "problem", None) or type(err).__name__
        raise CorefBertError(f"not valid YAML ({reason}); fix the file", path=path, position=position) from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise CorefBertError("a config must be a mapping of argument names to values", path=path)
    return values


def peek_argument(args: Sequence[str], name: str) -> Any:
    """The value of ``--name`` on the command line ``args``, else in its ``--config`` file, else None: for a
    setting that decides other defaults (FEVER's ``--model_type``) before the full parse."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument(f"--{name}", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(list(args))
    value = getattr(known, name)
    if value is None and known.config is not None:
        value = load_yaml_config(known.config).get(name)
    return value


def parse_args(
    dataclass_types: Sequence[type],
    args: Sequence[str] | None = None,
    prog: str | None = None,
    defaults: dict[str, Any] | None = None,
):
    """Parse ``args`` (default ``sys.argv[1:]``) into one instance per dataclass type.

    Precedence, lowest first: dataclass defaults, ``defaults`` (a CLI's own, e.g. a benchmark's paper
    learning rate), the ``--config`` YAML file, command-line flags. Unknown names are an error.
    """
    args = list(sys.argv[1:] if args is None else args)
    # The secrets first, so that no later message can show them: every --hub_token value on the command
    # line (abbreviated or with "=" too: argparse accepts both), then the config's.
    secrets = [a.split("=", 1)[1] for a in args if a.startswith("--hub") and "=" in a]
    find_secrets = argparse.ArgumentParser(add_help=False)
    for name in SECRET_ARGUMENTS:
        find_secrets.add_argument(f"--{name}", dest=name, action="append", default=[])
    _one_line_errors(find_secrets, secrets)
    # One spelling for the search, so that "--hub=..." is not "ambiguous" between two spellings of one flag.
    given, _ = find_secrets.parse_known_args([a.replace("-", "_") if a.startswith("--hub-") else a for a in args])
    secrets += [value for name in SECRET_ARGUMENTS for value in getattr(given, name)]
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    _one_line_errors(pre, secrets)
    known, rest = pre.parse_known_args(args)
    values = load_yaml_config(known.config) if known.config is not None else {}
    secrets += [s for name in SECRET_ARGUMENTS for s in _secret_strings(values.get(name))]

    parser = HfArgumentParser(list(dataclass_types), prog=prog)
    parser.add_argument("--config", default=None, help="YAML file of argument values; flags override it.")
    _one_line_errors(parser, secrets)
    if defaults:
        parser.set_defaults(**defaults)
    if known.config is not None:
        dests = {action.dest: action for action in parser._actions}
        unknown = sorted(set(values) - set(dests))
        if unknown:
            raise CorefBertError(
                f"unknown argument(s) {', '.join(unknown)}; run with --help for the valid names",
                path=known.config,
            )
        for name in SECRET_ARGUMENTS:
            if name in values and values[name] is not None and not isinstance(values[name], str):
                # safe_load gives a list or a mapping as is; the dataclass check would print it.
                raise CorefBertError(f"{name} must be a string (got a {type(values[name]).__name__}; its value is "
                                     "not shown); write it as one quoted string, or leave it out and use $HF_TOKEN",
                                     path=known.config, position=_yaml_line(known.config, name))
        values = _convert_yaml_values(values, dests, known.config)
        for key in values:
            dests[key].required = False
        parser.set_defaults(**values)

    parsed, remaining = parser.parse_known_args(rest)
    if remaining:
        raise CorefBertError(f"unrecognized argument(s): {redact(' '.join(remaining), secrets)}; run with --help")
    outputs = []
    namespace = vars(parsed)
    for dtype in dataclass_types:
        names = {f.name for f in dataclasses.fields(dtype) if f.init}
        outputs.append(dtype(**{k: v for k, v in namespace.items() if k in names}))
    return tuple(outputs)
