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
from corefbert.ablation.curve import START, point_dir, row_kind, saved_point, token_label
from corefbert.ablation.probes import HELDOUT_ROWS
from corefbert.ablation.report import ARM_LABELS
from corefbert.ablation.study import ARMS, run_dir
from corefbert.pretraining.plotting import pyplot, save_figure
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import read_json

#: The copy head's zero-shot rows are compared with the other arms' masked-LM scoring of the same problems, and
#: with the same arm's copy scoring under an untrained V (the control).
COPY_PREFIX, MLM_PREFIX = f"{curve.COPY_ROW}: ", f"{curve.MLM_ROW}: "
UNTRAINED_PREFIX = f"{curve.UNTRAINED_COPY_ROW}: "
#: The arms every other arm is compared with: table 7's WWM, and MRM (the copy loss's own question).
REFERENCES = ("wwm", "mrm")


def reference_row(row: str) -> str:
    """The row of another arm an arm's row is paired with (the same problems): itself, or for a copy head's scoring
    the masked LM's scoring of the same problems and candidates."""
    if row.startswith(COPY_PREFIX):
        return MLM_PREFIX + row[len(COPY_PREFIX):]
    return HELDOUT_ROWS["same_mlm"] if row == HELDOUT_ROWS["same_copy"] else row


def control_row(row: str) -> str | None:
    """The same arm's row a trained copy head is compared with: the same scoring with V untrained (None: no
    control)."""
    if row.startswith(COPY_PREFIX):
        return UNTRAINED_PREFIX + row[len(COPY_PREFIX):]
    return HELDOUT_ROWS["same_copy_untrained"] if row == HELDOUT_ROWS["same_copy"] else None


def minimum_detectable(ci: dict) -> float | None:
    """The smallest true difference a paired test with this interval detects with 80% power at a two-sided 5%
    level: (1.96 + 0.84) standard errors, the standard error read off the 95% interval (its width / 3.92)."""
    if ci.get("ci_low") is None or ci.get("ci_high") is None:
        return None
    return 2.8 * (ci["ci_high"] - ci["ci_low"]) / 3.92


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
                    if name not in names and tokens and not name.startswith(("zeroshot_copy_", "finetune_", "quoref",
                                                                                  "coref_e2e"))]
        for path in found:
            if path.stem not in rows_of:
                continue  # a probe this command does not ask for (another file, a dropped probe)
            results = read_json(str(path))["results"]
            for row, value in rows_of[path.stem](results).items():
                table.setdefault(row, {}).setdefault(tokens, {}).setdefault(arm, {})[seed] = value
    return table, {t: sorted(v - {None}) for t, v in trained.items()}, missing


def row_order(row: str) -> tuple:
    """The tables' order: the held-out parts (:data:`HELDOUT_ROWS`' order), each zero-shot file's rows (masked LM,
    copy head, copy head with V untrained), the frozen probe (by subset, then layer), the fine-tuning probes,
    QUOREF, then any other probe's rows."""
    rows = list(HELDOUT_ROWS.values())
    if row in rows:
        return 0, rows.index(row), 0, ""
    for scorer, prefix in enumerate((MLM_PREFIX, COPY_PREFIX, UNTRAINED_PREFIX)):
        if row.startswith(prefix):
            return 1, 0, scorer, row[len(prefix):]
    if row.startswith("frozen coref probe, layer "):
        layer, rest = row[len("frozen coref probe, layer "):].split(":", 1)
        return 2, int("gain" in rest), 0, f"{rest}{int(layer):03d}"
    family = next((n for n, p in enumerate(("eq. 5", "LitBank", "QUOREF")) if row.startswith(p)), 3)
    return 3 + family, 0, 0, row


def summarize_curve(table: dict, study) -> dict:
    """Per row and point: each arm's figure per seed and its mean over seeds; every arm's difference to WWM and
    to MRM (``vs_wwm``, ``vs_mrm``: paired bootstrap over the same examples, seeds paired; a copy head's row against
    the other arm's masked-LM row) and, for a trained copy head, to its own untrained V (``vs_control``); each
    difference with its per-seed values and its minimum detectable effect (``mde``)."""
    out = {}
    for row, by_tokens in sorted(table.items(), key=lambda item: row_order(item[0])):
        reference, control = table.get(reference_row(row), {}), table.get(control_row(row) or "", {})
        for tokens, by_arm in sorted(by_tokens.items()):
            entry = {"arms": {}, **{f"vs_{r}": {} for r in REFERENCES}, "vs_control": {}}
            for arm, by_seed in by_arm.items():
                kind = next(iter(by_seed.values()))[0]
                figure = row_kind(kind).figure
                entry["arms"][arm] = {"per_seed": {str(s): figure([d]) for s, (_, d) in sorted(by_seed.items())},
                                      "mean": figure([d for _, d in by_seed.values()]),
                                      "counts": _counts(kind, [d for _, d in by_seed.values()])}
                if not tokens:
                    continue
                # WWM − MRM would repeat MRM − WWM: WWM is compared with nothing.
                others = [(f"vs_{r}", reference.get(tokens, {}).get(r, {})) for r in REFERENCES
                          if r != arm and arm != "wwm"]
                others.append(("vs_control", control.get(tokens, {}).get(arm, {})))
                for key, against in others:
                    found = _paired(kind, by_seed, against, study)
                    if found is not None:
                        entry[key][arm] = found
            out.setdefault(row, {})[str(tokens)] = entry
    return out


