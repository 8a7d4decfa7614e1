"""Pronoun-replacement entailment pairs from CoNLL-2012 coreference files.

For each third-person pronoun whose coreference cluster has a noun-phrase mention earlier in the pronoun's
*scope* (its sentence and the one before, the paper's two-sentence group; cut to a window of
``max_scope_words`` around the pronoun when longer), the scope's text is the ``source`` and three ``target``
texts replace the pronoun with

- ``correct`` (label 1): the nearest such antecedent;
- ``in_scope`` (label 0): a noun phrase of another entity inside the scope, where one exists;
- ``out_of_scope`` (label 0): a noun phrase of another entity from elsewhere in the document, where one exists.

Noun phrases are the gold mentions of the file; pronoun mentions, phrases with a relative pronoun or longer
than ``max_phrase_words``, and a wrong phrase whose words equal a mention of the pronoun's own entity are not
used. The morphology (possessives, capitals, restored articles), the skipped pronouns (counted) and the
seeding per pronoun are those of docs/guides/pronoun_pairs.md (pairs). A file reached by several input paths
is read once and a document repeated word for word under its ``doc_key`` used once, both counted.

    python -m corefbert.tasks.pronoun_pairs.builder --input '../shared/data/conll2012/*/*conll' --output_dir pairs --seed 42
"""

from __future__ import annotations

import glob
import random
import sys
from collections import Counter
from dataclasses import dataclass, field

from corefbert.argparser import parse_args, peek_argument
from corefbert.corpus.readers import document_sources
from corefbert.errors import CorefBertError, cli_entry
from corefbert.pronouns import LEXICON, PRONOUNS, THIRD_PERSON
from corefbert.pronouns import is_possessive as pronoun_is_possessive
from corefbert.tasks.pronoun_pairs.output import inputs_outside_output, write_outputs
from corefbert.text.conll import ConllDocument, expand_paths, read_conll_file
from corefbert.text.durable import check_writable

PAIR_TYPES = ("correct", "in_scope", "out_of_scope")
FIRST_SECOND_PERSON = PRONOUNS - THIRD_PERSON
POSSESSIVE_DETERMINERS = frozenset(w for w, p in LEXICON.items() if "determiner" in p.forms)
DETERMINERS = {"the", "a", "an", "this", "that", "these", "those", "some", "any", "no", "every", "each", "another",
               "one"} | POSSESSIVE_DETERMINERS
ARTICLES = {"the", "a", "an", "this", "these", "those"}  # restored before a mention annotated without it
RELATIVES = {"who", "whom", "whose", "which"}  # "some two or three of whom": a clause, not a phrase to move
PLEONASTIC_VERBS = {"is", "was", "'s", "be", "been", "being", "seems", "seemed", "seem", "appears", "appeared",
                    "appear", "happens", "happened", "happen", "becomes", "became", "remains", "remained"}
AUXILIARIES = {"will", "would", "can", "could", "may", "might", "must", "shall", "should", "does", "did", "do",
               "has", "had", "have", "not", "n't", "never", "also", "then", "certainly", "now"}
WEATHER = {"rain", "rains", "rained", "raining", "snow", "snows", "snowed", "snowing", "dark", "cold", "late",
           "early", "hot", "warm", "freezing", "thundering", "midnight", "noon", "morning", "night"}
PLEONASTIC_HEADS = {"clear", "obvious", "possible", "impossible", "likely", "unlikely", "necessary", "important",
                    "true", "evident", "certain", "apparent", "strange", "odd", "useless", "difficult", "easy",
                    "hard", "good", "better", "best", "time", "pity", "shame", "wonder", "plain", "natural",
                    "probable", "doubtful", "known", "said", "thought", "believed", "supposed", "expected",
                    "needless", "worth", "wonderful", "curious", "remarkable", "fortunate", "unfortunate",
                    "enough", "right", "wrong", "well", "proper", "vain", "surprising", "sad", "hopeless"}
COMPLEMENTS = {"that", "to", "whether", "if", "how", "what", "when", "why", "as", "for"}
# Above the longest two-sentence scope of the shared LitBank and OntoNotes files (263 words), so the cap
# changes no pair there; it bounds the pairs of text without sentence breaks (a 20,000-word "sentence").
MAX_SCOPE_WORDS = 300


