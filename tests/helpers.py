"""What every test and benchmark shares: paths computed once here (so a test's folder depth never matters) and
the plain builders: synthetic packed corpora in the docs/contracts.md schema (trainer tests then need neither
spaCy nor text), tiny model configs, CLI scripts loaded as modules, runs under a memory cap.

Tests import them as ``from helpers import ROOT`` (pytest puts this folder on ``sys.path`` for the rootdir
conftest); benchmarks put ``tests/`` on ``sys.path`` first. pytest fixtures stay in ``conftest.py``.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]  # the repository
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data"  # the real benchmark data, when present
TINY_HIDDEN = 32
TOKENIZER_FIXTURES = FIXTURES / "tokenizers"
#: The committed tiny tokenizer of each kind the encoder families use (tests/fixtures/tokenizers/README.md), each
#: with the transformers class its families load it as: WordPiece (BERT, ELECTRA, DistilBERT), byte-level BPE framed
#: as RoBERTa's and as ModernBERT's (``[CLS]``/``[SEP]``, offsets keeping the space), SentencePiece unigram
#: (DeBERTa-v3).
TOKENIZER_KINDS = {
    "wordpiece": "BertTokenizerFast",
    "bpe": "RobertaTokenizerFast",
    "bpe_cls": "PreTrainedTokenizerFast",
    "sentencepiece_unigram": "DebertaV2TokenizerFast",
}


def synthetic_rows(tokenizer, n_rows: int, seed: int, min_words: int = 10, max_words: int = 20) -> dict:
    """Rows of ``[CLS] words [SEP]``: words of 1-2 subwords, some repeated so every row has mention groups."""
    rng = np.random.default_rng(seed)
    special = set(tokenizer.all_special_ids)
    vocab = np.array([i for i in range(len(tokenizer)) if i not in special])
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    columns = {k: [] for k in ("input_ids", "word_ids", "mention_starts", "mention_ends", "mention_groups")}
    for _ in range(n_rows):
        n_words = int(rng.integers(min_words, max_words + 1))
        nouns = [tuple(rng.choice(vocab, size=int(rng.integers(1, 3)))) for _ in range(3)]
        words, noun_of_word = [], []
        for _ in range(n_words):
            if rng.random() < 0.4:
                k = int(rng.integers(len(nouns)))
                words.append(nouns[k])
                noun_of_word.append(k)
            else:
                words.append(tuple(rng.choice(vocab, size=int(rng.integers(1, 3)))))
                noun_of_word.append(-1)
        ids, word_ids, spans = [cls_id], [-1], []
        for w, word in enumerate(words):
            spans.append((len(ids), len(ids) + len(word) - 1))
            ids.extend(int(t) for t in word)
            word_ids.extend([w] * len(word))
        ids.append(sep_id)
        word_ids.append(-1)
        counts = {k: noun_of_word.count(k) for k in set(noun_of_word) if k >= 0}
        usable = sorted(k for k, c in counts.items() if c >= 2)
        group_of = {k: g for g, k in enumerate(usable)}
        starts, ends, groups = [], [], []
        for w, k in enumerate(noun_of_word):
            if k in group_of:
                starts.append(spans[w][0])
                ends.append(spans[w][1])
                groups.append(group_of[k])
        for key, value in zip(columns, (ids, word_ids, starts, ends, groups)):
            columns[key].append(value)
    return columns


def save_corpus(splits, folder) -> None:
    """Save ``splits`` as a prepared corpus folder, with the integrity manifest ``corefbert prepare`` writes."""
    from corefbert.corpus.cache import write_manifest

    splits.save_to_disk(str(folder))
    write_manifest(str(folder))


def synthetic_corpus(tokenizer, n_train: int = 48, n_eval: int = 16, seed: int = 0):
    """A DatasetDict with train/validation splits of :func:`synthetic_rows`."""
    import datasets

    return datasets.DatasetDict({
        "train": datasets.Dataset.from_dict(synthetic_rows(tokenizer, n_train, seed)),
        "validation": datasets.Dataset.from_dict(synthetic_rows(tokenizer, n_eval, seed + 1)),
    })


def load_cli(script: str):
    """A CLI script (``finetune/run_glue.py``, ``pretrain/run_mrp.py``) imported as a module, once per process:
    in-process runs of ``main(argv)`` skip the 5-10 s of torch + transformers start-up a subprocess pays."""
    import importlib.util

    path = ROOT / script
    name = f"cli_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def run_cli_main(script: str, argv: list[str]):
    """``main(argv)`` of a CLI script in this process (:func:`load_cli`), with accelerate's process-wide state
    reset afterwards, so the next in-process run builds its own accelerator."""
    from accelerate.state import AcceleratorState, GradientState

    try:
        return load_cli(script).main(argv)
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def shared_data(*parts: str) -> Path:
    """Path under ../shared/data; the calling test is skipped when it is absent."""
    import pytest  # here, not at the top: benchmarks import this module without pytest

    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared/data is only on developer machines)")
    return path


def training_text() -> list[str]:
    """The non-empty lines of ``tests/fixtures/tiny_corpus.txt``: what the tests' tokenizers are trained on."""
    text = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def fixture_tokenizer(kind: str):
    """The tiny tokenizer of ``kind`` (a key of :data:`TOKENIZER_KINDS`), loaded offline from
    ``TOKENIZER_FIXTURES / kind`` as its families' transformers class (conftest's ``wordpiece_tokenizer``,
    ``bpe_tokenizer``, ``bpe_cls_tokenizer``, ``sentencepiece_tokenizer`` and ``kind_tokenizer`` hold one each)."""
    import transformers

    return getattr(transformers, TOKENIZER_KINDS[kind]).from_pretrained(str(TOKENIZER_FIXTURES / kind))


