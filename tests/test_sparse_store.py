"""Sparse blocks in the store (issue 17): a block of Q with few non-zeros is stored as CSR,
every reader returns the same Q as a dense store would, updates move blocks between the two
forms, damage to a sparse block is found, and fits do not depend on the form."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp

import streamtopic as st
from streamtopic import store as store_mod
from streamtopic.cooccurrence import document_cooccurrence
from streamtopic.store import CooccurrenceStore, StoreError, block_files


def zipf_docs(path, n_docs: int, V: int, seed: int, length: int = 30) -> str:
    """Text documents over V letter-only words with Zipfian frequencies: the frequent words
    co-occur densely, the rare ones sparsely."""
    rng = np.random.default_rng(seed)
    words = [_word(i) for i in range(V)]
    p = 1.0 / np.arange(1, V + 1)
    p /= p.sum()
    with open(path, "w") as fh:
        for _ in range(n_docs):
            fh.write(" ".join(words[w] for w in rng.choice(V, size=length, p=p)) + "\n")
    return str(path)


def _word(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = "q"
    while True:
        out += letters[i % 26]
        i //= 26
        if i == 0:
            return out + "z"


def reference_q(path: str, vocab: list[str]) -> np.ndarray:
    """Σ_d Q_d of the text file over ``vocab`` (documents with 2+ in-vocabulary tokens),
    computed by scipy."""
    index = {t: k for k, t in enumerate(vocab)}
    rows, cols = [], []
    with open(path) as fh:
        for d, line in enumerate(fh):
            ids = [index[w] for w in line.split() if w in index]
            rows += [d] * len(ids)
            cols += ids
    H = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(d + 1, len(vocab)))
    H.sum_duplicates()
    H = H[np.asarray(H.sum(axis=1)).ravel() >= 2]
    Q, _ = document_cooccurrence(H)
    return Q.toarray()


def _ingest(inputs, store, **kw):
    if not os.path.exists(store):
        kw.update(min_df=1, max_df=1.0, stop_words="none")
    return st.ingest(inputs, store, progress=False, **kw)


def test_from_array_stores_sparse_blocks_and_every_reader_agrees(tmp_path):
    rng = np.random.default_rng(0)
    V, c = 700, 128
    A = sp.random(V, V, density=0.02, random_state=1).toarray()
    A[:128, :128] = rng.random((128, 128))
    Q = A + A.T
    Q /= Q.sum()
    s = CooccurrenceStore.from_array(Q, [f"w{i}" for i in range(V)], tmp_path / "a.zarr",
                                     n_docs=10, chunk_size=c)
    kinds = s.block_sparse
    assert not kinds[0, 0] and kinds[1, 1] and kinds[0, 3] and kinds[3, 0]
    np.testing.assert_allclose(s.read_dense(), Q, rtol=1e-15, atol=0)
    np.testing.assert_allclose(s.Q.compute(), Q, rtol=1e-15, atol=0)
    ids = np.array([3, 50, 129, 400, 699])
    np.testing.assert_allclose(s.read_submatrix(ids), Q[np.ix_(ids, ids)], rtol=1e-15, atol=0)
    assert s.verify() == [] and s.missing_blocks() == []
    info = s.info()
    assert info["blocks_sparse"] == int(kinds.sum())
    assert info["nnz"] == np.count_nonzero(Q)
    # one file per sparse block, and the store's size follows its non-zeros
    files = block_files(s.path, 1, *s.block_slices(1, 1), c, True)
    assert len(files) == 1 and os.path.isfile(files[0])
    assert info["bytes_per_nnz"] < 12


def test_ingest_mixes_dense_and_sparse_blocks_exactly(tmp_path):
    docs = zipf_docs(tmp_path / "a.txt", 400, 600, seed=1)
    _ingest(docs, str(tmp_path / "s.zarr"), chunk_size=64)
    with CooccurrenceStore.open(tmp_path / "s.zarr") as s:
        kinds = s.block_sparse
        assert kinds.any() and not kinds[0, 0]  # the frequent words' block is dense
        upper = np.triu(np.ones(kinds.shape, dtype=bool), 1)
        # a block above the diagonal is written once: its mirror reads it transposed
        assert np.isin(kinds[upper], (store_mod.DENSE, store_mod.SPARSE)).all()
        mirror = {store_mod.DENSE: store_mod.MIRRORED_DENSE, store_mod.SPARSE: store_mod.MIRRORED}
        np.testing.assert_array_equal(kinds.T[upper], [mirror[k] for k in kinds[upper]])
        assert (kinds[upper] == store_mod.DENSE).any() and (kinds[upper] == store_mod.SPARSE).any()
        for kind, stored in ((store_mod.MIRRORED, store_mod.SPARSE),
                             (store_mod.MIRRORED_DENSE, store_mod.DENSE)):
            i, j = np.argwhere(kinds == kind)[0]
            own = block_files(s.path, 1, *s.block_slices(i, j), s.chunk_size, stored)
            assert not os.path.exists(own[0])  # no file of its own
            src = block_files(s.path, 1, *s.block_slices(i, j), s.chunk_size, kind)
            assert os.path.exists(src[0])  # its mirror image's
        want = reference_q(docs, s.vocab)
        got = s.read_dense(normalised=False)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(s.Q_sum.compute(), want, rtol=1e-12, atol=1e-15)
        assert s.verify() == []
        assert s.info()["nnz"] == np.count_nonzero(want)


def test_updates_move_blocks_between_forms(tmp_path):
    """A sparse block that a later round fills becomes dense, and every version's Q equals
    a single ingest of the same inputs."""
    vocab = [_word(i) for i in range(40)]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (tmp_path / "a.txt").write_text(f"{vocab[0]} {vocab[12]}\n{vocab[1]} {vocab[2]}\n")
    rng = np.random.default_rng(5)
    lines = [" ".join(vocab[w] for w in rng.choice(20, size=12)) for _ in range(200)]
    (tmp_path / "b.txt").write_text("\n".join(lines) + "\n")
    inc, joint = str(tmp_path / "inc.zarr"), str(tmp_path / "joint.zarr")
    voc = str(tmp_path / "vocab.txt")
    st.ingest(str(tmp_path / "a.txt"), inc, vocab=voc, chunk_size=10, progress=False)
    with CooccurrenceStore.open(inc) as s:
        assert s.block_sparse[0, 1] and s.block_sparse[1, 0]
    st.ingest(str(tmp_path / "b.txt"), inc, progress=False)
    st.ingest([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], joint, vocab=voc,
              chunk_size=10, progress=False)
    with CooccurrenceStore.open(inc) as a, CooccurrenceStore.open(joint) as b:
        assert a.block_sparse[0, 1] == store_mod.DENSE  # became dense, its mirror too
        assert a.block_sparse[1, 0] == store_mod.MIRRORED_DENSE
        np.testing.assert_array_equal(a.block_sparse, b.block_sparse)
        np.testing.assert_allclose(a.read_dense(), b.read_dense(), rtol=1e-13, atol=0)
        assert a.verify() == []
        # version 1's sparse block was superseded and removed once no reader needed it
        assert not any(os.path.exists(f) for f in block_files(
            inc, 1, slice(0, 10), slice(10, 20), 10, store_mod.SPARSE))


@pytest.fixture
def mixed_store(tmp_path):
    path = str(tmp_path / "m.zarr")
    _ingest(zipf_docs(tmp_path / "a.txt", 400, 600, seed=2), path, chunk_size=64)
    return path


def _a_sparse_block(path):
    with CooccurrenceStore.open(path) as s:
        i, j = np.argwhere((s.block_sparse == store_mod.SPARSE) & (s.block_nnz > 0))[0]
        return block_files(path, int(s.block_versions[i, j]), *s.block_slices(i, j),
                           s.chunk_size, store_mod.SPARSE)[0]


def test_a_deleted_sparse_block_is_found(mixed_store):
    os.remove(_a_sparse_block(mixed_store))
    with CooccurrenceStore.open(mixed_store) as s:
        # the block and its mirror image, which reads it transposed, are both missing
        assert len(s.missing_blocks()) == 2
        problems = s.verify()
        assert len(problems) == 2 and all("missing" in p for p in problems)
        with pytest.raises(StoreError, match="is missing"):
            s.read_dense()
        with pytest.raises(StoreError, match="is missing"):
            s.Q.sum().compute()


def test_a_corrupted_sparse_block_fails_its_checksum(mixed_store):
    f = _a_sparse_block(mixed_store)
    raw = bytearray(open(f, "rb").read())
    raw[len(raw) // 2] ^= 0xFF
    open(f, "wb").write(bytes(raw))
    with CooccurrenceStore.open(mixed_store) as s:
        problems = s.verify()
        assert len(problems) == 2 and all("cannot be read" in p for p in problems)
        with pytest.raises(StoreError, match="cannot be read"):
            s.read_dense()


@pytest.mark.parametrize("method", ["plain", "rectified"])
def test_fits_do_not_depend_on_the_block_form(tmp_path, monkeypatch, method):
    docs = zipf_docs(tmp_path / "a.txt", 600, 400, seed=3)
    mixed = str(tmp_path / "mixed.zarr")
    _ingest(docs, mixed, chunk_size=64)
    monkeypatch.setattr(store_mod, "SPARSE_BELOW", 0.0)  # every block dense
    dense = str(tmp_path / "dense.zarr")
    _ingest(docs, dense, chunk_size=64)
    with CooccurrenceStore.open(mixed) as a, CooccurrenceStore.open(dense) as b:
        assert (a.block_sparse == store_mod.SPARSE).any()
        assert not (b.block_sparse == store_mod.SPARSE).any()
        np.testing.assert_array_equal(a.read_dense(), b.read_dense())
    fits = [st.AnchorTopicModel(4, method=method, seed=0, progress=False).fit(p)
            for p in (mixed, dense)]
    np.testing.assert_allclose(fits[0].components_, fits[1].components_, rtol=0, atol=1e-12)


def test_a_store_of_a_newer_format_is_refused(mixed_store):
    import json

    meta_path = os.path.join(mixed_store, "zarr.json")
    meta = json.load(open(meta_path))
    meta["attributes"]["streamtopic"]["format_version"] = 99
    json.dump(meta, open(meta_path, "w"))
    with pytest.raises(StoreError, match="newer streamtopic.*format 99"):
        CooccurrenceStore.open(mixed_store)


def test_groups_follow_the_expected_density_and_cover_the_triangle_once():
    """With document frequencies, a group spans blocks up to GROUP_BYTES of expected
    running sum (dense blocks count whole, mostly empty ones by their expected non-zeros)
    and at most SPARSE_RUN blocks, so the rare words' blocks share few groups; every block
    on and above the diagonal is in exactly one group."""
    from streamtopic.cooccurrence import GROUP_BYTES, SPARSE_RUN, _block_bytes, _make_grid

    V, c, n_docs = 40_000, 2000, 20_000
    df = np.maximum(1, (n_docs * 0.9 / np.arange(1, V + 1) ** 0.8)).astype(np.int64)
    uniform, shaped = _make_grid(V, c), _make_grid(V, c, df, n_docs)
    for grid in (uniform, shaped):
        seen = [(i, j) for i, g in grid.groups for j in grid.blocks(i, g)]
        assert sorted(seen) == [(i, j) for i in range(grid.nb) for j in range(i, grid.nb)]
    assert len(shaped.groups) < len(uniform.groups) / 2
    cost = _block_bytes(df.astype(float), n_docs, c)
    assert cost[0, 0] == 8.0 * c * c and cost[-1, -1] < 0.1 * 8.0 * c * c  # dense, sparse
    for i, g in shaped.groups:
        blocks = shaped.blocks(i, g)
        assert len(blocks) <= SPARSE_RUN
        assert len(blocks) == 1 or sum(cost[i, j] for j in blocks) <= GROUP_BYTES
    # dense blocks are grouped as without frequencies: the 1B-token store is all dense
    all_dense = np.full(V, n_docs, dtype=np.int64)
    assert _make_grid(V, c, all_dense, n_docs).runs == uniform.runs


def test_a_sparse_group_sum_is_cut_into_its_blocks_exactly():
    from streamtopic.cooccurrence import _column_blocks

    S = sp.random(50, 230, density=0.05, format="csr", random_state=0)
    parts = _column_blocks(S, 100, 50, range(2, 7), 330)
    dense = S.toarray()
    assert [p.shape for p in parts] == [(50, 50)] * 4 + [(50, 30)]
    for k, p in enumerate(parts):
        np.testing.assert_array_equal(p.toarray(), dense[:, 50 * k : 50 * k + p.shape[1]])
