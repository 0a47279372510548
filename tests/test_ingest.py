"""Ingestion: Q in the store equals an independent dense computation; incremental updates."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tarfile

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import streamtopic as st
from streamtopic.cli import main
from streamtopic.cooccurrence import DuplicateInputError, document_cooccurrence
from streamtopic.synth import default_vocab
from streamtopic.vocabulary import LEGACY_TOKEN_PATTERN, Tokenizer

from ._reference import (
    count_matrix,
    dense_cooccurrence_sum,
    prune,
    read_tar_docs,
    read_uci,
    tokenize,
)


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _aligned_reference(H, terms, store, lengths=None):
    """Reference Σ Q_d with rows/columns in the store's vocabulary order (``lengths``: the
    documents' input lengths, default the row sums of ``H``)."""
    pos = {t: i for i, t in enumerate(terms)}
    assert sorted(store.vocab) == sorted(terms)
    order = [pos[t] for t in store.vocab]
    Hs = sp.csr_matrix(H)[:, order]
    return dense_cooccurrence_sum(Hs, lengths), Hs


# ------------------------------------------------------------------------ exactness on real data


@pytest.mark.slow
def test_kos_matches_dense_reference(kos_dir, tmp_path, pair_kernels):
    """KOS' Q equals a dense computation, with either pair kernel (C when built, numba)."""
    kos = kos_dir
    report = st.ingest(str(kos / "docword.kos.txt.gz"), tmp_path / "kos.zarr", progress=False)
    store = st.CooccurrenceStore.open(tmp_path / "kos.zarr")
    H, terms = read_uci(str(kos / "docword.kos.txt.gz"), str(kos / "vocab.kos.txt"))
    Hp, kept = prune(H, terms, min_df=5, max_df=0.5, keep_n=100_000)
    assert store.vocab == kept  # same terms, same order (df descending, then term)
    n = np.asarray(H.sum(axis=1)).ravel()  # each document's length in the input
    ref, Hs = _aligned_reference(Hp, kept, store, lengths=n)
    got = store.Q_sum.compute()
    assert rel_err(got, ref) <= 1e-12
    assert store.n_docs == report.n_docs == int((n >= 2).sum())
    assert store.n_tokens == int(n[n >= 2].sum())
    np.testing.assert_array_equal(store.word_counts, np.asarray(Hs[n >= 2].sum(axis=0)).ravel())
    np.testing.assert_array_equal(store.doc_freq, np.asarray((Hs[n >= 2] > 0).sum(axis=0)).ravel())
    assert report.n_oov_tokens == int(H.sum() - Hp.sum())
    np.testing.assert_allclose(store.Q.sum().compute(), 1.0, rtol=1e-12)


@pytest.mark.slow
def test_20newsgroups_matches_dense_reference(newsgroups_tar, tmp_path):
    tar = newsgroups_tar
    # the tokenisation the reference implements: scikit-learn's pattern on whole files
    legacy = Tokenizer(token_pattern=LEGACY_TOKEN_PATTERN, stop_words="none",
                       drop_encoded=False, drop_addresses=False)
    st.ingest(str(tar), tmp_path / "ng.zarr", keep_n=1500, progress=False, tokenizer=legacy,
              strip_headers=False)
    store = st.CooccurrenceStore.open(tmp_path / "ng.zarr")
    docs = [tokenize(d) for d in read_tar_docs(str(tar))]
    assert len(docs) == 18_846
    H, terms = count_matrix(docs)
    Hp, kept = prune(H, terms, min_df=5, max_df=0.5, keep_n=1500)
    assert store.vocab == kept
    n = np.asarray(H.sum(axis=1)).ravel()  # each document's tokens, in the vocabulary or not
    ref, _ = _aligned_reference(Hp, kept, store, lengths=n)
    assert rel_err(store.Q_sum.compute(), ref) <= 1e-12
    assert store.n_docs == int((n >= 2).sum())


def _random_docs(rng, n_docs, vocab, mean_len=30):
    lens = rng.poisson(mean_len, size=n_docs)
    p = rng.dirichlet(np.full(len(vocab), 0.3))
    return [[vocab[i] for i in rng.choice(len(vocab), size=k, p=p)] for k in lens]