def running_text_words(tokenizer, words: list[str]) -> tuple[list[int], list[tuple[int, int]]]:
    """What a model pretrained on running text reads for ``words``: the ids of the words joined by single spaces,
    and each word's (first, last) token by the corpus's word rule (``references.words_reference``; a lone space
    token the tokenizer joins to a word is its first), for checking the parts that read pre-split words."""
    from references import words_reference

    text = " ".join(words)
    ends = np.cumsum([len(w) + 1 for w in words]) - 1
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    word_of_token, single = words_reference(text, [(e - len(w), e) for w, e in zip(words, ends)],
                                            [tuple(o) for o in encoding["offset_mapping"]], encoding.word_ids())
    assert single == list(range(len(words))), "a token straddles two words: pick other words"
    spans = [(word_of_token.index(k), len(word_of_token) - 1 - word_of_token[::-1].index(k)) for k in range(len(words))]
    return encoding["input_ids"], spans


#: The six encoder families MRP pretrains, each with the tokenizer kind of :data:`TOKENIZER_KINDS` it
#: reads: a test parametrised over them carries the family in its id, so ``pytest -k "modernbert or deberta"`` picks
#: it. DeBERTa is the v2 architecture in DeBERTa-v3's arrangement (relative positions, no absolute ones).
FAMILIES = {
    "bert": "wordpiece",
    "roberta": "bpe",
    "modernbert": "bpe_cls",
    "deberta": "sentencepiece_unigram",
    "electra": "wordpiece",
    "distilbert": "wordpiece",
}


def tiny_config(model_type: str, tokenizer):
    """A 2-layer, hidden-32 config of ``model_type`` (a key of :data:`FAMILIES`) sized to ``tokenizer``: its
    vocabulary and pad id (and the special ids each family's config records), so any tokenizer of
    :func:`fixture_tokenizer` sizes one too."""
    import transformers

    sizes = dict(vocab_size=len(tokenizer), hidden_size=TINY_HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=256 + 2, pad_token_id=tokenizer.pad_token_id)
    if model_type == "bert":
        return transformers.BertConfig(**sizes)
    if model_type == "roberta":
        return transformers.RobertaConfig(**sizes, bos_token_id=tokenizer.bos_token_id,
                                          eos_token_id=tokenizer.eos_token_id)
    if model_type == "modernbert":
        # Local attention every other layer as in ModernBERT, over a window the tiny sequences exceed.
        return transformers.ModernBertConfig(**sizes, cls_token_id=tokenizer.cls_token_id,
                                             sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id,
                                             eos_token_id=tokenizer.sep_token_id, global_attn_every_n_layers=2,
                                             local_attention=16)
    if model_type == "deberta":
        return transformers.DebertaV2Config(**sizes, relative_attention=True, position_buckets=32,
                                            pos_att_type=["p2c", "c2p"], position_biased_input=False,
                                            max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True)
    if model_type == "electra":
        return transformers.ElectraConfig(**sizes, embedding_size=TINY_HIDDEN // 2)
    if model_type == "distilbert":
        return transformers.DistilBertConfig(vocab_size=sizes["vocab_size"], dim=TINY_HIDDEN, n_layers=2, n_heads=2,
                                             hidden_dim=64, max_position_embeddings=sizes["max_position_embeddings"],
                                             pad_token_id=sizes["pad_token_id"])
    raise ValueError(model_type)


def save_tiny_family(family: str, out: Path, seed: int = 0) -> Path:
    """A tiny random-init masked-LM checkpoint of ``family`` (its own ``AutoModelForMaskedLM`` body and head) with
    its family's fixture tokenizer, saved to ``out`` as a user's starting checkpoint would be."""
    import torch
    from transformers import AutoModelForMaskedLM

    tokenizer = fixture_tokenizer(FAMILIES[family])
    torch.manual_seed(seed)
    AutoModelForMaskedLM.from_config(tiny_config(family, tokenizer)).save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


_MEMORY_CAP_PRELUDE = '''
import resource


def cap_memory():
    """From here on this process may map at most {headroom_mb} MiB more address space (RLIMIT_AS)."""
    with open("/proc/self/status", encoding="ascii") as status:
        size_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    limit = size_kb * 1024 + {headroom_mb} * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


'''


def run_under_memory_cap(code: str, headroom_mb: int, timeout: float = 300):
    """Run ``code`` in a fresh Python; where it calls ``cap_memory()`` the address space is capped at what it
    maps then plus ``headroom_mb`` MiB, so imports and model loading (about 1.2 GB of address space with
    torch) are not counted, only what the work under test adds. Returns the ``CompletedProcess``.

    glibc serves tensors below its mmap threshold from one heap, and the small blocks autograd keeps between
    two freed chunks of a tiny model's activations fragment it: the heap then grows with the input although
    the live memory does not. A fixed threshold (128 KiB, glibc's default before it adapts) maps every
    larger tensor on its own, so the cap measures live memory; a real encoder's tensors are mapped anyway.
    """

    root = str(ROOT)
    # The tests folder too: the code may import these builders (``load_cli``).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "131072"}
    script = _MEMORY_CAP_PRELUDE.format(headroom_mb=int(headroom_mb)) + code
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=root)


