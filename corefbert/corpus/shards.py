"""A corpus prepared as N shards on N machines (``prepare_corpus.py --num_shards N --shard_index k``), trained on
as one corpus.

``--dataset_dir`` names the shard set as a folder whose sub-folders are the shards (``data/wiki`` for
``data/wiki/part_0``, ...) or as a quoted glob over the shard folders (``'data/wiki/part_*'``).

Each shard is loaded through its own manifest check, then the set is checked from the shards'
``prepare_summary.json``: one ``--num_shards``, each index once, one tokenizer and the same row-deciding
settings; the splits are concatenated in shard order. Every document's draws are seeded by its global index,
so with ``--packing single`` that is row for row the corpus prepared whole (with ``documents``, all but the
rows at the shard boundaries).
"""

from __future__ import annotations

import glob
import os

from corefbert.corpus.cache import SUMMARY_FILE, read_summary
from corefbert.errors import CorefBertError

SAVED_MARKERS = ("dataset_dict.json", "state.json")
GLOB_CHARS = "*?["
#: Settings that may differ between the machines of one shard set: paths, parallelism, cache handling.
PER_MACHINE_SETTINGS = ("shard_index", "output_dir", "train_file", "validation_file", "num_proc",
                        "preprocessing_batch_size", "documents_per_chunk", "verify_corpus", "overwrite_cache",
                        "model_name_or_path", "cache_dir")


def is_saved_corpus(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in SAVED_MARKERS)


def shard_folders(dataset_dir: str) -> list[str] | None:
    """The shard folders ``dataset_dir`` names (a glob, or a folder of shard folders), sorted; ``None`` when it
    is a single prepared corpus (or names nothing: the caller says so in its own line)."""
    if any(c in dataset_dir for c in GLOB_CHARS) and not os.path.isdir(dataset_dir):
        found = sorted(p for p in glob.glob(dataset_dir) if os.path.isdir(p))
        if not found:
            raise CorefBertError("the --dataset_dir glob matches no folder; check the pattern (quote it)",
                                 path=dataset_dir)
        return found
    if not os.path.isdir(dataset_dir) or is_saved_corpus(dataset_dir):
        return None
    found = sorted(os.path.join(dataset_dir, name) for name in os.listdir(dataset_dir)
                   if is_saved_corpus(os.path.join(dataset_dir, name)))
    return found or None


def shard_summary(folder: str) -> dict:
    """A shard's summary (:func:`corefbert.corpus.cache.read_summary`); one line when it has none."""
    summary = read_summary(folder)
    if summary is None:
        raise CorefBertError(f"a shard needs its {SUMMARY_FILE}; prepare it again with prepare_corpus.py --num_shards "
                             "N --shard_index k", path=folder)
    if not isinstance(summary.get("shard"), list):
        raise CorefBertError(f"{SUMMARY_FILE} has no shard record; prepare it again with this version", path=folder)
    return summary


def row_settings(summary: dict) -> dict:
    """The settings of a shard that decide its rows (what every shard of one set must share)."""
    settings = summary.get("settings") or {}
    return {k: v for k, v in settings.items() if k not in PER_MACHINE_SETTINGS}


def check_shard_set(folders: list[str], summaries: list[dict]) -> list[int]:
    """Shard order of ``folders``: one line for a shard set that is not one corpus (mixed ``--num_shards``,
    a missing or repeated index, another tokenizer or other settings)."""
    counts = {tuple(s["shard"])[1] for s in summaries}
    if len(counts) != 1:
        raise CorefBertError(f"the shards were prepared with different --num_shards ({sorted(counts)}); give the "
                             "folders of one shard set", path=os.path.dirname(folders[0]))
    total = counts.pop()
    indices = [int(s["shard"][0]) for s in summaries]
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        first = [f for f, i in zip(folders, indices) if i == repeated[0]]
        raise CorefBertError(f"shard {repeated[0]} of {total} is given twice ({', '.join(first[:2])}); keep one",
                             path=os.path.dirname(folders[0]))
    missing = sorted(set(range(total)) - set(indices))
    if missing:
        raise CorefBertError(f"shard(s) {', '.join(map(str, missing))} of {total} missing ({len(folders)} given); "
                             "copy them here or prepare them with --shard_index", path=os.path.dirname(folders[0]))
    reference, ref_folder = summaries[0], folders[0]
    for folder, summary in zip(folders[1:], summaries[1:]):
        if summary.get("tokenizer") != reference.get("tokenizer"):
            raise CorefBertError(f"this shard was prepared with another tokenizer than {ref_folder}; prepare every "
                                 "shard with the same --model_name_or_path", path=folder)
        mine, theirs = row_settings(summary), row_settings(reference)
        name = min((k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)), default=None)
        if name is not None:
            raise CorefBertError(f"this shard was prepared with {name} {mine.get(name)!r} but {ref_folder} with "
                                 f"{theirs.get(name)!r}; prepare every shard with the same settings", path=folder)
    return sorted(range(len(folders)), key=lambda n: indices[n])


def load_shard_set(folders: list[str], load_one) -> dict:
    """``{"train", "validation"}`` of the shards in ``folders``, concatenated in shard order. ``load_one(folder)``
    loads one shard after its manifest check (``corefbert.pretraining.data.load_prepared_corpus`` for one folder)."""
    import datasets

    summaries = [shard_summary(folder) for folder in folders]
    order = check_shard_set(folders, summaries)
    parts = [load_one(folders[n]) for n in order]
    for n, part in zip(order, parts):
        if not all(split in part for split in ("train", "validation")):
            raise CorefBertError("this shard lacks a train or validation split; prepare it again", path=folders[n])
    merged = {}
    for split in ("train", "validation"):
        pieces = [part[split] for part in parts if len(part[split])]  # an empty split may carry no schema
        merged[split] = datasets.concatenate_datasets(pieces) if pieces else parts[0][split]
    print(f"corpus: {len(folders)} shards of {summaries[0]['shard'][1]} ({', '.join(os.path.basename(folders[n]) for n in order)}): "
          f"{len(merged['train'])} train + {len(merged['validation'])} validation sequences", flush=True)
    return datasets.DatasetDict(merged)