def _write_all_formats(tmp_path, docs, vocab):
    """The same documents as text, gzip text, JSON Lines, UCI, HDF5, a tree and a tarball."""
    out = {}
    text = "\n".join(" ".join(d) for d in docs) + "\n"
    (tmp_path / "c.txt").write_text(text)
    out["text"] = tmp_path / "c.txt"
    with gzip.open(tmp_path / "cz.txt.gz", "wt") as fh:
        fh.write(text)
    out["text.gz"] = tmp_path / "cz.txt.gz"
    with open(tmp_path / "c.jsonl", "w") as fh:
        for i, d in enumerate(docs):
            fh.write(json.dumps({"id": i, "body": " ".join(d)}) + "\n")
    out["jsonl"] = tmp_path / "c.jsonl"
    index = {t: i for i, t in enumerate(vocab)}
    entries = []
    for di, d in enumerate(docs):
        ids, cnt = np.unique([index[t] for t in d], return_counts=True)
        entries += [(di + 1, i + 1, c) for i, c in zip(ids.tolist(), cnt.tolist(), strict=True)]
    with open(tmp_path / "docword.syn.txt", "w") as fh:
        fh.write(f"{len(docs)}\n{len(vocab)}\n{len(entries)}\n")
        fh.writelines(f"{a} {b} {c}\n" for a, b, c in entries)
    (tmp_path / "vocab.syn.txt").write_text("\n".join(vocab) + "\n")
    out["uci"] = tmp_path / "docword.syn.txt"
    tree = tmp_path / "tree"
    for i, d in enumerate(docs):
        sub = tree / f"g{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{i:05d}").write_text(" ".join(d))
    out["files"] = tree
    with tarfile.open(tmp_path / "c.tar.gz", "w:gz") as tf:
        tf.add(tree, arcname="tree")
    out["tar"] = tmp_path / "c.tar.gz"
    H, terms = count_matrix(docs)
    with st.corpus.HDF5CorpusWriter(tmp_path / "c.h5") as w:
        w.append(H.astype(np.int32), terms)
    out["hdf5"] = tmp_path / "c.h5"
    return out


def test_every_format_gives_the_same_exact_q(tmp_path):
    rng = np.random.default_rng(7)
    vocab = default_vocab(120)  # letters only: every word is a token
    docs = _random_docs(rng, 400, vocab)
    docs[5] = [vocab[1]]  # a one-token document: skipped and counted
    docs[9] = []
    paths = _write_all_formats(tmp_path, docs, vocab)
    H, terms = count_matrix(docs)
    ref = None
    for name, path in paths.items():
        store_path = tmp_path / f"{name}.zarr"
        kw = {"text_field": "body"} if name == "jsonl" else {}
        rep = st.ingest(str(path), store_path, min_df=1, max_df=1.0, chunk_size=50,
                        blocksize=2000, progress=False, **kw)
        store = st.CooccurrenceStore.open(store_path)
        if ref is None:
            ref, _ = _aligned_reference(H, terms, store)
        got = store.Q_sum.compute()
        assert rel_err(got, ref) <= 1e-12, name
        assert store.n_docs == 398, name
        # files, tarball and UCI count the empty document; every reader counts the 1-token one
        assert rep.n_skipped_docs >= 1, name
    # the tree and the tarball hold documents in path order, like the others; so do their Qs
    assert store.vocab == st.CooccurrenceStore.open(tmp_path / "text.zarr").vocab


