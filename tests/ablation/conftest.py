"""What the ablation tests share: the synthetic prepared corpus every test study trains on."""

from __future__ import annotations

import pytest
from helpers import save_corpus, synthetic_corpus


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, tiny_bert_dir):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("ablation_corpus") / "corpus"
    save_corpus(synthetic_corpus(AutoTokenizer.from_pretrained(tiny_bert_dir), n_train=16, n_eval=6), out)
    return out
