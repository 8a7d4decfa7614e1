"""The Hub round trip: model cards with metadata, a staged repository, and the upload (``--push_to_hub``).

At the end of a run (pretraining: ``final/``; fine-tuning: ``best/``, else ``last/``) the main process copies
the model folder to ``output_dir/hub/``, writes its ``README.md`` (a ``huggingface_hub.ModelCard``: base
model, datasets, licence, pipeline tag, hyper-parameters and a ``model-index`` of the run's evaluation
results) and ``all_results.json``, then uploads that folder with ``HfApi.upload_folder``. The staged folder
is exactly what is uploaded, so it can be checked (or uploaded later by hand) without network:
``hf upload USER/NAME output_dir/hub``. Cards never hold a local absolute path (the base model is named by
its Hub id, or by its folder's name when local), and the token is never written anywhere.

Offline (``HF_HUB_OFFLINE=1``) ``--push_to_hub`` is refused before training starts
(:func:`check_hub_arguments`), not after hours of it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData

from corefbert.arguments import SECRET_ARGUMENTS, redact
from corefbert.errors import CorefBertError
from corefbert.text.durable import remove_folder

HUB_DIR = "hub"
LICENSE = "apache-2.0"  # the toolkit's and the released CorefBERT weights' licence
PAPER = "arxiv:2004.06870"
SECRET_FIELDS = SECRET_ARGUMENTS  # never in a file, a tracker, a card or a message

#: task name -> (Hub dataset id, readable name, model-index task type, pipeline tag, the Auto class that loads
#: the saved model with its head); GLUE tasks by their config name.
TASK_CARDS = {
    "quoref": ("allenai/quoref", "QUOREF", "question-answering", "question-answering", "AutoModel"),
    "mrqa": ("mrqa-workshop/mrqa", "MRQA", "question-answering", "question-answering",
             "AutoModelForQuestionAnswering"),
    "docred": ("thunlp/docred", "DocRED", "relation-extraction", None, "AutoModel"),
    "fever": ("fever/fever", "FEVER", "text-classification", "text-classification", "AutoModel"),
    "coref": ("gap", "GAP / DPR / WSC (pronoun resolution)", "coreference-resolution", None, "AutoModel"),
}
GLUE_CARD = ("nyu-mll/glue", "GLUE", "text-classification", "text-classification", "AutoModelForSequenceClassification")
#: Card hyper-parameters of every run (pretraining adds its masking and MRP settings).
CARD_SETTINGS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
                 "num_train_epochs", "weight_decay", "warmup_ratio", "warmup_steps", "lr_scheduler_type",
                 "max_grad_norm", "mixed_precision", "seed")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (read now, so a test or a shell can change it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def check_hub_arguments(args) -> None:
    """One line before any training when ``--push_to_hub`` cannot work: offline mode, a malformed repo id,
    or Hub flags without ``--push_to_hub`` (which would otherwise be ignored silently)."""
    if not getattr(args, "push_to_hub", False):
        given = [f"--{name}" for name in ("hub_model_id", "hub_token") if getattr(args, name, None)]
        if getattr(args, "hub_private_repo", False):
            given.append("--hub_private_repo")
        if given:
            raise CorefBertError(f"{', '.join(given)} given without --push_to_hub; add --push_to_hub or drop them")
        return
    if hub_offline():
        raise CorefBertError("--push_to_hub with HF_HUB_OFFLINE=1: the upload needs the network; unset "
                             "HF_HUB_OFFLINE, or drop --push_to_hub and upload output_dir later")
    if hasattr(args, "do_train") and not args.do_train:
        raise CorefBertError("--push_to_hub uploads the model a fine-tuning run trains: add --do_train, or upload "
                             "an existing folder with `hf upload USER/NAME FOLDER`")
    repo = args.hub_model_id
    if repo is not None and (repo.count("/") > 1 or not all(repo.split("/")) or any(c.isspace() for c in repo)):
        raise CorefBertError(f"--hub_model_id {redact(repr(repo))} is not a Hub repository name (user/name or name)")


def public_settings(args) -> dict:
    """``asdict(args)`` without secrets (``hub_token``): what may be written to files, trackers and cards."""
    return {k: ("<redacted>" if k in SECRET_FIELDS and v else v) for k, v in asdict(args).items()}


def model_reference(path: str | None) -> tuple[str | None, str]:
    """``(Hub id or None, name for the card)`` of ``--model_name_or_path``: a Hub id is kept; a local folder
    is named by its last component(s) only (``runs/base/final`` -> ``base/final``), never its absolute path."""
    if not path:
        return None, "a model trained from scratch"
    if os.path.exists(path):
        parts = Path(os.path.abspath(path)).parts
        tail = "/".join(parts[-2:]) if parts[-1] in ("final", "best", "last") else parts[-1]
        return None, f"the local checkpoint `{tail}`"
    return path, f"[{path}](https://huggingface.co/{path})"


def repo_name(args) -> str:
    """The repository to push to: ``--hub_model_id``, else the output folder's name (the token's account)."""
    return args.hub_model_id or Path(os.path.abspath(args.output_dir)).name


def eval_results(results: dict, task_type: str, dataset_type: str, dataset_name: str, split: str = "validation",
                 dataset_config: str | None = None, prefix: str = "eval_") -> list[EvalResult]:
    """One ``EvalResult`` per finite numeric ``<prefix>metric`` of ``results`` (counts like ``*_samples`` and
    losses of the loop are left out: they are not the benchmark's metrics)."""
    found = []
    for key, value in sorted(results.items()):
        if not key.startswith(prefix) or key.endswith(("_samples", "_runtime", "_mentions")):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        found.append(EvalResult(task_type=task_type, dataset_type=dataset_type, dataset_name=dataset_name,
                                dataset_config=dataset_config, dataset_split=split,
                                metric_type=key[len(prefix):], metric_value=round(float(value), 4)))
    return found


def settings_table(args, names) -> str:
    rows = [f"| `{name}` | `{getattr(args, name)}` |" for name in names if hasattr(args, name)]
    return "| setting | value |\n|---|---|\n" + "\n".join(rows)


def results_table(results: dict) -> str:
    rows = [f"| `{k}` | {v:.4f} |" if isinstance(v, float) else f"| `{k}` | {v} |" for k, v in sorted(results.items())
            if isinstance(v, int | float) and not isinstance(v, bool)]
    return "| metric | value |\n|---|---|\n" + "\n".join(rows) if rows else "(no evaluation was run)"


def render_card(data: ModelCardData, body: str) -> ModelCard:
    """The card text: YAML metadata, then the Markdown ``body``."""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")


def load_snippet(where: str, auto_class: str = "AutoModel") -> str:
    return (f"```python\nfrom transformers import {auto_class}, AutoTokenizer\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{where}")\n'
            f'model = {auto_class}.from_pretrained("{where}")\n```')