@pytest.mark.slow
def test_partitioning_does_not_change_q(kos_dir, tmp_path):
    """Record-aligned splits: tiny partitions, plain and gzip files, all give the same Q."""
    kos = kos_dir
    plain = tmp_path / "docword.kos.txt"
    with gzip.open(kos / "docword.kos.txt.gz", "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(kos / "vocab.kos.txt", tmp_path / "vocab.kos.txt")
    corpus = st.read_corpus(str(plain), blocksize=50_000)
    assert corpus.npartitions > 20
    q = {}
    for name, path, bs in [("plain-small", plain, 50_000), ("gz", kos / "docword.kos.txt.gz", None),
                           ("plain-one", plain, 10**9)]:
        st.ingest(str(path), tmp_path / f"{name}.zarr", blocksize=bs, min_df=1, max_df=1.0,
                  progress=False)
        q[name] = st.CooccurrenceStore.open(tmp_path / f"{name}.zarr").Q_sum.compute()
    assert rel_err(q["plain-small"], q["plain-one"]) <= 1e-12
    assert rel_err(q["gz"], q["plain-one"]) <= 1e-12


def test_gzip_text_splits_are_line_aligned(tmp_path):
    lines = [f"doc{i} " + " ".join([f"tok{i % 17}"] * (1 + i % 5)) for i in range(5000)]
    with gzip.open(tmp_path / "t.txt.gz", "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    for name in ("t.txt.gz", "t.txt"):
        corpus = st.read_corpus(str(tmp_path / name), blocksize=3000)
        assert corpus.npartitions > 4
        n = sum(ch.n_docs for ch in corpus.iter_chunks())
        assert n == 5000, name


# ------------------------------------------------------------------------ incremental updates


def _two_corpora(tmp_path):
    rng = np.random.default_rng(3)
    vocab = default_vocab(80)
    a = _random_docs(rng, 300, vocab)
    b = _random_docs(rng, 200, vocab)
    b[0] = b[0] + ["brandnew", "brandnew", "unseen"]  # out of the frozen vocabulary
    pa, pb = tmp_path / "a.txt", tmp_path / "b.txt"
    pa.write_text("\n".join(" ".join(d) for d in a) + "\n")
    pb.write_text("\n".join(" ".join(d) for d in b) + "\n")
    return pa, pb


def test_incremental_equals_joint(tmp_path):
    pa, pb = _two_corpora(tmp_path)
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(default_vocab(80)) + "\n")
    st.ingest(str(pa), tmp_path / "inc.zarr", vocab=str(vocab_file), chunk_size=16,
              progress=False)
    rep = st.ingest(str(pb), tmp_path / "inc.zarr", progress=False)
    assert rep.n_oov_tokens == 3
    st.ingest([str(pa), str(pb)], tmp_path / "joint.zarr", vocab=str(vocab_file),
              chunk_size=16, progress=False)
    inc = st.CooccurrenceStore.open(tmp_path / "inc.zarr")
    joint = st.CooccurrenceStore.open(tmp_path / "joint.zarr")
    assert inc.version == 2 and joint.version == 1
    assert rel_err(inc.Q_sum.compute(), joint.Q_sum.compute()) <= 1e-12
    assert rel_err(inc.Q.compute(), joint.Q.compute()) <= 1e-12
    assert inc.n_docs == joint.n_docs and inc.n_tokens == joint.n_tokens
    np.testing.assert_array_equal(inc.word_counts, joint.word_counts)
    np.testing.assert_array_equal(inc.doc_freq, joint.doc_freq)
    assert [s["path"] for s in inc.sources] == [str(pa), str(pb)]
    assert [s["version"] for s in inc.sources] == [1, 2]
    assert inc.info()["n_oov_tokens"] == 3


def test_update_rewrites_only_touched_blocks(tmp_path):
    vocab = default_vocab(40)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")

    def words(*ids: int) -> str:
        return " ".join(vocab[i] for i in ids)

    (tmp_path / "a.txt").write_text(f"{words(0, 1, 30, 31)}\n{words(5, 35, 36)}\n")
    (tmp_path / "b.txt").write_text(f"{words(0, 1, 2)}\n{words(3, 4)}\n")  # block 0 only
    st.ingest(str(tmp_path / "a.txt"), tmp_path / "s.zarr", vocab=str(tmp_path / "vocab.txt"),
              chunk_size=10, progress=False)
    before = st.CooccurrenceStore.open(tmp_path / "s.zarr")
    q1 = before.Q_sum.compute()
    before.close()  # no reader holds version 1 any more: the update may delete its blocks
    st.ingest(str(tmp_path / "b.txt"), tmp_path / "s.zarr", progress=False)
    after = st.CooccurrenceStore.open(tmp_path / "s.zarr")
    bv = after.block_versions
    assert bv[0, 0] == 2  # changed by the update
    assert bv[0, 3] == 1 and bv[3, 3] == 1  # untouched, still read from version 1
    assert bv[1, 1] == 0  # never written: all zero
    q2 = after.Q_sum.compute()
    np.testing.assert_array_equal(q2[10:, :], q1[10:, :])
    add, _ = document_cooccurrence(
        sp.csr_matrix(np.array([[1, 1, 1, 0, 0] + [0] * 35, [0, 0, 0, 1, 1] + [0] * 35]))
    )
    np.testing.assert_allclose(q2 - q1, add.toarray(), rtol=0, atol=1e-15)
    # superseded data of version 1 is gone from disk, referenced blocks are kept (these
    # tiny blocks are sparse: both forms are checked)
    from streamtopic.store import block_files

    root = str(tmp_path / "s.zarr")
    assert before.block_sparse[0, 0] and before.block_sparse[0, 3]
    for sparse in (0, 1):
        assert not any(os.path.exists(f) for f in block_files(
            root, 1, slice(0, 10), slice(0, 10), 10, sparse))
    assert all(os.path.exists(f) for f in block_files(root, 1, slice(0, 10), slice(30, 40), 10,
                                                      1))
    # the in-memory read assembles the same Q from blocks of both versions and zero blocks
    np.testing.assert_array_equal(after.read_dense(normalised=False), q2)
    np.testing.assert_array_equal(after.read_dense(threads=1), after.Q.compute())


def test_duplicate_input_refused_or_skipped(tmp_path):
    pa, pb = _two_corpora(tmp_path)
    path = tmp_path / "d.zarr"
    st.ingest(str(pa), path, min_df=1, progress=False)
    q = st.CooccurrenceStore.open(path).Q_sum.compute()
    with pytest.raises(DuplicateInputError, match="already ingested"):
        st.ingest(str(pa), path, progress=False)
    rep = st.ingest([str(pa), str(pb)], path, skip_existing=True, progress=False)
    assert rep.skipped_inputs == [str(pa)]
    s = st.CooccurrenceStore.open(path)
    assert s.version == 2 and len(s.sources) == 2
    rep = st.ingest([str(pa), str(pb)], path, skip_existing=True, progress=False)
    assert rep.n_docs == 0 and st.CooccurrenceStore.open(path).version == 2
    # the same content under another path is another input
    shutil.copy(pa, tmp_path / "copy.txt")
    st.ingest(str(tmp_path / "copy.txt"), path, progress=False)
    assert st.CooccurrenceStore.open(path).version == 3
    assert not np.array_equal(q, st.CooccurrenceStore.open(path).Q_sum.compute())


def test_from_array_roundtrip(tmp_path):
    rng = np.random.default_rng(0)
    A = rng.random((30, 30))
    Q = (A + A.T) / (A + A.T).sum()
    vocab = [f"x{i}" for i in range(30)]
    s = st.CooccurrenceStore.from_array(Q, vocab, tmp_path / "pop.zarr", n_docs=1000,
                                        chunk_size=7)
    again = st.CooccurrenceStore.open(tmp_path / "pop.zarr")
    np.testing.assert_allclose(again.Q.compute(), Q, rtol=1e-14)
    np.testing.assert_allclose(again.Q_sum.compute(), Q * 1000, rtol=1e-14)
    assert again.n_docs == 1000 and again.vocab == vocab and not again.counts_known
    assert s.Q.chunks[0] == (7, 7, 7, 7, 2)


# ------------------------------------------------------------------------ command line


def test_cli_ingest_and_info(kos_docword, tmp_path):
    runner = CliRunner()
    store = tmp_path / "kos.zarr"
    docword = kos_docword
    res = runner.invoke(main, ["ingest", docword, "--store", str(store), "--local", "threads"])
    assert res.exit_code == 0, res.output
    assert "3,430 documents" in res.output
    res = runner.invoke(main, ["info", str(store)])
    assert res.exit_code == 0, res.output
    for field in ("vocabulary (V)", "documents", "tokens", "density", "size on disk", "sources:"):
        assert field in res.output
    res = runner.invoke(main, ["info", str(store), "--json"])
    info = json.loads(res.output)
    assert info["n_docs"] == 3430 and info["V"] == 6839 and info["sources"][0]["sha256"]
    assert 0 < info["density"] <= 1
    res = runner.invoke(main, ["ingest", docword, "--store", str(store), "--local", "threads"])
    assert res.exit_code != 0 and "already ingested" in res.output


@pytest.mark.slow
def test_cli_local_cluster_equals_threads(kos_docword, tmp_path):
    """The default local cluster (worker processes) gives exactly the threaded result."""
    runner = CliRunner()
    docword = kos_docword
    res = runner.invoke(main, ["ingest", docword, "--store", str(tmp_path / "c.zarr"),
                               "--workers", "2"])
    assert res.exit_code == 0, res.output
    st.ingest(docword, tmp_path / "t.zarr", progress=False)
    a = st.CooccurrenceStore.open(tmp_path / "c.zarr").Q_sum.compute()
    b = st.CooccurrenceStore.open(tmp_path / "t.zarr").Q_sum.compute()
    np.testing.assert_array_equal(a, b)


def test_progress_bar_shown(kos_docword, tmp_path, capsys):
    st.ingest(kos_docword, tmp_path / "p.zarr")
    err = capsys.readouterr().err
    # not a terminal: one line per stage with its time, no bar frames
    assert re.search(r"^co-occurrence: \d+\.\d\d s$", err, re.M), err
    assert "\r" not in err


@pytest.mark.slow
def test_convert_then_ingest_hdf5(kos_docword, tmp_path):
    runner = CliRunner()
    docword = kos_docword
    out = tmp_path / "kos.h5"
    res = runner.invoke(main, ["convert", docword, "-o", str(out), "--local", "threads", "-q"])
    assert res.exit_code == 0, res.output
    assert st.corpus.detect_format(str(out)) == "hdf5"
    st.ingest(str(out), tmp_path / "h.zarr", progress=False)
    st.ingest(docword, tmp_path / "u.zarr", progress=False)
    a = st.CooccurrenceStore.open(tmp_path / "h.zarr")
    b = st.CooccurrenceStore.open(tmp_path / "u.zarr")
    assert a.vocab == b.vocab
    assert rel_err(a.Q_sum.compute(), b.Q_sum.compute()) <= 1e-12


@pytest.mark.parametrize("bounds", [(0, 40, 0, 60), (13, 37, 5, 59), (40, 60, 0, 20)])
def test_accumulation_links_dense_and_sparse_paths_agree(bounds, pair_kernels):
    """A chain link adds the partition's Σ_d w_d h_d h_dᵀ on its rectangle, whether its running
    sum is dense (the pair kernel, C or numba) or sparse (scipy's product), in any order."""
    from streamtopic.cooccurrence import _accumulate_piece, _finished, _SparseSum, _weighted_docs

    rng = np.random.default_rng(3)
    H = sp.random(200, 60, density=0.15, format="csr", random_state=4,
                  data_rvs=lambda n: rng.integers(1, 4, n).astype(float))
    H = H[np.asarray(H.sum(axis=1)).ravel() >= 2]
    n = np.asarray(H.sum(axis=1)).ravel()
    w = 1.0 / (n - 1)  # per token: the default weights
    full = (H.T @ sp.diags(w) @ H).toarray()  # diagonal Σ h² w: the writer's to replace
    r0, r1, c0, c1 = bounds
    want = full[r0:r1, c0:c1]
    # two partitions, shuffled columns within rows: the part sorts them
    halves = [H[:100], H[100:]]
    parts = [_weighted_docs(h)[0] for h in halves]
    dense = _accumulate_piece(np.zeros((r1 - r0, c1 - c0)), parts[0], bounds)
    dense = _accumulate_piece(dense, parts[1], bounds)
    np.testing.assert_allclose(dense, want, rtol=1e-13, atol=1e-16)
    sparse = _SparseSum()
    for p in parts:
        sparse = _accumulate_piece(sparse, p, bounds)
    sparse = _finished(sparse)
    got = sparse.toarray() if sp.issparse(sparse) else sparse
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-16)
    # a fresh chain picks its path by the first partition's pair count
    first = _accumulate_piece(None, parts[0], bounds)
    assert isinstance(first, np.ndarray)  # 15% dense documents fill the rectangle
    empty = _accumulate_piece(None, None, bounds)
    assert empty is None