def _paired(kind: str, by_seed: dict, against: dict, study) -> dict | None:
    """The paired difference of one arm's seeds against another's (or a control's) on the same examples."""
    common = [s for s in sorted(by_seed) if s in against and np.shape(by_seed[s][1]) == np.shape(against[s][1])]
    if not common:
        return None
    rows = row_kind(kind)
    found = rows.paired([by_seed[s][1] for s in common], [against[s][1] for s in common], study.bootstrap_samples,
                        study.probe_seed)
    if found is None:
        return None
    found["per_seed"] = {str(s): rows.figure([by_seed[s][1]]) - rows.figure([against[s][1]]) for s in common}
    found["mde"] = minimum_detectable(found)
    return found


def _counts(kind: str, seeds: list) -> list[float] | None:
    """The summed counts of a count row (one seed: what the figure is made of), else None."""
    if kind not in ("ratio", "gap_f1") or len(seeds) != 1:
        return None
    return [float(x) for x in np.asarray(seeds[0], dtype=float).sum(axis=0)]


def decision_rule(rows: dict, tokens: int) -> dict:
    """The rule at one point: for each outcome, CorefBERT − MRM with its interval and per-seed signs; the verdict
    ``supported`` (an outcome clear of 0 above it, every seed positive), ``contradicted`` (one clear below, every
    seed negative, none clear above) or ``no effect larger than`` the largest minimum detectable effect among the
    outcomes measured (``pending`` while none is)."""
    frozen = [row for row in rows if row.startswith("frozen coref probe, layer ") and row.endswith("(pronoun–name)")]
    start = {row: rows[row].get("0", {}).get("arms", {}).get("backbone", {}).get("mean") for row in frozen}
    best = max((row for row in frozen if start[row] is not None), key=lambda row: start[row], default=None)
    outcomes = {name: row for name, row in (
        ("fine-tuned GAP F1", next((r for r in rows if r.startswith("eq. 5 on gap") and r.endswith(" F1")), None)),
        ("LitBank end-to-end avg F1", curve.E2E_ROW if curve.E2E_ROW in rows else None),
        ("frozen AUC, pronoun–name, the start's best layer", best)) if row is not None}
    found, verdict = {}, "pending"
    for name, row in outcomes.items():
        ci = rows[row].get(str(tokens), {}).get("vs_mrm", {}).get("corefbert")
        if ci is None or ci.get("difference") is None:
            continue
        seeds = list((ci.get("per_seed") or {}).values())
        found[name] = {"row": row, **{k: ci.get(k) for k in ("difference", "ci_low", "ci_high", "mde")},
                       "per_seed": ci.get("per_seed"), "above": ci["ci_low"] > 0 and all(v > 0 for v in seeds),
                       "below": ci["ci_high"] < 0 and all(v < 0 for v in seeds)}
    if any(f["above"] for f in found.values()):
        verdict = "supported"
    elif any(f["below"] for f in found.values()):
        verdict = "contradicted"
    elif found:
        verdict = f"no effect larger than {max(f['mde'] or 0 for f in found.values()):.1f} points"
    return {"outcomes": found, "verdict": verdict, "complete": len(found) == 3}


def collect_curve(root: Path, study, seeds: list[int], points: list[int], plot: bool = True) -> dict:
    """Write ``curve.json`` and ``curve.md`` (and with ``plot`` ``curve.png``) from what ``root`` holds."""
    root = Path(root)
    # Seeds that run in processes of their own on this folder write one table: every seed found is in it.
    seeds = sorted(set(seeds) | {int(p.name[len("seed_"):]) for p in root.glob("*/seed_*")
                                 if p.is_dir() and p.name[len("seed_"):].isdigit() and p.parent.name in ARMS})
    table, trained, missing = read_curve(root, study, seeds, points)
    rows = summarize_curve(table, study)
    result = {"points": points, "seeds": seeds, "trained_tokens": {str(t): v for t, v in trained.items()},
              "rows": rows, "decision": {str(t): decision_rule(rows, t) for t in points}, "missing": missing,
              "study": dataclasses.asdict(study)}
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
    seeds = entry.get("per_seed") or {}
    return f"{entry['mean']:.1f}" + (" (" + " / ".join(f"{v:.1f}" for v in seeds.values()) + ")" if len(seeds) > 1
                                     else "")


