"""``import corefbert`` alone is enough for ``AutoModelForPreTraining`` to load a CorefBERT checkpoint as the
CorefBERT class, and ``import corefbert`` still loads neither torch nor transformers.

Each check runs in a fresh interpreter: in this one, the model module is long imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

LOAD = """
import json, sys
{before}
from transformers import AutoModelForPreTraining
model = AutoModelForPreTraining.from_pretrained(sys.argv[1])
print(json.dumps({{"class": type(model).__name__, "copy_head": hasattr(model, "mrp")}}))
"""


def _fresh(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "before",
    ["import corefbert", "import transformers.models.auto.modeling_auto\nimport corefbert"],
    ids=["corefbert first", "transformers first"],
)
def test_import_corefbert_is_enough_for_auto_model_for_pretraining(coref_checkpoint, before):
    loaded = json.loads(_fresh(LOAD.format(before=before), str(coref_checkpoint)))
    assert loaded == {"class": "CorefBertForPreTraining", "copy_head": True}


def test_without_corefbert_transformers_gives_its_stock_class(coref_checkpoint):
    """The control: the same load without ``import corefbert`` is BERT's class, no copy head."""
    loaded = json.loads(_fresh(LOAD.format(before=""), str(coref_checkpoint)))
    assert loaded == {"class": "BertForPreTraining", "copy_head": False}


def test_import_corefbert_stays_light():
    code = "import sys, corefbert; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    assert _fresh(code) == "[]"


def test_import_corefbert_then_any_transformers_model_import_works():
    """The registration must not run inside transformers' own imports: with ``import corefbert`` first, a
    plain ``from transformers import BertModel`` was a circular ImportError (the Auto module loads while
    ``modeling_bert`` is half initialized)."""
    code = ("import corefbert\nfrom transformers import BertModel, RobertaModel\n"
            "from transformers import AutoModel\nprint(BertModel.__name__, RobertaModel.__name__)")
    assert _fresh(code) == "BertModel RobertaModel"


def test_import_corefbert_is_enough_for_a_modernbert_checkpoint(tmp_path):
    """The registration covers every family's class, ModernBERT's (which transformers has no pretraining
    class for) included, in a process that imported nothing but ``corefbert`` and transformers."""
    from helpers import save_tiny_family

    from corefbert.pretraining.families import load_pretraining_model

    load_pretraining_model(save_tiny_family("modernbert", tmp_path / "start")).save_pretrained(tmp_path / "coref")
    loaded = json.loads(_fresh(LOAD.format(before="import corefbert"), str(tmp_path / "coref")))
    assert loaded == {"class": "CorefModernBertForPreTraining", "copy_head": True}
