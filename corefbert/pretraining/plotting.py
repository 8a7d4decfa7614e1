"""Accuracy curves of a pretraining run, drawn from its ``log.jsonl`` (needs the ``plot`` extra).

    python -m corefbert.pretraining.plotting runs/demo/log.jsonl -o runs/demo/curves.png
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from corefbert.argparser import parse_args
from corefbert.errors import CorefBertError, cli_entry
from corefbert.text.durable import output_path
from corefbert.training.outputs.runlog import read_log


def pyplot(what: str):
    """``matplotlib.pyplot`` on the file-only Agg backend, or one line: ``what`` needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CorefBertError(f"{what} needs matplotlib: pip install 'corefbert[plot]'") from None
    return plt


def save_figure(fig, out_path: str | os.PathLike, what: str, dpi: int) -> Path:
    """Write ``fig`` to ``out_path`` (format from its suffix, png by default) durably, then close it."""
    import matplotlib.pyplot as plt

    out_path = Path(out_path)
    check_image_name(out_path, fig)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with output_path(out_path, what) as fresh:
        fig.savefig(fresh, dpi=dpi, format=out_path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return out_path


def check_image_name(out_path: str | os.PathLike, fig=None) -> None:
    """One line when ``out_path``'s suffix names no image format matplotlib writes (no suffix: png), before
    ``savefig`` would raise; ``fig``: the figure whose canvas is asked."""
    suffix = Path(out_path).suffix.lstrip(".").lower()
    if not suffix:
        return
    plt = pyplot("plotting")
    probe = plt.figure() if fig is None else fig
    formats = probe.canvas.get_supported_filetypes()
    if fig is None:
        plt.close(probe)
    if suffix not in formats:
        raise CorefBertError(f"'.{suffix}' is not an image format matplotlib writes ({', '.join(sorted(formats))}); "
                             "name the output .png (or .pdf, .svg)", path=out_path)


def plot_curves(log_path: str | os.PathLike, out_path: str | os.PathLike, title: str | None = None) -> Path:
    """Plot held-out MRP and MLM accuracy (left) and losses (right) against the optimizer step."""
    plt = pyplot("plotting")
    evals = [r for r in read_log(log_path) if r.get("split") == "eval"]
    if not evals:
        raise CorefBertError("no evaluation records to plot; run with --eval_steps", path=log_path)
    steps = [r["step"] for r in evals]
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label in (("mrp_accuracy", "MRP accuracy"), ("mlm_accuracy", "MLM accuracy")):
        acc_ax.plot(steps, [r.get(key, float("nan")) for r in evals], marker="o", markersize=3, label=label)
    for key, label in (("mrp_loss", "MRP loss"), ("mlm_loss", "MLM loss")):
        loss_ax.plot(steps, [r.get(key, float("nan")) for r in evals], marker="o", markersize=3, label=label)
    acc_ax.set(xlabel="optimizer step", ylabel="held-out accuracy", ylim=(0, 1))
    loss_ax.set(xlabel="optimizer step", ylabel="held-out loss")
    for ax in (acc_ax, loss_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, out_path, "the plot", dpi=120)


@dataclass
class PlotArguments:
    """Plot MRP/MLM accuracy curves from a pretraining log.jsonl"""

    log: str = field(metadata={"help": "output_dir/log.jsonl of a pretraining run (also the first word)"})
    output: str | None = field(default=None, metadata={
        "aliases": ["-o"], "help": "image file (default: curves.png beside the log)"})
    title: str | None = field(default=None, metadata={"help": "a title above the curves"})


@cli_entry
def main(argv: list[str] | None = None) -> None:
    (args,) = parse_args([PlotArguments], argv, prog=None, positionals=("log",),
                         usage="%(prog)s [-h] LOG [-o OUTPUT] [--title TITLE] [--config FILE]",
                         description=PlotArguments.__doc__)
    out = args.output or str(Path(args.log).with_name("curves.png"))
    check_image_name(out)  # before the log is read
    print(plot_curves(args.log, out, title=args.title))


if __name__ == "__main__":
    main()
