"""What the curve (:mod:`corefbert.ablation.curve`) writes for people: ``curve.json``, ``curve.md`` and ``curve.png``.

Every figure is read back from the probe files on disk (``<arm>/seed_<seed>/points/tokens_<N>/probes/*.json`` and
the start's ``backbone/seed_<seed>/probes/*.json``), so an interrupted curve, or one whose arms ran on several
machines, is written from what is there; what is missing is listed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from corefbert.ablation import curve
from corefbert.ablation.curve import REFERENCE, ROW_KINDS, START, point_dir, saved_point, token_label
from corefbert.ablation.report import ARM_LABELS
from corefbert.ablation.study import ARMS, run_dir
from corefbert.pretraining.plotting import pyplot, save_figure
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import read_json

#: The copy head's zero-shot rows are compared with WWM's masked-LM scoring of the same problems.
COPY_PREFIX, MLM_PREFIX = "zero-shot, copy head: ", "zero-shot: "


def reference_row(row: str) -> str:
    """The WWM row an arm's row is paired with (the same problems): itself, or for the copy head's scoring the
    masked LM's scoring of the same file."""
    return MLM_PREFIX + row[len(COPY_PREFIX):] if row.startswith(COPY_PREFIX) else row


def read_curve(root: Path, study, seeds: list[int], points: list[int]) -> tuple[dict, dict, list[str]]:
    """``{row: {tokens: {arm: {seed: (kind, data)}}}}`` (tokens 0: the start), the tokens each point had trained
    (``{tokens: trained tokens}``, from the point records) and what is missing."""
    rows_of = {probe.name: probe.rows for probe in curve.point_probes(study)}
    arms = [arm for arm in ARMS if arm in study.arm_list() or (Path(root) / arm).is_dir()]
    table, trained, missing = {}, {}, []
    # The start's probes are read wherever they are (a process given --skip_backbone left them to another one).
    sites = [(START, seed, 0, run_dir(root, START, seed)) for seed in seeds]
    sites += [(arm, seed, tokens, point_dir(run_dir(root, arm, seed), tokens)) for tokens in points
              for seed in seeds for arm in arms]
    for arm, seed, tokens, folder in sites:
        if tokens:
            record = saved_point(folder)
            if record is None:
                missing.append(f"{arm}/seed_{seed} at {token_label(tokens)}: not trained yet")
                continue
            trained.setdefault(tokens, set()).add(record.get("trained_tokens"))
        found = sorted((folder / "probes").glob("*.json")) if (folder / "probes").is_dir() else []
        names = {path.stem for path in found}
        missing += [f"{arm}/seed_{seed} at {token_label(tokens)}: no {name}" for name in rows_of
                    if name not in names and tokens and not name.startswith(("zeroshot_copy_", "finetune_", "quoref"))]
        for path in found:
            if path.stem not in rows_of:
                continue  # a probe this command does not ask for (another file, a dropped probe)
            results = read_json(str(path))["results"]
            for row, value in rows_of[path.stem](results).items():
                table.setdefault(row, {}).setdefault(tokens, {}).setdefault(arm, {})[seed] = value
    return table, {t: sorted(v - {None}) for t, v in trained.items()}, missing


def row_order(row: str) -> tuple:
    """The tables' order: the held-out parts (all, repeated mentions, other words, MRP), zero-shot rows with each
    file's copy-head row after its masked-LM row, fine-tuning probes, QUOREF, then any other probe's rows."""
    rows = list(curve.HELDOUT_ROWS.values())
    if row in rows:
        return 0, rows.index(row), ""
    family = next((n for n, p in enumerate((MLM_PREFIX, COPY_PREFIX, "eq. 5", "QUOREF")) if row.startswith(p)), 4)
    return 1 + (family if family > 1 else 0), 0, reference_row(row) + str(family)


