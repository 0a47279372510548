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
import scipy.sparse as sp

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
    read: list[bool] = []  # per band: whether it read the corpus (its partition tasks)
    real_band = cooccurrence._count_band

    def counted(parts, grid, homes=(), only=None, **kw):
        seen.append(len(grid.groups) if only is None else len(only))
        return real(parts, grid, homes, only, **kw)

    def band(corpus, store, sources, parts, *args, **kw):
        read.append(len(parts) > 0)
        return real_band(corpus, store, sources, parts, *args, **kw)

    with CooccurrenceStore.open(one) as s:
        grid = _make_grid(s.V, s.chunk_size, s.doc_freq, s.n_docs)
        cost = _block_bytes(s.doc_freq.astype(float), s.n_docs, s.chunk_size)
    total = sum(cost[i, j] for i, g in grid.groups for j in grid.blocks(i, g))
    monkeypatch.setenv("STREAMTOPIC_ACCUMULATION_BYTES", str(int(total / 4)))
    monkeypatch.setattr(cooccurrence, "_chains", counted)
    monkeypatch.setattr(cooccurrence, "_count_band", band)
    banded = _ingest_two(tmp_path, "banded.zarr")
    assert len(seen) > 2 and max(seen) < len(grid.groups)
    # each ingest's first band reads the corpus; the later ones read it again, or none does
    assert read[0] and len(read) >= 4
    if documents == "kept":
        assert sum(read) == 2  # one read per ingest (two ingests)
    else:
        assert all(read)
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


# --- the ingest's time at a large vocabulary (issue 30, case 14): what makes it faster must
# give the same numbers


def _docs_of_mixed_and_even() -> list:
    """Weighted documents of two kinds: Zipf-like, long ones dense in the frequent words'
    tiles (BLAS) among short ones (``tests/test_pairs.py``), and short ones over words used
    evenly (every pair scalar)."""
    from .test_pairs import _mixed_counts

    rng = np.random.default_rng(3)
    even = sp.csr_matrix(rng.poisson(0.05, size=(400, 1100)).astype(np.float64))
    return [cooccurrence._weighted_docs(H)[0] for H in (_mixed_counts(11), even)]


@pytest.mark.parametrize("bounds", [(0, 1100, 0, 1100), (0, 256, 0, 1100), (300, 700, 700, 1100),
                                    (5, 600, 590, 600), (1000, 1100, 1000, 1100)])
@pytest.mark.parametrize("blas", [True, False])
def test_rows_summed_by_word_give_the_same_bits(bounds, blas):
    """The tiled kernel given the documents by word (its rows without a dense document summed
    row by row) adds exactly what it adds without them (document by document), BLAS tiles
    or none, into what the sum already holds."""
    tiled = pytest.importorskip("streamtopic._pairs").add_pairs_tiled
    r0, r1, c0, c1 = bounds
    for part in _docs_of_mixed_and_even():
        args = (part.indptr, part.indices, part.data, part.w, r0, r1, c0, c1,
                cooccurrence._dgemm() if blas else None, cooccurrence.BLAS_DENSITY)
        start = np.random.default_rng(0).random((r1 - r0, c1 - c0))
        ref, got = start.copy(), start.copy()
        tiled(ref, *args)
        tiled(got, *args, *part.by_word())
        assert np.array_equal(got, ref)
        assert not np.array_equal(got, start)


def test_rows_by_word_refuse_documents_out_of_range():
    tiled = pytest.importorskip("streamtopic._pairs").add_pairs_tiled
    part = _docs_of_mixed_and_even()[1]
    indptr, docs, data = part.by_word()
    args = (part.indptr, part.indices, part.data, part.w, 0, 100, 0, 100, None, 0.1)
    bad = docs.copy()
    bad[indptr[50]] = part.w.size  # a document that is not there
    with pytest.raises(ValueError):
        tiled(np.zeros((100, 100)), *args, indptr, bad, data)
    with pytest.raises(ValueError):
        tiled(np.zeros((100, 100)), *args, indptr[:50], docs, data)  # rows not covered
    with pytest.raises(TypeError):
        tiled(np.zeros((100, 100)), *args, indptr, None, data)


@pytest.mark.parametrize("shape, cols", [((300, 900), slice(100, 400)), ((7, 100), slice(None)),
                                         ((3, 70_000), slice(None)), ((4, 5), slice(0, 0))])
def test_dense_blocks_encode_as_through_scipy(shape, cols):
    """A dense block (a view of some columns of a sum too; 32-bit column indices past 65,536
    columns) becomes the bytes scipy's CSR gives, signed zeros dropped as zeros; a count of
    non-zeros that is wrong is refused, never written past."""
    from streamtopic.store import _dense_sparse_bytes, _sparse_bytes, block_nonzeros

    rng = np.random.default_rng(1)
    dense = np.where(rng.random(shape) < 0.15, rng.random(shape) - 0.5, 0.0)
    dense[0, -1] = -0.0
    block = dense[:, cols]
    nnz = block_nonzeros(block)
    assert nnz == np.count_nonzero(block)
    assert np.array_equal(_dense_sparse_bytes(block, nnz), _sparse_bytes(sp.csr_matrix(block)))
    if nnz:
        for wrong in (nnz - 1, nnz + 1):
            with pytest.raises(ValueError):
                _dense_sparse_bytes(block, wrong)


def test_dense_sums_are_lent_again_zeroed_and_never_more_than_lent():
    """A sum given back is lent again to the next one of as many entries (its memory,
    zeroed); the arrays lent and free never hold more entries than the most lent at once
    (a take that none matches drops free ones, largest first); clear drops them all."""
    sums = cooccurrence._DenseSums()
    a, small = sums.take((40, 50)), sums.take((10, 10))
    assert a.shape == (40, 50) and not a.any() and a.flags.c_contiguous
    a += 1.0
    small += 1.0
    sums.give(a)
    sums.give(small)
    b = sums.take((50, 40))  # as many entries as a: its memory
    assert np.shares_memory(a, b) and b.shape == (50, 40) and not b.any()
    c = sums.take((30, 60))  # none matches: 3,800 lent, the most; small's 100 dropped
    assert not np.shares_memory(c, a) and not np.shares_memory(c, small) and not c.any()
    assert sums._free == []
    sums.give(b)
    sums.give(c)
    assert sorted(x.size for x in sums._free) == [1800, 2000]
    d = sums.take((10, 10))  # none matches: 100 lent + 3,800 free would pass 3,800
    assert not d.any() and [x.size for x in sums._free] == [1800]  # the largest dropped
    e = sums.take((30, 60))
    assert np.shares_memory(e, c) and not e.any()
    sums.clear()
    assert sums._free == [] and sums._lent == sums._most == 0
