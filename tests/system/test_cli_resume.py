"""Exact resume, per CLI: every fine-tuning CLI resumed from ``latest`` equals its uninterrupted run.

tests/tasks/test_finetuning.py proves the shared loop resumes exactly on a toy task; each CLI adds its own model,
collate and data, any of which could break that (a collate or dataset drawing random numbers, dropout in a
custom head, stateful preprocessing). For each CLI (FEVER with both models, coref with both eq.-5 loss
variants, DocRED also with a DataLoader worker process) run A trains 2 epochs
uninterrupted with gradient accumulation 2, a checkpoint and a log line every update. Run B is run A's output
directory as a job killed right after checkpoint ``k`` would have left it (later checkpoints, ``last`` and
the log lines after ``k`` removed), resumed with ``--resume_from_checkpoint latest`` and the same flags, so
the LR schedule is the same one (a shorter ``--max_steps`` would change it). ``k`` is the end of epoch 1 and
the first update of epoch 2. The resumed run's per-update losses, learning rates and evaluations, its final
weights (``last/``, ``best/``) and its ``train_loss`` must equal run A's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import FIXTURES, load_cli

RTOL = 1e-6


def _cli(name: str):
    """``finetune/<name>.py``'s ``main``, imported in-process once."""
    return load_cli(f"finetune/{name}.py").main


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory, bert_tokenizer):
    """A tiny BertForMaskedLM (coref scores candidates with the MLM head; the other CLIs drop the head)."""
    from helpers import tiny_config
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("resume_mlm")
    BertForMaskedLM(tiny_config("bert", bert_tokenizer)).save_pretrained(str(out))
    bert_tokenizer.save_pretrained(str(out))
    return out


def _docred_train(tmp_path: Path) -> str:
    """The DocRED fixture's 2 training documents 3 times over (new titles): 3 updates per epoch at batch 1
    and accumulation 2, so a checkpoint can fall inside an epoch."""
    docs = json.loads((FIXTURES / "docred" / "train.json").read_text())
    copies = [{**doc, "title": f"{doc['title']} ({n})"} for n in range(3) for doc in docs]
    path = tmp_path / "docred_train.json"
    path.write_text(json.dumps(copies))
    return str(path)


COREF = ["--train_file", str(FIXTURES / "coref" / "blocks.txt"), str(FIXTURES / "coref" / "gap.tsv"),
         "--validation_file", str(FIXTURES / "coref" / "blocks.txt"), str(FIXTURES / "coref" / "gap.tsv")]