def _difference(ci: dict | None) -> str:
    """``+1.2 [−0.3, +2.6]`` with the per-seed differences where there are several, and the minimum detectable
    effect beside an interval that holds 0."""
    if ci is None or ci.get("difference") is None:
        return "–"
    text = f"{ci['difference']:+.1f} [{ci['ci_low']:+.1f}, {ci['ci_high']:+.1f}]"
    seeds = ci.get("per_seed") or {}
    if len(seeds) > 1:
        text += " (" + ", ".join(f"{v:+.1f}" for v in seeds.values()) + ")"
    if ci["ci_low"] <= 0 <= ci["ci_high"] and ci.get("mde") is not None:
        text += f"; MDE {ci['mde']:.1f}"
    return text


def _decision_lines(result: dict) -> list[str]:
    """The decision rule's section: each point's outcomes (CorefBERT − MRM) and its verdict."""
    lines = ["## The decision rule: CorefBERT − MRM (docs/guides/ablation.md)", ""]
    for tokens in result["points"]:
        decision = result["decision"][str(tokens)]
        found = "; ".join(f"{name} {_difference(o)}" for name, o in decision["outcomes"].items()) or "none measured"
        lines.append(f"- {token_label(tokens)}: **{decision['verdict']}**"
                     f"{'' if decision['complete'] else ' (not every outcome measured yet)'}; {found}")
    return lines + [""]


#: The contrasts the tables show: (label, arm, the entry's key).
CONTRASTS = (("CorefBERT − MRM", "corefbert", "vs_mrm"), ("CorefBERT − WWM", "corefbert", "vs_wwm"),
             ("MRM − WWM", "mrm", "vs_wwm"), ("trained − untrained V", "corefbert", "vs_control"))


def write_curve_markdown(path: Path, result: dict) -> Path:
    """The contrasts by point (one table), then every point's figures (a table each)."""
    arms = [a for a in ("corefbert", "mrm", "official_loss", "wwm")
            if any(a in e["arms"] for r in result["rows"].values() for e in r.values())]
    points = result["points"]
    lines = ["# The ablation as a curve", "", _settings_line(result), "",
             *_decision_lines(result),
             "## The contrasts by point (paired bootstrap 95% CI over the same examples)", "",
             "| probe | contrast | " + " | ".join(f"{token_label(t)} ({_tokens_of(result, t)})" for t in points) + " |",
             "|---|---|" + "---|" * len(points)]
    for row, by_tokens in result["rows"].items():
        for label, arm, key in CONTRASTS:
            cells = [_difference(by_tokens.get(str(t), {}).get(key, {}).get(arm)) for t in points]
            if any(c != "–" for c in cells):
                lines.append(f"| {row} | {label} | " + " | ".join(cells) + " |")
    for tokens in points:
        lines += ["", f"## {token_label(tokens)} tokens per arm (trained: {_tokens_of(result, tokens)})", "",
                  "| probe | start | " + " | ".join(ARM_LABELS.get(a, a) for a in arms) + " | "
                  + " | ".join(label for label, _, _ in CONTRASTS) + " |",
                  "|---" * (2 + len(arms) + len(CONTRASTS)) + "|"]
        for row, by_tokens in result["rows"].items():
            entry = by_tokens.get(str(tokens))
            if entry is None:
                continue
            start = by_tokens.get("0", {}).get("arms", {}).get(START)
            lines.append(f"| {row} | {_figure(start)} | " + " | ".join(_figure(entry["arms"].get(a)) for a in arms)
                         + " | " + " | ".join(_difference(entry.get(key, {}).get(arm)) for _, arm, key in CONTRASTS)
                         + " |")
    lines += ["", f"Percent; counts (correct/total) where one seed, per-seed figures in brackets where several; seeds "
              f"{', '.join(map(str, result['seeds']))}. A difference is one arm's figure minus another's on the same "
              "examples (a copy head's rows: minus the other arm's masked-LM scoring of the same problems and "
              "candidates; trained − untrained V: the same checkpoint's copy scoring with V at 1/hidden); its "
              f"interval redraws the examples ({result['study']['bootstrap_samples']} samples), every seed of a "
              "drawn example kept; per-seed differences in brackets. MDE: the minimum detectable effect beside an "
              "interval that holds 0, the true difference this test detects with 80% power at a two-sided 5% level."]
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