def conversion_card(record: dict) -> ModelCard:
    """The card of a folder ``corefbert.pretraining.convert`` wrote from a released CorefBERT checkpoint (``record``: its
    ``conversion.json``): what it is, what the conversion kept and what is missing."""
    data = ModelCardData(license=LICENSE, pipeline_tag="fill-mask", library_name="transformers", language="en",
                         tags=["corefbert", "coreference", "mention-reference-prediction", PAPER])
    notes = "\n".join(f"- {note}" for note in record.get("notes", []))
    body = f"""# {record['source']} (CorefBERT, converted)

The released CorefBERT checkpoint `{record['source']}` (Ye et al., EMNLP 2020; <https://github.com/thunlp/CorefBERT>),
converted by `python -m corefbert.pretraining.convert` into an ordinary `{record['model_type']}` checkpoint (safetensors):
`AutoModel`, `AutoModelForMaskedLM` and the other `AutoModelFor*` classes load it; the copy vector of the
Mention Reference Prediction head is `mrp.copy_vector` (trained: {str(record['copy_head_trained']).lower()}).

{notes}

{load_snippet("path/to/this/folder", "AutoModelForMaskedLM")}
"""
    return render_card(data, body)


def task_card_facts(task) -> tuple[tuple, str | None]:
    """``((dataset id, dataset name, task type, pipeline tag, Auto class), GLUE config or None)`` of a task."""
    glue_task = getattr(getattr(task, "task_args", None), "task_name", None)
    if glue_task:
        return GLUE_CARD, str(glue_task).lower()
    return TASK_CARDS.get(task.name, (task.name, task.name, task.name, None, "AutoModel")), None


