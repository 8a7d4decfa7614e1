"""Pretraining text from a Hub dataset (``--dataset_name wikimedia/wikipedia --dataset_config_name 20231101.en``).

``datasets.load_dataset`` downloads once into its cache (Arrow, memory-mapped) and reads from there after; with
``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1`` it reads the cache only, and a dataset that is not cached is
one line saying so (never a hang or a traceback). ``datasets`` 3+ runs no loading scripts: a dataset must be
data files on the Hub (Parquet, JSON, ...), which Wikipedia dumps such as ``wikimedia/wikipedia`` are.

A Hub dataset is one more corpus source (a ``corefbert.corpus.readers.Source`` of kind ``"hub"`` whose path is
:func:`hub_path`, ``hub:NAME:CONFIG:SPLIT``): its documents are the rows' ``--text_column``, read in Arrow batches, so the
preparation pipeline (mentions, packing, shards, the chunk cache) is the same as for local files, and
``--num_shards``/``--shard_index`` cut it into ranges of rows like any other document list. Its cache-key
part is the dataset's own fingerprint (name, config, split, revision, rows), not file times.
"""

from __future__ import annotations

from corefbert.errors import CorefBertError

HUB_PREFIX = "hub:"


def hub_path(name: str, config: str | None = None, split: str = "train") -> str:
    """The source path of split ``split`` of Hub dataset ``name`` (configuration ``config``)."""
    if not name or ":" in name:
        raise CorefBertError(f"--dataset_name {name!r} is not a dataset name (user/name, or a local folder)")
    return f"{HUB_PREFIX}{name}:{config or ''}:{split}"


def parse_hub_path(path: str) -> tuple[str, str | None, str]:
    """``(name, config or None, split)`` of a :func:`hub_path`."""
    name, config, split = path[len(HUB_PREFIX):].rsplit(":", 2)
    return name, config or None, split


def load_hub_split(path: str):
    """The ``datasets.Dataset`` behind a ``hub`` source; one line for an unknown or uncached dataset, a missing
    configuration or split (the message lists what exists when ``datasets`` says)."""
    import datasets

    name, config, split = parse_hub_path(path)
    try:
        data = datasets.load_dataset(name, config, split=split)
    except (FileNotFoundError, ConnectionError, ValueError, OSError,
            datasets.exceptions.DatasetGenerationError) as err:  # the last: a data file that does not parse
        reason = " ".join(str(err).split())[:240] or type(err).__name__
        offline = datasets.config.HF_HUB_OFFLINE
        hint = ("offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set) and not in the local datasets cache: load it "
                "once with network, or pass local files with --train_file") if offline else \
            "check --dataset_name / --dataset_config_name and the split"
        raise CorefBertError(f"cannot load the dataset ({type(err).__name__}: {reason}); {hint}",
                             path=f"{name}{'/' + config if config else ''}[{split}]") from None
    if isinstance(data, datasets.DatasetDict):  # split=None never reaches here; a guard for odd builders
        raise CorefBertError(f"the dataset has splits {list(data)}; name one", path=name)
    return data


def hub_fingerprint(path: str) -> list:
    """The cache-key entry of a :func:`hub_path`: its name, rows and ``datasets``' own fingerprint of the split
    (which changes with the revision and the data files)."""
    data = load_hub_split(path)
    return [path, data.num_rows, data._fingerprint]