@dataclass
class PronounPair:
    """One entailment pair; word positions are indices into the document's flat word list (inclusive)."""

    label: int  # 1 = the target is entailed (correct antecedent), 0 = not
    source: str  # the scope's words joined by spaces
    target: str  # the same with the pronoun replaced
    type: str  # correct | in_scope | out_of_scope
    doc_key: str
    pronoun: str
    pronoun_index: int  # in the document
    pronoun_position: int  # in source.split()
    replacement: str  # as written into the target (morphology applied)
    replacement_start: int  # the mention it comes from, in the document
    replacement_end: int
    scope_start: int
    scope_end: int
    possessive: bool


def is_noun_phrase(words: list[str], start: int, end: int) -> bool:
    """Not a pronoun, nor headed by one ("him whose foot ...", "them all"); a possessive determiner may open
    it ("her sister")."""
    first = words[start].lower()
    pronouns = THIRD_PERSON | FIRST_SECOND_PERSON
    return first not in (pronouns if start == end else pronouns - POSSESSIVE_DETERMINERS)


def is_possessive(words: list[str], index: int, tags: list[str] | None) -> bool:
    """Does the pronoun at ``index`` need the possessive of its replacement (:mod:`corefbert.pronouns`)?"""
    following = words[index + 1] if index + 1 < len(words) else "."
    return pronoun_is_possessive(words[index], following, tags[index] if tags is not None else None)


def is_pleonastic_it(words: list[str], index: int) -> bool:
    """'it' + auxiliaries + be/seem/appear/happen + (a weather/time word | adverbs + an evaluative word +
    that/to/...). Only used to name a skip: a gold mention is never judged pleonastic."""
    if words[index].lower() != "it":
        return False
    following = [w.lower() for w in words[index + 1: index + 9]]
    position = next((i for i, word in enumerate(following) if word not in AUXILIARIES), len(following))
    if position >= len(following) or following[position] not in PLEONASTIC_VERBS:
        return False
    verb, rest = following[position], following[position + 1:]
    if verb.startswith(("seem", "appear", "happen")) and rest[:1] and rest[0] in COMPLEMENTS:
        return True
    if rest[:1] and rest[0] in WEATHER:
        return True
    for offset, word in enumerate(rest[:4]):
        if word in PLEONASTIC_HEADS:
            after = rest[offset + 1: offset + 2]
            return word == "time" or bool(after and after[0] in COMPLEMENTS)
        if not word.isalpha():
            return False
    return False


def replacement_words(words: list[str], mention: tuple[int, int], pronoun: str, possessive: bool,
                      lowercase_words: set[str] = frozenset(), starts_sentence: bool = False) -> list[str]:
    """The words that replace ``pronoun``: the mention, its article restored, case and possessive adjusted.

    ``lowercase_words``: words the document also writes in lower case mid-sentence; a mention that opened
    a sentence ("Foot passengers") loses the capital of such a first word when it moves mid-sentence."""
    start, end = mention
    out = list(words[start: end + 1])
    if start > 0 and words[start - 1].lower() in ARTICLES and out[0].lower() not in DETERMINERS:
        out.insert(0, words[start - 1].lower())
    elif starts_sentence and out[0][1:].islower() and out[0].lower() in lowercase_words:
        out[0] = out[0].lower()
    if pronoun[:1].isupper():
        out[0] = out[0][:1].upper() + out[0][1:]
    elif out[0].lower() in DETERMINERS and out[0][:1].isupper() and out[0][1:].islower():
        out[0] = out[0].lower()
    if possessive and out[-1] not in ("'s", "'"):
        out.append("'" if out[-1].endswith("s") and out[-1].islower() else "'s")
    return out


