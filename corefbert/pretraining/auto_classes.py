"""``import corefbert`` alone makes ``AutoModelForPreTraining`` give the CorefBERT class for a CorefBERT
checkpoint, and keeps ``import corefbert`` free of torch and transformers.

The registration itself (:func:`corefbert.pretraining.modeling.register_auto_classes`) needs the model
classes, i.e. torch and transformers' BERT code: importing them in ``corefbert/__init__.py`` would make
``import corefbert`` cost what a model import costs. Instead, :func:`install` registers at once when
transformers' Auto module is already loaded, and otherwise right after it loads: a user's
``from transformers import AutoModelForPreTraining`` pays the import of our model module with its own.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

AUTO_MODULE = "transformers.models.auto.modeling_auto"
MODEL_MODULE = "corefbert.pretraining.modeling"


def _register() -> None:
    model_module = sys.modules.get(MODEL_MODULE)
    if model_module is not None and getattr(model_module.__spec__, "_initializing", False):
        return  # transformers' Auto module loads *while* our model module is imported: that one registers at its end
    from corefbert.pretraining import (
        modeling,
    )  # registers on import (heavy: deferred until transformers loads)

    modeling.register_auto_classes()


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