def test_sparse_running_sum_merges_like_a_binary_counter():
    """The sparse running sum of a chain equals the plain sum of its pieces, keeps few
    partial sums (about log2 of the pieces), and turns dense past DENSE_FRACTION."""
    from streamtopic.cooccurrence import DENSE_FRACTION, _add_piece, _finished

    rng = np.random.default_rng(0)
    pieces = [sp.random(300, 400, density=d, format="csr", random_state=k)
              for k, d in enumerate(rng.uniform(0.0005, 0.003, 64))]
    acc = None
    most = 0
    for p in pieces:
        acc = _add_piece(acc, p)
        most = max(most, len(acc.levels))
    assert most <= 2 * np.log2(len(pieces)) + 1
    want = sum(p.toarray() for p in pieces)
    np.testing.assert_allclose(_finished(acc).toarray(), want, rtol=1e-14, atol=0)
    dense = None
    for k in range(40):
        dense = _add_piece(dense, sp.random(50, 50, density=0.05, format="csr",
                                            random_state=100 + k))
    assert isinstance(dense, np.ndarray)  # the sum passed DENSE_FRACTION of the rectangle
    assert np.count_nonzero(dense) > DENSE_FRACTION * dense.size


def _random_part(seed: int, n_docs: int = 300, V: int = 700):
    from streamtopic.cooccurrence import _weighted_docs

    rng = np.random.default_rng(seed)
    H = sp.random(n_docs, V, density=0.03, format="csr", random_state=seed,
                  data_rvs=lambda n: rng.integers(1, 5, n).astype(float))
    H = H[np.asarray(H.sum(axis=1)).ravel() >= 2]
    return H, _weighted_docs(H)[0]


