"""Benchmark metrics: pure functions in ``corefbert/metrics/<benchmark>.py``, each also an offline
``evaluate`` module in ``corefbert/metrics/evaluate_modules/<name>/<name>.py`` (hub metrics cannot be
fetched offline; a local module directory loads).

    from corefbert.metrics import load_metric
    load_metric("glue", "mrpc").compute(predictions=[1, 0], references=[1, 1])
"""

from __future__ import annotations

from pathlib import Path

from corefbert.errors import CorefBertError

EVALUATE_MODULES = Path(__file__).parent / "evaluate_modules"


def available_metrics() -> list[str]:
    """Names of the ``evaluate`` modules shipped with corefbert."""
    return sorted(p.name for p in EVALUATE_MODULES.iterdir() if (p / f"{p.name}.py").is_file())


def metric_path(name: str) -> str:
    """Directory of the shipped ``evaluate`` module ``name`` (what ``evaluate.load`` takes offline)."""
    path = EVALUATE_MODULES / name
    if not (path / f"{name}.py").is_file():
        raise CorefBertError(f"unknown metric {name!r}; corefbert ships {', '.join(available_metrics())}")
    return str(path)


def load_metric(name: str, config_name: str | None = None, **kwargs):
    """``evaluate.load`` of a shipped metric module, offline; ``config_name`` e.g. the GLUE task."""
    import evaluate

    return evaluate.load(metric_path(name), config_name, **kwargs)
