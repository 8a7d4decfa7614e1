"""bAbI-1k with the Gated-Attention reader and Coref-GRU (Dhingra et al., NAACL 2018) on the shared training
core (``finetune/run_babi.py``).

One :class:`BabiTask` is one bAbI task trained from scratch; :func:`run_babi` runs every ``--task_ids`` x
``--seeds`` combination into ``output_dir/qaN/seed_k`` and writes the paper's table (per-task accuracy,
mean and max over seeds, average, tasks failed at < 0.95) as ``babi_table.md`` / ``babi_table.json``.

Answers: the paper fixes the mode per task. The ten tasks whose answer is always one word of the story
(:data:`EXTRACTIVE_TASKS`) take an attention sum over document tokens; the others (yes/no, counting, task 8's
lists, task 19's paths) a softmax over the answer strings seen in training, a comma-joined list being one
class. A held-out or test answer the model cannot give is scored wrong and counted (``*_unanswerable``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch

from corefbert.errors import CorefBertError
from corefbert.tasks.babi.copy_scoring import CopyHeadLinker, copy_head_clusters
from corefbert.tasks.babi.data import (
    BabiExample,
    exact_match_clusters,
    find_task_file,
    read_babi_file,
    read_coref_file,
    spans_to_clusters,
    tokenize,
)
from corefbert.tasks.babi.ga_reader import GAReader, GAReaderConfig
from corefbert.tasks.base import (
    FinetuningJob,
    FinetuningTask,
    HeldOutArguments,
    held_out_split,
    run_finetuning,
)
from corefbert.tasks.scratch import ScratchFolder
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import read_json
from corefbert.text.vocabulary import Vocabulary
from corefbert.training.outputs.cards import repo_name
from corefbert.training.outputs.evaluation import write_json
from corefbert.training.sweep import SweepRules, SweepRun, run_sweep, training_settings

logger = logging.getLogger(__name__)

#: --model -> (recurrent kind of the document layers, number of layers K)
MODELS = {"ga_cgru": ("cgru", 3), "ga_gru": ("gru", 3), "bi_cgru": ("cgru", 1), "bi_gru": ("gru", 1)}
CONFIG_FILE = "babi_reader.json"
#: A reader's folder: ``model.safetensors`` and ``babi_reader.json`` holding the reader's config (``"reader"``),
#: its vocabulary, the task, the --model and the answer mode and classes.
READER_FOLDER = ScratchFolder(CONFIG_FILE, GAReaderConfig, lambda config, _vocabulary: GAReader(config),
                              "finetune/run_babi.py", vocab_file=None, config_key="reader")
#: Tasks whose every answer is one word of its story (attention sum); the paper's "half of the tasks [that] are
#: extractive" (appendix B). On the official 1k training files exactly these have every answer in the story;
#: 8, 9, 15 and 20 have some (58, 37, 65, 70 %), 6, 7, 10, 17, 18 and 19 none.
EXTRACTIVE_TASKS = frozenset({1, 2, 3, 4, 5, 11, 12, 13, 14, 16})
FAILED_BELOW = 0.95


@dataclass(kw_only=True)
class BabiArguments(HeldOutArguments):
    """Data, model and the paper's bAbI settings (hidden 64, dropout 0.1, at most 13 clusters)."""

    data_dir: str | None = field(default=None, metadata={"help": "Folder with the official qaN_*_train.txt "
                                                                  "(and optionally qaN_*_test.txt) files."})
    task_ids: list[int] = field(default_factory=lambda: list(range(1, 21)),
                                metadata={"help": "bAbI tasks to run (1-20)."})
    seeds: int = field(default=1, metadata={"help": "Runs per task, seeds --seed, --seed+1, ...; the table "
                                                    "reports the mean and the max over them."})
    model: str = field(default="ga_cgru", metadata={"help": "ga_cgru | ga_gru (K=3 gated-attention layers) | "
                                                            "bi_cgru | bi_gru (one bidirectional layer)."})
    coref_source: str = field(default="exact", metadata={
        "help": "exact (exact match of entity tokens within a story, the paper's bAbI setting) | file | copy "
                "(beyond the paper: pronouns by --coref_model's copy head)."})
    coref_model: str | None = field(default=None, metadata={
        "help": "A CorefBERT checkpoint (with its MRP copy head) for --coref_source copy."})
    coref_file: str | None = field(default=None, metadata={
        "help": 'JSONL of {"task": N, "line": L, "clusters": [[[start, end], ...], ...]}: character spans in the '
                "question's story (its sentences joined by one space); with --coref_source file."})
    max_clusters: int = field(default=13, metadata={"help": "At most this many clusters per story (paper: 13)."})
    max_story_sentences: int = field(default=0, metadata={"help": "Keep only the last N story sentences "
                                                                  "(0: the whole story)."})
    embedding_dim: int = field(default=64, metadata={"help": "Word embedding size (the paper states none)."})
    hidden_size: int = field(default=64, metadata={"help": "GRU state size per direction (paper: 64)."})
    dropout: float = field(default=0.1, metadata={"help": "Dropout at each layer's output (paper: 0.1)."})
    memory: str = field(default="split", metadata={"help": "C-GRU memory: split (paper: φ_s/φ_c are the two "
                                                           "halves of h) | full (identity, convex mix)."})
    validation_split_percentage: int = field(default=10, metadata={
        "help": "Hold out this percentage of each training file's stories for evaluation."})

    def check(self) -> None:
        if not self.data_dir or not os.path.isdir(self.data_dir):
            raise CorefBertError("--data_dir must be a folder with the official bAbI qaN_*_train.txt files",
                                 path=self.data_dir or "--data_dir")
        if not self.task_ids or any(not 1 <= t <= 20 for t in self.task_ids):
            raise CorefBertError(f"--task_ids must be bAbI task numbers 1-20 (got {self.task_ids})")
        if self.model not in MODELS:
            raise CorefBertError(f"--model {self.model!r} is not one of {', '.join(MODELS)}")
        if self.coref_source not in ("exact", "file", "copy"):
            raise CorefBertError(f"--coref_source {self.coref_source!r} is not one of exact, file, copy")
        if (self.coref_source == "file") != bool(self.coref_file):
            raise CorefBertError("--coref_source file and --coref_file go together")
        if (self.coref_source == "copy") != bool(self.coref_model):
            raise CorefBertError("--coref_source copy and --coref_model go together")
        if self.coref_model and not os.path.isdir(self.coref_model):
            raise CorefBertError("--coref_model must be a CorefBERT checkpoint folder", path=self.coref_model)
        for name in ("seeds", "max_clusters", "hidden_size", "embedding_dim"):
            if getattr(self, name) < 1:
                raise CorefBertError(f"--{name} must be at least 1 (got {getattr(self, name)})")


