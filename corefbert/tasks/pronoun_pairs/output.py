"""What the pronoun-pair builder writes into ``--output_dir``: written whole or not at all, and never read back
as its own input.

The files are written into a hidden folder beside them (``.partial-<pid>``) and renamed into place only once
every one is whole, so a full disk or a kill leaves an earlier run's files as they were, and a failed write is
one line (:func:`corefbert.text.durable.writing`); the partial copy is removed however the run ends, and a run
removes those that killed runs left. A rerun whose ``--output_dir`` sits where an ``--input`` glob
reaches (``--input 'data/*' --output_dir data/pairs``) leaves the builder's own output out of its input.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict
from pathlib import Path

from corefbert.corpus.cache import pid_alive
from corefbert.errors import CorefBertError
from corefbert.text.durable import (
    fsync_dir,
    remove_folder,
    replace_file,
    replace_files,
    write_json_durably,
    writing,
)

SPLITS = ("train", "validation", "test")
PARTIAL_PREFIX = ".partial-"  # + the writing process's id
#: Every name the builder writes into ``--output_dir`` (``dataset`` is a folder).
OUTPUT_NAMES = ("pairs.jsonl", "pairs.tsv", "counts.json", *(f"{name}.jsonl" for name in SPLITS), "dataset")


def inputs_outside_output(patterns: list[str], output_dir: str) -> tuple[list[str], list[str]]:
    """``patterns`` (``--input``) with every glob match that is ``output_dir`` or something the builder wrote
    in it left out, and the matches left out. A path named without a glob is kept as given: the reader's
    message then says what it is."""
    output = os.path.realpath(output_dir)
    own = {output, *(os.path.join(output, name) for name in OUTPUT_NAMES)}
    dataset = os.path.join(output, "dataset")

    def is_own(path: str) -> bool:
        real = os.path.realpath(path)
        return real in own or os.path.commonpath([real, dataset]) == dataset

    kept, left_out = [], []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else []
        mine = [path for path in matches if is_own(path)]
        if not mine:  # as given: a path, or a pattern the reader's own messages handle (one matching nothing)
            kept.append(pattern)
            continue
        left_out += mine
        kept += [glob.escape(path) for path in matches if path not in mine]
    if not kept:
        raise CorefBertError(f"--input matches only what this builder wrote into --output_dir {output_dir}; pass "
                             "the CoNLL-2012 files", path=patterns[0])
    return kept, left_out


def write_outputs(pairs: list, output_dir: str, split_of: dict[str, str] | None, counts: dict) -> list[str]:
    """``pairs.jsonl``, ``pairs.tsv``, ``dataset/``, ``counts.json`` (and the split files) in ``output_dir``, all
    written before any is put in place (the module docstring); returns the paths written."""
    output = Path(output_dir)
    partial = output / f"{PARTIAL_PREFIX}{os.getpid()}"
    remove_stale_partials(output)
    try:
        with writing(partial, "the pronoun pairs", f"the files in {output_dir} are as they were",
                     then="rerun the same command"):
            output.mkdir(parents=True, exist_ok=True)
            remove_folder(partial)
            partial.mkdir()
            names = write_pairs(pairs, str(partial), split_of)
            write_json_durably(partial / "counts.json", dict(sorted(counts.items())))
            names.append("counts.json")
            fsync_dir(partial)
        with writing(partial, "the pronoun pairs", f"some files in {output_dir} may be this run's and others the "
                     "earlier run's", then="rerun the same command"):
            replace_files(partial, output, names)
    finally:  # however the run ends (a failed rename is one line too, but left the partial copy behind)
        remove_folder(partial)
    return [str(output / name) for name in names]


def remove_stale_partials(output: Path) -> None:
    """Delete the ``.partial-<pid>`` folders (and their ``.deleting`` trash) in ``output`` whose process is gone:
    a run killed while writing, whose partial copy nothing else would ever remove."""
    for path in output.glob(f"{PARTIAL_PREFIX}*"):
        pid = path.name[len(PARTIAL_PREFIX):].removesuffix(".deleting")
        if pid.isdigit() and not pid_alive(int(pid)):
            remove_folder(path)


def write_pairs(pairs: list, output_dir: str, split_of: dict[str, str] | None = None) -> list[str]:
    """``pairs.jsonl``, ``pairs.tsv`` (label, source, target, type, doc_key) and ``dataset/`` (``datasets``
    ``save_to_disk``) in ``output_dir``; with ``split_of`` also ``<split>.jsonl`` and a DatasetDict. The first
    of ``pairs`` (at least one :class:`~corefbert.tasks.pronoun_pairs.builder.PronounPair`) decides the column
    types. Returns the names written."""
    import datasets

    rows = [asdict(p) | ({"split": split_of[p.doc_key]} if split_of else {}) for p in pairs]
    features = datasets.Features({name: datasets.Value("string") if isinstance(value, str) else
                                  datasets.Value("bool") if isinstance(value, bool) else datasets.Value("int64")
                                  for name, value in rows[0].items()})
    lines = {"pairs.jsonl": [json.dumps(row, ensure_ascii=False) + "\n" for row in rows],
             "pairs.tsv": ["label\tsource\ttarget\ttype\tdoc_key\n",
                           *(f"{p.label}\t{p.source}\t{p.target}\t{p.type}\t{p.doc_key}\n" for p in pairs)]}
    if split_of:
        by_split = {}
        for name in SPLITS:
            chosen = [row for row in rows if row["split"] == name]
            lines[f"{name}.jsonl"] = [json.dumps(row, ensure_ascii=False) + "\n" for row in chosen]
            # from_list([]) loses the columns: an empty split is built column-wise.
            by_split[name] = datasets.Dataset.from_dict({k: [row[k] for row in chosen] for k in features},
                                                        features=features)
        dataset = datasets.DatasetDict(by_split)
    else:
        dataset = datasets.Dataset.from_list(rows, features=features)
    for name, content in lines.items():
        replace_file(os.path.join(output_dir, name), "".join(content))
    dataset.save_to_disk(os.path.join(output_dir, "dataset"))
    return [*lines, "dataset"]
