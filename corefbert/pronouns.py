"""The one English pronoun lexicon: person, number, gender and form of every personal pronoun, the archaic second
person included, and the one rule for whether "her" is possessive; every family reads its pronouns here
(``tests/system/test_word_rules.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pronoun:
    """One written form: its person (1-3), number (singular / plural), gender (masculine / feminine / neuter, None
    where the form does not tell) and forms (``subject``, ``object``, ``determiner`` for a possessive before a noun,
    ``possessive`` for one standing alone, ``reflexive``)."""

    person: int
    number: str
    gender: str | None
    forms: frozenset[str]

    @property
    def possessive(self) -> bool | None:
        """True for a possessive form, False for none, None where the word is both (``her``: object or
        determiner; :func:`is_possessive` decides in context)."""
        owning = bool(self.forms & {"determiner", "possessive"})
        return None if owning and self.forms & {"object", "subject"} else owning


def _entries(text: str) -> dict[str, Pronoun]:
    table = {}
    for line in text.strip().splitlines():
        word, person, number, gender, forms = line.split()
        table[word] = Pronoun(int(person), number, None if gender == "-" else gender, frozenset(forms.split(",")))
    return table


#: word -> :class:`Pronoun`. "you" and its forms are both numbers; "they" is the plural (and the singular they).
LEXICON: dict[str, Pronoun] = _entries("""
i 1 singular - subject
me 1 singular - object
my 1 singular - determiner
mine 1 singular - possessive
myself 1 singular - reflexive
we 1 plural - subject
us 1 plural - object
our 1 plural - determiner
ours 1 plural - possessive
ourselves 1 plural - reflexive
you 2 any - subject,object
your 2 any - determiner
yours 2 any - possessive
yourself 2 singular - reflexive
yourselves 2 plural - reflexive
thou 2 singular - subject
thee 2 singular - object
thy 2 singular - determiner
thine 2 singular - possessive,determiner
thyself 2 singular - reflexive
ye 2 plural - subject,object
he 3 singular masculine subject
him 3 singular masculine object
his 3 singular masculine determiner,possessive
himself 3 singular masculine reflexive
she 3 singular feminine subject
her 3 singular feminine object,determiner
hers 3 singular feminine possessive
herself 3 singular feminine reflexive
it 3 singular neuter subject,object
its 3 singular neuter determiner
itself 3 singular neuter reflexive
they 3 plural - subject
them 3 plural - object
their 3 plural - determiner
theirs 3 plural - possessive
themselves 3 plural - reflexive
""")

PRONOUNS = frozenset(LEXICON)
THIRD_PERSON = frozenset(w for w, p in LEXICON.items() if p.person == 3)
REFLEXIVE = frozenset(w for w, p in LEXICON.items() if "reflexive" in p.forms)
#: Possessive whatever the context (``her`` is not: :func:`is_possessive`).
POSSESSIVE = frozenset(w for w, p in LEXICON.items() if p.possessive)
#: Plural possessives: an s-final antecedent takes a bare apostrophe in their place ("the Joneses'").
PLURAL_POSSESSIVE = frozenset(w for w in POSSESSIVE if LEXICON[w].number == "plural")


def gender(word: str) -> str | None:
    """``masculine`` / ``feminine`` / ``neuter`` of a third-person singular form, else None."""
    entry = LEXICON.get(word.lower())
    return entry.gender if entry is not None else None


def forms_of(gender_: str | None, person: int = 3, number: str | None = None,
             forms=("subject", "object", "determiner", "possessive")) -> tuple[str, ...]:
    """The words of one gender (None: any), person and number (None: any) in any of ``forms``, in the lexicon's
    order."""
    return tuple(w for w, p in LEXICON.items() if p.person == person and (gender_ is None or p.gender == gender_)
                 and (number is None or p.number == number) and p.forms & set(forms))


# After object "her" ("saw her to the door", "gave her the book"); any other word makes "her" possessive.
NOT_AFTER_POSSESSIVE = PRONOUNS | {
    "the", "a", "an", "this", "that", "these", "those", "some", "any", "no", "every", "each", "another", "one",
    "to", "and", "or", "but", "in", "on", "at", "by", "for", "from", "with", "of", "into", "as", "than", "if", "when",
    "while", "so", "up", "down", "out", "off", "away", "back", "again", "too", "very", "not", "then", "there",
    "here", "now", "all", "both", "was", "is", "were", "had", "would", "could", "should", "be", "what", "how", "why",
    "where", "who", "which", "about", "before", "after", "over", "through", "once", "never", "until", "till"}


def is_possessive(word: str, following: str | None = None, tag: str | None = None) -> bool:
    """Whether the pronoun ``word`` is possessive ("his", "their"; "her" tagged ``PRP$``, or without a tag when
    ``following`` is a word that can follow a possessive determiner, not "to", "the", "and", ...)."""
    entry = LEXICON.get(word.lower())
    if entry is None or entry.possessive is not None:
        return bool(entry and entry.possessive)
    if tag:
        return tag == "PRP$"
    return following is not None and following.isalpha() and following.lower() not in NOT_AFTER_POSSESSIVE
