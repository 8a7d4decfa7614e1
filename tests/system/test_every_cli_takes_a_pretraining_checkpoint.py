"""The pretraining-to-fine-tuning contract: a corefbert pretraining checkpoint
(CorefBertForPreTraining.save_pretrained, which is what pretrain/run_mrp.py writes to output_dir/final) is accepted
by every fine-tuning CLI.

GLUE and QUOREF have their own such tests (tests/tasks/test_glue.py, tests/tasks/qa/test_quoref.py); this covers the rest.
"""

from __future__ import annotations

import math

import pytest
from helpers import FIXTURES, load_cli, tiny_config


def _cli(name: str):
    """``finetune/<name>.py``'s ``main``, imported in-process once."""
    return load_cli(f"finetune/{name}.py").main


@pytest.fixture(scope="module")
def pretraining_checkpoint(tmp_path_factory, bert_tokenizer):
    """A tiny CorefBERT pretraining checkpoint: encoder + pooler + MLM head + copy vector, with its tokenizer."""
    import torch

    from corefbert.pretraining.modeling import CorefBertForPreTraining

    torch.manual_seed(0)
    model = CorefBertForPreTraining(tiny_config("bert", bert_tokenizer))
    with torch.no_grad():
        model.mrp.copy_vector.mul_(3.0)  # a copy vector that differs from the initial value
    out = tmp_path_factory.mktemp("corefbert_final")
    model.save_pretrained(str(out))
    bert_tokenizer.save_pretrained(str(out))
    return out


CASES = {
    "run_mrqa": lambda: [
        "--train_file", str(FIXTURES / "mrqa" / "squad_tiny.json"),
        "--validation_file", str(FIXTURES / "mrqa" / "squad_tiny.json"),
        "--do_train", "--do_eval", "--max_seq_length", "64", "--doc_stride", "32",
    ],
    "run_docred": lambda: [
        "--rel_info_file", str(FIXTURES / "docred" / "rel_info.json"), "--max_seq_length", "256",
        "--train_file", str(FIXTURES / "docred" / "train.json"),
        "--validation_file", str(FIXTURES / "docred" / "dev.json"), "--do_train", "--do_eval",
        "--num_na_pairs", "2",
    ],
    "run_fever": lambda: [
        "--train_file", str(FIXTURES / "fever" / "pairs.jsonl"), "--split_seed", "3",
        "--validation_split_percentage", "25", "--do_train", "--do_eval",
    ],
    "run_coref": lambda: [
        "--train_file", str(FIXTURES / "coref" / "blocks.txt"),
        "--validation_file", str(FIXTURES / "coref" / "blocks.txt"), str(FIXTURES / "coref" / "gap.tsv"),
        "--do_train", "--do_eval",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("cli", sorted(CASES))
def test_cli_fine_tunes_a_pretraining_checkpoint(cli, pretraining_checkpoint, tmp_path):
    results = _cli(cli)([
        "--model_name_or_path", str(pretraining_checkpoint), *CASES[cli](),
        "--max_steps", "2", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3",
        "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true",
    ])
    assert results["train_steps"] == 2 and math.isfinite(results["train_loss"])
    assert any(key.startswith("eval_") for key in results)
    assert (tmp_path / "out" / "all_results.json").is_file()


def test_coref_zero_shot_copy_uses_the_checkpoint_copy_head(pretraining_checkpoint, tmp_path):
    """The copy-head resolver needs a trained V: a pretraining checkpoint has one, no override flag needed."""
    results = _cli("run_coref")([
        "--model_name_or_path", str(pretraining_checkpoint), "--zero_shot", "copy", "--do_eval",
        "--validation_file", str(FIXTURES / "coref" / "blocks.txt"), "--output_dir", str(tmp_path / "out"),
        "--disable_tqdm", "true",
    ])
    assert 0.0 <= results["eval_blocks_accuracy"] <= 100.0