def summarize_curve(table: dict, study) -> dict:
    """Per row and point: each arm's figure per seed and its mean over seeds, and every arm's difference to WWM
    (paired bootstrap over the same examples, seeds paired) where both have the point."""
    out = {}
    for row, by_tokens in sorted(table.items(), key=lambda item: row_order(item[0])):
        reference = table.get(reference_row(row), {})
        for tokens, by_arm in sorted(by_tokens.items()):
            entry = {"arms": {}, "vs_wwm": {}}
            for arm, by_seed in by_arm.items():
                kind = next(iter(by_seed.values()))[0]
                figure = ROW_KINDS[kind].figure
                entry["arms"][arm] = {"per_seed": {str(s): figure([d]) for s, (_, d) in sorted(by_seed.items())},
                                      "mean": figure([d for _, d in by_seed.values()]),
                                      "counts": _counts(kind, [d for _, d in by_seed.values()])}
                wwm = reference.get(tokens, {}).get(REFERENCE, {})
                common = [s for s in sorted(by_seed) if s in wwm and np.shape(by_seed[s][1]) == np.shape(wwm[s][1])]
                if arm != REFERENCE and tokens and common:
                    entry["vs_wwm"][arm] = ROW_KINDS[kind].paired([by_seed[s][1] for s in common],
                                                                  [wwm[s][1] for s in common],
                                                                  study.bootstrap_samples, study.probe_seed)
            out.setdefault(row, {})[str(tokens)] = entry
    return out


def _counts(kind: str, seeds: list) -> list[float] | None:
    """The summed counts of a count row (one seed: what the figure is made of), else None."""
    if kind not in ("ratio", "gap_f1") or len(seeds) != 1:
        return None
    return [float(x) for x in np.asarray(seeds[0], dtype=float).sum(axis=0)]


def collect_curve(root: Path, study, seeds: list[int], points: list[int], plot: bool = True) -> dict:
    """Write ``curve.json`` and ``curve.md`` (and with ``plot`` ``curve.png``) from what ``root`` holds."""
    root = Path(root)
    # Seeds that run in processes of their own on this folder write one table: every seed found is in it.
    seeds = sorted(set(seeds) | {int(p.name[len("seed_"):]) for p in root.glob("*/seed_*")
                                 if p.is_dir() and p.name[len("seed_"):].isdigit() and p.parent.name in ARMS})
    table, trained, missing = read_curve(root, study, seeds, points)
    result = {"points": points, "seeds": seeds, "trained_tokens": {str(t): v for t, v in trained.items()},
              "rows": summarize_curve(table, study), "missing": missing, "study": dataclasses.asdict(study)}
    root.mkdir(parents=True, exist_ok=True)
    replace_file(root / "curve.json", json.dumps(result, indent=2), "the curve")
    write_curve_markdown(root / "curve.md", result)
    if plot:
        figure = plot_curve(result, root / "curve.png")
        result["plot"] = str(figure) if figure else None
    return result


def _tokens_of(result: dict, tokens: int) -> str:
    seen = result["trained_tokens"].get(str(tokens)) or []
    return f"{seen[0]:,}" if len(seen) == 1 else (f"{min(seen):,}–{max(seen):,}" if seen else "–")


def _figure(entry: dict | None) -> str:
    if entry is None:
        return "–"
    counts = entry.get("counts")
    if counts and len(counts) == 2:
        return f"{entry['mean']:.1f} ({counts[0]:,.0f}/{counts[1]:,.0f})"
    return f"{entry['mean']:.1f}"


def _difference(ci: dict | None) -> str:
    if ci is None:
        return "–"
    return f"{ci['difference']:+.1f} [{ci['ci_low']:+.1f}, {ci['ci_high']:+.1f}]"


