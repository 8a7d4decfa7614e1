"""Shared fixtures: tokenizers trained here on a fixture text, the committed tiny tokenizers of every kind
(``tests/fixtures/tokenizers/``), tiny random BERT/RoBERTa checkpoints (the plain builders they use,
``tiny_config``, ``fixture_tokenizer`` and the rest, are in ``helpers.py``).

Everything is built offline in seconds; no hub access, no pretrained weights.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import (
    FAMILIES,
    FIXTURES,
    TOKENIZER_KINDS,
    fixture_tokenizer,
    save_tiny_family,
    tiny_config,
    training_text,
)

# The suite runs as `pytest -n 2` on 2 cores: one thread per worker (and per spawned training process)
# avoids the oversubscription that made tiny-model tests several times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

# The tests' own torch extensions folder (per checkout, under pytest's cache; every xdist worker and every
# subprocess a test starts inherits it): a DeepSpeed op build killed half-way leaves a lock file that makes every
# later DeepSpeed run wait forever; left in the user's cache, it would hang the user's runs and every later
# CI run on the machine.
os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "torch_extensions")
# The up-front build of DeepSpeed's CPU op: about a minute on an idle machine, over 6 minutes measured at load 15
# on 2 cores. A DeepSpeed test's timeout is the default plus this (its setup may include the build).
DEEPSPEED_BUILD_LIMIT_S = 600

# Test modules import builders from one another by file name (``from test_pretraining import
# _save_tiny_bert``), across folders too: every test folder is on sys.path, whichever files a run
# collects (pytest adds only the collected files' own). Test file names are unique for the same reason.
TESTS = Path(__file__).parent
sys.path += sorted(
    str(folder)
    for folder in TESTS.rglob("*")
    if folder.is_dir() and not {"fixtures", "__pycache__"} & set(folder.relative_to(TESTS).parts)
)


@pytest.fixture(scope="session")
def bert_tokenizer(tmp_path_factory):
    """A WordPiece (BERT-style, uncased) fast tokenizer over a vocabulary trained once on the fixture text
    (``BertWordPieceTokenizer``, 600 entries asked for) and kept in ``tiny_bert_vocab.txt``: retrained in each
    process, the vocabulary came out 589 to 592 entries long, so messages naming a shape differed by process."""
    import shutil

    from transformers import BertTokenizerFast

    out = tmp_path_factory.mktemp("bert_tok")
    shutil.copy(FIXTURES / "tiny_bert_vocab.txt", out / "vocab.txt")
    # transformers 5 ignores vocab_file=/merges_file= silently (a 5-token vocabulary): pass vocab=/merges=.
    tok = BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(str(out))
    return BertTokenizerFast.from_pretrained(str(out))


@pytest.fixture(scope="session")
def roberta_tokenizer(tmp_path_factory):
    """A byte-level BPE (RoBERTa-style) fast tokenizer trained on the fixture text."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    out = tmp_path_factory.mktemp("roberta_tok")
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(
        training_text(), vocab_size=700, min_frequency=1,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    )
    trainer.save_model(str(out))
    tok = RobertaTokenizerFast(vocab=str(out / "vocab.json"), merges=str(out / "merges.txt"))
    tok.save_pretrained(str(out))
    return RobertaTokenizerFast.from_pretrained(str(out))


@pytest.fixture(scope="session")
def wordpiece_tokenizer():
    """WordPiece, uncased (``tests/fixtures/tokenizers/wordpiece``), as ``BertTokenizerFast``."""
    return fixture_tokenizer("wordpiece")


@pytest.fixture(scope="session")
def bpe_tokenizer():
    """Byte-level BPE framed as RoBERTa's (``tests/fixtures/tokenizers/bpe``), as ``RobertaTokenizerFast``."""
    return fixture_tokenizer("bpe")


@pytest.fixture(scope="session")
def bpe_cls_tokenizer():
    """The same byte-level BPE framed as ModernBERT's: ``[CLS]``/``[SEP]``, offsets that keep the leading space
    (``tests/fixtures/tokenizers/bpe_cls``), as ``PreTrainedTokenizerFast``."""
    return fixture_tokenizer("bpe_cls")


