"""What a pretraining run reports: held-out evaluation, log.jsonl, the final checkpoint and its model card."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from corefbert.checkpointing import raise_if_stopping, remove_folder, replace_folder, writing
from corefbert.training import PreservedRng


@torch.no_grad()
def evaluate(model, dataloader, accelerator) -> dict[str, float]:
    """Held-out MLM loss/accuracy and MRP loss/accuracy, summed over all processes.

    The eval set is cut to a multiple of (batch size x processes) when several processes share it, so no
    sequence is counted twice; the MRP counts of the model are per batch, which ``gather_for_metrics``
    could not de-duplicate.
    """
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


def load_lines(final_dir: str | Path) -> list[str]:
    """Three lines of Python that load the checkpoint (printed by the demo at the end of a run)."""
    return [
        "from transformers import AutoModel, AutoTokenizer",
        f'tokenizer = AutoTokenizer.from_pretrained("{final_dir}")',
        f'model = AutoModel.from_pretrained("{final_dir}")',
    ]


def model_card(args, num_processes: int, precision: str, before: dict, after: dict) -> str:
    """The README.md of ``final/``: a ``huggingface_hub`` model card (base model, licence, pipeline tag,
    settings, held-out metrics before/after as ``model-index``); see :func:`corefbert.hub.pretraining_card`.
    It names no local absolute path, so the folder can be published as is (``--push_to_hub``)."""
    from corefbert.hub import pretraining_card

    return str(pretraining_card(args, before, after, num_processes, precision))


def final_save(accelerator, model, tokenizer, args, before: dict, after: dict) -> Path:
    """``save_pretrained`` model + tokenizer into ``output_dir/final``, with a model card and all_results.json.

    The weights come from ``accelerator.get_state_dict`` so ZeRO-3 / FSDP shards are gathered first (a
    plain ``save_pretrained`` of a ZeRO-3 model writes placeholder tensors).
    """
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
            card = model_card(args, accelerator.num_processes, str(accelerator.mixed_precision), before, after)
            (tmp / "README.md").write_text(card, encoding="utf-8")
            replace_folder(tmp, final_dir)
        results = {**{f"eval_{k}": v for k, v in after.items()}, **{f"init_{k}": v for k, v in before.items()}}
        (Path(args.output_dir) / "all_results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
        if args.plot:
            from corefbert.plotting import plot_curves

            plot_curves(Path(args.output_dir) / "log.jsonl", Path(args.output_dir) / "curves.png")
    accelerator.wait_for_everyone()
    return final_dir


def print_summary(accelerator, args, before: dict, after: dict, final_dir: Path) -> None:
    """What the demo promises to print: MRP accuracy before/after, the checkpoint, how to load it."""
    lines = [
        "",
        f"held-out MRP accuracy: {before['mrp_accuracy']:.3f} before -> {after['mrp_accuracy']:.3f} after "
        f"({after.get('mrp_mentions', 0)} masked mentions); MLM accuracy {before['mlm_accuracy']:.3f} -> "
        f"{after['mlm_accuracy']:.3f}",
        f"checkpoint: {final_dir}",
        "load it with:",
        *(f"    {line}" for line in load_lines(final_dir)),
    ]
    accelerator.print("\n".join(lines))
