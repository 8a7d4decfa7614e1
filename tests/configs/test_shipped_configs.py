"""The pretraining and accelerate configs ship inside the package: an installed package
finds them with ``importlib.resources``, and every path the docs give from a checkout still resolves, to the
one copy of each file."""

from __future__ import annotations

import fnmatch
import re
import sys
from importlib.resources import files
from pathlib import Path

import pytest
from helpers import ROOT

from corefbert import cli
from corefbert.configs import KINDS, config_path, shipped_configs
from corefbert.errors import CorefBertError

PACKAGE_CONFIGS = ROOT / "corefbert" / "configs"
# Where the docs and scripts name configs from a checkout, and the package folder each one links to.
CHECKOUT_FOLDERS = {"pretrain/configs": "pretraining", "accelerate_configs": "accelerate"}


def test_importlib_resources_finds_every_config_by_name():
    folder = files("corefbert.configs")
    on_disk = sorted(p.relative_to(PACKAGE_CONFIGS).as_posix() for p in PACKAGE_CONFIGS.glob("*/*.yaml"))
    found = sorted(f"{kind}/{entry.name}" for kind in KINDS for entry in folder.joinpath(kind).iterdir()
                   if entry.name.endswith(".yaml"))
    assert found == on_disk and len(found) >= 12
    configs = shipped_configs()
    assert len(configs) == len(found), "two kinds share a config name"
    for name, path in configs.items():
        assert path.is_file() and config_path(name) == path == config_path(f"{name}.yaml")
    assert config_path("demo").parent.name == "pretraining" and config_path("cpu").parent.name == "accelerate"


def test_an_unknown_config_is_one_error_naming_the_configs():
    with pytest.raises(CorefBertError, match=r"no shipped config 'cpu2'; the configs are .*\bcpu\b.*\bdemo\b"):
        config_path("cpu2")


def test_the_checkout_folders_are_links_to_the_one_copy():
    """One copy of each file: the documented folders are symbolic links (git stores them) into the package."""
    for folder, kind in CHECKOUT_FOLDERS.items():
        path = ROOT / folder
        assert path.is_symlink(), f"{folder} should link to corefbert/configs/{kind}, not hold copies"
        assert path.resolve() == (PACKAGE_CONFIGS / kind).resolve()


def test_every_documented_config_path_resolves_to_the_shipped_file():
    texts = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("pretrain/*.py"), *ROOT.glob("finetune/*.py"),
             *PACKAGE_CONFIGS.glob("*/*.yaml")]
    pattern = re.compile(r"\b(pretrain/configs|accelerate_configs)/(\w+\.yaml)")
    cited = {match.groups() for text in texts for match in pattern.finditer(text.read_text(encoding="utf-8"))}
    assert len(cited) >= 8, cited
    for folder, name in sorted(cited):
        documented = ROOT / folder / name
        assert documented.is_file(), f"{folder}/{name} is named in the docs but does not exist"
        assert documented.resolve() == config_path(name).resolve()


def test_package_data_declares_every_config():
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"]["corefbert"]
    for path in PACKAGE_CONFIGS.glob("*/*.yaml"):
        relative = path.relative_to(ROOT / "corefbert").as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), f"{relative} is not package data"


def test_corefbert_config_path_prints_one_path_or_all(capsys):
    cli.main(["config-path", "single_gpu"])
    assert Path(capsys.readouterr().out.strip()) == config_path("single_gpu")
    cli.main(["config-path"])
    listed = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    assert {name: Path(path) for name, path in listed.items()} == shipped_configs()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["config-path", "nope"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: no shipped config 'nope'")