def _encode(example: BabiExample, vocab: Vocabulary, args: BabiArguments, coref: dict | None, linker) -> dict:
    sentences = example.sentences[-args.max_story_sentences:] if args.max_story_sentences else example.sentences
    text = " ".join(sentences)
    tokens = tokenize(text) or [(".", 0, 0)]
    if linker is not None:
        clusters = copy_head_clusters(linker, text, tokens, args.max_clusters)
    elif coref is None:
        clusters = exact_match_clusters(tokens, [text[s:e] for _, s, e in tokens], args.max_clusters)
    else:
        spans = coref.get((example.task_id, example.line), [])
        shift = len(example.document) - len(text)  # the kept sentences are a suffix of the story's text
        in_story = [(w, s + shift, e + shift) for w, s, e in tokens]  # the file's offsets index the whole story
        clusters = spans_to_clusters(in_story, spans, args.max_clusters, f"{args.coref_file} (task "
                                     f"{example.task_id} line {example.line})") if spans else [0] * len(tokens)
    return {"doc_ids": vocab.encode([t for t, _, _ in tokens]), "clusters": clusters,
            "query_ids": vocab.encode([t for t, _, _ in tokenize(example.question)] or ["?"])}


class BabiTask(FinetuningTask):
    """One bAbI task (``task_id``, default the first of ``--task_ids``) trained from scratch."""

    name = "babi"
    main_metric = "accuracy"
    args_class = BabiArguments
    uses_model_folder = False
    # Paper (appendix B, bAbI): batch 32, LR 0.01 halved after every 120 updates (the step schedule). Not stated
    # there: the optimizer (Adam here: AdamW with no weight decay), epochs (30 here: 870 updates at 29 batches per
    # epoch, the LR ends at 1/128 of its start), clipping (10). A checkpoint per epoch: a 20-task table runs for
    # hours, and an interrupted task resumes from its last epoch (run_babi). The paper <-> code table is in
    # docs/guides/babi.md.
    training_defaults = {"learning_rate": 0.01, "per_device_train_batch_size": 32, "weight_decay": 0.0,
                         "warmup_ratio": 0.0, "num_train_epochs": 30.0, "max_grad_norm": 10.0,
                         "lr_scheduler_type": "step", "lr_decay_steps": 120, "lr_decay_factor": 0.5,
                         "checkpointing_steps": "epoch", "load_best_model_at_end": False,
                         "per_device_eval_batch_size": 100}

    @classmethod
    def run(cls, task_args: BabiArguments, training_args) -> dict[str, float]:
        """Every ``--task_ids`` x ``--seeds`` run, then the paper's table (:func:`run_babi`)."""
        return run_babi(task_args, training_args)

    def __init__(self, task_args: BabiArguments, training_args):
        super().__init__(task_args, training_args)
        task_args.check()
        self.task_id = task_args.task_ids[0]  # one run is one task: run() hands each its own task_ids
        examples, self.test_examples = task_examples(task_args, training_args, self.task_id)
        self.train_examples, self.eval_examples = (
            held_out_split(examples, task_args.validation_split_percentage, task_args.split_seed, lambda e: e.story)
            if task_args.validation_split_percentage else (examples, []))
        # What is trained comes from the training file alone (a test file must not change the model): the mode
        # from the task number, the vocabulary from the whole training file (its held-out stories included, so
        # the split percentage does not change the word ids; test-only words are unknown, id 1).
        self.extractive = self.task_id in EXTRACTIVE_TASKS
        self.vocab = Vocabulary.build([t for t, _, _ in tokenize(e.document + " " + e.question + " " + e.answer)]
                                      for e in examples)
        self.answers = [] if self.extractive else sorted({e.answer for e in self.train_examples})
        self.coref = read_coref_file(task_args.coref_file) if task_args.coref_source == "file" else None
        self.linker = CopyHeadLinker(task_args.coref_model) if task_args.coref_source == "copy" else None
        self.skipped: dict[str, int] = {}

    def _label(self, example: BabiExample, doc_ids: list[int]) -> tuple[int, str | None]:
        """The answer's class (extractive: its word id) and, when the model cannot give it, why (label -1)."""
        if not self.extractive:
            if example.answer in self.answers:
                return self.answers.index(example.answer), None
            return -1, "answer never seen in training"
        label = self.vocab.get(example.answer)
        if label is None:  # id 1 would pool every unknown word of the story into one "correct" answer
            return -1, "answer is a word never seen in training"
        if label not in doc_ids:
            return -1, "answer not a word of its (kept) story"
        return label, None

    def _features(self, examples: list[BabiExample], split: str) -> list[dict]:
        features, unanswerable = [], {}
        for example in examples:
            feature = _encode(example, self.vocab, self.task_args, self.coref, self.linker)
            label, why = self._label(example, feature["doc_ids"])
            if why is not None:
                unanswerable.setdefault(why, []).append(example.line)
                if split == "train":  # the attention sum gives it probability 0: there is nothing to learn
                    continue
            features.append({**feature, "label": label, "example": example})
        for why, lines in unanswerable.items():
            if split == "train":
                self.skipped[why] = len(lines)
            else:
                logger.warning("bAbI task %d, %s: %d question(s) the model cannot answer (%s; first at line %d), "
                               "scored wrong and counted in %s_unanswerable", self.task_id, split, len(lines),
                               why, lines[0], split)
        return features

    def train_dataset(self):
        features = self._features(self.train_examples, "train")
        skipped = ", ".join(f"{n} skipped: {why}" for why, n in self.skipped.items()) or "none skipped"
        logger.info("bAbI task %d: %d training questions (%s), %d held out, %s answers, %d clusters at most",
                    self.task_id, len(features), skipped, len(self.eval_examples),
                    "extractive" if self.extractive else f"{len(self.answers)} classes", self.task_args.max_clusters)
        return features

    def eval_dataset(self):
        return self._features(self.eval_examples, "eval") or None

    def predict_dataset(self):
        return self._features(self.test_examples, "predict") or None

    def build_model(self) -> GAReader:
        if not self.args.do_train:  # evaluate or predict: this run's own trained reader, never a fresh one
            return self.trained_reader()
        recurrent, layers = MODELS[self.task_args.model]
        return GAReader(GAReaderConfig(
            vocab_size=len(self.vocab), num_answers=len(self.answers), embedding_dim=self.task_args.embedding_dim,
            hidden_size=self.task_args.hidden_size, num_layers=layers, dropout=self.task_args.dropout,
            recurrent=recurrent, memory=self.task_args.memory))

    def trained_reader(self) -> GAReader:
        """The reader this run trained into its ``--output_dir`` (``best/`` with ``--load_best_model_at_end``,
        else ``last/``, the model ``eval_accuracy`` is of), checked to read the same vocabulary and answers."""
        best = os.path.join(self.args.output_dir, "best")
        folder = best if self.args.load_best_model_at_end and os.path.isdir(best) else \
            os.path.join(self.args.output_dir, "last")
        if not os.path.isfile(os.path.join(folder, CONFIG_FILE)):
            raise CorefBertError("no trained reader here to evaluate (a bAbI reader is trained from scratch); train "
                                 "it first with --do_train", path=folder)
        model, saved = load_babi_reader(folder)
        if saved.get("task_id") != self.task_id or saved["vocabulary"] != self.vocab or \
                list(saved.get("answers", [])) != self.answers:
            raise CorefBertError(f"this reader was trained on another training file than bAbI task {self.task_id}'s "
                                 "in --data_dir (its vocabulary or answers differ); give the --data_dir it was "
                                 "trained on, or train again with --do_train", path=folder)
        return model

    def token_masks(self, batch: dict) -> list[torch.Tensor]:
        return [batch["doc_mask"], batch["query_mask"]]

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        def pad(key):
            width = max(len(f[key]) for f in features)
            return torch.tensor([f[key] + [0] * (width - len(f[key])) for f in features])  # [B, width]

        doc_ids, query_ids = pad("doc_ids"), pad("query_ids")
        # label -1 (an answer the model cannot give, _label) is scored wrong; training drops such questions
        return {"doc_ids": doc_ids, "doc_mask": doc_ids != 0, "clusters": pad("clusters"), "query_ids": query_ids,
                "query_mask": query_ids != 0, "labels": torch.tensor([max(f["label"], 0) for f in features]),
                "known": torch.tensor([f["label"] >= 0 for f in features])}

    def evaluate(self, model, dataloader, accelerator, split):
        correct, total, unanswerable, predictions = 0, 0, 0, []
        for batch in dataloader:
            known, labels = batch["known"], batch["labels"]  # [B], [B]
            predicted = model(**batch).scores.argmax(-1)  # [B]
            hits = (predicted == labels) & known
            hits, predicted, known = accelerator.gather_for_metrics((hits, predicted, known))
            correct += int(hits.sum())
            total += hits.numel()
            unanswerable += int((~known).sum())
            predictions += [self.vocab.words[p] if self.extractive else self.answers[p] for p in predicted.tolist()]
        return {"accuracy": correct / max(total, 1), "unanswerable": unanswerable}, predictions

    def write_predictions(self, predictions, output_dir: str, split: str) -> list[str]:
        examples = self.eval_examples if split == "eval" else self.test_examples
        path = os.path.join(output_dir, f"{split}_predictions.tsv")
        rows = [f"{e.line}\t{e.question}\t{e.answer}\t{p}\n" for e, p in zip(examples, predictions)]
        replace_file(path, "line\tquestion\tanswer\tprediction\n" + "".join(rows), "the predictions")
        return [path]

    def save_pretrained(self, model, output_dir: str, state_dict: dict | None = None) -> None:
        READER_FOLDER.save_pretrained(output_dir, model, self.vocab, state_dict, settings={
            "task_id": self.task_id, "model": self.task_args.model, "extractive": self.extractive,
            "answers": self.answers})


