"""The one way to load a tokenizer, and what every part asks of one: a real vocabulary, its special-token frame.

Every CLI, task and API that takes a model folder loads its tokenizer through :func:`load_tokenizer`, so a
missing folder, a folder without tokenizer files and transformers 5's silent fallback tokenizer all read as
the same one error line wherever they happen.
"""

from __future__ import annotations

from corefbert.errors import CorefBertError, one_line

# A tokenizer with fewer entries is a stand-in (transformers 5's 5-token fallback), not a language's.
MIN_VOCABULARY = 100
PROBE_SENTENCE = "The keeper of the lighthouse wrote in his notebook every evening."
TOKENIZER_FILES = "tokenizer.json, or vocab.txt (BERT) / vocab.json + merges.txt (RoBERTa)"


def load_tokenizer(path_or_name: str | None, *, advice: str = "check --model_name_or_path",
                   check_vocabulary: bool = True):
    """``AutoTokenizer.from_pretrained(path_or_name)``, or one error line naming the path and ``advice``.

    ``check_vocabulary``: refuse a tokenizer that reads English as unknown tokens
    (:func:`check_tokenizer_vocabulary`); off only where a caller builds such a tokenizer on purpose.
    """
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
    return tokenizer


def check_tokenizer_vocabulary(tokenizer, where: object = None) -> None:
    """Refuse a tokenizer that would turn English text into ``[UNK]``: a tiny vocabulary, or a probe sentence
    that comes out mostly unknown.

    transformers 5 loads a model folder without tokenizer files as a tokenizer of its 5 special tokens,
    silently: every word becomes ``[UNK]``, preparation and training exit 0, and ``final/`` ships it.
    """
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
    """The ids the tokenizer puts before and after a single sequence (``[CLS]``/``[SEP]``, ``<s>``/``</s>``).

    transformers 5 dropped ``build_inputs_with_special_tokens``; tokenizing one word with and without the
    special tokens finds the template. A pair's count is ``tokenizer.num_special_tokens_to_add(pair=True)``.
    """
    plain = tokenizer("corpus", add_special_tokens=False)["input_ids"]
    full = tokenizer("corpus", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(plain) + 1):
        if full[i : i + len(plain)] == plain:
            return full[:i], full[i + len(plain) :]
    raise CorefBertError(f"cannot locate the special tokens of {type(tokenizer).__name__}; use a BERT/RoBERTa one")
