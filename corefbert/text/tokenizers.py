"""The one way to load a tokenizer, and what every part asks of one: a real vocabulary, its special-token frame,
and which subwords make a word.

A missing folder, a folder without tokenizer files and transformers 5's silent fallback tokenizer read as the
same one error line wherever a tokenizer is loaded (:func:`load_tokenizer`). Words and character spans map
onto subwords through :func:`word_pieces`, :func:`span_tokens` and :func:`joins_next` for every family.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from corefbert.errors import CorefBertError, one_line
from corefbert.text.jsonio import read_json

# A tokenizer with fewer entries is a stand-in (transformers 5's 5-token fallback), not a language's.
MIN_VOCABULARY = 100
PROBE_SENTENCE = "The keeper of the lighthouse wrote in his notebook every evening."
TOKENIZER_FILES = "tokenizer.json, or vocab.txt (BERT) / vocab.json + merges.txt (RoBERTa)"


def load_tokenizer(path_or_name: str | None, *, advice: str = "check --model_name_or_path",
                   check_vocabulary: bool = True):
    """``AutoTokenizer.from_pretrained(path_or_name)``, or one error line naming the path and ``advice``; with
    ``check_vocabulary``, not one that reads English as unknown (:func:`check_tokenizer_vocabulary`)."""
    from transformers import AutoTokenizer

    if not path_or_name:
        raise CorefBertError("no tokenizer: pass --model_name_or_path (a checkpoint or tokenizer directory)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path_or_name)
    except (OSError, ValueError, TypeError) as err:
        # transformers raises all three for a folder it cannot read (TypeError: a config of another kind).
        raise CorefBertError(f"cannot load a tokenizer ({one_line(err, first_line=True)}); {advice}",
                             path=path_or_name) from None
    if check_vocabulary:
        check_tokenizer_vocabulary(tokenizer, path_or_name)
    check_tokenizer_fits_model(tokenizer, local_model_config(path_or_name), path_or_name)
    return tokenizer


def local_model_config(path: str | None, strict: bool = False) -> dict | None:
    """The ``config.json`` of a local model folder as a dict; None for a tokenizer-only folder, a Hub name or a
    file that is no JSON object. A file that is not JSON: one line with ``strict``, else None (the model's
    loader reports it)."""
    config_path = os.path.join(path or "", "config.json")
    if not path or not os.path.isfile(config_path):
        return None
    try:
        config = read_json(config_path)
    except CorefBertError:
        if strict:
            raise
        return None
    return config if isinstance(config, dict) else None


def check_tokenizer_fits_model(tokenizer, config: dict | None, where: object = None) -> None:
    """Refuse a tokenizer that is not the model's, before any training: ids past the model's ``vocab_size``,
    or a tokenizer of another family than its ``model_type``'s (a BERT WordPiece beside DeBERTa weights trains
    and exits 0, every id meaning another piece). The family is the config's ``tokenizer_class``, else
    transformers' tokenizer of its ``model_type``; a family whose tokenizer is the generic one (ModernBERT)
    cannot be told."""
    import transformers
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    if not config:
        return
    vocab_size, model_type = config.get("vocab_size"), config.get("model_type")
    if isinstance(vocab_size, int) and len(tokenizer) > vocab_size:
        raise CorefBertError(f"the tokenizer has {len(tokenizer)} entries, more than the model's vocabulary of "
                             f"{vocab_size} ({model_type}): it is not this model's tokenizer (or its config's "
                             "vocab_size is wrong); put the model's own tokenizer files beside its weights", path=where)
    wanted = config.get("tokenizer_class") or TOKENIZER_MAPPING_NAMES.get(model_type)
    try:
        family = getattr(transformers, wanted, None) if isinstance(wanted, str) else None
    except (ImportError, RuntimeError):  # a class whose backend (sentencepiece, ...) is not installed
        family = None
    generic = transformers.PreTrainedTokenizerFast  # TokenizersBackend: any tokenizer.json, no family of its own
    if not isinstance(family, type) or family is generic or type(tokenizer) is generic or \
            isinstance(tokenizer, family):
        return
    raise CorefBertError(f"the tokenizer is a {type(tokenizer).__name__}, but the model is {model_type}, whose "
                         f"tokenizer is a {family.__name__}: it is another family's tokenizer; put the model's own "
                         "tokenizer files beside its weights (if this one is right for the model, name it in the "
                         f"config: \"tokenizer_class\": \"{type(tokenizer).__name__}\")", path=where)


def check_tokenizer_vocabulary(tokenizer, where: object = None) -> None:
    """Refuse a tokenizer that would turn English text into ``[UNK]``: a tiny vocabulary, or a probe sentence
    that comes out mostly unknown (transformers 5 silently loads a folder without tokenizer files as its 5
    special tokens, and preparation and training exit 0)."""
    label = where or type(tokenizer).__name__
    size = len(tokenizer)
    if size < MIN_VOCABULARY:
        raise CorefBertError(f"tokenizer {label} has only {size} vocabulary entries (a real one has thousands): "
                             f"its folder most likely lacks the tokenizer files ({TOKENIZER_FILES}); copy them "
                             "there from the model it was made from, or pass a folder that has them")
    ids = tokenizer(PROBE_SENTENCE, add_special_tokens=False)["input_ids"]
    unknown = sum(i == tokenizer.unk_token_id for i in ids) if tokenizer.unk_token_id is not None else 0
    if not ids or 2 * unknown >= len(ids):
        raise CorefBertError(f"tokenizer {label} maps {unknown} of the {len(ids)} tokens of the English probe "
                             f"sentence {PROBE_SENTENCE!r} to {tokenizer.unk_token} (vocabulary of {size}); check "
                             f"its files ({TOKENIZER_FILES}) and --model_name_or_path")


def special_token_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a single sequence (``[CLS]``/``[SEP]``, ``<s>``/``</s>``),
    found by tokenizing one word with and without them (transformers 5 dropped
    ``build_inputs_with_special_tokens``)."""
    plain = tokenizer("corpus", add_special_tokens=False)["input_ids"]
    full = tokenizer("corpus", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(plain) + 1):
        if full[i : i + len(plain)] == plain:
            return full[:i], full[i + len(plain) :]
    raise CorefBertError(f"cannot locate the special tokens of {type(tokenizer).__name__}; use a BERT/RoBERTa one")