def task_examples(task_args: BabiArguments, args,
                  task_id: int) -> tuple[list[BabiExample], list[BabiExample]]:
    """Task ``task_id``'s training questions (when its file is there) and, with ``--do_predict``, its test
    questions; one line when a ``--do_*`` flag needs an absent file, and at the first training answer of an
    extractive task that is not one word of its story (the paper's attention sum can never give it: the file
    is not that task's)."""
    paths = []
    for split, wanted in (("train", args.do_train or args.do_eval), ("test", args.do_predict)):
        path = find_task_file(task_args.data_dir, task_id, split)
        if wanted and path is None:
            raise CorefBertError(f"no qa{task_id}_*_{split}.txt for bAbI task {task_id} (needed by "
                                 f"{'--do_predict' if split == 'test' else '--do_train/--do_eval'})",
                                 path=task_args.data_dir)
        paths.append(path)
    examples = read_babi_file(paths[0], task_id) if paths[0] else []
    if task_id in EXTRACTIVE_TASKS:
        for example in examples:
            if "," in example.answer or example.answer not in {t for t, _, _ in tokenize(example.document)}:
                raise CorefBertError(
                    f"answer {example.answer!r} is not a word of its story, but bAbI task {example.task_id} "
                    "is extractive (the paper's attention sum over the story's words, which cannot give it); "
                    f"correct the line or check that this is task {example.task_id}'s file", path=paths[0],
                    position=example.line)
    return examples, read_babi_file(paths[1], task_id) if args.do_predict else []


