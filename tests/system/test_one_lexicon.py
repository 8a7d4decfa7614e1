"""One English pronoun lexicon (``corefbert.pronouns``): no other module of the package lists pronouns.

The check looks for the concept, not a spelling: any collection of words written out in code (a set, list, tuple
or dict literal, or a string split into words) that holds three pronouns or more is a second list, wherever it is
and whatever it is called. The last test plants lists of each shape and watches the checker find every one.
"""

from __future__ import annotations

import ast

from test_architecture import MODULES

from corefbert.pronouns import PRONOUNS

HOME = "corefbert.pronouns"


def _words(node: ast.AST) -> set[str] | None:
    """The words a literal collection (or ``"a b c".split()``) writes out; None for anything else."""
    if isinstance(node, ast.Set | ast.List | ast.Tuple):
        items = node.elts
    elif isinstance(node, ast.Dict):
        items = [key for key in node.keys if key is not None]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        return set(node.func.value.value.lower().split())
    else:
        return None
    return {item.value.lower() for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}


def pronoun_lists(name: str, tree: ast.Module) -> list[str]:
    """Where module ``name`` (its parsed source ``tree``) writes out a list of pronouns of its own."""
    if name == HOME:
        return []
    found = []
    for node in ast.walk(tree):
        words = _words(node)
        if words and len(words & PRONOUNS) >= 3:
            found.append(f"{name}:{node.lineno}: lists pronouns ({', '.join(sorted(words & PRONOUNS)[:5])}, ...): take "
                         f"them from {HOME}")
    return found


def test_no_module_but_the_lexicon_lists_pronouns():
    found = [line for module in MODULES.values() for line in pronoun_lists(module.name, module.tree)]
    assert not found, "\n".join(found)


def test_the_lexicon_holds_every_form_and_one_possessive_rule():
    from corefbert.pronouns import LEXICON, THIRD_PERSON, is_possessive

    assert {"he", "him", "his", "himself", "she", "her", "hers", "herself", "thou", "thee", "ye"} <= PRONOUNS
    assert len(THIRD_PERSON) == 16 and LEXICON["her"].possessive is None
    assert is_possessive("his") and is_possessive("Their") and not is_possessive("him")
    assert is_possessive("her", "sister") and not is_possessive("her", "to") and not is_possessive("her", None)
    assert is_possessive("her", "to", tag="PRP$") and not is_possessive("her", "sister", tag="PRP")


def test_a_planted_pronoun_list_of_each_shape_is_found():
    planted = ast.parse(
        'PERSONAL = {"he", "him", "she"}\n'
        'ORDER = ["I", "me", "my"]\n'
        'GENDER = {"he": "m", "she": "f", "they": "n"}\n'
        'WORDS = "thou thee thy".split()\n'
        'FINE = {"the", "a", "he"}  # two words short of a list\n'
    )
    found = pronoun_lists("corefbert.tasks.planted", planted)
    assert [line.split(":")[1] for line in found] == ["1", "2", "3", "4"], found
    assert pronoun_lists(HOME, planted) == []
