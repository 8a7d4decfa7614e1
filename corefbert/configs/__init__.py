"""The YAML configs shipped with the package: pretraining recipes (``pretraining/``) and accelerate launch
configs (``accelerate/``), found the same way from a checkout and from an installed wheel.

In a checkout ``pretrain/configs`` and ``accelerate_configs`` are links to these folders, so the documented
paths keep working; an installed package has no such folders, and ``corefbert config-path NAME`` prints where
a config is instead::

    accelerate launch --config_file "$(corefbert config-path single_gpu)" -m corefbert.cli pretrain \\
        --config "$(corefbert config-path corefbert_base)" --model_name_or_path ... --train_file ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from corefbert.argparser import parse_args
from corefbert.errors import CorefBertError, cli_entry

KINDS = ("pretraining", "accelerate")


def _folder() -> Path:
    # files() of an installed package is a Path on disk (wheels install unzipped); accelerate and the YAML
    # reader need a real file name, so a zipped install is not supported.
    return Path(str(files(__name__)))


def shipped_configs() -> dict[str, Path]:
    """Every shipped config by name (the file name without ``.yaml``; names are unique across the kinds)."""
    return {path.stem: path for kind in KINDS for path in sorted((_folder() / kind).glob("*.yaml"))}


def config_path(name: str) -> Path:
    """The file of the shipped config ``name`` (``demo``, ``corefbert_base``, ``cpu``; ``.yaml`` may be given)."""
    configs = shipped_configs()
    stem = name.removesuffix(".yaml")
    if stem not in configs:
        raise CorefBertError(f"no shipped config {name!r}; the configs are {', '.join(sorted(configs))}")
    return configs[stem]


@dataclass
class ConfigPathArguments:
    """``corefbert config-path [NAME]``: the path of one shipped config, or every name and path."""

    name: str | None = field(default=None, metadata={
        "help": "a config's name, e.g. demo, corefbert_base, cpu, deepspeed_zero3 (also the first word); "
                "without it, every name and path"})


@cli_entry
def main(argv: list[str] | None = None) -> None:
    """``corefbert config-path [NAME]``: the path of one shipped config, or every name and path."""
    (args,) = parse_args([ConfigPathArguments], argv, prog="corefbert config-path", positionals=("name",),
                         usage="%(prog)s [-h] [NAME] [--config FILE]", description=ConfigPathArguments.__doc__)
    if args.name is not None:
        print(config_path(args.name))
        return
    for name, path in sorted(shipped_configs().items()):
        print(f"{name}\t{path}")