PAIR_BOUNDS = [(0, 700, 0, 700), (0, 300, 300, 700), (650, 700, 0, 10), (100, 101, 100, 101),
               (5, 600, 590, 600)]


@pytest.mark.parametrize("bounds", PAIR_BOUNDS)
def test_pair_kernel_equals_scipy(bounds, pair_kernels):
    """Each pair-kernel implementation (the C extension when built, the numba fallback
    always) adds scipy's product to 1e-13, into what is there, and counts the pairs."""
    H, part = _random_part(7)
    r0, r1, c0, c1 = bounds
    got = np.full((r1 - r0, c1 - c0), 0.5)  # adds into what is there
    pair_kernels.add_pairs_dense(got, part.indptr, part.indices, part.data, part.w,
                                 r0, r1, c0, c1)
    n = np.asarray(H.sum(axis=1)).ravel()
    full = (H.T @ sp.diags(1.0 / (n - 1)) @ H).toarray()  # per token: the default weights
    np.testing.assert_allclose(got - 0.5, full[r0:r1, c0:c1], rtol=1e-13, atol=1e-16)
    count = pair_kernels.count_pairs(part.indptr, part.indices, r0, r1, c0, c1)
    Hd = (H > 0).astype(np.int64)
    assert count == int((Hd[:, r0:r1].T @ Hd[:, c0:c1]).sum())