# cli, flags beyond the shared ones. Batch sizes give every run at least 2 updates per epoch.
CASES = {
    "glue": ("run_glue", lambda tmp: [
        "--task_name", "rte", "--data_dir", str(FIXTURES / "glue" / "RTE"), "--max_seq_length", "48",
        "--per_device_train_batch_size", "8"]),
    # Regression head; evaluation (and the best-model choice) after every update, between checkpoints too.
    "glue_stsb_eval_every_update": ("run_glue", lambda tmp: [
        "--task_name", "stsb", "--data_dir", str(FIXTURES / "glue" / "STS-B"), "--max_seq_length", "48",
        "--per_device_train_batch_size", "4", "--eval_steps", "1"]),
    "quoref": ("run_quoref", lambda tmp: [
        "--train_file", str(FIXTURES / "quoref" / "quoref_tiny.json"),
        "--validation_file", str(FIXTURES / "quoref" / "quoref_tiny.json"),
        "--max_seq_length", "64", "--doc_stride", "32", "--per_device_train_batch_size", "2"]),
    "mrqa": ("run_mrqa", lambda tmp: [
        "--train_file", str(FIXTURES / "mrqa" / "squad_tiny.json"),
        "--validation_file", str(FIXTURES / "mrqa" / "squad_tiny.json"),
        "--max_seq_length", "64", "--doc_stride", "32", "--per_device_train_batch_size", "1"]),
    "docred": ("run_docred", lambda tmp: [
        "--rel_info_file", str(FIXTURES / "docred" / "rel_info.json"), "--max_seq_length", "256",
        "--train_file", _docred_train(tmp),
        "--validation_file", str(FIXTURES / "docred" / "dev.json"), "--num_na_pairs", "2",
        "--per_device_train_batch_size", "1"]),
    "fever_concat": ("run_fever", lambda tmp: [
        "--model_type", "concat", "--train_file", str(FIXTURES / "fever" / "pairs.jsonl"), "--split_seed", "3",
        "--validation_split_percentage", "25", "--per_device_train_batch_size", "1"]),
    "fever_kgat": ("run_fever", lambda tmp: [
        "--model_type", "kgat", "--max_seq_length", "32", "--train_file", str(FIXTURES / "fever" / "train.jsonl"),
        "--wiki_pages_dir", str(FIXTURES / "fever" / "wiki-pages"),
        "--validation_file", str(FIXTURES / "fever" / "dev.jsonl"),
        "--validation_evidence_file", str(FIXTURES / "fever" / "retrieved_dev.jsonl"),
        "--per_device_train_batch_size", "1"]),
    "coref": ("run_coref", lambda tmp: [*COREF, "--per_device_train_batch_size", "2"]),
    "coref_wikicrem_sum": ("run_coref", lambda tmp: [
        *COREF, "--per_device_train_batch_size", "2", "--loss_variant", "wikicrem", "--score_reduction", "sum"]),
    # Worker processes: the NA-pair draw must not depend on which process reads a document.
    "docred_workers": ("run_docred", lambda tmp: [*CASES["docred"][1](tmp), "--num_workers", "1"]),
}


def _run(cli: str, model_dir: Path, out: Path, extra: list[str], *more: str) -> dict:
    return _cli(cli)([
        "--model_name_or_path", str(model_dir), "--output_dir", str(out), *extra,
        "--do_train", "--do_eval", "--num_train_epochs", "2", "--gradient_accumulation_steps", "2",
        "--learning_rate", "1e-3", "--warmup_ratio", "0.3", "--checkpointing_steps", "1", "--save_total_limit", "0",
        "--logging_steps", "1", "--seed", "7", "--disable_tqdm", "true", *more,
    ])


