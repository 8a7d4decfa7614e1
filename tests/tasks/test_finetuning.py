"""The shared fine-tuning loop on a tiny model: learning, best checkpoint, exact resume."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from helpers import ROOT

from corefbert.errors import CorefBertError
from corefbert.tasks.base import FinetuningArguments, FinetuningTask, run_finetuning
from corefbert.training.checkpoints.folders import list_checkpoints
from corefbert.training.loop.optimization import parameter_groups


class _PairDataset(torch.utils.data.Dataset):
    """Label 1 when the sequence contains token 7, else 0: learnable in a few steps."""

    def __init__(self, size: int, seed: int):
        rng = np.random.default_rng(seed)
        self.rows = []
        for _ in range(size):
            ids = rng.integers(10, 40, size=6).tolist()
            label = int(rng.random() < 0.5)
            if label:
                ids[int(rng.integers(0, 6))] = 7
            self.rows.append({"input_ids": [2] + ids + [3], "label": label})

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class ToyTask(FinetuningTask):
    name = "toy"
    main_metric = "accuracy"

    def __init__(self, model_dir, train_size=64, eval_size=32):
        self.model_dir = model_dir
        self.train, self.dev = _PairDataset(train_size, 0), _PairDataset(eval_size, 1)

    def build_model(self):
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification.from_pretrained(self.model_dir, num_labels=2)

    def train_dataset(self):
        return self.train

    def eval_dataset(self):
        return self.dev

    def predict_dataset(self):
        return self.dev

    def collate(self, features):
        return {
            "input_ids": torch.tensor([f["input_ids"] for f in features]),
            "labels": torch.tensor([f["label"] for f in features]),
        }

    def evaluate(self, model, dataloader, accelerator, split):
        preds, golds = [], []
        for batch in dataloader:
            logits = model(input_ids=batch["input_ids"]).logits  # [batch, 2]
            pred, gold = accelerator.gather_for_metrics((logits.argmax(-1), batch["labels"]))
            preds.append(pred.cpu())
            golds.append(gold.cpu())
        preds, golds = torch.cat(preds), torch.cat(golds)
        return {"accuracy": (preds == golds).float().mean().item()}, preds.tolist()

    def write_predictions(self, predictions, output_dir, split):
        path = os.path.join(output_dir, f"{split}_predictions.json")
        with open(path, "w") as handle:
            json.dump(predictions, handle)
        return [path]


@pytest.fixture(scope="module")
def toy_bert_dir(tmp_path_factory):
    """A tiny random BERT with a 64-token vocabulary (the toy task needs ids, not a tokenizer)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("toy_bert")
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    BertModel(config).save_pretrained(str(out))
    return out


def _args(tmp_path, model_dir, **overrides):
    values = dict(
        model_name_or_path=str(model_dir), output_dir=str(tmp_path / "out"), do_train=True, do_eval=True,
        per_device_train_batch_size=8, per_device_eval_batch_size=16, learning_rate=3e-3, num_train_epochs=3,
        warmup_ratio=0.1, logging_steps=2, seed=3, disable_tqdm=True,
    )
    values.update(overrides)
    return FinetuningArguments(**values)


def _read_log(output_dir):
    with open(os.path.join(output_dir, "log.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def _weights(directory):
    from safetensors.torch import load_file

    return load_file(os.path.join(directory, "model.safetensors"))


def test_loss_goes_down_and_best_is_kept(tmp_path, toy_bert_dir):
    from transformers import AutoModelForSequenceClassification

    args = _args(tmp_path, toy_bert_dir, num_train_epochs=4, eval_steps=12, do_predict=True, learning_rate=5e-3)
    results = run_finetuning(ToyTask(toy_bert_dir, train_size=128), args)
    log = _read_log(args.output_dir)
    losses = [r["loss"] for r in log if "loss" in r]
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3])
    evals = [r for r in log if "eval_accuracy" in r and "step" in r and "split" not in r]
    assert [r["step"] for r in evals] == [12, 24, 36, 48, 60, 64]
    best = max(evals, key=lambda r: r["eval_accuracy"])  # first of equals wins: strictly better replaces
    assert results["best_step"] == best["step"]
    assert results["best_eval_accuracy"] == pytest.approx(best["eval_accuracy"])
    assert results["eval_accuracy"] == pytest.approx(best["eval_accuracy"])
    # do_predict runs the reloaded best weights over the same rows: the best's accuracy again
    assert results["predict_accuracy"] == pytest.approx(best["eval_accuracy"])
    assert results["best_eval_accuracy"] >= 0.9
    reloaded = AutoModelForSequenceClassification.from_pretrained(os.path.join(args.output_dir, "best"))
    assert reloaded.config.num_labels == 2
    with open(os.path.join(args.output_dir, "all_results.json")) as handle:
        assert json.load(handle)["train_steps"] == 64
    assert os.path.isfile(os.path.join(args.output_dir, "predict_predictions.json"))