@pytest.fixture(scope="session")
def sentencepiece_tokenizer():
    """SentencePiece unigram, DeBERTa-v3's arrangement (``tests/fixtures/tokenizers/sentencepiece_unigram``), as
    ``DebertaV2TokenizerFast``."""
    return fixture_tokenizer("sentencepiece_unigram")


@pytest.fixture(scope="session", params=list(TOKENIZER_KINDS), ids=list(TOKENIZER_KINDS))
def kind_tokenizer(request):
    """Each kind of :data:`helpers.TOKENIZER_KINDS` in turn: a test taking it runs once per kind."""
    return fixture_tokenizer(request.param)


@pytest.fixture(scope="session", params=list(FAMILIES), ids=list(FAMILIES))
def family_dir(request, tmp_path_factory):
    """A saved tiny random masked-LM checkpoint of each encoder family of :data:`helpers.FAMILIES` in turn (with its
    fixture tokenizer): a test taking it runs once per family, the family in its id."""
    return save_tiny_family(request.param, tmp_path_factory.mktemp(f"tiny_{request.param}"))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, bert_tokenizer):
    """A saved tiny random BertModel checkpoint (with tokenizer), as a backbone would be given."""
    import torch
    from transformers import BertModel

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny_bert")
    BertModel(tiny_config("bert", bert_tokenizer)).save_pretrained(str(out))
    bert_tokenizer.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory, roberta_tokenizer):
    """A saved tiny random RobertaModel checkpoint (with tokenizer)."""
    import torch
    from transformers import RobertaModel

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny_roberta")
    RobertaModel(tiny_config("roberta", roberta_tokenizer)).save_pretrained(str(out))
    roberta_tokenizer.save_pretrained(str(out))
    return out


@pytest.fixture(autouse=True, scope="session")
def _offline_env():
    """No test may reach a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    yield


@pytest.fixture
def fresh_accelerate_state():
    """A run builds its own Accelerator, but accelerate keeps process-wide singletons: without a reset, a
    second run in the same process inherits the first one's mixed precision and dataloader state."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture(scope="session")
def coref_checkpoint(tmp_path_factory, bert_tokenizer):
    """A tiny CorefBertForPreTraining checkpoint (copy head included, V set to a ramp) with its tokenizer."""
    import torch

    from corefbert.pretraining.modeling import CorefBertForPreTraining

    out = tmp_path_factory.mktemp("coref_ckpt")
    torch.manual_seed(0)
    model = CorefBertForPreTraining(tiny_config("bert", bert_tokenizer))
    with torch.no_grad():
        model.mrp.copy_vector.copy_(torch.linspace(-1.0, 2.0, model.config.hidden_size))
    model.save_pretrained(str(out))
    bert_tokenizer.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def deepspeed_ops_built():
    """DeepSpeed's CPU communication op, built once into the tests' extensions folder before the first DeepSpeed
    test, in a subprocess with a bounded wait: a build that hangs fails the DeepSpeed tests, it cannot hang them.
    """
    import signal
    import subprocess
    import sys

    pytest.importorskip("deepspeed")
    code = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
    # A session of its own: at the limit the compilers it started (ninja, c++) go with it, not on as orphans.
    build = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        printed, _ = build.communicate(timeout=DEEPSPEED_BUILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()
        pytest.fail(f"building DeepSpeed's CPU op took over {DEEPSPEED_BUILD_LIMIT_S} s "
                    f"(TORCH_EXTENSIONS_DIR={os.environ['TORCH_EXTENSIONS_DIR']})")
    assert build.returncode == 0, printed[-3000:]


@pytest.fixture(autouse=True)
def _deepspeed_ops_first(request):
    """Every test marked ``deepspeed`` starts after :func:`deepspeed_ops_built`."""
    if request.node.get_closest_marker("deepspeed") is not None:
        request.getfixturevalue("deepspeed_ops_built")


def pytest_collection_modifyitems(config, items):
    """A DeepSpeed test may wait for :func:`deepspeed_ops_built` in its setup: its timeout allows for that."""
    try:
        default = float(config.getini("timeout") or 0)
    except ValueError:  # pytest-timeout not installed (the test extra installs it)
        return
    for item in items:
        if default and item.get_closest_marker("deepspeed") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(default + DEEPSPEED_BUILD_LIMIT_S))