def load_babi_reader(directory: str) -> tuple[GAReader, dict]:
    """A trained reader from a ``best/`` or ``last/`` folder (:data:`READER_FOLDER`) and its saved settings
    (``task_id``, ``model``, ``extractive``, ``answers``, ``"reader"`` as a dict, ``"vocabulary"``)."""
    loaded = READER_FOLDER.from_pretrained(directory)
    return loaded.model, {**loaded.settings, "reader": loaded.config.to_dict(), "vocabulary": loaded.vocabulary}


def babi_table(accuracies: dict[int, list[float]], model: str, split: str = "") -> dict:
    """The paper's table from ``{task id: [accuracy per seed]}``: per task mean/max, their averages over tasks
    and the number of tasks failed (accuracy < 0.95) by mean and by max; ``split``: the questions it is on."""
    rows = {str(t): {"accuracies": accs, "mean": statistics.fmean(accs), "max": max(accs)}
            for t, accs in sorted(accuracies.items())}
    return {"model": model, "split": split, "tasks": rows,
            "average_mean": statistics.fmean(r["mean"] for r in rows.values()),
            "average_max": statistics.fmean(r["max"] for r in rows.values()),
            "failed_mean": sum(r["mean"] < FAILED_BELOW for r in rows.values()),
            "failed_max": sum(r["max"] < FAILED_BELOW for r in rows.values())}


