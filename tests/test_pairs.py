"""Pair counting through matrix products (issue 24): the tiled kernel, whose documents dense in
a tile go through BLAS, equals the scalar kernel and scipy to 1e-12 relative, adds in place,
and gives the same bits run to run; whole ingests with it equal the scalar kernel's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import streamtopic as st
from streamtopic import cooccurrence as co

from .test_ingest import rel_err

V = 1100  # not a multiple of the 256-word tiles, nor of the 256-word blocks below
BOUNDS = [(0, V, 0, V), (0, 256, 0, V), (256, 512, 256, V), (300, 700, 700, V),
          (1000, V, 1000, V), (5, 600, 590, 600), (100, 101, 100, 101)]


def _mixed_counts(seed: int, n_long: int = 40, n_short: int = 300) -> sp.csr_matrix:
    """Documents over V words of Zipf-like frequencies, shuffled: long ones (thousands of
    tokens: dense in the frequent words' tiles) and short ones (2 to 30 tokens)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, V + 1) ** 0.9
    p /= p.sum()
    lengths = np.r_[rng.integers(2000, 6000, n_long), rng.integers(2, 30, n_short)]
    rows = np.array([np.bincount(rng.choice(V, n, p=p), minlength=V) for n in lengths])
    return sp.csr_matrix(rows[rng.permutation(len(rows))], dtype=np.float64)


def _kernels():
    tiled = pytest.importorskip("streamtopic._pairs").add_pairs_tiled
    from streamtopic._kernels import add_pairs_dense as numba_scalar
    from streamtopic._pairs import add_pairs_dense as c_scalar

    return tiled, c_scalar, numba_scalar


@pytest.fixture(scope="module")
def mixed():
    H = _mixed_counts(11)
    return H, co._weighted_docs(H)[0]


@pytest.mark.parametrize("bounds", BOUNDS)
@pytest.mark.parametrize("density", [0.0, co.BLAS_DENSITY, None])
def test_tiled_kernel_equals_scalar_and_scipy(mixed, bounds, density):
    """Every document through BLAS (density 0), the default split, or none (no dgemm): the
    sum equals the scalar kernels' (C, numba) and scipy's Hᵀ W H to 1e-12 relative, entry by
    entry, and adds into what the running sum holds."""
    tiled, c_scalar, numba_scalar = _kernels()
    H, part = mixed
    r0, r1, c0, c1 = bounds
    args = (part.indptr, part.indices, part.data, part.w, r0, r1, c0, c1)
    gemm = None if density is None else co._dgemm()
    got = np.zeros((r1 - r0, c1 - c0))
    tiled(got, *args, gemm, 0.0 if density is None else density)
    for scalar in (c_scalar, numba_scalar):
        ref = np.zeros_like(got)
        scalar(ref, *args)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
    full = (H.T @ sp.diags(part.w) @ H).toarray()[r0:r1, c0:c1]
    np.testing.assert_allclose(got, full, rtol=1e-12, atol=0)
    S, _ = co.document_cooccurrence(H)  # the estimator, its diagonal exact: compare off it
    off = np.arange(r0, r1)[:, None] != np.arange(c0, c1)[None, :]
    np.testing.assert_allclose(got[off], S.toarray()[r0:r1, c0:c1][off], rtol=1e-12, atol=0)
    again = np.full_like(got, 0.5)
    tiled(again, *args, gemm, 0.0 if density is None else density)
    np.testing.assert_allclose(again - 0.5, got, rtol=1e-12, atol=1e-15)


def test_tiled_kernel_is_deterministic_and_in_place(mixed):
    """The same documents give the same bits, call after call, whatever the memory holds
    around the sum; the sum is written through the array given (a view of a padded array
    too: BLAS writes the tiles in place, through their row stride)."""
    tiled, _, _ = _kernels()
    _, part = mixed
    r0, r1, c0, c1 = 0, 512, 0, V
    args = (part.indptr, part.indices, part.data, part.w, r0, r1, c0, c1, co._dgemm(), 0.05)
    first = np.zeros((r1 - r0, c1 - c0))
    tiled(first, *args)
    for k in range(3):
        padded = np.zeros((r1 - r0, c1 - c0 + 8 + k))
        view = padded[:, : c1 - c0]
        tiled(view, *args)
        assert np.array_equal(view, first)
        assert not padded[:, c1 - c0 :].any()  # nothing written past the rows
    with pytest.raises(TypeError):
        tiled(np.zeros((c1 - c0, r1 - r0)).T, *args)  # columns not contiguous


def test_chains_blas_and_merged_links_equal_scalar(mixed, monkeypatch):
    """Each group's chain (dense and sparse running sums, groups of several blocks of 128
    words) gives the scalar kernel's sum to 1e-12 relative, with one partition a link or the
    partitions merged into one link input."""
    H, _ = mixed
    grid = co._make_grid(V, 128)
    assert any(len(grid.blocks(i, g)) > 1 for i, g in grid.groups)
    parts = [[(co._weighted_docs(H[k : k + 60])[0], None)] for k in range(0, H.shape[0], 60)]
    links = {"partition": [co._docs_of(p) for p in parts], "merged": [co._docs_of(*parts)]}

    def chains(method, inputs):
        monkeypatch.setattr(co, "PAIR_METHOD", method)
        out = []
        for i, g in grid.groups:
            acc = None
            for part in inputs:
                acc = co._accumulate_piece(acc, part, (*grid.rows(i), *grid.cols(i, g)))
            acc = co._finished(acc)
            out.append(acc.toarray() if sp.issparse(acc) else acc)
        return out

    ref = chains("scalar", links["partition"])
    for method, name in (("blas", "partition"), ("blas", "merged"), ("scalar", "merged")):
        for got, want in zip(chains(method, links[name]), ref, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_merged_link_inputs_are_the_stacked_documents(mixed):
    H, _ = mixed
    parts = [[(co._weighted_docs(H[k : k + 70])[0], None)] for k in range(0, H.shape[0], 70)]
    merged = co._docs_of(*parts[:2], [(None, None)], *parts[2:])
    whole = co._weighted_docs(H)[0]
    for name in ("indptr", "indices", "data", "w"):
        assert np.array_equal(getattr(merged, name), getattr(whole, name))
    assert co._docs_of([(None, None)]) is None


def _write_uci(H: sp.csr_matrix, path, name: str = "mixed") -> str:
    """H as a UCI docword file (and its vocabulary beside it); returns the docword path."""
    C = H.tocoo()
    docword = path / f"docword.{name}.txt"
    with open(docword, "w") as fh:
        fh.write(f"{H.shape[0]}\n{H.shape[1]}\n{C.nnz}\n")
        order = np.lexsort((C.col, C.row))
        for r, c, v in zip(C.row[order], C.col[order], C.data[order], strict=True):
            fh.write(f"{r + 1} {c + 1} {int(v)}\n")
    (path / f"vocab.{name}.txt").write_text("".join(f"w{j:04d}\n" for j in range(H.shape[1])))
    return str(docword)


def test_whole_ingest_blas_equals_scalar(tmp_path, monkeypatch):
    """A store ingested with the tiled BLAS kernel and merged links holds the scalar
    kernel's Q (one partition a link, as before) to 1e-12 relative, and the same bits when
    ingested again; both equal the dense reference."""
    pytest.importorskip("streamtopic._pairs")
    H = _mixed_counts(5, n_long=60, n_short=600)
    docword = _write_uci(H, tmp_path)
    stores = {}
    for name, method, link_bytes in (("scalar", "scalar", 0), ("blas", "blas", 2**30),
                                     ("again", "blas", 2**30)):
        monkeypatch.setattr(co, "PAIR_METHOD", method)
        monkeypatch.setattr(co, "LINK_BYTES", link_bytes)
        st.ingest(docword, tmp_path / f"{name}.zarr", progress=False, chunk_size=256,
                  min_df=1, max_df=1.0, blocksize=64 * 1024)
        stores[name] = st.CooccurrenceStore.open(tmp_path / f"{name}.zarr").Q_sum.compute()
    assert rel_err(stores["blas"], stores["scalar"]) <= 1e-12
    assert np.array_equal(stores["blas"], stores["again"])
    store = st.CooccurrenceStore.open(tmp_path / "blas.zarr")
    order = [int(t[1:]) for t in store.vocab]
    Hs = H[:, order]
    ref = co.document_cooccurrence(Hs)[0].toarray()
    assert rel_err(stores["blas"], ref) <= 1e-12
