"""Mention spans: the one span type of the CoNLL reader and writer, end-to-end coreference, its inference and the
spaCy component (``tests/system/test_one_home_io.py`` finds any other alias of it).

A mention is ``(first, last)``: the indices of its first and its last word (or token), **both inclusive**, as
the CoNLL-2012 coreference column marks them and the span rankers enumerate them (a one-word mention is
``(i, i)``). The indices are into whatever sequence the user names: the flat word list of a CoNLL document,
the words of a text, the tokens of a spaCy ``Doc``. spaCy's ``Span(doc, start, end)`` takes an exclusive end;
the component converts there, and nowhere else (``corefbert.tasks.coref_e2e.spacy_component.write_clusters``).
"""

from __future__ import annotations

Mention = tuple[int, int]  # (first, last), both inclusive
Cluster = list[Mention]  # the mentions of one entity, in text order
