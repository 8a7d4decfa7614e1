"""Mention spans, the one span type (``tests/system/test_one_home_io.py`` finds any other alias of it).

A mention is ``(first, last)``: the indices of its first and its last word (or token), **both inclusive**, as
the CoNLL-2012 coreference column marks them (a one-word mention is ``(i, i)``). spaCy's
``Span(doc, start, end)`` takes an exclusive end: only
``corefbert.tasks.coref_e2e.spacy_component.write_clusters`` converts.
"""

from __future__ import annotations

Mention = tuple[int, int]  # (first, last), both inclusive
Cluster = list[Mention]  # the mentions of one entity, in text order