def table_markdown(table: dict) -> str:
    """A ``babi_table.md`` section: the split it is on, one row per task, the average and the failed count."""
    counts = sorted({len(r["accuracies"]) for r in table["tasks"].values()})
    seeds = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"  # the seeds averaged, per task
    lines = [f"Accuracy on {table['split']}.", ""] if table.get("split") else []
    lines += [f"| task ({table['model']}, {seeds} seed{'s' * (seeds != '1')}) | mean | max |", "|---|---|---|"]
    lines += [f"| {t} | {r['mean']:.3f} | {r['max']:.3f} |" for t, r in table["tasks"].items()]
    lines.append(f"| average | {table['average_mean']:.3f} | {table['average_max']:.3f} |")
    lines.append(f"| failed (< {FAILED_BELOW}) | {table['failed_mean']} | {table['failed_max']} |")
    if table.get("missing_tasks"):
        lines += ["", f"Not finished yet: tasks {', '.join(map(str, table['missing_tasks']))}; the average and the "
                      f"failed count are over the {len(table['tasks'])} finished tasks only."]
    if table.get("short_tasks"):
        short = ", ".join(f"task {t}: {n} of {table['seeds']}" for t, n in table["short_tasks"].items())
        lines += ["", f"Seeds with results ({short}); those tasks' mean and max are over these seeds only."]
    return "\n".join(lines) + "\n"


