"""Damage fuzzing (issue 30): random flipped bits, truncated and deleted files in a small
store and in a model, each followed by the commands that read them (``verify``, ``info``,
``fit``; ``topics`` and the model's loader), each in a forked child process. Zero crashes,
hangs and tracebacks, and no command that exits 0 with another result than on the pristine
copy.

The default run takes 25 trials of each; ``benchmarks/damage_fuzz.py`` runs 200 of each and
records the figures (benchmarks/results/damage_fuzz.json); the slow test runs 200 too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def fuzzing():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import damage_fuzz
    finally:
        sys.path.remove(str(BENCHMARKS))
    return damage_fuzz


def _check(result: dict, trials: int) -> None:
    for kind in ("store", "model"):
        assert sum(result[kind]["by_damage"].values()) == trials
        assert result[kind]["bad"] == [], (kind, result[kind]["bad"][:3])
        outcomes = result[kind]["outcomes"]
        assert set(outcomes) <= {"refused", "correct"}, outcomes


def test_damage_fuzzing_fast_subset(fuzzing, tmp_path):
    _check(fuzzing.fuzz(25, seed=1, workdir=str(tmp_path)), 25)


@pytest.mark.slow
def test_damage_fuzzing_200_trials(fuzzing, tmp_path):
    _check(fuzzing.fuzz(200, seed=0, workdir=str(tmp_path)), 200)
