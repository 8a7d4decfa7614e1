"""Paths every test and benchmark shares, computed once here so that a test's folder depth never matters.

Tests import them as ``from helpers import ROOT`` (pytest puts this folder on ``sys.path`` for the rootdir
conftest); fixtures' builders stay in ``conftest.py``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data"  # the real benchmark data, when present