def _log(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    for record in records:
        record.pop("time", None)
        record.pop("tokens_per_s", None)  # wall-clock rates differ between runs
    return records


def _interrupted_copy(full: Path, dest: Path, k: int) -> None:
    """``dest`` as a job killed right after writing ``checkpoints/step_k`` would have left ``full``."""
    shutil.copytree(full, dest)
    for path in list((dest / "checkpoints").iterdir()):
        if int(path.name.split("_")[1]) > k:
            shutil.rmtree(path)
    for path in list(dest.iterdir()):
        name = path.name
        if name == "checkpoints":
            continue
        if name == "best" and json.loads((path / "eval_results.json").read_text())["step"] <= k:
            continue
        if name != "log.jsonl":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    # Records of steps up to k; the final evaluation's records carry no step.
    kept = [line for line in (dest / "log.jsonl").read_text().splitlines()
            if json.loads(line).get("step", k + 1) <= k]
    (dest / "log.jsonl").write_text("".join(line + "\n" for line in kept))


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    assert files, f"no weights in {directory}"
    return {f"{path.name}:{key}": value for path in files for key, value in load_file(str(path)).items()}


def _assert_same_values(got: dict, want: dict, where: str) -> None:
    assert got.keys() == want.keys(), where
    for key, value in want.items():
        if isinstance(value, float) and isinstance(got[key], float):
            assert got[key] == pytest.approx(value, rel=RTOL, abs=1e-9), f"{where}: {key}"
        else:
            assert got[key] == value, f"{where}: {key}"


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_resumes_exactly(case, tiny_mlm_dir, tmp_path):
    cli, flags = CASES[case]
    extra = flags(tmp_path)
    full = tmp_path / "full"
    want = _run(cli, tiny_mlm_dir, full, extra)
    full_log = _log(full)
    updates = [r for r in full_log if "loss" in r]
    assert [r["step"] for r in updates] == list(range(1, want["train_steps"] + 1))
    # The update that ends epoch 1 (accumulation runs on across the epoch end, so with an odd number of
    # batches it is the one that straddles the boundary).
    boundary = next(r["step"] for r in updates if r["epoch"] >= 1.0)
    assert boundary >= 2 and want["train_steps"] > boundary, "needs >= 2 updates per epoch"
    assert len({r["loss"] for r in updates}) > 1  # the model trains: losses change

    for k in (boundary, boundary + 1):  # at the epoch boundary, and one update into epoch 2
        resumed = tmp_path / f"resumed_{k}"
        _interrupted_copy(full, resumed, k)
        got = _run(cli, tiny_mlm_dir, resumed, extra, "--resume_from_checkpoint", "latest")
        log = _log(resumed)
        start = next(i for i, r in enumerate(log) if "resumed_from" in r)
        assert log[start]["step"] == k and log[start]["resumed_from"].endswith(f"step_{k}")
        after = log[start + 1:]
        # The last step is saved before its evaluation, so a resume from it repeats that evaluation.
        expected = [r for r in full_log if r.get("step", 0) > k or "step" not in r
                    or (k == want["train_steps"] and r["step"] == k and "loss" not in r)]
        assert len(after) == len(expected) >= 1
        for got_record, want_record in zip(after, expected):
            _assert_same_values(got_record, want_record, f"{case}, resumed at {k}, log")
        for name in ("last", "best"):
            a, b = _weights(full / name), _weights(resumed / name)
            assert a.keys() == b.keys()
            for key in a:
                torch.testing.assert_close(b[key], a[key], rtol=RTOL, atol=1e-7, msg=f"{case} at {k}: {name} {key}")
        _assert_same_values({k_: v for k_, v in got.items() if k_ != "train_runtime"},
                            {k_: v for k_, v in want.items() if k_ != "train_runtime"}, f"{case} at {k}: results")


def test_docred_na_pairs_depend_on_seed_epoch_and_document_only():
    """What made run_docred resume inexactly: NA pairs came from one generator advanced by every access, so
    a resumed run (which skips the batches it already did without reading them) drew other pairs."""
    from corefbert.tasks.docred import DocredDataset

    feature = {"mention_spans": [[(0, 1)]] * 5, "labels": {(0, 1): [1]}}
    dataset = DocredDataset([feature, feature], num_na_pairs=3, seed=7)
    first = dataset[1]["pairs"]
    assert len(first) == 4 and (0, 1) in first
    _ = [dataset[i] for i in (0, 1, 0)]
    assert dataset[1]["pairs"] == first  # earlier reads change nothing
    assert DocredDataset([feature, feature], num_na_pairs=3, seed=7)[1]["pairs"] == first  # a fresh (resumed) run
    draws = set()
    for epoch in range(6):
        dataset.set_epoch(epoch)
        draws.add(tuple(dataset[1]["pairs"]))
    assert len(draws) > 1  # still new NA pairs in each epoch


def test_accelerate_passes_the_epoch_to_the_docred_dataset():
    """The loop calls ``set_epoch`` on the prepared training dataloader; Accelerate hands it to the dataset
    (single process). If a version stops doing so, every epoch would draw epoch 0's NA pairs."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration
    from torch.utils.data import DataLoader

    from corefbert.tasks.docred import DocredDataset

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=7))
    dataset = DocredDataset([{"mention_spans": [], "labels": {}}] * 4, num_na_pairs=1, seed=7)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=2, shuffle=True, collate_fn=list))
    loader.set_epoch(3)
    assert dataset.epoch == 3
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