# --- a real full disk: a small tmpfs in a private mount namespace ---


def can_mount_tmpfs(where: Path) -> bool:
    """Whether a tmpfs can be mounted at ``where`` here (root and ``unshare``: CI and the dev machines have
    both); the full-disk tests skip where it cannot."""

    where.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs '{where}'"],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def run_on_a_small_disk(mount: Path, shell: str, *args: str, size_kib: int = 4096, timeout: float = 600):
    """Run the ``sh`` commands ``shell`` with a real tmpfs of ``size_kib`` KiB mounted at ``mount`` (``$1``; ``args``
    follow as ``$2``...), in a private mount namespace that ends with them: copy out what the test reads.
    ``fill_but K`` fills the tmpfs but for K KiB (a file ``filler``). ``cwd`` is the checkout, so
    ``"$2" -m corefbert...`` with ``sys.executable`` as ``$2`` runs this tree. Returns the ``CompletedProcess``."""

    prelude = (f'mount -t tmpfs -o size={size_kib}k tmpfs "$1" || exit 99; disk="$1"; fill_but() {{ head -c '
               f'{size_kib * 1024} /dev/zero > "$disk/filler" 2>/dev/null; truncate -s -"$1"K "$disk/filler"; }}; ')
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(["unshare", "-m", "sh", "-c", prelude + shell, "sh", str(mount), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# --- model cards: what a test reads in one (corefbert/training/outputs/cards.py) ---


def card_code_blocks(text: str, language: str) -> list[str]:
    """The contents of a card's fenced code blocks in ``language`` (``python``, ``bash``)."""
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def card_spacy_config(text: str) -> dict | None:
    """The config the card's spaCy snippet gives ``nlp.add_pipe("corefbert_coref", config=...)``; None without one."""
    for block in card_code_blocks(text, "python"):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_pipe" and \
                    node.args and ast.literal_eval(node.args[0]) == "corefbert_coref":
                return ast.literal_eval(next(k.value for k in node.keywords if k.arg == "config"))
    return None


def card_commands(text: str, command: str) -> list[list[str]]:
    """The argv (after ``corefbert COMMAND``) of each line of the card's bash blocks that runs ``command``."""
    found = []
    for block in card_code_blocks(text, "bash"):
        for line in block.splitlines():
            words = shlex.split(line)
            if words[:2] == ["corefbert", command]:
                found.append(words[2:])
    return found


def assert_card_links_the_project(text: str, project_url: str) -> None:
    """A model card's "made with" line links this project (``project_url``); the paper and the authors' code are
    cited, not credited."""
    from corefbert.training.outputs.cards import AUTHORS_CODE, PAPER_URL

    made_with = next(line for line in text.splitlines() if line.startswith("Made with"))
    assert made_with.startswith(f"Made with [corefbert]({project_url}) ")
    assert PAPER_URL in made_with and f"[the authors' code]({AUTHORS_CODE})" in made_with
    assert text.count(AUTHORS_CODE) == 1  # nowhere else: thunlp did not make this checkpoint