class _Preempted(Exception):
    pass


class _CrashingDataset(_PairDataset):
    """Raises once ``crash_at`` rows were read: a job killed between two checkpoints."""

    def __init__(self, size, seed, crash_at):
        super().__init__(size, seed)
        self.reads, self.crash_at = 0, crash_at

    def __getitem__(self, i):
        self.reads += 1
        if self.reads > self.crash_at:
            raise _Preempted
        return super().__getitem__(i)


POISON = 9  # a token whose loss is NaN (see _PoisonedToyTask)


class _PoisonedToyTask(ToyTask):
    """Row 13 carries the token POISON, whose loss is NaN: with --on_nonfinite skip one update per epoch is
    skipped and does not count as a step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _poison(self.train)

    def build_model(self):
        model = super().build_model()
        forward = model.forward

        def poisoned(input_ids=None, **kwargs):
            out = forward(input_ids=input_ids, **kwargs)
            if out.loss is not None and bool((input_ids == POISON).any()):
                out.loss = out.loss * float("nan")
            return out

        model.forward = poisoned
        return model


def _poison(dataset):
    dataset.rows[13]["input_ids"][1] = POISON


def _resume_equals_uninterrupted(tmp_path, model_dir, accumulation, crash_at, resumed_at, poisoned=False):
    common = dict(gradient_accumulation_steps=accumulation, checkpointing_steps="2", save_total_limit=2,
                  num_train_epochs=3, per_device_train_batch_size=6, eval_steps=3,
                  on_nonfinite="skip" if poisoned else "stop")
    task_class = _PoisonedToyTask if poisoned else ToyTask
    full = _args(tmp_path / "full", model_dir, **common)
    run_finetuning(task_class(model_dir, train_size=40), full)

    interrupted = _args(tmp_path / "interrupted", model_dir, **common)
    crashing = task_class(model_dir, train_size=40)
    crashing.train = _CrashingDataset(40, 0, crash_at)
    if poisoned:
        _poison(crashing.train)
    with pytest.raises(_Preempted):
        run_finetuning(crashing, interrupted)
    assert [step for step, _ in list_checkpoints(interrupted.output_dir)] == [resumed_at - 2, resumed_at]
    interrupted.resume_from_checkpoint = "latest"
    run_finetuning(task_class(model_dir, train_size=40), interrupted)

    for name in ("last", "best"):
        a, b = _weights(os.path.join(full.output_dir, name)), _weights(os.path.join(interrupted.output_dir, name))
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
    full_log = _read_log(full.output_dir)
    log = _read_log(interrupted.output_dir)
    logged = [r["step"] for r in log if "loss" in r]
    assert logged == sorted(set(logged)), "the crashed run's records past the checkpoint must be dropped"
    resumed = [i for i, r in enumerate(log) if "resumed_from" in r]
    assert len(resumed) == 1 and log[resumed[0]]["step"] == resumed_at
    after = [r for r in log[resumed[0]:] if "loss" in r or "eval_accuracy" in r]
    expected = [r for r in full_log if ("loss" in r or "eval_accuracy" in r) and r.get("step", 1e9) > resumed_at]
    assert len(after) == len(expected) > 2
    for got, want in zip(after, expected):
        for key in ("loss", "eval_accuracy", "lr"):
            assert got.get(key) == pytest.approx(want.get(key), abs=1e-6)
    with open(os.path.join(full.output_dir, "all_results.json")) as a, \
            open(os.path.join(interrupted.output_dir, "all_results.json")) as b:
        want, got = json.load(a), json.load(b)
    assert got["train_loss"] == pytest.approx(want["train_loss"], abs=1e-6)
    assert got["best_step"] == want["best_step"]


def test_resume_mid_epoch_equals_uninterrupted(tmp_path, toy_bert_dir):
    # 40 rows / batch 6 = 7 batches, 7 updates per epoch. The crash comes while reading the 12th batch
    # (prefetched during update 11): step_10, mid-epoch 2, is the latest.
    _resume_equals_uninterrupted(tmp_path, toy_bert_dir, accumulation=1, crash_at=40 + 6 * 4, resumed_at=10)


def test_resume_with_accumulation_equals_uninterrupted(tmp_path, toy_bert_dir):
    # 7 batches, accumulation 2, accumulation running on across the epoch end: update 4 is batch 7 of epoch 1
    # and batch 1 of epoch 2. The crash comes while reading batch 6 of epoch 2 (prefetched while batch 5 is
    # handed out, mid-update 6): step_4, an update that straddles the epoch boundary, is the latest.
    _resume_equals_uninterrupted(tmp_path, toy_bert_dir, accumulation=2, crash_at=40 + 6 * 5, resumed_at=4)


@pytest.mark.parametrize("accumulation", [1, 2])
def test_resume_with_skipped_nonfinite_updates_equals_uninterrupted(tmp_path, toy_bert_dir, accumulation, capsys):
    """--on_nonfinite skip in fine-tuning: every epoch has an update with a NaN loss (batch 3, row 13); the
    crash comes in epoch 2 after such a skip, and the resumed run repeats the uninterrupted one."""
    # accumulation 1: 7 batches, 6 steps per epoch (batch 3 skipped); the crash while reading batch 5 of
    # epoch 2 (prefetched as batch 4 is handed out) leaves step 8 = 6 + batches 1 and 2, after the skip.
    # accumulation 2: steps (1,2), (5,6), (7 | 1), (4,5) of epoch 2 (the pairs holding a batch 3 skipped); the
    # crash while reading batch 7 of epoch 2 leaves step 4, taken right after the epoch-2 skip.
    crash_at, resumed_at = {1: (40 + 6 * 4, 8), 2: (40 + 6 * 6, 4)}[accumulation]
    _resume_equals_uninterrupted(tmp_path, toy_bert_dir, accumulation=accumulation, crash_at=crash_at,
                                 resumed_at=resumed_at, poisoned=True)
    assert capsys.readouterr().out.count("non-finite loss") >= 6  # the skips happened, in every run


def test_no_weight_decay_on_bias_and_layernorm(toy_bert_dir):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(toy_bert_dir, num_labels=2)
    decay, plain = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    plain_names = {names[id(p)] for p in plain["params"]}
    decay_names = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert "bert.embeddings.LayerNorm.weight" in plain_names and "classifier.bias" in plain_names
    assert "classifier.weight" in decay_names and "bert.embeddings.word_embeddings.weight" in decay_names
    assert all(n.endswith("bias") or "LayerNorm" in n for n in plain_names)
    assert len(plain_names) + len(decay_names) == len(list(model.parameters()))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"mixed_precision": "fp8"}, "--mixed_precision 'fp8'"),
        ({"do_train": False, "do_eval": False}, "nothing to do"),
        ({"checkpointing_steps": "often"}, "--checkpointing_steps 'often'"),
        ({"resume_from_checkpoint": "/nonexistent/checkpoints/step_3"}, "checkpoint folder not found"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path, toy_bert_dir, overrides, message):
    with pytest.raises(CorefBertError, match=message) as err:
        run_finetuning(ToyTask(toy_bert_dir), _args(tmp_path, toy_bert_dir, **overrides))
    assert "\n" not in str(err.value)


def test_refuses_non_empty_output_dir(tmp_path, toy_bert_dir):
    args = _args(tmp_path, toy_bert_dir)
    os.makedirs(args.output_dir)
    open(os.path.join(args.output_dir, "something"), "w").close()
    with pytest.raises(CorefBertError, match="--overwrite_output_dir"):
        run_finetuning(ToyTask(toy_bert_dir), args)


def test_bf16_mixed_precision_trains(tmp_path, toy_bert_dir):
    args = _args(tmp_path, toy_bert_dir, mixed_precision="bf16", max_steps=3, do_eval=False, logging_steps=1)
    results = run_finetuning(ToyTask(toy_bert_dir, train_size=24), args)
    losses = [r["loss"] for r in _read_log(args.output_dir) if "loss" in r]
    assert results["train_steps"] == 3 and len(losses) == 3 and all(np.isfinite(losses))
    assert os.path.isfile(os.path.join(args.output_dir, "last", "model.safetensors"))


_DDP_SCRIPT = """
import json, sys
sys.path[:0] = [{root!r}, {root!r} + "/tests"]  # tests/: the test module imports helpers
from tests.tasks.test_finetuning import ToyTask, _args
from corefbert.tasks.base import run_finetuning
from pathlib import Path
args = _args(Path({out!r}), {model!r}, num_train_epochs=3, per_device_train_batch_size=6, logging_steps=1,
             do_predict=True)
