"""What ``--torch_compile`` costs and gives on CPU: whole-model against regional compilation.

    python benchmarks/bench_compile.py --model bert-base --batch_size 2 --max_seq_length 128 --steps 4 \
        --timeout_s 420 --output_json compile.json

A BERT-base-shaped CorefBERT pretraining model with random weights, real collated batches of the demo corpus
(masks and MRP targets as the trainer's collator makes them), and the trainer's optimizer step (AdamW). Three
modes, each in a fresh interpreter (nothing cached between them; a mode that runs past ``--timeout_s`` is killed and
reported as "did not finish in N s"):

- ``eager``: no compilation;
- ``regional``: the repeated encoder layer compiled in place (``corefbert.training.loop.compiling.compile_repeated_layers``,
  what ``--torch_compile`` does by default);
- ``model``: the whole model compiled (``torch.compile(model, dynamic=True)``, ``--torch_compile_scope model``).

Per mode: the first step's wall time (the compilation, for the compiled modes), the mean of the ``--steps`` steps
after ``--warmup`` more (two batch lengths alternate, so a recompile on a new length would show), and the graphs
dynamo built. Compile time is reported as the first step minus the eager mode's mean step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODES = ("eager", "regional", "model")


def child(mode: str, model_dir: str, dataset_dir: str, batch_size: int, steps: int, warmup: int) -> dict:
    """Run one mode in this process and return its figures."""
    from bench_trainer import _sync

    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction
    from corefbert.pretraining.data import load_prepared_corpus
    from corefbert.pretraining.families import load_pretraining_model
    from corefbert.text.tokenizers import load_tokenizer
    from corefbert.training.loop.compiling import compile_repeated_layers, compiled_graphs

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = load_prepared_corpus(dataset_dir)["train"]
    collate = DataCollatorForMentionReferencePrediction(load_tokenizer(model_dir), pad_to_multiple_of=8, seed=0)
    # Two padded lengths where the corpus has them (the longest rows, then the next length down): a new length,
    # as a short last batch brings, must not compile again.
    def padded(i: int) -> int:
        return -(-len(rows[i]["input_ids"]) // 8) * 8

    order = sorted(range(len(rows)), key=padded, reverse=True)
    first = order[:batch_size]
    rest = [i for i in order if padded(i) < padded(first[0])][:batch_size] or order[batch_size:2 * batch_size]
    full, cut = [rows[i] for i in first], [rows[i] for i in rest]
    batches = [{k: v.to(device) for k, v in collate(b).items()} for b in (full, cut)]
    model = load_pretraining_model(model_dir).to(device).train()
    step_model = model
    if mode == "regional":
        compile_repeated_layers(model)
    elif mode == "model":
        step_model = torch.compile(model, dynamic=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    times = []
    for i in range(1 + warmup + steps):
        _sync(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = step_model(**batches[i % 2], masked_logits_only=True).loss
        loss.backward()
        optimizer.step()
        _sync(device)
        times.append(time.perf_counter() - start)
        print(json.dumps({"step": i + 1, "s": round(times[-1], 2)}), flush=True)  # what a killed mode still reports
    return {"mode": mode, "first_step_s": round(times[0], 2), "second_step_s": round(times[1], 2),
            "step_s": round(statistics.mean(times[1 + warmup:]), 3), "graphs": compiled_graphs(),
            "batch": [list(b["input_ids"].shape) for b in batches], "device": device.type,
            "threads": torch.get_num_threads()}


def run_mode(mode: str, args, model_dir: str, dataset_dir: str) -> dict:
    """One mode in a fresh interpreter, killed after ``--timeout_s``."""
    command = [sys.executable, __file__, "--child", mode, model_dir, dataset_dir, str(args.batch_size),
               str(args.steps), str(args.warmup)]
    started = time.perf_counter()
    # A fresh inductor cache per mode: a cache left on disk by an earlier run turns a compilation into a load
    # (measured: a regional first step of 58 s with a fresh cache, 12 s with the cache of the run before).
    cache = tempfile.mkdtemp(prefix=f"inductor_{mode}_")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": cache}
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, timeout=args.timeout_s, text=True, check=True,
                              env=env)
    except subprocess.TimeoutExpired as stopped:
        output = stopped.output.decode() if isinstance(stopped.output, bytes) else stopped.output or ""
        steps = [json.loads(line)["s"] for line in output.splitlines() if line.startswith('{"step"')]
        return {"mode": mode, "did_not_finish_s": args.timeout_s, "step_times_s": steps}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-base", help="bert-base | bert-tiny (random init) | a folder")
    parser.add_argument("--dataset_dir", default=None, help="a prepared corpus; default: the demo corpus")
    parser.add_argument("--max_seq_length", type=int, default=128, help="for the default demo corpus")
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps after the first")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--timeout_s", type=int, default=420, help="per mode; a mode past it is reported as such")
    parser.add_argument("--output_json", default=None)
    parser.add_argument("--child", nargs=6, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        mode, model_dir, dataset_dir, batch, steps, warmup = args.child
        print(json.dumps(child(mode, model_dir, dataset_dir, int(batch), int(steps), int(warmup))))
        return
    from bench_trainer import demo_corpus, model_folder

    with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
        work = Path(tmp)
        model_dir = model_folder(args.model, work)
        dataset_dir = args.dataset_dir or demo_corpus(model_dir, work, args.max_seq_length)
        results = [run_mode(mode, args, model_dir, dataset_dir) for mode in args.modes.split(",")]
    by_mode = {r["mode"]: r for r in results}
    eager = by_mode.get("eager", {}).get("step_s")
    for r in results:
        if "did_not_finish_s" in r:
            print(f"{r['mode']:>8}: did not finish in {r['did_not_finish_s']} s (steps done: {r['step_times_s']} s)")
            continue
        if eager and r["mode"] != "eager":
            r["compile_s"] = round(r["first_step_s"] - eager, 2)
            r["step_vs_eager"] = round(r["step_s"] / eager, 3)
        print(f"{r['mode']:>8}: first step {r['first_step_s']} s (compile {r.get('compile_s', '-')} s), then "
              f"{r['step_s']} s per step ({r.get('step_vs_eager', 1.0)} x eager), {r['graphs']} graph(s), "
              f"batches {r['batch']}, {r['threads']} threads")
    summary = {"model": args.model, "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
               "load_average": [round(x, 2) for x in os.getloadavg()], "modes": results}
    if "regional" in by_mode and "model" in by_mode:
        whole = by_mode["model"].get("compile_s")
        summary["regional_over_whole_compile"] = (round(by_mode["regional"]["compile_s"] / whole, 3)
                                                  if whole and "compile_s" in by_mode["regional"] else None)
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
