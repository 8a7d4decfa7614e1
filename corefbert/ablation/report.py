"""What an ablation study (:mod:`corefbert.ablation.study`) writes for people: ``study.md`` and ``curves.png``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from corefbert.pretraining.plotting import pyplot, save_figure
from corefbert.text.durable import replace_file
from corefbert.training.outputs.runlog import read_log

ARM_LABELS = {"base": "base (whole-word MLM, shared start)", "backbone": "backbone (start)", "corefbert": "CorefBERT (MLM+MRP)", "mrm": "MRM (no copy loss)",
              "wwm": "WWM (MLM only)", "official_loss": "CorefBERT, official loss"}


def _cell(entry: dict | None) -> str:
    if entry is None:
        return "–"
    std = entry["std"]
    return f"{entry['mean']:.1f}" + (f" ± {std:.1f}" if std is not None else "") + f" (n={len(entry['per_seed'])})"


def _ci(ci: dict | None) -> str:
    if ci is None:
        return "–"
    return f"{ci['difference']:+.1f} [{ci['ci_low']:+.1f}, {ci['ci_high']:+.1f}] ({ci['examples']} ex.)"


def write_markdown(path: Path, result: dict) -> Path:
    """The study's table: mean ± std over seeds per arm and probe, and the CorefBERT - WWM bootstrap CI."""
    arms = ["backbone"] + result["arms"]
    a, b = result["contrast"]
    header = "| probe | " + " | ".join(ARM_LABELS.get(arm, arm) for arm in arms) + f" | {a} − {b} [95% CI] |"
    lines = ["# Ablation study", "", _settings_line(result), "", header, "|---" * (len(arms) + 2) + "|"]
    for probe, entry in result["probes"].items():
        cells = [_cell(entry["arms"].get(arm)) for arm in arms]
        lines.append(f"| {probe} | " + " | ".join(cells) + f" | {_ci(entry.get('ci'))} |")
    lines += ["", "Figures in percent; mean ± std over seeds (std with ddof 1), n = seeds. The CI is a paired "
              f"bootstrap ({result['study']['bootstrap_samples']} samples) of {a} − {b}: the examples of a probe "
              "are redrawn with replacement, every seed of a drawn example kept (seed k of one arm paired with "
              "seed k of the other), the statistic being the mean over seeds of the per-seed difference; the "
              "interval is the 2.5-97.5 percentile range. A CI that contains 0 means this study cannot tell the "
              "two arms apart on that probe. MRP accuracy is probed only where the copy head was trained."]
    if result["missing"]:
        lines += ["", f"Missing ({len(result['missing'])}): " + "; ".join(result["missing"][:20])]
    lines += ["", "Each run's own held-out evaluation (its seed's masks) at the end of pretraining:", "",
              "| arm | seeds | tokens per run | MLM accuracy | MRP accuracy (at step 0) |", "|---|---|---|---|---|"]
    for arm, runs in result["pretraining"].items():
        mlm = [r.get("eval_mlm_accuracy", float("nan")) * 100 for r in runs.values()]
        trained = [r for r in runs.values() if r["copy_trained"] is not False]
        mrp = [r.get("eval_mrp_accuracy", float("nan")) * 100 for r in trained]
        start = np.mean([r.get("init_mrp_accuracy", float("nan")) * 100 for r in trained]) if trained else None
        tokens = sorted({r.get("train_tokens") for r in runs.values()}, key=str)
        lines.append(f"| {arm} | {len(runs)} | {', '.join(f'{t:,}' if t else '?' for t in tokens)} | "
                     f"{np.mean(mlm):.1f} | {f'{np.mean(mrp):.1f} ({start:.1f})' if mrp else '– (copy head not trained)'} |")
    replace_file(path, "\n".join(lines) + "\n", "the study table")
    return path