def babi_run(task_args: BabiArguments, args, task_id: int, seed_index: int) -> SweepRun:
    """One task x seed of the table, in ``output_dir/qaN/seed_k``: its settings are what a checkpoint records
    (the training flags, the task's flags and the sizes of its files) and the schedule's length."""
    out = os.path.join(args.output_dir, f"qa{task_id}", f"seed_{seed_index}")
    # --push_to_hub (one run, run_babi): the repository is named after the table's folder, not "seed_0"
    run_args = dataclasses.replace(args, output_dir=out, seed=args.seed + seed_index,
                                   hub_model_id=repo_name(args) if args.push_to_hub else args.hub_model_id)
    task = BabiTask(dataclasses.replace(task_args, task_ids=[task_id], seeds=1), run_args)
    settings = {**training_settings(run_args, FinetuningJob(task, run_args, None, None).settings()),
                "max_steps": run_args.max_steps, "num_train_epochs": run_args.num_train_epochs}

    def train(resume: bool) -> dict:
        given = run_args.resume_from_checkpoint
        return run_finetuning(task, dataclasses.replace(run_args, resume_from_checkpoint=given if resume else None))

    def evaluate() -> dict:  # a finished run trained without --do_eval / --do_predict: its trained reader
        eval_args = dataclasses.replace(run_args, do_train=False, resume_from_checkpoint=None, push_to_hub=False)
        trained = read_json(os.path.join(out, "all_results.json"))
        results = {**(trained if isinstance(trained, dict) else {}),
                   **run_finetuning(BabiTask(task.task_args, eval_args), eval_args)}
        write_json(os.path.join(out, "all_results.json"), results)  # the training's results kept beside
        return results

    wanted = ("eval_accuracy",) * bool(args.do_eval) + ("predict_accuracy",) * bool(args.do_predict)
    return SweepRun(f"bAbI task {task_id}, seed {run_args.seed}", Path(out), settings, train, wanted, evaluate)