@pytest.mark.parametrize("bounds", PAIR_BOUNDS)
def test_compiled_pair_kernel_equals_numba(bounds, compiled_pairs):
    """The C pair kernels (``streamtopic._pairs``, what ingest uses when built) give exactly
    the numba kernels' sums and pair counts (same order of additions)."""
    from streamtopic import _kernels as numba_kernels
    from streamtopic.cooccurrence import pair_kernels

    c_kernels = compiled_pairs
    assert pair_kernels() == (c_kernels.add_pairs_dense, c_kernels.count_pairs)
    _, part = _random_part(7)
    r0, r1, c0, c1 = bounds
    args = (part.indptr, part.indices, part.data, part.w, r0, r1, c0, c1)
    got = np.full((r1 - r0, c1 - c0), 0.5)
    ref = got.copy()
    c_kernels.add_pairs_dense(got, *args)
    numba_kernels.add_pairs_dense(ref, *args)
    assert np.array_equal(got, ref)
    count = c_kernels.count_pairs(part.indptr, part.indices, r0, r1, c0, c1)
    assert count == numba_kernels.count_pairs(part.indptr, part.indices, r0, r1, c0, c1)


def test_pair_kernels_fall_back_to_numba(monkeypatch):
    """Without the C extension (no compiler at install), ingest takes the numba kernels."""
    import sys

    from streamtopic import _kernels as numba_kernels
    from streamtopic.cooccurrence import pair_kernels

    monkeypatch.setitem(sys.modules, "streamtopic._pairs", None)  # import fails
    assert pair_kernels() == (numba_kernels.add_pairs_dense, numba_kernels.count_pairs)