def _settings_line(result: dict) -> str:
    heldout = result["probe_settings"].get("heldout")
    line = (f"Arms {', '.join(result['arms'])}; seeds {', '.join(map(str, result['seeds']))}; probes on each "
            "arm's final checkpoint and on the starting backbone")
    if heldout:
        line += (f"; held-out probes on {heldout['sequences']} sequences, masks drawn with seed "
                 f"{heldout['mask_seed']} for every model")
    base = result["study"].get("base_mlm_steps")
    if base:
        line += (f"; every arm of every seed starts from the same base, the backbone continued with {base} steps "
                 "of whole-word MLM (the 'backbone (start)' column probes that base)")
    for name, settings in result["probe_settings"].items():
        if name == "quoref":
            line += (f"; QUOREF: {settings['max_steps']} fine-tuning steps of {settings['batch_size']} windows of "
                     f"{settings['max_seq_length']} at LR {settings['learning_rate']:g}, EM/F1 of the last model on "
                     f"{os.path.basename(settings['validation_file'])}")
        if name.startswith("finetune_"):
            line += (f"; {name[len('finetune_'):]}: {settings['max_steps']} eq. 5 steps of {settings['batch_size']} "
                     f"at LR {settings['learning_rate']:g}")
    capped = {s.get("max_eval_samples") for n, s in result["probe_settings"].items() if n != "heldout"} - {None}
    return line + (f"; at most {', '.join(map(str, sorted(capped)))} problems per evaluated file" if capped else "") + "."


def plot_study(logs: dict[tuple[str, int], os.PathLike], out_path: Path, copy_trained: set,
               base_log: os.PathLike | None = None) -> Path | None:
    """Training loss, held-out MLM accuracy and held-out MRP accuracy against training tokens, one line per
    run (colour: arm); MRP only for the runs in ``copy_trained``. Evaluation records carry steps only: their
    tokens are read off the train records. ``base_log``: the base every arm continued (grey); the arms' tokens
    then count on from the base's last one."""
    if not logs:
        return None
    plt = pyplot("the study plot")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colours = {}
    runs = sorted(logs.items())
    offset = 0
    if base_log is not None and Path(base_log).is_file():
        base_train = [r for r in read_log(base_log) if r.get("split") == "train"]
        offset = base_train[-1]["tokens"] if base_train else 0
        runs = [(("base", 0), base_log)] + runs
        colours["base"] = "0.5"
    for (arm, seed), path in runs:
        records = read_log(path)
        train = [r for r in records if r.get("split") == "train"]
        evals = [r for r in records if r.get("split") == "eval"]
        colour = colours.setdefault(arm, f"C{len(colours)}")
        label = ARM_LABELS.get(arm, arm) if arm == "base" or seed == min(s for a, s in logs if a == arm) else None
        shift = 0 if arm == "base" else offset
        steps, tokens = [0] + [r["step"] for r in train], [shift] + [shift + r["tokens"] for r in train]
        # The MLM part of the loss is comparable across arms; the total is not (MRM and WWM drop L_MRP).
        axes[0].plot(tokens[1:], [r.get("mlm_loss", r["loss"]) for r in train], color=colour, alpha=0.7, label=label)
        if (arm, seed) in copy_trained and all("mrp_loss" in r for r in train):
            axes[0].plot(tokens[1:], [r["mrp_loss"] for r in train], color=colour, alpha=0.7, linestyle="--")
        eval_tokens = np.interp([r["step"] for r in evals], steps, tokens)
        axes[1].plot(eval_tokens, [100 * r["mlm_accuracy"] for r in evals], marker="o", ms=3, color=colour,
                     alpha=0.7, label=label)
        with_mrp = [(t, r) for t, r in zip(eval_tokens, evals) if r.get("mrp_mentions", 0) > 0]
        if with_mrp and (arm, seed) in copy_trained:
            axes[2].plot([t for t, _ in with_mrp], [100 * r["mrp_accuracy"] for _, r in with_mrp], marker="o",
                         ms=3, color=colour, alpha=0.7, label=label)
    for ax, title in zip(axes, ("training loss: MLM (solid), MRP (dashed)", "held-out MLM accuracy (%)",
                                "held-out MRP accuracy (%)")):
        ax.set(xlabel="training tokens (non-padding)", title=title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_path, "the plot", dpi=110)
