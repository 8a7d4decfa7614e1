"""Kill a real pretraining run after its first checkpoint, resume it, and compare with an uninterrupted run.

    python benchmarks/resume_check.py --model bert-base --dataset_dir D --steps 60 --checkpointing_steps 30

Both runs are ``pretrain/run_mrp.py`` processes with the same flags. The interrupted one gets SIGTERM as
soon as ``checkpoints/step_<checkpointing_steps>`` exists (it saves where it is and exits 143); the resume
(``--resume_from_checkpoint latest``) runs to the end. Printed: the step it stopped at, and each logged
loss of the resumed run beside the uninterrupted one's (equal on CPU; on a GPU within the run-to-run noise
of its non-deterministic kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trainer import model_folder  # noqa: E402


def command(args, model: str, output_dir: Path) -> list[str]:
    return [sys.executable, str(ROOT / "pretrain" / "run_mrp.py"), "--model_name_or_path", model,
            "--dataset_dir", args.dataset_dir, "--output_dir", str(output_dir), "--max_steps", str(args.steps),
            "--per_device_train_batch_size", str(args.batch_size), "--per_device_eval_batch_size", str(args.batch_size),
            "--max_eval_samples", str(args.batch_size), "--logging_steps", str(max(1, args.steps // 6)),
            "--checkpointing_steps", str(args.checkpointing_steps), "--learning_rate", "1e-4", "--seed", "0",
            "--disable_tqdm", "true"]


def losses(output_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (output_dir / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r.get("split") == "train"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-tiny")
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--dataset_dir", required=True)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpointing_steps", type=int, default=30)
    parser.add_argument("--work", default="resume_check")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    model = model_folder(args.model, work, args.tokenizer)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    started = time.perf_counter()
    whole = subprocess.run(command(args, model, work / "whole"), env=env, capture_output=True, text=True)
    print(f"uninterrupted: exit {whole.returncode} in {time.perf_counter() - started:.0f} s")
    if whole.returncode:
        print(whole.stderr[-2000:])
        sys.exit(1)

    stopped = work / "stopped"
    process = subprocess.Popen(command(args, model, stopped), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    first = stopped / "checkpoints" / f"step_{args.checkpointing_steps}"
    while process.poll() is None and not first.is_dir():
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate()
    saved = sorted(p.name for p in (stopped / "checkpoints").glob("step_*"))
    print(f"SIGTERM after {first.name} appeared: exit {process.returncode}, checkpoints {saved}")
    resumed = subprocess.run(command(args, model, stopped) + ["--resume_from_checkpoint", "latest"], env=env,
                             capture_output=True, text=True)
    print(f"resumed: exit {resumed.returncode}")
    if resumed.returncode:
        print(resumed.stderr[-2000:])
        sys.exit(1)
    want, got = losses(work / "whole"), losses(stopped)
    worst = max(abs(got[s] - want[s]) for s in want if s in got)
    for step in sorted(want):
        print(f"step {step:>4}: uninterrupted {want[step]:.6f}  resumed {got.get(step, float('nan')):.6f}")
    print(f"largest loss difference: {worst:.2e} over {len(want)} logged steps")


if __name__ == "__main__":
    main()
