"""One save/load for every model trained from scratch: the bAbI readers, the recurrent end-to-end coreference
models and the pronoun-pair classifiers.

A folder holds ``model.safetensors`` (every weight: nothing is pickled, and nothing pickled is read); the
family's JSON config file (the model's :class:`ScratchConfig`, or an object with it under one key beside the
family's own settings: bAbI's ``babi_reader.json``); and the :class:`~corefbert.text.vocabulary.Vocabulary`,
in its own file or as the config file's ``"vocabulary"`` (bAbI). Each family describes its folder once, as a
:class:`ScratchFolder`. Loading checks the config (:meth:`ScratchConfig.from_dict`), compares its sizes with
the safetensors headers before anything is allocated and loads with the one loader
(:func:`~corefbert.tasks.heads.load_weights`); every mismatch is one :class:`CorefBertError`.

Why not ``huggingface_hub.PyTorchModelHubMixin``: it writes its files straight at their final names (not
through :mod:`corefbert.text.durable`), names the config ``config.json`` (an end-to-end ``bert`` folder's
encoder config), builds the class from the config's keys alone (these models also need a vocabulary), loads
with ``strict=False``, drops unknown config keys silently and falls back to a pickled ``pytorch_model.bin``;
its ``push_to_hub`` the runs already have (:mod:`corefbert.training.hub`).
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, NamedTuple

import torch

from corefbert.argparser import conform_value
from corefbert.errors import CorefBertError
from corefbert.tasks.heads import load_weights, weight_files
from corefbert.text.durable import output_path
from corefbert.text.jsonio import read_json
from corefbert.text.vocabulary import VOCAB_FILE, Vocabulary
from corefbert.training.model_folders import check_sizes_against_weights
from corefbert.training.outputs.evaluation import write_json

__all__ = ["WEIGHTS_FILE", "ScratchConfig", "ScratchFolder", "ScratchModel"]

WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class ScratchConfig:
    """The config base of every model trained from scratch: a frozen dataclass saved as JSON. Subclasses
    declare their fields (``int``, ``float``, ``bool``, ``str``, lists of those, ``| None`` and nested
    :class:`ScratchConfig` types) and may set :attr:`describes` and override :meth:`check` (allowed values); a
    key missing or unknown is refused in one line."""

    #: What the config is, in words, for the error line: "not <describes> (...)".
    describes: ClassVar[str] = "a model config"
    #: What to do about a file that is not one.
    advice: ClassVar[str] = "use the file saved with the weights"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Any, path: str | None = None):
        """The config of :meth:`to_dict`'s mapping; one line naming ``path`` when it is not one."""
        try:
            return cls.from_values(values)
        except ValueError as err:
            raise CorefBertError(f"not {cls.describes} of this version ({err}): written by another version? "
                                 f"{cls.advice}", path=path) from None

    @classmethod
    def from_values(cls, values: Any, where: str = ""):
        """:meth:`from_dict` without the wrapping: a ``ValueError`` saying which key (``where``: the nested
        config's key and a dot) is wrong and how."""
        if not isinstance(values, dict):
            raise ValueError(f"{where or 'the config'} is a {type(values).__name__}, not an object")
        hints = typing.get_type_hints(cls)
        known = {f.name: f for f in fields(cls) if f.init}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown keys {[where + k for k in unknown]}")
        missing = [where + name for name, f in known.items() if name not in values
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"missing keys {missing}")
        config = cls(**{name: _conform(where + name, value, hints[name]) for name, value in values.items()})
        config.check()
        return config

    def check(self) -> None:
        """Raise ``ValueError`` for a value outside the allowed ones (types are checked before)."""


def _conform(key: str, value: Any, annotation) -> Any:
    """``value`` as the field ``key`` typed ``annotation`` holds it, else ``ValueError`` saying what it must be
    (the type rules are :func:`corefbert.argparser.conform_value`'s, the one home of them)."""
    if isinstance(annotation, type) and issubclass(annotation, ScratchConfig):
        return annotation.from_values(value, f"{key}.")
    try:
        return conform_value(key, value, annotation)
    except CorefBertError as err:
        raise ValueError(str(err).removeprefix("--")) from None


