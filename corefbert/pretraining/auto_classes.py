"""``import corefbert`` alone makes ``AutoModelForPreTraining`` give the CorefBERT class for a CorefBERT
checkpoint, and keeps ``import corefbert`` free of torch and transformers.

The registration (:func:`corefbert.pretraining.families.register_auto_classes`) needs the model classes, which
would make ``import corefbert`` cost a model import. Instead :func:`install` registers at once when
transformers' Auto module is loaded, and otherwise right after it loads.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

AUTO_MODULE = "transformers.models.auto.modeling_auto"
MODEL_MODULE = "corefbert.pretraining.families"


def _register() -> None:
    """Registers at the first ``AutoModelForPreTraining.from_pretrained`` call: importing our model module
    while transformers imports its Auto module (``modeling_bert`` half initialized) would break a user's
    ``from transformers import BertModel`` as a circular import."""
    if MODEL_MODULE in sys.modules:
        return  # imported (or being imported): the module registers at its end
    auto = sys.modules[AUTO_MODULE].AutoModelForPreTraining
    original = auto.__dict__.get("from_pretrained")  # transformers sets a per-class copy (its docstring)
    if getattr(getattr(original, "__func__", None), "corefbert_registers", False):
        return

    def from_pretrained(cls, *args, **kwargs):
        importlib.import_module(MODEL_MODULE)  # registers the CorefBERT classes (the module's last lines)
        if original is None:
            del auto.from_pretrained
        else:
            auto.from_pretrained = original
        return cls.from_pretrained(*args, **kwargs)

    from_pretrained.corefbert_registers = True
    from_pretrained.__doc__ = getattr(getattr(original, "__func__", None), "__doc__", None)
    auto.from_pretrained = classmethod(from_pretrained)


class _RegisterAfterAutoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when transformers' Auto module is being imported, hands back the real spec with
    a loader that runs :func:`_register` once the module has executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != AUTO_MODULE:
            return None
        sys.meta_path.remove(self)  # once, and so that the real finders below answer
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _register()

        spec.loader.exec_module = exec_module  # this spec's own loader object only
        return spec


def install() -> None:
    """Register now if transformers' Auto module is loaded, else as soon as it is (idempotent)."""
    if AUTO_MODULE in sys.modules:
        _register()
    elif not any(isinstance(finder, _RegisterAfterAutoImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterAutoImport())