run_finetuning(ToyTask({model!r}, train_size=40, eval_size=33), args)
"""


@pytest.mark.slow
@pytest.mark.distributed
def test_two_processes_schedule_and_gather(tmp_path, toy_bert_dir):
    """Real 2-process CPU DDP (torchrun; `accelerate launch --cpu` would run one): the LR schedule spans
    the per-process updates and ends at 0, and evaluation gathers every dev row once."""
    import subprocess
    import sys

    root = str(ROOT)
    script = tmp_path / "ddp_toy.py"
    script.write_text(_DDP_SCRIPT.format(root=root, out=str(tmp_path), model=str(toy_bert_dir)))
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    from test_pretraining import _free_port

    # An own port: the default 29500 collides with another 2-process test running in the other pytest worker.
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                    str(_free_port()), str(script)],
                   check=True, env=env, cwd=root, timeout=600, capture_output=True)
    log = _read_log(tmp_path / "out")
    updates = [r for r in log if "loss" in r]
    # 40 rows over 2 processes: 20 each, 4 batches of 6 (the last padded): 4 updates/epoch, 12 in all.
    assert [r["step"] for r in updates] == list(range(1, 13))
    assert updates[-1]["lr"] == 0.0 and updates[0]["lr"] > 0.0
    with open(tmp_path / "out" / "all_results.json") as f:
        results = json.load(f)
    assert results["train_steps"] == 12
    # 33 dev rows, 17 + 16 per process: the duplicate padding row is dropped by gather_for_metrics.
    with open(tmp_path / "out" / "predict_predictions.json") as f:
        assert len(json.load(f)) == 33
    assert results["eval_accuracy"] * 33 == pytest.approx(round(results["eval_accuracy"] * 33))


def test_fp16_overflow_skips_updates_and_reports_them(tmp_path, toy_bert_dir, monkeypatch):
    """accelerate gives fp16 a GradScaler only on GPUs; a real torch one on CPU (forward under fp16 autocast)
    overflows at a large scale, so the first updates are skipped until the scale has come down."""
    import accelerate
    from accelerate import Accelerator

    class CpuFp16Accelerator(Accelerator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "mixed_precision": "fp16"})
            self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40, growth_interval=1000)
            self.native_amp = True

    monkeypatch.setattr(accelerate, "Accelerator", CpuFp16Accelerator)  # what build_accelerator constructs
    results = run_finetuning(ToyTask(toy_bert_dir), _args(tmp_path, toy_bert_dir, num_train_epochs=4, do_eval=False))
    skipped = results["train_fp16_skipped_updates"]
    assert 1 <= skipped < results["train_steps"]
    assert results["train_fp16_loss_scale"] == 2.0 ** (40 - skipped)  # halved once per skipped update