def scope_of(sentence_starts: list[int], sentence: int, num_words: int, index: int,
             max_words: int = MAX_SCOPE_WORDS) -> tuple[int, int]:
    """Inclusive word range of sentence ``sentence - 1`` (if any) and ``sentence``, the pronoun at ``index``'s
    scope. Longer than ``max_words``: the ``max_words`` words of it around the pronoun, three quarters
    before it where the scope allows (antecedents precede their pronoun)."""
    start = sentence_starts[max(sentence - 1, 0)]
    end = sentence_starts[sentence + 1] - 1 if sentence + 1 < len(sentence_starts) else num_words - 1
    if end - start + 1 > max_words:
        end = min(end, max(index + max_words // 4, start + max_words - 1))
        start = max(start, end - max_words + 1)
    return start, end


@dataclass
class DocumentView:
    """What the pair choices look up in one document."""

    document: ConllDocument
    max_phrase_words: int
    max_scope_words: int = MAX_SCOPE_WORDS

    def __post_init__(self):
        document = self.document
        self.words, self.sentence_of = document.words, document.sentence_of_word()
        self.starts = [i for i in range(len(self.words)) if i == 0 or self.sentence_of[i] != self.sentence_of[i - 1]]
        self.start_set = set(self.starts)  # membership tests: the list made them quadratic in the sentences
        # column 5 (POS) when the file has Penn Treebank tags there (OntoNotes), else None (LitBank's "_")
        tags = [c[4] if len(c) > 4 else "_" for sentence in document.columns for c in sentence]
        self.tags = tags if len(tags) == len(self.words) and any(t in ("PRP", "PRP$") for t in tags) else None
        self.cluster_of = {tuple(m): c for c, cluster in enumerate(document.clusters) for m in cluster}
        self.phrases = sorted(m for m in self.cluster_of if is_noun_phrase(self.words, *m))
        self.lowercase = {w for i, w in enumerate(self.words) if w.islower() and i not in self.start_set}

    def scope(self, index: int) -> tuple[int, int]:
        return scope_of(self.starts, self.sentence_of[index], len(self.words), index, self.max_scope_words)

    def usable(self, mention: tuple[int, int]) -> bool:
        """Short enough, and no relative clause inside: a phrase that reads well in another place."""
        start, end = mention
        return end - start < self.max_phrase_words and not any(w.lower() in RELATIVES for w in self.words[start: end + 1])

    def text(self, mention: tuple[int, int]) -> tuple[str, ...]:
        return tuple(w.lower() for w in self.words[mention[0]: mention[1] + 1])


def pronoun_choices(view: DocumentView, index: int, seed: int) -> dict[str, tuple[int, int] | None] | str:
    """The mention of each pair type for the pronoun at ``index`` (None: no phrase), or why it is skipped."""
    words = view.words
    if words[index].lower() in FIRST_SECOND_PERSON:
        return "skipped_first_or_second_person"
    cluster = view.cluster_of.get((index, index))
    if cluster is None:
        return "skipped_pleonastic" if is_pleonastic_it(words, index) else "skipped_not_a_gold_mention"
    scope = view.scope(index)
    antecedents = [m for m in view.phrases if view.cluster_of[m] == cluster and scope[0] <= m[0] and m[1] < index]
    usable = [m for m in antecedents if view.usable(m)]
    if not usable:
        return "skipped_antecedent_unusable" if antecedents else "skipped_no_antecedent_in_scope"
    own_texts = {view.text(m) for m in view.document.clusters[cluster]}
    wrong = [m for m in view.phrases if view.cluster_of[m] != cluster and not m[0] <= index <= m[1]
             and view.usable(m) and view.text(m) not in own_texts]
    in_scope = [m for m in wrong if scope[0] <= m[0] and m[1] <= scope[1]]
    out_of_scope = [m for m in wrong if m[1] < scope[0] or m[0] > scope[1]]
    rng = random.Random(f"{seed}|{view.document.doc_key}|{index}")  # per pronoun: stable when files are added
    return {"correct": max(usable, key=lambda m: (m[1], m[0])),  # the nearest; of those ending there, the shortest
            "in_scope": rng.choice(in_scope) if in_scope else None,
            "out_of_scope": rng.choice(out_of_scope) if out_of_scope else None}


def document_pairs(document: ConllDocument, seed: int, counts: Counter, max_phrase_words: int = 10,
                   max_scope_words: int = MAX_SCOPE_WORDS) -> list[PronounPair]:
    """The pairs of one document, in pronoun order; skips and missing negatives are added to ``counts``."""
    view = DocumentView(document, max_phrase_words, max_scope_words)
    pairs = []
    for index, word in enumerate(view.words):
        if word.lower() not in THIRD_PERSON | FIRST_SECOND_PERSON:
            continue
        counts["third_person_pronouns"] += word.lower() in THIRD_PERSON
        choices = pronoun_choices(view, index, seed)
        if isinstance(choices, str):
            counts[choices] += 1
            continue
        scope = view.scope(index)
        sentences = scope_of(view.starts, view.sentence_of[index], len(view.words), index, len(view.words))
        counts["scopes_cut_to_max_scope_words"] += scope != sentences
        for kind in PAIR_TYPES:
            if choices[kind] is None:
                counts[f"no_{kind}_phrase"] += 1
            else:
                pairs.append(make_pair(view, index, choices[kind], kind))
    return pairs


def make_pair(view: DocumentView, index: int, mention: tuple[int, int], kind: str) -> PronounPair:
    words = view.words
    scope = view.scope(index)
    possessive = is_possessive(words, index, view.tags)
    starts_sentence = mention[0] in view.start_set or (mention[0] > 0 and words[mention[0] - 1] in ("“", '"', "``", "'"))
    replacement = replacement_words(words, mention, words[index], possessive, view.lowercase, starts_sentence)
    source = words[scope[0]: scope[1] + 1]
    position = index - scope[0]
    target = source[:position] + replacement + source[position + 1:]
    return PronounPair(label=int(kind == "correct"), source=" ".join(source), target=" ".join(target), type=kind,
                       doc_key=view.document.doc_key, pronoun=words[index], pronoun_index=index,
                       pronoun_position=position, replacement=" ".join(replacement), replacement_start=mention[0],
                       replacement_end=mention[1], scope_start=scope[0], scope_end=scope[1], possessive=possessive)


def generate_pairs(documents: list[ConllDocument], seed: int = 42, max_phrase_words: int = 10,
                   max_scope_words: int = MAX_SCOPE_WORDS) -> tuple[list[PronounPair], Counter]:
    """All pairs of ``documents`` (document order, then pronoun order, then :data:`PAIR_TYPES`) and the
    counts: pairs per type, third-person pronouns, each reason for a skip or missing negative, scopes cut."""
    counts: Counter = Counter()
    pairs = []
    for document in documents:
        pairs.extend(document_pairs(document, seed, counts, max_phrase_words, max_scope_words))
    for kind in PAIR_TYPES:
        counts[kind] = sum(p.type == kind for p in pairs)
    return pairs, counts


def split_documents(doc_keys: list[str], seed: int, validation_percentage: int,
                    test_percentage: int) -> dict[str, str]:
    """doc_key -> train|validation|test, whole documents (a seeded shuffle), so no text is in two splits; a
    split asked for (percentage above 0) gets at least one document, as in ``held_out_split``."""
    order = sorted(set(doc_keys))
    random.Random(f"{seed}|split").shuffle(order)

    def share(percentage: int) -> int:
        return max(1, round(len(order) * percentage / 100)) if percentage else 0

    splits = ["test"] * share(test_percentage) + ["validation"] * share(validation_percentage)
    return {key: splits[i] if i < len(splits) else "train" for i, key in enumerate(order)}


def summary(counts: Counter, documents: int) -> str:
    """Per-type pair counts, every skip reason, inputs read once and scopes cut, one line each."""
    lines = [f"{documents} documents, {counts['third_person_pronouns']} third-person pronouns",
             "pairs: " + ", ".join(f"{kind} {counts[kind]}" for kind in PAIR_TYPES)
             + f" (total {sum(counts[k] for k in PAIR_TYPES)})"]
    reasons = sorted(k for k in counts if k.startswith(("skipped_", "no_")))
    lines += [f"  {name}: {counts[name]}" for name in reasons]
    if counts["repeated_input_paths"]:
        lines.append(f"  {counts['repeated_input_paths']} input path(s) led to a file already read (named twice, "
                     "matched by a glob too, a link): read once")
    if counts["repeated_documents"]:
        lines.append(f"  {counts['repeated_documents']} document(s) repeated word for word under their doc_key "
                     "(a copy of a file): used once")
    if counts["scopes_cut_to_max_scope_words"]:
        lines.append(f"  {counts['scopes_cut_to_max_scope_words']} scope(s) longer than --max_scope_words: cut to "
                     "that many words around the pronoun")
    return "\n".join(lines)


def read_inputs(patterns: list[str]) -> tuple[list[ConllDocument], Counter]:
    """The documents of the CoNLL files ``patterns`` name, each file (told apart by what it resolves to, with
    ``document_sources``) and each document once, and how many repeats were dropped: a file given twice would
    give every pair twice and could put one document into two splits."""
    files = expand_paths(patterns)  # regular files only: every path document_sources drops is a repeat
    # glob.escape: each is a path now, not a pattern ("story[1].conll" names itself).
    sources = document_sources([glob.escape(path) for path in files], what="--input")
    counts: Counter = Counter(repeated_input_paths=len(files) - len(sources))
    documents, seen = [], {}
    for source in sources:
        for document in read_conll_file(source.path):
            earlier = seen.setdefault(document.doc_key, document)
            if earlier is not document and earlier.sentences == document.sentences \
                    and earlier.clusters == document.clusters:
                counts["repeated_documents"] += 1
                continue
            documents.append(document)
    return documents, counts


RENAMED_FLAGS = {"validation_fraction": "validation_split_percentage", "test_fraction": "test_split_percentage"}


@dataclass
class PronounPairsArguments:
    """Where the CoNLL files are, where the pairs go."""

    input: list[str] = field(default_factory=list, metadata={
        "help": "CoNLL-2012 coreference files or globs (*_conll, *.conll; OntoNotes or LitBank layout)."})
    output_dir: str | None = field(default=None, metadata={"help": "Folder for pairs.jsonl, pairs.tsv, dataset/."})
    seed: int = field(default=42, metadata={"help": "Seed of the wrong-phrase choices."})
    validation_split_percentage: int = field(default=0, metadata={
        "help": "Percentage of the documents in validation.jsonl (whole documents; 0 and no "
                "--test_split_percentage: no split files)."})
    test_split_percentage: int = field(default=0, metadata={
        "help": "Percentage of the documents in test.jsonl (whole documents; 0: none)."})
    split_seed: int = field(default=42, metadata={
        "help": "Seed of the document split (apart from --seed, as in the fine-tuning CLIs)."})
    max_phrase_words: int = field(default=10, metadata={
        "help": "Longest noun phrase used as a replacement, in words (LitBank mentions carry whole relative "
                "clauses; a long one would give the pair away by length)."})
    max_scope_words: int = field(default=MAX_SCOPE_WORDS, metadata={
        "help": "Longest scope (the pronoun's sentence and the one before) in words; a longer one is cut to "
                "a window of this many words around the pronoun, so text without sentence breaks cannot "
                "make every pair as long as the document."})

    def __post_init__(self):
        if not self.input:
            raise CorefBertError("--input is required: one or more CoNLL-2012 files or globs")
        if not self.output_dir:
            raise CorefBertError("--output_dir is required")
        if self.max_phrase_words < 1:
            raise CorefBertError(f"--max_phrase_words must be >= 1, not {self.max_phrase_words}")
        if self.max_scope_words < 2:
            raise CorefBertError(f"--max_scope_words must be >= 2 (a pronoun and an antecedent), not "
                                 f"{self.max_scope_words}")
        percentages = (self.validation_split_percentage, self.test_split_percentage)
        if min(percentages) < 0 or sum(percentages) >= 100:
            raise CorefBertError(f"--validation_split_percentage and --test_split_percentage must be >= 0 and sum "
                                 f"below 100, not {percentages}")


@cli_entry
def main(argv: list[str] | None = None) -> Counter:
    """``python -m corefbert.tasks.pronoun_pairs.builder --input FILES... --output_dir D --seed S``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    for old, new in RENAMED_FLAGS.items():  # one spelling per concept across the toolkit
        if peek_argument(argv, old) is not None:
            raise CorefBertError(f"--{old} is now --{new}, a percentage of the documents (0.15 -> 15)")
    (args,) = parse_args([PronounPairsArguments], argv, prog="python -m corefbert.tasks.pronoun_pairs.builder")
    check_writable(args.output_dir)  # a read-only folder or a full disk: one line before any file is read
    inputs, own_output = inputs_outside_output(args.input, args.output_dir)
    if own_output:
        print(f"left out {len(own_output)} path(s) an --input glob matched in --output_dir, this builder's own "
              f"output: {', '.join(own_output)}", flush=True)
    documents, read_counts = read_inputs(inputs)
    print(f"read {len(documents)} documents from {len(args.input)} input argument(s)", flush=True)
    pairs, counts = generate_pairs(documents, args.seed, args.max_phrase_words, args.max_scope_words)
    counts.update(read_counts)
    if not pairs:
        raise CorefBertError("no pronoun pair in the input: no third-person pronoun has a noun-phrase antecedent "
                             "in its scope (is the coreference column filled?)", path=args.input[0])
    split_of = None
    if args.validation_split_percentage or args.test_split_percentage:
        split_of = split_documents([d.doc_key for d in documents], args.split_seed,
                                   args.validation_split_percentage, args.test_split_percentage)
    written = write_outputs(pairs, args.output_dir, split_of, counts)
    print(summary(counts, len(documents)))
    if split_of:
        print("split by document: " + ", ".join(f"{name} {sum(split_of[p.doc_key] == name for p in pairs)} pairs"
                                                for name in ("train", "validation", "test")))
    print("wrote " + ", ".join(written))
    return counts


def console_script() -> None:
    """The ``corefbert-pronoun-pairs`` command: returns nothing, as a console script exits with its function's
    return value (``main``'s report would become exit status 1)."""
    main()


if __name__ == "__main__":
    main()
