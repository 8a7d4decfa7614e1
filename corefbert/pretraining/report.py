"""What a pretraining run reports: held-out evaluation, log.jsonl, the final checkpoint and its model card."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from huggingface_hub import ModelCard, ModelCardData

from corefbert.text.durable import remove_folder, replace_file, replace_folder, writing
from corefbert.training.checkpoints.signals import raise_if_stopping
from corefbert.training.loop.rng import PreservedRng
from corefbert.training.outputs.cards import (
    CARD_SETTINGS,
    LICENSE,
    PAPER,
    Usage,
    eval_results,
    made_with,
    model_reference,
    pretrained_finetune_line,
    render_card,
    repo_name,
    settings_table,
    usage_section,
)
from corefbert.training.outputs.runlog import log_path, read_log


@torch.no_grad()
def evaluate(model, dataloader, accelerator) -> dict[str, float]:
    """Held-out MLM loss/accuracy and MRP loss/accuracy, summed over all processes. The run cuts the eval
    set to whole rounds of (batch x processes): ``gather_for_metrics`` can't de-duplicate per-batch counts."""
    model.eval()
    # mlm_loss_sum, mlm_correct, mlm_total, mrp_loss_sum, mrp_correct, mrp_total
    totals = torch.zeros(6, dtype=torch.float64, device=accelerator.device)
    for batch in PreservedRng(dataloader):
        raise_if_stopping()  # a SIGTERM in the training loop's evaluation ends it here, within one batch
        out = model(**batch, masked_logits_only=True)
        labels = batch["labels"]
        targets = labels != -100  # [batch, seq]
        n_mlm = targets.sum()
        predicted = out.logits.argmax(dim=-1)  # [masked], in labels != -100 order
        totals[0] += out.mlm_loss.double() * n_mlm
        totals[1] += (predicted == labels[targets]).sum()
        totals[2] += n_mlm
        if out.mrp_total is not None:
            totals[3] += out.mrp_loss.double() * out.mrp_total
            totals[4] += out.mrp_correct
            totals[5] += out.mrp_total
    totals = accelerator.reduce(totals, reduction="sum").tolist()
    model.train()
    return {
        "mlm_loss": totals[0] / max(totals[2], 1),
        "mlm_accuracy": totals[1] / max(totals[2], 1),
        "mrp_loss": totals[3] / max(totals[5], 1),
        "mrp_accuracy": totals[4] / max(totals[5], 1),
        "mrp_mentions": int(totals[5]),
    }


def final_save(accelerator, model, tokenizer, args, before: dict, after: dict) -> Path:
    """``save_pretrained`` model + tokenizer into ``output_dir/final``, with a model card and
    all_results.json; weights from ``accelerator.get_state_dict``, so ZeRO-3 / FSDP shards are gathered."""
    final_dir = Path(args.output_dir) / "final"
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)  # every process must take part in the gather
    unwrapped = accelerator.unwrap_model(model)
    if accelerator.is_main_process:
        # Written beside and renamed: a kill mid-save leaves the checkpoints and no half-written final/.
        tmp = final_dir.with_name("final.tmp")
        remove_folder(tmp)
        with writing(tmp, "the final model", "the checkpoints are intact"):
            unwrapped.save_pretrained(tmp, state_dict=state_dict, save_function=accelerator.save)
            tokenizer.save_pretrained(tmp)
            card = pretraining_card(args, before, after, accelerator.num_processes,
                                    str(accelerator.mixed_precision))
            replace_file(tmp / "README.md", str(card))
            replace_folder(tmp, final_dir)
        results = {**{f"eval_{k}": v for k, v in after.items()}, **{f"init_{k}": v for k, v in before.items()}}
        replace_file(Path(args.output_dir) / "all_results.json", json.dumps(results, indent=2), "the results")
        if args.plot:
            from corefbert.pretraining.plotting import plot_curves

            plot_curves(log_path(args.output_dir), Path(args.output_dir) / "curves.png")
    accelerator.wait_for_everyone()
    return final_dir