def write_tables(task_args: BabiArguments, args, accuracies: dict[int, list[float]],
                 test_accuracies: dict[int, list[float]]) -> list[dict]:
    """``babi_table.json`` / ``babi_test_table.json`` / ``babi_table.md`` from the runs finished so far
    (rewritten after every run, so an interrupted table shows what it has), naming the tasks of ``--task_ids``
    it lacks and the tasks with results of fewer than ``--seeds`` runs (``short_tasks``)."""
    tables = []
    # which questions each table's accuracies are on, in words (the first line of its babi_table.md section)
    held_out = (f"our own held-out split: {task_args.validation_split_percentage}% of the stories of each "
                f"qaN_*_train.txt (--split_seed {task_args.split_seed}), not the official test files")
    test_files = "the official test files (qaN_*_test.txt, --do_predict)"
    for values, split, name in ((accuracies, held_out, "babi_table.json"),
                                (test_accuracies, test_files, "babi_test_table.json")):
        if values:
            table = babi_table(values, task_args.model, split)
            if missing := [t for t in task_args.task_ids if t not in values]:
                table["missing_tasks"] = missing
            short = {str(t): len(a) for t, a in sorted(values.items()) if len(a) < task_args.seeds}
            if short:  # a task's mean and max are over the seeds it has: say how many those are
                table["seeds"], table["short_tasks"] = task_args.seeds, short
            write_json(os.path.join(args.output_dir, name), table)
            tables.append(table)
    if tables:  # one section per split, each naming its questions, so no number is read as the other split's
        replace_file(os.path.join(args.output_dir, "babi_table.md"), "\n".join(table_markdown(t) for t in tables),
                     "the table")
    return tables


def run_babi(task_args: BabiArguments, args) -> dict[str, float]:
    """``BabiTask.run``: one run per task x seed in ``output_dir/qaN/seed_k``, then the combined table."""
    args.validate()
    task_args.check()
    if args.push_to_hub and len(task_args.task_ids) * task_args.seeds > 1:
        raise CorefBertError(f"--push_to_hub uploads one model, and this table trains {len(task_args.task_ids)} "
                             f"task(s) x {task_args.seeds} seed(s): push one run (one --task_ids, --seeds 1), or "
                             "upload a run's best/ later with `hf upload USER/NAME output_dir/qaN/seed_0/best`")
    if task_args.coref_source == "file":
        read_coref_file(task_args.coref_file)
    for task_id in task_args.task_ids:  # every task's files before the first run, not an hour into training
        task_examples(task_args, args, task_id)
    runs = [(t, k) for t in task_args.task_ids for k in range(task_args.seeds)]
    accuracies: dict[int, list[float]] = {}
    results: dict[str, float] = {}
    test_accuracies: dict[int, list[float]] = {}
    unanswerable: dict[str, int] = {}
    tables: list[dict] = []

    def after_run(point: tuple[int, int], run: dict) -> None:  # the table rewritten after every run
        nonlocal tables
        for split, values in (("eval", accuracies), ("predict", test_accuracies)):
            if f"{split}_accuracy" in run:
                values.setdefault(point[0], []).append(run[f"{split}_accuracy"])
            if f"{split}_unanswerable" in run:  # the same questions for every seed: the count of one run
                unanswerable[f"{split}_unanswerable_qa{point[0]}"] = run[f"{split}_unanswerable"]
        tables = write_tables(task_args, args, accuracies, test_accuracies)

    print(f"bAbI with {task_args.model}: {len(runs)} runs (tasks x seeds)", flush=True)
    # With --resume_from_checkpoint a finished run of the same settings and length is kept (not retrained, not
    # re-evaluated; evaluated when it lacks the results --do_eval / --do_predict ask for), an unfinished one
    # or one given a longer schedule continues from its newest checkpoint, and a changed one is refused.
    rules = SweepRules(continues=("max_steps", "num_train_epochs"),
                       keep_finished=bool(args.resume_from_checkpoint),
                       ignore_changed_settings=args.ignore_changed_settings)
    run_sweep(runs, lambda point: babi_run(task_args, args, *point), rules, after_run=after_run)
    results.update({f"predict_accuracy_qa{t}": statistics.fmean(a) for t, a in test_accuracies.items()})
    results.update(unanswerable)
    if accuracies:
        table = tables[0]
        results.update({f"eval_accuracy_qa{t}": r["mean"] for t, r in table["tasks"].items()})
        results.update(eval_accuracy=table["average_mean"], eval_accuracy_max=table["average_max"],
                       failed_tasks_mean=table["failed_mean"], failed_tasks_max=table["failed_max"])
    if tables:
        print("\n".join(table_markdown(table) for table in tables))
    write_json(os.path.join(args.output_dir, "all_results.json"), results)
    return results
