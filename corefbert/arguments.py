"""Dataclass arguments with an optional ``--config file.yaml`` whose values become defaults.

Every CLI parses through :func:`parse_args`: flags on the command line override the YAML file, the
YAML file overrides the dataclass defaults (the TRL convention). YAML is read with ``safe_load``,
so a config can never run code.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from transformers import HfArgumentParser

from corefbert.errors import CorefBertError


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
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, rest = pre.parse_known_args(args)

    parser = HfArgumentParser(list(dataclass_types), prog=prog)
    parser.add_argument("--config", default=None, help="YAML file of argument values; flags override it.")
    if defaults:
        parser.set_defaults(**defaults)
    if known.config is not None:
        values = load_yaml_config(known.config)
        dests = {action.dest: action for action in parser._actions}
        unknown = sorted(set(values) - set(dests))
        if unknown:
            raise CorefBertError(
                f"unknown argument(s) {', '.join(unknown)}; run with --help for the valid names",
                path=known.config,
            )
        for key in values:
            dests[key].required = False
        parser.set_defaults(**values)

    try:
        parsed, remaining = parser.parse_known_args(rest)
    except SystemExit:
        raise
    if remaining:
        raise CorefBertError(f"unrecognized argument(s): {' '.join(remaining)}; run with --help")
    outputs = []
    namespace = vars(parsed)
    for dtype in dataclass_types:
        names = {f.name for f in dataclasses.fields(dtype) if f.init}
        outputs.append(dtype(**{k: v for k, v in namespace.items() if k in names}))
    return tuple(outputs)
