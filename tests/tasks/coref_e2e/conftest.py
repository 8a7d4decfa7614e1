"""Fixtures of the spaCy component's tests."""

from __future__ import annotations

import pytest

from corefbert.tasks.coref.resolver import spacy_copy_scorer


@pytest.fixture
def copy_registered():
    """The copy scorer as the package's ``spacy_misc`` entry point registers it (this checkout may not be
    installed with its current entry points)."""
    from spacy.util import registry

    if "corefbert.scorer.copy" not in registry.misc.get_all():
        registry.misc.register("corefbert.scorer.copy", func=spacy_copy_scorer)