def finetuning_card(task, args, results: dict, model_dir_name: str) -> ModelCard:
    """The card of a fine-tuned model: base checkpoint, benchmark, hyper-parameters, ``model-index`` from the
    run's ``eval_*`` results (the dev split the run evaluated), and how to load it."""
    base, base_text = model_reference(args.model_name_or_path)
    (dataset, dataset_name, task_type, pipeline, auto_class), config = task_card_facts(task)
    name = repo_name(args)
    data = ModelCardData(model_name=name, base_model=base, datasets=[dataset], license=LICENSE,
                         pipeline_tag=pipeline, library_name="transformers",
                         tags=["corefbert", task.name, PAPER],
                         eval_results=eval_results(results, task_type, dataset, dataset_name,
                                                   dataset_config=config) or None)
    where = args.hub_model_id or name
    body = f"""# {name}: {dataset_name}{f' ({config})' if config else ''} fine-tuned from {base_text}

Fine-tuned with corefbert's `{task.name}` task (CorefBERT, Ye et al., EMNLP 2020). This repository holds the
`{model_dir_name}/` model of the run: an ordinary Hugging Face checkpoint of its encoder (a standard head saved as
its transformers class, other task heads in a sidecar file), so `{auto_class}` loads it; corefbert's
`{task.name}` task loads the whole model.

## Results (dev split)

{results_table(results)}

## Training settings

{settings_table(args, CARD_SETTINGS)}

## How to load

{load_snippet(where, auto_class)}
"""
    return render_card(data, body)


def stage_repository(model_dir: Path, staging_dir: Path, card: ModelCard | None, results: dict | None) -> Path:
    """Copy ``model_dir`` to ``staging_dir`` (replacing an earlier staging), add the card as ``README.md`` (or
    keep the folder's own when ``card`` is None) and ``all_results.json``: the repository as uploaded."""
    remove_folder(staging_dir)
    shutil.copytree(model_dir, staging_dir, symlinks=False)
    if card is not None:
        card.save(staging_dir / "README.md")
    if results is not None:
        (staging_dir / "all_results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return staging_dir


def upload_staged(staging_dir: Path, args) -> str:
    """Create the repository if needed (``--hub_private_repo``) and upload ``staging_dir``; returns the repo
    id. A failure is one line naming the staged folder and the command that uploads it later."""
    name = repo_name(args)
    api = HfApi(token=args.hub_token)  # None: $HF_TOKEN or the stored login
    try:
        repo_id = api.create_repo(name, private=args.hub_private_repo, exist_ok=True, repo_type="model").repo_id
        api.upload_folder(repo_id=repo_id, folder_path=str(staging_dir), repo_type="model",
                          commit_message=f"corefbert: upload {Path(os.path.abspath(args.output_dir)).name}")
    except Exception as err:  # noqa: BLE001 - network, auth and quota errors all leave the run's files intact
        # The token never reaches an error line, even where a library error quotes its request.
        reason = redact(" ".join(str(err).split()), [args.hub_token or ""])[:200]
        raise CorefBertError(f"upload to the Hub failed ({type(err).__name__}: {reason}); the run's outputs are "
                             f"intact and the repository is staged: upload it with `hf upload {name} {staging_dir}`",
                             path=staging_dir) from None
    return repo_id


def _main_process(accelerator) -> bool:
    return accelerator is None or accelerator.is_main_process


def push_finetuned(task, args, results: dict, accelerator=None) -> Path | None:
    """``--push_to_hub`` at the end of a fine-tuning run (main process only): stage ``best/`` (else
    ``last/``) with its card and ``all_results.json`` in ``output_dir/hub`` and upload it. Returns the staged
    folder, or None when not asked."""
    if not getattr(args, "push_to_hub", False) or not _main_process(accelerator):
        return None
    out = Path(args.output_dir)
    candidates = ([out / "best"] if args.load_best_model_at_end else []) + [out / "last"]
    model_dir = next((d for d in candidates if (d / "config.json").is_file() or any(d.glob("*.safetensors"))), None)
    if model_dir is None:
        raise CorefBertError("--push_to_hub: no trained model to upload (neither best/ nor last/ holds one)", path=out)
    card = finetuning_card(task, args, results, model_dir.name)
    staged = stage_repository(model_dir, out / HUB_DIR, card, results)
    repo_id = upload_staged(staged, args)
    print(f"pushed {model_dir.name}/ with its model card to https://huggingface.co/{repo_id}")
    return staged


def push_pretrained(args, final_dir: Path | None, accelerator=None) -> Path | None:
    """``--push_to_hub`` at the end of pretraining (main process only): stage ``final/`` (its card was written
    with it) and ``all_results.json`` in ``output_dir/hub`` and upload it."""
    if not getattr(args, "push_to_hub", False) or not _main_process(accelerator):
        return None
    if final_dir is None or not Path(final_dir).is_dir():
        raise CorefBertError("--push_to_hub: the run has no final/ to upload", path=args.output_dir)
    results_path = Path(args.output_dir) / "all_results.json"
    results = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else None
    staged = stage_repository(Path(final_dir), Path(args.output_dir) / HUB_DIR, None, results)
    repo_id = upload_staged(staged, args)
    print(f"pushed final/ with its model card to https://huggingface.co/{repo_id}")
    return staged