def wilson_interval(correct: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``correct / total``; (0, 1) when ``total`` is 0. At the
    demo's 45 mentions it is about +-0.12: the before/after difference there is a smoke test, not a result."""
    if total <= 0:
        return 0.0, 1.0
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def mrp_counts(metrics: dict) -> str:
    """``8 of 45 (0.178, 95% CI 0.09-0.31)``: the held-out MRP result as counts with its interval."""
    total = int(metrics.get("mrp_mentions", 0))
    correct = round(metrics["mrp_accuracy"] * total)  # accuracy is correct / total, so this is exact
    low, high = wilson_interval(correct, total)
    return f"{correct} of {total} ({metrics['mrp_accuracy']:.3f}, 95% CI {low:.2f}-{high:.2f})"


def run_folder(output_dir: str) -> str:
    """``--output_dir`` as the card's snippets name it: relative to where the run was started (the demo's
    ``runs/corefbert_demo``), else by its last component, since no card holds a local absolute path."""
    if not os.path.isabs(output_dir):
        return Path(os.path.normpath(output_dir)).as_posix()
    inside = os.path.relpath(os.path.abspath(output_dir), os.getcwd())
    return Path(inside).as_posix() if not inside.startswith(os.pardir) else Path(output_dir).name


def pretraining_card(args, before: dict, after: dict, num_processes: int, precision: str) -> ModelCard:
    """The README.md of a pretraining ``final/``: MLM + MRP from ``--model_name_or_path``, the settings, the
    held-out MLM/MRP metrics before and after (``model-index``: the after-metrics), how to load. It names no
    local absolute path, so the folder can be published as is (``--push_to_hub``)."""
    base, base_text = model_reference(args.model_name_or_path)
    name = repo_name(args)
    datasets = [args.dataset_name] if getattr(args, "dataset_name", None) else None
    results = eval_results(dict(after), "fill-mask", "text",
                           "held-out split of the pretraining corpus", prefix="")
    data = ModelCardData(model_name=name, base_model=base, datasets=datasets, license=LICENSE,
                         pipeline_tag="fill-mask", library_name="transformers",
                         tags=["corefbert", "coreference", "mention-reference-prediction", PAPER],
                         eval_results=results or None)
    rows = "\n".join(f"| {label} | {before[key]:.4f} | {after[key]:.4f} |" for key, label in (
        ("mrp_accuracy", "MRP accuracy"), ("mrp_loss", "MRP loss"), ("mlm_accuracy", "MLM accuracy"),
        ("mlm_loss", "MLM loss")))
    batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * num_processes
    names = CARD_SETTINGS + ("mlm_probability", "mrp_ratio", "mrp_loss_weight", "mrp_official_loss",
                             "mrp_copy_candidates")
    # The copy head learns only from the MRP loss: without it V stays at its initial value.
    copy_trained = args.mrp_loss_weight > 0 and args.mrp_ratio > 0
    # Published under a known name: the download's folder; else the run's own folder, as the card names it.
    folder = args.hub_model_id.rsplit("/", 1)[-1] if args.hub_model_id else f"{run_folder(args.output_dir)}/final"
    usage = Usage(folder, args.hub_model_id, finetune=pretrained_finetune_line(folder),
                  spacy_config={"scorer": "copy"} if copy_trained else None)
    copy_note = "" if copy_trained else (
        "\n\nThis run trained without MRP (`mrp_loss_weight` or `mrp_ratio` 0), so its copy head is untrained: "
        "it is not for zero-shot pronoun resolution.")
    body = f"""# CorefBERT checkpoint ({name})

{made_with()}

Pretrained from {base_text}: masked-language modelling plus Mention Reference Prediction, a copy-based
objective over repeated nouns. An ordinary checkpoint of the backbone type: `AutoModel`, `AutoModelForMaskedLM`,
`AutoModelForQuestionAnswering` and `AutoModelForSequenceClassification` load it; the MRP head
(`mrp.copy_vector`) travels with it. With the MRP head: `import corefbert` first, then
`AutoModelForPreTraining` gives the CorefBERT pretraining class (without that import, transformers returns
its stock class for the family, without the copy head: for BERT with a random next-sentence head).{copy_note}

## Settings

Effective batch: {batch} sequences ({num_processes} process(es)); precision used: {precision}.

{settings_table(args, names)}

## Held-out metrics

Masked positions are fixed across evaluations, so before and after are comparable
({after.get('mrp_mentions', 0)} MRP-masked mentions). MRP-masked mentions copied right: {mrp_counts(before)} before,
{mrp_counts(after)} after (Wilson intervals). This is the model after the last training step
(step {args.max_steps}), not the best evaluation; `log.jsonl` of the run holds every evaluation.

| metric | before | after |
|---|---|---|
{rows}

{usage_section(usage)}
"""
    return render_card(data, body)


def best_evaluation(log_path: Path) -> dict | None:
    """The held-out evaluation record of ``log.jsonl`` with the highest MRP accuracy (None without one)."""
    if not log_path.is_file():
        return None
    evaluations = [r for r in read_log(log_path) if r.get("split") == "eval" and "mrp_accuracy" in r]
    return max(evaluations, key=lambda r: (r["mrp_accuracy"], -r.get("step", 0)), default=None)


def print_summary(accelerator, args, before: dict, after: dict, final_dir: Path) -> None:
    """What the demo promises to print: MRP before/after as counts with intervals, the checkpoint (the last
    step's, and where the best evaluation was), how to load it."""
    best = best_evaluation(log_path(args.output_dir))
    last = f"final/ holds the model after the last step (step {args.max_steps})"
    if best is not None and best["mrp_accuracy"] > after["mrp_accuracy"]:
        last += f", not the best evaluation (step {best['step']} had {mrp_counts(best)})"
    else:
        last += ", the best held-out evaluation too"
    lines = [
        "",
        f"held-out MRP: {mrp_counts(before)} masked mentions copied right before -> {mrp_counts(after)} after; "
        f"MLM accuracy {before['mlm_accuracy']:.3f} -> {after['mlm_accuracy']:.3f}",
        *(["(so few mentions give wide intervals: a smoke test that the pipeline trains, not a measurement)"]
          if after.get("mrp_mentions", 0) < 1000 else []),
        last,
        f"checkpoint: {final_dir}",
        "load it with:",
        "    from transformers import AutoModel, AutoTokenizer",
        f'    tokenizer = AutoTokenizer.from_pretrained("{final_dir}")',
        f'    model = AutoModel.from_pretrained("{final_dir}")',
        "next:",
        f"    corefbert plot {log_path(args.output_dir)} -o {Path(args.output_dir) / 'curves.png'}   # the training curves",
        f"    corefbert finetune coref --model_name_or_path {final_dir} --zero_shot copy --validation_file FILE "
        "--do_eval --output_dir out/zero_shot   # GAP/DPR/WSC/... with the copy head",
        "    corefbert finetune --help   # QUOREF, MRQA, DocRED, FEVER, GLUE; every guide: docs/README.md",
    ]
    accelerator.print("\n".join(lines))