class ScratchModel(NamedTuple):
    """What :meth:`ScratchFolder.from_pretrained` gives: the model (eval mode) with its config, vocabulary and the
    family's own saved settings (``{}`` where it has none)."""

    model: torch.nn.Module
    config: ScratchConfig
    vocabulary: Vocabulary
    settings: dict


@dataclass(frozen=True)
class ScratchFolder:
    """How one family's model trained from scratch lies in a folder, and what builds it from its config."""

    config_file: str  # the JSON file of the model's config
    config_class: type[ScratchConfig]
    build: Callable[[Any, Vocabulary], torch.nn.Module]  # (config, vocabulary) -> a fresh model of those sizes
    written_by: str  # the command that writes such folders, named when a file is missing
    vocab_file: str | None = VOCAB_FILE  # None: the vocabulary is the config file's "vocabulary"
    config_key: str | None = None  # the model's config is this key of the config file, the family's settings beside

    def save_pretrained(self, directory: str, model: torch.nn.Module, vocabulary: Vocabulary,
                        state_dict: dict | None = None, settings: dict | None = None) -> None:
        """Write ``model`` (its ``config``; ``state_dict`` when given, e.g. gathered from several processes), its
        vocabulary and the family's ``settings`` into ``directory``, each file put in place whole."""
        from safetensors.torch import save_file

        os.makedirs(directory, exist_ok=True)
        state = model.state_dict() if state_dict is None else state_dict
        with output_path(os.path.join(directory, WEIGHTS_FILE), "the weights") as fresh:
            save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, fresh)
        config = model.config.to_dict()
        content = config if self.config_key is None else {**(settings or {}), self.config_key: config}
        if self.vocab_file is None:
            content["vocabulary"] = vocabulary.to_dict()
        else:
            vocabulary.save(directory, self.vocab_file)
        write_json(os.path.join(directory, self.config_file), content)

    def read(self, directory: str, model_type: str | None = None) -> tuple[ScratchConfig, Vocabulary, dict]:
        """``(the model's config, its vocabulary, the family's settings)`` of a folder :meth:`save_pretrained`
        wrote; the weights are not read. With ``model_type``, a folder whose config names another model type is
        refused before its other files are looked at."""
        path = os.path.join(str(directory), self.config_file)
        not_ours, describes, advice = (f"not a model folder written by {self.written_by}",
                                       self.config_class.describes, self.config_class.advice)
        values = read_json(path, missing=f"no {self.config_file}: {not_ours}")
        if not isinstance(values, dict):
            raise CorefBertError(f"not {describes} (a {type(values).__name__}, not an object); {advice}",
                                 path=path)
        settings = dict(values)
        stored_vocabulary = settings.pop("vocabulary", None) if self.vocab_file is None else None
        if self.config_key is None:
            values, settings = settings, {}
        elif self.config_key in settings:
            values = settings.pop(self.config_key)
        else:
            raise CorefBertError(f"not {describes} (no {self.config_key!r}); {advice}", path=path)
        config = self.config_class.from_dict(values, path)  # first: a folder of another model says so, not its files
        found = getattr(config, "model_type", None)
        if model_type is not None and found != model_type:
            raise CorefBertError(f"this folder holds a {found} model, not --model {model_type}", path=directory)
        if self.vocab_file is not None:
            vocabulary = Vocabulary.load(directory, self.vocab_file,
                                         missing=f"no {self.vocab_file}: {not_ours}")
        elif stored_vocabulary is None:
            raise CorefBertError(f"not {describes} (no 'vocabulary'); {advice}", path=path)
        else:
            vocabulary = Vocabulary.from_dict(stored_vocabulary, path)
        return config, vocabulary, settings

    def from_pretrained(self, directory: str) -> ScratchModel:
        """The model a folder :meth:`save_pretrained` wrote, in eval mode (its sizes checked first)."""
        config, vocabulary, settings = self.read(directory)
        files = weight_files(directory)
        # The sizes come from the config and, for the embeddings, from the vocabulary's length: name both.
        sized_by = self.config_file if self.vocab_file is None else f"{self.config_file} with {self.vocab_file}"
        check_sizes_against_weights(lambda: self.build(config, vocabulary), files, sized_by, directory)
        model = self.build(config, vocabulary)
        load_weights(model, directory)
        return ScratchModel(model.eval(), config, vocabulary, settings)
