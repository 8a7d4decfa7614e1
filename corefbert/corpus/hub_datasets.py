"""Pretraining text from a Hub dataset (``--dataset_name wikimedia/wikipedia --dataset_config_name 20231101.en``).

``datasets.load_dataset`` downloads once into its cache and reads from there after; offline
(``HF_HUB_OFFLINE=1``) a dataset that is not cached is one line. ``datasets`` 3+ runs no loading scripts: a
dataset must be data files on the Hub (Parquet, JSON, ...), as ``wikimedia/wikipedia`` is.

A Hub dataset is one more corpus source (a ``corefbert.corpus.readers.Source`` of kind ``"hub"``, path
:func:`hub_path`): its documents are the rows' ``--text_column``, prepared like local files; its cache-key
part is the dataset's own fingerprint, not file times.
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
    if isinstance(data, datasets.DatasetDict):  # an empty --dataset_split
        raise CorefBertError(f"the dataset has splits {list(data)}; name one", path=name)
    return data


def hub_fingerprint(path: str) -> list:
    """The cache-key entry of a :func:`hub_path`: its name, rows and ``datasets``' own fingerprint of the split
    (which changes with the revision and the data files)."""
    data = load_hub_split(path)
    return [path, data.num_rows, data._fingerprint]