# ---------------------------------------------------------------- words and their subwords, for every family
#
#  What a word is comes only from character offsets and the tokenizer's own word ids, never from a family's
# marker (``##``, ``Ġ``, ``▁``): byte-level BPE and SentencePiece may emit a lone space token before a
# character they lack a "space + character" piece for; WordPiece emits none for a space
# (docs/guides/corpus.md).


def joins_next(word_ids: Sequence[int | None]) -> np.ndarray:
    """``[T]`` bool: the tokenizer's word ids (``BatchEncoding.word_ids()``: its pre-tokenizer's split) put token
    ``t`` and ``t + 1`` in one word; False at the end and around special tokens (word id None)."""
    words = np.asarray([-1 if w is None else w for w in word_ids], dtype=np.int64)
    joined = np.zeros(words.size, dtype=bool)
    joined[:-1] = (words[:-1] == words[1:]) & (words[:-1] >= 0)
    return joined


def span_tokens(text: str, offsets: Sequence[Sequence[int]], joined: np.ndarray, start: int, end: int) -> list[int]:
    """The positions of the tokens of ``text[start:end]`` (a word or a phrase of whole words): every token whose
    characters overlap it, and before them the tokens that hold only whitespace (or are zero-width) and that the
    tokenizer's word ids join to the first of them (``joined``: :func:`joins_next`), as a lone SentencePiece space
    piece before a word is. ``offsets``: ``[T, 2]`` character offsets into ``text``. Empty when no token overlaps."""
    inside = [i for i, (a, b) in enumerate(offsets) if a < end and b > start and b > a]
    if not inside:
        return []
    first = inside[0]
    while first > 0 and joined[first - 1] and not text[offsets[first - 1][0]:offsets[first - 1][1]].strip():
        first -= 1
    return list(range(first, inside[-1] + 1))


def trimmed_offsets(text: str, start: int, end: int) -> tuple[int, int] | None:
    """A token's character offsets ``[start, end)`` into ``text`` without the whitespace at either edge, None when
    nothing else is left (a lone space piece). Byte-level BPE framed as ModernBERT's and SentencePiece keep the
    space a token carries in its offsets; a span read off them (an extractive answer) must not begin with it."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def word_pieces(tokenizer, words: Sequence[str]) -> list[list[int]]:
    """Each word's subword ids as the tokenizer reads ``words`` in running text: joined by single spaces,
    tokenized in one call, each token given to the first word that ends after the token starts, so a token's
    space goes with the word it precedes (one word at a time, byte-level BPE would read each as if it began
    the text). A word the tokenizer drops entirely gets ``[]``."""
    if not words:
        return []
    ends = np.cumsum(np.fromiter((len(w) + 1 for w in words), dtype=np.int64, count=len(words))) - 1  # [W]
    encoding = tokenizer(" ".join(words), add_special_tokens=False, return_offsets_mapping=True,
                         return_attention_mask=False, return_token_type_ids=False, verbose=False)
    starts = np.asarray([a for a, _ in encoding["offset_mapping"]], dtype=np.int64)  # [T]
    owner = np.minimum(np.searchsorted(ends, starts, side="right"), len(words) - 1)  # [T]
    pieces: list[list[int]] = [[] for _ in words]
    for token, word in zip(encoding["input_ids"], owner.tolist()):
        pieces[word].append(token)
    return pieces
