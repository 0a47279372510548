"""Shared fixtures: the real corpora in ../shared/data and a fast in-process scheduler."""

from __future__ import annotations

import os
from pathlib import Path

import dask
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("STREAMTOPIC_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's real corpora (UCI KOS, 20 Newsgroups). Missing data is an error, not a
    skip: CI always has ../shared."""
    if not (SHARED_DATA / "uci-kos" / "docword.kos.txt.gz").is_file():
        raise RuntimeError(
            f"shared corpora not found at {SHARED_DATA}; set STREAMTOPIC_SHARED_DATA"
        )
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _threaded_scheduler():
    """API tests run on Dask's threaded scheduler (fast, in process); tests of the local
    cluster and of real processes start their own."""
    with dask.config.set(scheduler="threads"):
        yield