def write_curve_markdown(path: Path, result: dict) -> Path:
    """The differences to WWM by point (one table), then every point's figures (a table each)."""
    arms = [a for a in ("corefbert", "mrm", "official_loss", "wwm")
            if any(a in e["arms"] for r in result["rows"].values() for e in r.values())]
    others = [a for a in arms if a != REFERENCE]
    points = result["points"]
    lines = ["# The ablation as a curve", "", _settings_line(result), "",
             "## Each arm − WWM (points; paired bootstrap 95% CI over the same examples)", "",
             "| probe | arm | " + " | ".join(f"{token_label(t)} ({_tokens_of(result, t)})" for t in points) + " |",
             "|---|---|" + "---|" * len(points)]
    for row, by_tokens in result["rows"].items():
        for arm in others:
            cells = [_difference(by_tokens.get(str(t), {}).get("vs_wwm", {}).get(arm)) for t in points]
            if any(c != "–" for c in cells):
                lines.append(f"| {row} | {ARM_LABELS.get(arm, arm)} | " + " | ".join(cells) + " |")
    for tokens in points:
        lines += ["", f"## {token_label(tokens)} tokens per arm (trained: {_tokens_of(result, tokens)})", "",
                  "| probe | start | " + " | ".join(ARM_LABELS.get(a, a) for a in arms) + " | "
                  + " | ".join(f"{a} − wwm [95% CI]" for a in others) + " |",
                  "|---" * (2 + len(arms) + len(others)) + "|"]
        for row, by_tokens in result["rows"].items():
            entry = by_tokens.get(str(tokens))
            if entry is None:
                continue
            start = by_tokens.get("0", {}).get("arms", {}).get(START)
            lines.append(f"| {row} | {_figure(start)} | " + " | ".join(_figure(entry["arms"].get(a)) for a in arms)
                         + " | " + " | ".join(_difference(entry["vs_wwm"].get(a)) for a in others) + " |")
    lines += ["", f"Percent; counts (correct/total) where one seed; seeds {', '.join(map(str, result['seeds']))}. "
              f"A difference is the arm's figure minus WWM's on the same examples (the copy head's rows: minus WWM's "
              f"masked-LM scoring of the same file); its interval redraws the examples "
              f"({result['study']['bootstrap_samples']} samples), every seed of a drawn example kept."]
    if result["missing"]:
        lines += ["", f"Missing ({len(result['missing'])}): " + "; ".join(result["missing"][:30])]
    replace_file(path, "\n".join(lines) + "\n", "the curve table")
    return path


def _settings_line(result: dict) -> str:
    study = result["study"]
    line = (f"Points {', '.join(token_label(t) for t in result['points'])} of non-padding training tokens per arm "
            f"(beyond the start); the arms warm up over {study['curve_warmup_steps']} steps, then keep their "
            "learning rate (a schedule that does not depend on the budget)")
    if study.get("base_mlm_steps"):
        line += (f"; every arm starts from the same base (the backbone + {study['base_mlm_steps']} steps of "
                 "whole-word MLM), probed as 'start'")
    return line + f"; fine-tuning probes at: {study['curve_slow_probes']}."


def plot_curve(result: dict, out_path: Path) -> Path | None:
    """One panel per probe: each arm's difference to WWM (points) with its 95% interval against the tokens the
    point had trained (log axis); the copy head's zero-shot scoring is drawn in the panel of its file."""
    panels: dict[str, list] = {}
    for row, by_tokens in result["rows"].items():
        for arm in ("corefbert", "mrm", "official_loss"):
            series = [(int(t), e["vs_wwm"][arm]) for t, e in by_tokens.items() if arm in e.get("vs_wwm", {})]
            if series:
                label = ARM_LABELS.get(arm, arm) + (", copy head (vs WWM's MLM)" if row.startswith(COPY_PREFIX) else "")
                panels.setdefault(reference_row(row), []).append((label, arm, sorted(series)))
    if not panels:
        return None
    plt = pyplot("the curve plot")
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    colours = {"corefbert": "C0", "mrm": "C1", "official_loss": "C2"}
    for ax, (row, lines) in zip(axes.flat, panels.items()):
        for number, (label, arm, series) in enumerate(lines):
            x = np.array([_plotted_tokens(result, t) for t, _ in series], dtype=float) * (1 + 0.04 * number)
            y = np.array([ci["difference"] for _, ci in series])
            low = y - np.array([ci["ci_low"] for _, ci in series])
            high = np.array([ci["ci_high"] for _, ci in series]) - y
            ax.errorbar(x, y, yerr=[low, high], marker="o", ms=4, capsize=3, label=label, color=colours.get(arm),
                        linestyle="--" if "copy head" in label else "-")
        ax.axhline(0, color="0.4", linewidth=0.8)
        ax.set_xscale("log")
        ax.set(title=row, xlabel="training tokens per arm (non-padding)", ylabel="arm − WWM (points)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("Each arm − WWM, paired 95% bootstrap interval", fontsize=11)
    fig.tight_layout()
    return save_figure(fig, out_path, "the curve plot", dpi=100)


def _plotted_tokens(result: dict, tokens: int) -> float:
    seen = result["trained_tokens"].get(str(tokens)) or []
    return float(np.mean(seen)) if seen else float(tokens)
