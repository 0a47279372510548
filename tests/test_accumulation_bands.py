"""A large vocabulary used evenly keeps to the memory budget (issue 30, case 14): the groups'
running sums are summed in bands, each band one pass over the corpus holding only its own
groups' sums, each band's expected bytes within the budget; the store is bit-identical to the
one built in one band. (``benchmarks/even_vocab.py`` measures the ingest of 20,000 documents
over 100,000 words: its peak RSS and its time against 20,000 words.)"""

from __future__ import annotations

import hashlib
from pathlib import Path

import dask
import numpy as np
import pytest

import streamtopic as st
from streamtopic import CooccurrenceStore, cooccurrence
from streamtopic.cooccurrence import _block_bytes, _make_grid, accumulation_bands


def even_docs(path: Path, n_docs: int, V: int, seed: int, length: int = 60) -> str:
    """Documents over V words used about evenly (a flat Dirichlet per document)."""
    rng = np.random.default_rng(seed)
    words = [f"w{chr(97 + i // 676 % 26)}{chr(97 + i // 26 % 26)}{chr(97 + i % 26)}"
             for i in range(V)]
    with open(path, "w") as fh:
        for _ in range(n_docs):
            fh.write(" ".join(words[w] for w in rng.integers(0, V, size=length)) + "\n")
    return str(path)


def test_bands_cover_every_group_once_within_the_budget():
    V, c, n_docs = 30_000, 1000, 20_000
    df = np.full(V, 90, dtype=np.int64)  # even: every block sparse, all alike
    grid = _make_grid(V, c, df, n_docs)
    cost = _block_bytes(df.astype(float), n_docs, c)
    need = [sum(cost[i, j] for j in grid.blocks(i, g)) for i, g in grid.groups]
    budget = sum(need) / 5
    bands = accumulation_bands(grid, (df, n_docs), budget)
    assert [n for band in bands for n in band] == list(range(len(grid.groups)))
    assert 5 <= len(bands) <= 7
    for band in bands:
        assert len(band) == 1 or sum(need[n] for n in band) <= budget
    assert accumulation_bands(grid, (df, n_docs), 10 * sum(need)) == [
        list(range(len(grid.groups)))]
    assert accumulation_bands(grid, None, 1.0) == [list(range(len(grid.groups)))]
    assert len(accumulation_bands(grid, (df, n_docs), 1.0)) == len(grid.groups)


def digests(store: Path) -> dict[str, str]:
    """Every file of a store but its lock, readers' folder and the uid-bearing metadata,
    by digest of its bytes: Q, the counts, the token cache, the manifest's inputs."""
    out = {}
    for p in sorted(store.rglob("*")):
        rel = str(p.relative_to(store))
        if p.is_file() and "readers" not in p.parts and not rel.endswith(".lock") \
                and not rel.endswith("zarr.json") and rel != "manifest.jsonl":
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _ingest_two(tmp_path: Path, name: str) -> Path:
    store = tmp_path / name
    with dask.config.set(scheduler="threads"):
        st.ingest(even_docs(tmp_path / "a.txt", 600, V=900, seed=1), store, min_df=1,
                  max_df=1.0, chunk_size=128, progress=False)
        st.ingest(even_docs(tmp_path / "b.txt", 200, V=900, seed=2), store, progress=False)
    return store


@pytest.mark.parametrize("documents", ["kept", "read again"])
def test_an_ingest_in_bands_is_bit_identical_and_holds_one_band_at_a_time(tmp_path,
                                                                           monkeypatch,
                                                                           documents):
    """A budget of a quarter of the groups' expected bytes: several passes, each summing
    only its band's groups, and the same store, byte for byte, as in one band (the later
    bands take the documents the first one weighted, or read the corpus again)."""
    one = _ingest_two(tmp_path, "one.zarr")
    if documents == "read again":
        monkeypatch.setattr(cooccurrence, "CACHE_SHARE", 0.0)
    seen: list[int] = []
    real = cooccurrence._chains

    def counted(parts, grid, homes=(), only=None, **kw):
        seen.append(len(grid.groups) if only is None else len(only))
        return real(parts, grid, homes, only, **kw)

    with CooccurrenceStore.open(one) as s:
        grid = _make_grid(s.V, s.chunk_size, s.doc_freq, s.n_docs)
        cost = _block_bytes(s.doc_freq.astype(float), s.n_docs, s.chunk_size)
    total = sum(cost[i, j] for i, g in grid.groups for j in grid.blocks(i, g))
    monkeypatch.setenv("STREAMTOPIC_ACCUMULATION_BYTES", str(int(total / 4)))
    monkeypatch.setattr(cooccurrence, "_chains", counted)
    banded = _ingest_two(tmp_path, "banded.zarr")
    assert len(seen) > 2 and max(seen) < len(grid.groups)
    assert digests(banded) == digests(one)
    with CooccurrenceStore.open(one) as a, CooccurrenceStore.open(banded) as b:
        assert np.array_equal(a.read_dense(), b.read_dense())
        assert a.verify() == b.verify() == []
        assert [e["sha256"] for e in a.sources] == [e["sha256"] for e in b.sources]


@pytest.mark.parametrize("budget", ["1"])
def test_every_group_its_own_band(tmp_path, monkeypatch, budget):
    one = _ingest_two(tmp_path, "one.zarr")
    monkeypatch.setenv("STREAMTOPIC_ACCUMULATION_BYTES", budget)
    banded = _ingest_two(tmp_path, "banded.zarr")
    assert digests(banded) == digests(one)