def test_compiled_pair_kernel_rejects_bad_arrays(compiled_pairs):
    """Wrong dtypes, shapes or unsorted ids are errors, never out-of-bounds writes."""
    add_pairs_dense, count_pairs = compiled_pairs.add_pairs_dense, compiled_pairs.count_pairs

    _, part = _random_part(8, n_docs=50, V=100)
    ok = (part.indptr, part.indices, part.data, part.w)
    with pytest.raises(TypeError, match="indices"):
        add_pairs_dense(np.zeros((100, 100)), part.indptr, part.indices.astype(np.int64),
                        part.data, part.w, 0, 100, 0, 100)
    with pytest.raises(TypeError, match="acc"):
        add_pairs_dense(np.zeros((100, 100), np.float32), *ok, 0, 100, 0, 100)
    with pytest.raises(TypeError, match="acc"):
        add_pairs_dense(np.zeros((100, 200))[:, ::2], *ok, 0, 100, 0, 100)
    with pytest.raises(ValueError, match="shape"):
        add_pairs_dense(np.zeros((100, 99)), *ok, 0, 100, 0, 100)
    with pytest.raises(ValueError, match="w"):
        add_pairs_dense(np.zeros((100, 100)), part.indptr, part.indices, part.data,
                        part.w[:-1], 0, 100, 0, 100)
    doc = int(np.argmax(np.diff(part.indptr) >= 2))
    bad = part.indices.copy()
    p = part.indptr[doc]
    bad[p], bad[p + 1] = bad[p + 1], bad[p]
    acc = np.zeros((100, 100))
    with pytest.raises(ValueError, match="increase"):
        add_pairs_dense(acc, part.indptr, bad, part.data, part.w, 0, 100, 0, 100)
    with pytest.raises(ValueError, match="increase"):
        count_pairs(part.indptr, bad, 0, 100, 0, 100)
    assert not acc.any()  # checked before anything is added


@pytest.mark.parametrize("cached", [True, False])
def test_new_store_reads_a_small_corpus_once(tmp_path, monkeypatch, cached):
    """A corpus is read and tokenised once for a new store's vocabulary and co-occurrence
    passes: kept in memory when small beside the memory budget, spilled to disk when large.
    Q is the same either way."""
    from streamtopic import cooccurrence, corpus

    rng = np.random.default_rng(3)
    vocab = default_vocab(80)
    docs = _random_docs(rng, 300, vocab)
    paths = _write_all_formats(tmp_path, docs, vocab)
    reads = []
    real = corpus._read_part
    monkeypatch.setattr(corpus, "_read_part",
                        lambda part, *rest: reads.append(1) or real(part, *rest))
    monkeypatch.setattr(cooccurrence, "CACHE_SHARE", 0.25 if cached else 0.0)
    st.ingest(str(paths["text"]), tmp_path / "s.zarr", min_df=1, max_df=1.0, blocksize=2000,
              progress=False)
    n_parts = corpus.read_corpus(str(paths["text"]), blocksize=2000).npartitions
    assert n_parts > 1 and len(reads) == n_parts
    H, terms = count_matrix(docs)
    store = st.CooccurrenceStore.open(tmp_path / "s.zarr")
    ref, _ = _aligned_reference(H, terms, store)
    assert rel_err(store.Q_sum.compute(), ref) <= 1e-12
