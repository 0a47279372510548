"""EM refinement: the kernels, the stopping rule, the cached sample and its one full pass,
determinism, and ground truth on a semi-synthetic corpus."""

from __future__ import annotations

import itertools
import threading
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp

import streamtopic as st
import streamtopic.corpus as corpus_mod
from streamtopic import synth
from streamtopic._kernels import cvb0_estep
from streamtopic.corpus import read_corpus
from streamtopic.inference import infer_topics
from streamtopic.metrics import matched_l1
from streamtopic.model import AnchorTopicModel, ModelError
from streamtopic.refinement import ETA, RefineResult, refine_topics

from ._reference import em_expected_counts, em_theta

V, K = 500, 8
N_RARE = 30  # extra words, each in one document only
BLOCKSIZE = 40_000  # bytes of HDF5 per partition: about 30 partitions


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A semi-synthetic corpus (K = 8 topics over 500 words, 3,000 documents of about 60
    tokens) plus 30 rare words, each planted 3 times in one random document. Returns the true
    topics (V_all × K, the rare words at 0), the directory, the vocabulary and H (D × V_all)."""
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=2)
    d = tmp_path_factory.mktemp("refine")
    H = synth.sample_documents(A, 3000, alpha=0.1, doc_length=60, seed=3).tolil()
    rows = np.random.default_rng(4).choice(H.shape[0], N_RARE, replace=False)
    H.resize((H.shape[0], V + N_RARE))
    H[rows, V + np.arange(N_RARE)] = 3
    H = H.tocsr()
    vocab = synth.default_vocab(V) + [f"rare{i:02d}" for i in range(N_RARE)]
    with st.corpus.HDF5CorpusWriter(d / "c.h5") as w:
        w.append(H, vocab)
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    st.ingest(str(d / "c.h5"), d / "s.zarr", vocab=str(d / "vocab.txt"), progress=False)
    return np.vstack([A, np.zeros((N_RARE, K))]), d, vocab, H


def _parts(d):
    return read_corpus(str(d / "c.h5"), blocksize=BLOCKSIZE)


def _perturbed(A, seed=0, weight=0.5):
    """The true topics (K×V) mixed with random Dirichlet topics."""
    rng = np.random.default_rng(seed)
    noise = rng.dirichlet(np.full(A.shape[0], 1.0), A.shape[1])
    return (1 - weight) * A.T + weight * noise


@pytest.fixture
def reads(monkeypatch):
    """Counts the partitions read (by source and start) through the partition reader."""
    seen: Counter = Counter()
    lock = threading.Lock()
    real = corpus_mod._read_part

    def counting(part, *rest):
        with lock:
            seen[(part.source.path, part.start)] += 1
        return real(part, *rest)

    monkeypatch.setattr(corpus_mod, "_read_part", counting)
    return seen


def _expected_counts(res: RefineResult) -> np.ndarray:
    """N (K×V) of the last M-step, from β = (N + η) / (N_k + Vη)."""
    V_ = res.components.shape[1]
    return res.components * (res.topic_tokens + V_ * ETA)[:, None] - ETA


# ----------------------------------------------------------------------------- kernels


def _random_problem(seed, n_docs, n_words, n_topics, density, max_count):
    """Random topics β (K×V) and counts H (CSR), the kernels' CSR arrays and βᵀ."""
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(n_words, 0.1), n_topics)
    H = sp.random(n_docs, n_words, density=density, format="csr", random_state=seed + 1,
                  data_rvs=lambda n: rng.integers(1, max_count, n).astype(float))
    args = (H.indptr.astype(np.int64), H.indices.astype(np.int32), H.data)
    return beta, H, args, np.ascontiguousarray(beta.T), rng


def test_em_kernels_match_numpy():
    beta, H, args, bt, _ = _random_problem(0, 40, 200, 6, 0.1, 5)
    theta = np.empty((40, 6))
    em_theta(*args, bt, 0.01, 1e-12, 5000, theta)
    ref = np.vstack([infer_topics(beta, H[i], tol=1e-12, max_iter=5000) for i in range(40)])
    np.testing.assert_allclose(theta, ref, atol=1e-8)
    out = np.zeros((200, 6))
    ll = em_expected_counts(*args, bt, theta, out)
    M = theta @ beta
    Hd = H.toarray()
    np.testing.assert_allclose(ll, (Hd * np.log(np.where(Hd > 0, M, 1))).sum(), rtol=1e-12)
    N = out.T * beta  # expected counts: each document's tokens shared out among topics
    np.testing.assert_allclose(N, theta.T @ (Hd / M) * beta, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(N.sum(), Hd.sum(), rtol=1e-12)


def test_warm_start_reaches_the_same_theta_with_less_work():
    """θ's MAP estimate is unique (α > 0): a warm start changes the iterations, not θ."""
    _, _, args, bt, rng = _random_problem(4, 60, 300, 7, 0.08, 4)
    cold = np.empty((60, 7))
    n_cold = em_theta(*args, bt, 0.1, 1e-13, 20000, cold)
    near = cold + rng.normal(0, 1e-3, cold.shape)
    near = np.abs(near) / np.abs(near).sum(axis=1, keepdims=True)
    n_warm = em_theta(*args, bt, 0.1, 1e-13, 20000, near, True)
    np.testing.assert_allclose(near, cold, atol=1e-9)
    assert n_warm < n_cold, (n_warm, n_cold)
    ignored = np.full((60, 7), 0.5)  # without warm, the start given is ignored
    assert em_theta(*args, bt, 0.1, 1e-13, 20000, ignored) == n_cold
    np.testing.assert_array_equal(ignored, cold)


def _cvb0_reference(H, beta, alpha, tol, max_iter):
    """CVB0 with the topics fixed, one document at a time in numpy, by plain fixed-point
    iteration (no acceleration, float64): N_d (n×K), the expected counts (V×K), the
    log-likelihood and the iterations."""
    K, V_ = beta.shape
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), (K,))  # symmetric or per topic
    N_all, out, ll, iters = np.zeros((H.shape[0], K)), np.zeros((V_, K)), 0.0, 0
    for d in range(H.shape[0]):
        idx, h = H.indices[H.indptr[d]:H.indptr[d + 1]], H.data[H.indptr[d]:H.indptr[d + 1]]
        B = beta[:, idx].T  # nnz × K
        N = np.full(K, h.sum() / K)
        R = (N + alpha) * B
        R /= R.sum(axis=1, keepdims=True)
        for it in range(max_iter):
            R = (N - R + alpha) * B  # one token of the word left out
            R /= R.sum(axis=1, keepdims=True)
            new = h @ R
            done = np.abs(new - N).max() < tol * (h.sum() + alpha.sum())
            N = new
            if done or it + 1 == max_iter:
                iters += it + 1
                break
        N_all[d] = N
        np.add.at(out, idx, h[:, None] * R)
        ll += h @ np.log(B @ ((N + alpha) / (N.sum() + alpha.sum())))
    return N_all, out, ll, iters


def _estep(args, bt, alpha, tol, max_iter, N, warm=False, step=None):
    """:func:`cvb0_estep` with the topics βᵀ cast to float32 and a zero ``step`` unless one
    is given; returns (maps, log-likelihood, expected counts V×K, the new step)."""
    step = np.zeros(N.shape, np.float32) if step is None else step.copy()
    out = np.zeros(bt.shape)
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float32), (bt.shape[1],)).copy()
    maps, ll = cvb0_estep(*args, np.ascontiguousarray(bt, dtype=np.float32), a, tol,
                          max_iter, N, step, warm, out)
    return maps, ll, out, step


def test_cvb0_kernel_matches_numpy():
    beta, H, args, bt, _ = _random_problem(1, 50, 300, 6, 0.05, 5)
    N = np.empty((50, 6))
    iters, ll, out, _ = _estep(args, bt, 0.05, 1e-7, 1000, N)
    N_ref, out_ref, ll_ref, _ = _cvb0_reference(H, beta, 0.05, 1e-12, 1000)
    # float32 responsibilities: the fixed point to about 1e-6 of a document's tokens
    np.testing.assert_allclose(N, N_ref, atol=1e-4)
    np.testing.assert_allclose(out, out_ref, atol=1e-4)
    np.testing.assert_allclose(ll, ll_ref, rtol=1e-6)
    np.testing.assert_allclose(out.sum(axis=0), N.sum(axis=0))  # every token shared out
    np.testing.assert_allclose(N.sum(axis=1), np.asarray(H.sum(axis=1)).ravel())
    # the fixed point leaves each token out: a one-token document's responsibilities are
    # p(k | w) ∝ α β_kw, not pulled towards the topic the token itself favours
    one = sp.csr_matrix(([1.0], [7], [0, 1]), shape=(1, 300))
    N1 = np.empty((1, 6))
    _estep((np.array([0, 1]), np.array([7], np.int32), one.data), bt, 0.05, 1e-9, 1000, N1)
    np.testing.assert_allclose(N1[0], beta[:, 7] / beta[:, 7].sum(), atol=1e-6)
    # a warm start reaches the same counts in fewer maps
    warm = N_ref + 0.01
    again = _estep(args, bt, 0.05, 1e-7, 1000, warm, True)[0]
    np.testing.assert_allclose(warm, N, atol=1e-4)
    assert again < iters, (again, iters)


def test_cvb0_kernel_with_one_pseudo_count_per_topic_matches_numpy():
    """An asymmetric α (one pseudo-count per topic, the refinement's prior from the
    spectral estimate) gives the fixed point of the numpy reference with that α, not the
    symmetric one's."""
    beta, H, args, bt, _ = _random_problem(2, 40, 200, 5, 0.05, 6)
    alpha = np.array([0.5, 0.02, 0.1, 1.0, 0.05])
    N = np.empty((40, 5))
    _, ll, out, _ = _estep(args, bt, alpha, 1e-7, 1000, N)
    N_ref, out_ref, ll_ref, _ = _cvb0_reference(H, beta, alpha, 1e-12, 1000)
    np.testing.assert_allclose(N, N_ref, atol=1e-4)
    np.testing.assert_allclose(out, out_ref, atol=1e-4)
    np.testing.assert_allclose(ll, ll_ref, rtol=1e-6)
    N_sym = _cvb0_reference(H, beta, alpha.mean(), 1e-12, 1000)[0]
    assert np.abs(N_sym - N_ref).max() > 1e-2  # the prior's shape matters


def test_cvb0_kernel_accelerates_long_documents_and_bounds_the_maps():
    """SQUAREM reaches the fixed point of slowly converging documents (2,000 tokens,
    overlapping topics) as closely as plain iteration in under 60% of its maps, and
    ``max_iter`` bounds every document's maps."""
    rng = np.random.default_rng(7)
    A = rng.dirichlet(np.full(400, 0.3), 8).T  # overlapping topics: slow plain iteration
    H = synth.sample_documents(A, 30, alpha=0.3, doc_length=2000, seed=8).tocsr()
    args = (H.indptr.astype(np.int64), H.indices.astype(np.int32), H.data.astype(float))
    N = np.empty((30, 8))
    maps = _estep(args, A, 0.01, 1e-5, 1000, N)[0]
    N_ref, _, _, plain = _cvb0_reference(H, A.T, 0.01, 1e-5, 1000)
    fixed = _cvb0_reference(H, A.T, 0.01, 1e-9, 20000)[0]
    assert maps < 0.6 * plain, (maps, plain)
    assert np.abs(N - fixed).max() < 1.5 * np.abs(N_ref - fixed).max()
    assert _estep(args, A, 0.01, 1e-5, 3, np.empty((30, 8)))[0] == 3 * 30


def test_cvb0_warm_start_extrapolated_by_the_last_change_saves_maps():
    """Topics that drift smoothly from pass to pass (as EM's do late on real corpora): a pass
    started from the last counts moved by their change in the previous pass (``step``) needs
    fewer maps than one started from the last counts alone, and reaches the same counts."""
    A, _ = synth.dirichlet_topics_with_anchors(300, 6, beta=0.05, seed=11)
    H = synth.sample_documents(A, 200, alpha=0.1, doc_length=500, seed=12).tocsr()
    args = (H.indptr.astype(np.int64), H.indices.astype(np.int32), H.data.astype(float))
    far = _perturbed(A, seed=13, weight=1.0)

    def topics(t):  # the truth moving towards other topics
        return ((1 - 0.03 * t) * A.T + 0.03 * t * far).T

    maps = {}
    for moved in (False, True):
        N, step, maps[moved] = np.empty((200, 6)), None, 0
        for t in range(8):
            m, _, _, new = _estep(args, topics(t), 0.01, 1e-4, 100, N, t > 0, step)
            step = new if moved else None
            maps[moved] += m if t >= 2 else 0
    assert maps[True] < 0.8 * maps[False], maps
    N_ref = _cvb0_reference(H, topics(7).T, 0.01, 1e-9, 5000)[0]
    np.testing.assert_allclose(N, N_ref, atol=1e-3 * 500)  # the last (extrapolated) pass'


def test_cvb0_kernel_results_do_not_depend_on_the_heap(corpus):
    """The same inputs give the same bits whatever lies next to the arrays in memory, on
    several threads (the vectorised sums must not fall back to another order; see
    streamtopic._kernels). The partitions' documents index their own words."""
    from streamtopic.refinement import _docs_of

    A, d, vocab, H = corpus
    c = _parts(d)
    docs = [_docs_of(corpus_mod._read_part(p, c.tokenizer), vocab) for p in c.parts[:6]]
    rows = 0
    for dc in docs:  # local word positions map back onto the corpus' rows
        local = sp.csr_matrix((dc.data, dc.indices, dc.indptr), (dc.n_docs, dc.words.size))
        assert (np.diff(dc.words) > 0).all()
        full = np.zeros((dc.n_docs, len(vocab)))
        full[:, dc.words] = local.toarray()
        np.testing.assert_array_equal(full, H[rows:rows + dc.n_docs].toarray())
        rows += dc.n_docs
    bt = np.ascontiguousarray(_perturbed(A).T, dtype=np.float32)

    def run(i, warm=None):
        N = np.empty((docs[i].n_docs, K)) if warm is None else warm.copy()
        step = np.full(N.shape, 0.1, np.float32)
        out = np.zeros((docs[i].words.size, K))
        ll = cvb0_estep(docs[i].indptr, docs[i].indices, docs[i].data,
                        np.ascontiguousarray(bt[docs[i].words]), np.full(K, 0.01, np.float32),
                        1e-3, 100, N, step,
                        warm is not None, out)[1]
        return N.tobytes() + out.tobytes() + step.tobytes(), ll

    first = [run(i) for i in range(len(docs))]
    warm = [np.frombuffer(f[0][:docs[i].n_docs * K * 8]).reshape(-1, K) + 0.3
            for i, f in enumerate(first)]
    first_warm = [run(i, w) for i, w in enumerate(warm)]
    differ: list[bool] = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, len(docs), 300):
            junk = [np.full(int(n), np.nan) for n in rng.integers(1, 5000, 3)]  # moves arrays
            differ.append(run(i) != first[i] or run(i, warm[i]) != first_warm[i])
            del junk

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(differ) == 900 and not any(differ), sum(differ)


_COMPILED_OR_CACHED = """
import hashlib, sys
import numpy as np
from streamtopic.corpus import read_corpus
from streamtopic.refinement import refine_topics
start = np.load(sys.argv[2])
vocab = open(sys.argv[3]).read().split()
res = refine_topics(start, read_corpus(sys.argv[1], blocksize=40_000), vocab, passes=5)
sys.stdout.write(hashlib.sha256(res.components.tobytes()).hexdigest())
"""


@pytest.mark.slow
def test_cvb0_kernels_compiled_and_cached_give_the_same_bits(corpus, tmp_path):
    """The kernels numba compiles in a process and the ones it loads from its cache in the
    next compute the same bits (with ``arcp`` among the fast-math flags they did not)."""
    import os
    import subprocess
    import sys

    A, d, _, _ = corpus
    np.save(tmp_path / "start.npy", _perturbed(A, weight=0.6))
    # no warm-up: the first run compiles in its own process, not in a child
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "STREAMTOPIC_WARMUP": "0"}
    cmd = [sys.executable, "-c", _COMPILED_OR_CACHED, str(d / "c.h5"),
           str(tmp_path / "start.npy"), str(d / "vocab.txt")]
    runs = [subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            for _ in range(2)]
    assert any((tmp_path / "numba").rglob("*.nbi"))  # the first run compiled and cached
    assert runs[0] == runs[1] and len(runs[0]) == 64


def test_kernels_with_words_no_topic_gives_a_probability():
    """Words whose β is 0 in every topic are left out: θ stays on the simplex, equal to θ of
    the document without them, and nothing is NaN."""
    beta, H, args, bt, _ = _random_problem(5, 30, 100, 5, 0.2, 4)
    dead = np.arange(0, 100, 3)
    beta[:, dead] = 0.0
    bt = np.ascontiguousarray(beta.T)
    theta = np.empty((30, 5))
    em_theta(*args, bt, 0.1, 1e-12, 5000, theta)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, rtol=1e-12)
    Hl = H.tolil()
    Hl[:, dead] = 0
    Hl = Hl.tocsr()
    Hl.eliminate_zeros()
    live = np.empty((30, 5))
    em_theta(Hl.indptr.astype(np.int64), Hl.indices.astype(np.int32), Hl.data, bt, 0.1,
             1e-12, 5000, live)
    np.testing.assert_allclose(theta, live, atol=1e-10)
    out = np.zeros((100, 5))
    assert np.isfinite(em_expected_counts(*args, bt, theta, out))
    assert np.isfinite(out).all() and not out[dead].any()
    N, N_live = np.empty((30, 5)), np.empty((30, 5))
    _, ll, out, _ = _estep(args, bt, 0.1, 1e-9, 5000, N)
    live_args = (Hl.indptr.astype(np.int64), Hl.indices.astype(np.int32), Hl.data)
    _, ll_live, out_live, _ = _estep(live_args, bt, 0.1, 1e-9, 5000, N_live)
    np.testing.assert_allclose(N, N_live, atol=1e-5)
    np.testing.assert_allclose(out, out_live, atol=1e-5)
    np.testing.assert_allclose(ll, ll_live, rtol=1e-6)
    assert np.isfinite(out).all() and not out[dead].any()


# ----------------------------------------------------------------------------- refine_topics


def test_stops_on_convergence_and_passes_runs_exactly(corpus):
    """Plain EM (``accelerate=False``): it stops at the first pass whose relative gain is
    below ``tol``; ``passes`` runs exactly that many."""
    A, d, vocab, _ = corpus
    start = _perturbed(A)
    res = refine_topics(start, _parts(d), vocab, tol=1e-4, max_passes=50, accelerate=False)
    assert res.extrapolations == [] and res.rejected == 0
    f = np.asarray(res.loglik_per_token)
    rel = (f[1:] - f[:-1]) / np.abs(f[1:])
    assert res.converged and 2 <= res.passes < 50, res.passes
    assert len(f) == len(res.seconds) == len(res.theta_iterations) == res.passes
    assert rel[-1] < 1e-4 and (rel[:-1] >= 1e-4).all(), rel  # stopped at the first pass below
    assert (np.diff(f) > 0).all(), f  # EM raises the likelihood
    iters = res.theta_iterations  # each pass starts from the previous pass' topic counts
    assert iters[-1] < 0.5 * iters[0], iters
    looser = refine_topics(start, _parts(d), vocab, tol=1e-2, accelerate=False)
    assert looser.passes < res.passes
    exact = refine_topics(start, _parts(d), vocab, passes=res.passes + 3)  # plain EM too
    assert exact.passes == len(exact.loglik_per_token) == res.passes + 3
    assert exact.extrapolations == []
    np.testing.assert_array_equal(exact.loglik_per_token[:res.passes], f)  # same path
    for accelerate in (False, True):
        capped = refine_topics(start, _parts(d), vocab, tol=0.0, max_passes=4,
                               accelerate=accelerate)
        assert capped.passes == 4 and not capped.converged


def test_squarem_reaches_plain_ems_likelihood_in_fewer_passes(corpus):
    """The default EM is accelerated by SQUAREM: cycles of two EM steps and an extrapolated
    one. Plain EM needs at least 4 more passes (here 20 against 14) to reach the likelihood
    where SQUAREM stops, which is at topics as close to the truth; only the plain steps
    test convergence."""
    A, d, vocab, _ = corpus
    start = _perturbed(A, weight=0.6)
    fast = refine_topics(start, _parts(d), vocab, tol=1e-5)
    plain = refine_topics(start, _parts(d), vocab, tol=0.0, max_passes=40, accelerate=False)
    assert fast.converged
    assert fast.extrapolations and all(a <= -1.0 for a in fast.extrapolations)
    f, p = np.asarray(fast.loglik_per_token), np.asarray(plain.loglik_per_token)
    reached = np.flatnonzero(p >= f.max())
    assert reached.size and reached[0] + 1 >= fast.passes + 4, (fast.passes, reached[:1])
    # a cycle is three passes; the stopping test is the second pass of one
    assert fast.passes % 3 == 2
    rel = (f[-1] - f[-2]) / abs(f[-1])
    assert rel < 1e-5
    assert (matched_l1(A, fast.components.T).mean
            <= matched_l1(A, plain.components.T).mean + 0.002)
    np.testing.assert_allclose(fast.components.sum(axis=1), 1.0)


def test_squarem_falls_back_to_the_plain_step_when_extrapolation_overshoots(corpus,
                                                                            monkeypatch):
    """Extrapolations forced far too long (a ≤ −30) are less likely than the plain steps
    before them: the safeguard rejects them and goes on from x₂, and the topics returned
    are the most likely ones evaluated, so the result is still as likely as plain EM's."""
    import streamtopic.refinement as refinement

    A, d, vocab, _ = corpus
    start = _perturbed(A, weight=0.6)
    monkeypatch.setattr(refinement, "SQUAREM_MIN_STEP", 30.0)
    wild = refine_topics(start, _parts(d), vocab, tol=0.0, max_passes=14)
    plain = refine_topics(start, _parts(d), vocab, tol=0.0, max_passes=9, accelerate=False)
    assert wild.rejected >= 1, wild.extrapolations
    f = np.asarray(wild.loglik_per_token)
    assert f.min() < f[0]  # an extrapolation fell below where EM started
    assert f.max() >= max(plain.loglik_per_token[:5])  # yet EM went on from the plain steps
    np.testing.assert_allclose(wild.components.sum(axis=1), 1.0)
    assert np.isfinite(wild.components).all() and (wild.components > 0).all()


def test_whole_corpus_sample_is_read_once_and_has_no_full_pass(corpus, reads):
    A, d, vocab, H = corpus
    c = _parts(d)
    assert c.npartitions >= 20
    res = refine_topics(_perturbed(A), c, vocab, passes=5)
    assert res.passes == 5 and not res.full_pass
    assert res.sample_partitions == res.partitions == c.npartitions
    assert res.sample_tokens == res.corpus_tokens == H.sum()
    assert len(reads) == c.npartitions and set(reads.values()) == {1}, reads
    N = _expected_counts(res)  # the M-step counted every token
    np.testing.assert_allclose(N.sum(axis=0), np.asarray(H.sum(axis=0)).ravel(), atol=1e-6)


def test_proper_subset_sample_ends_with_one_full_pass(corpus, reads):
    A, d, vocab, H = corpus
    c = _parts(d)
    total = int(H.sum())
    res = refine_topics(_perturbed(A), c, vocab, sample_tokens=total // 4)
    assert res.full_pass and res.converged
    assert 1 < res.sample_partitions < c.npartitions
    assert total // 4 <= res.sample_tokens < total // 2
    assert res.corpus_tokens == total and res.corpus_docs == H.shape[0]
    # every partition read exactly once: the sample before EM, the rest in the full pass
    assert len(reads) == c.npartitions and set(reads.values()) == {1}, reads
    N = _expected_counts(res)  # the last M-step counted every token of the corpus
    word_counts = np.asarray(H.sum(axis=0)).ravel()
    np.testing.assert_allclose(N.sum(axis=0), word_counts, atol=1e-6)
    # rare words outside the sample got rows from their document's topics (fold-in)
    sampled = np.zeros(H.shape[0], bool)
    for part in c.subset(res.sample_partition_indices).parts:
        sampled[part.start:part.stop] = True
    rare = np.arange(V, V + N_RARE)
    doc = H[:, rare].tocsc().indices  # the document of each rare word
    outside = rare[~sampled[doc]]
    assert 5 <= outside.size < N_RARE
    share = N[:, outside] / N[:, outside].sum(axis=0)
    theta = infer_topics(res.components, H[doc[~sampled[doc]]])
    np.testing.assert_array_equal(share.argmax(axis=0), theta.argmax(axis=1))
    assert (share.max(axis=0) > 2.5 / K).all(), share.max(axis=0)  # not flat


def test_a_sample_of_few_partitions_is_cut_into_pieces_with_the_same_result(corpus,
                                                                            monkeypatch):
    """A sample of fewer than ``SAMPLE_PIECES`` partitions runs its E-step as that many
    tasks of whole documents (a corpus read as one partition uses every core): every token
    is counted once, and the topics are those of the uncut partition, to rounding. A sample
    of more partitions is left in them."""
    import streamtopic.refinement as refinement

    A, d, vocab, H = corpus
    whole = read_corpus(str(d / "c.h5"), blocksize=2**30)
    assert whole.npartitions == 1
    start = _perturbed(A)
    tokens = int(H.sum())
    runs = {}
    for pieces in (1, 5):
        monkeypatch.setattr(refinement, "SAMPLE_PIECES", pieces)
        runs[pieces] = refine_topics(start, whole, vocab, passes=5)
    one, cut = runs[1], runs[5]
    assert one.sample_pieces == 1 and one.sample_partitions == cut.sample_partitions == 1
    assert cut.sample_pieces == 5
    assert cut.sample_tokens == one.sample_tokens == tokens
    assert cut.sample_docs == one.sample_docs == H.shape[0]
    np.testing.assert_allclose(_expected_counts(cut).sum(axis=0),
                               np.asarray(H.sum(axis=0)).ravel(), atol=1e-6)
    np.testing.assert_allclose(cut.components, one.components, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cut.loglik_per_token, one.loglik_per_token, rtol=1e-12)
    monkeypatch.undo()
    default = refine_topics(start, whole, vocab, passes=1)
    assert default.sample_pieces == refinement.SAMPLE_PIECES > 1
    parts = refine_topics(start, _parts(d), vocab, passes=1)  # about 30 partitions: as read
    assert parts.sample_pieces == parts.sample_partitions > refinement.SAMPLE_PIECES


def test_deterministic_under_the_seed(corpus):
    A, d, vocab, H = corpus
    kw = {"sample_tokens": int(H.sum()) // 3, "max_passes": 8}
    one = refine_topics(_perturbed(A), _parts(d), vocab, **kw)
    two = refine_topics(_perturbed(A), _parts(d), vocab, **kw)
    np.testing.assert_array_equal(one.components, two.components)
    assert one.loglik_per_token == two.loglik_per_token
    np.testing.assert_array_equal(one.sample_partition_indices, two.sample_partition_indices)
    other = refine_topics(_perturbed(A), _parts(d), vocab, seed=1, **kw)
    assert not np.array_equal(other.sample_partition_indices, one.sample_partition_indices)


def test_refinement_approaches_the_truth(corpus):
    """From the true topics perturbed, EM moves them back towards the truth, on the whole
    corpus and from a sample with one full pass."""
    A, d, vocab, H = corpus
    start = _perturbed(A, weight=0.6)
    before = matched_l1(A, start.T).mean
    whole = refine_topics(start, _parts(d), vocab)
    sampled = refine_topics(start, _parts(d), vocab, sample_tokens=int(H.sum()) // 3)
    for res in (whole, sampled):
        assert res.converged
        np.testing.assert_allclose(res.components.sum(axis=1), 1.0)
        after = matched_l1(A, res.components.T).mean
        assert after < 0.25 * before, (before, after)
    np.testing.assert_allclose(whole.prevalence.sum(), 1.0)


def test_refinement_is_as_close_to_the_truth_as_the_plain_iteration(corpus):
    """The accelerated E-step (SQUAREM, extrapolated warm starts, float32) refines the topics
    as close to the truth as the plain fixed-point iteration it replaced (commit 707e0ed:
    matched L1 0.0607 on the whole corpus, 0.0661 from a third of it, from the truth
    perturbed by 0.6). A first map that leaves out each token's share estimated from N_d
    (0.0693 and 0.0709) fails."""
    A, d, vocab, H = corpus
    start = _perturbed(A, weight=0.6)
    whole = refine_topics(start, _parts(d), vocab)
    sampled = refine_topics(start, _parts(d), vocab, sample_tokens=int(H.sum()) // 3)
    assert matched_l1(A, whole.components.T).mean < 0.0615
    assert matched_l1(A, sampled.components.T).mean < 0.0675


def test_uninformative_and_zero_rows_get_topics(corpus):
    """Starting topics whose rows for half the words are the words' unigram probability in
    every topic, and with exact zeros elsewhere: no NaN, and EM gives those words
    topic-specific rows close to the truth."""
    A, d, vocab, H = corpus
    counts = np.asarray(H.sum(axis=0)).ravel().astype(float)
    unigram = counts / counts.sum()
    flat = np.argsort(counts)[: (V + N_RARE) // 2]  # the rarer half
    core = np.setdiff1d(np.arange(V + N_RARE), flat)
    start = np.tile(unigram, (K, 1))
    start[:, core] = A.T[:, core] * unigram[core].sum() / A.T[:, core].sum(axis=1, keepdims=True)
    start[:, core[::7]] = 0.0  # exact zeros, some words 0 in every topic
    plain = refine_topics(start, _parts(d), vocab, accelerate=False)
    # every token counts from the first pass (words 0 in every topic too): the likelihood
    # rises pass after pass of plain EM, and EM does not stop at once
    f = plain.loglik_per_token
    assert plain.passes > 3 and (np.diff(f) > 0).all(), f
    res = refine_topics(start, _parts(d), vocab)  # accelerated: not monotone pass by pass
    assert np.isfinite(res.components).all() and np.isfinite(res.loglik_per_token).all()
    assert res.passes > 3 and max(res.loglik_per_token) >= f[-1] - 1e-4 * abs(f[-1])
    m = matched_l1(A, res.components.T)
    Bt = res.components[m.matching] / res.components[m.matching].sum(axis=0)
    At = A.T / np.maximum(A.T.sum(axis=0), 1e-300)
    frequent = flat[counts[flat] >= 20]  # enough tokens to place them
    agree = (Bt[:, frequent].argmax(axis=0) == At[:, frequent].argmax(axis=0)).mean()
    assert agree > 0.8, agree  # p(k|w) of the unigram-start words follows the truth
    assert m.mean < matched_l1(A, start.T).mean


def test_refine_topics_api_and_errors(corpus, tmp_path):
    A, d, vocab, _ = corpus
    res = refine_topics(np.ascontiguousarray(A.T), str(d / "c.h5"), vocab, passes=1,
                        scratch=str(tmp_path / "scratch"))
    assert res.components.shape == (K, V + N_RARE) and len(res.seconds) == 1
    assert not res.converged  # one pass measures no change
    assert list((tmp_path / "scratch").iterdir()) == []  # its scratch is cleaned up
    whole = refine_topics(A.T, _parts(d), vocab, passes=1, sample_tokens=None)
    assert whole.sample_partitions == whole.partitions > 20 and not whole.full_pass
    for kw, msg in [({"passes": 0}, "passes=0"), ({"max_passes": 0}, "max_passes=0"),
                    ({"tol": -1.0}, "tol=-1.0"), ({"sample_tokens": 0}, "sample_tokens=0"),
                    ({"alpha": 0.0}, "alpha=0.0")]:
        with pytest.raises(ValueError, match=msg):
            refine_topics(A.T, str(d / "c.h5"), vocab, **kw)
    with pytest.raises(ValueError, match="vocab has 3 words"):
        refine_topics(A.T, str(d / "c.h5"), ["a", "b", "c"])
    with pytest.raises(ValueError, match="non-negative"):
        refine_topics(-A.T, str(d / "c.h5"), vocab)


def test_model_refinement_raises_the_likelihood_and_approaches_the_truth(corpus, tmp_path):
    A, d, _, _ = corpus
    spectral = AnchorTopicModel(K, seed=0, method="plain").fit(d / "s.zarr")
    refined = AnchorTopicModel(K, seed=0, method="plain", refine_passes=4).fit(d / "s.zarr")
    info = refined.diagnostics_["refinement"]
    ll = info["loglik_per_token"]
    assert len(ll) == 4 and all(b > a for a, b in itertools.pairwise(ll)), ll
    iters = info["theta_iterations"]  # later passes start from the previous pass' θ
    assert len(iters) == 4 and iters[-1] < 0.7 * iters[0], iters
    assert matched_l1(A, refined.components_.T).mean < matched_l1(A, spectral.components_.T).mean
    np.testing.assert_allclose(refined.components_.sum(axis=1), 1.0)
    np.testing.assert_array_equal(refined.anchors_, spectral.anchors_)
    # a store whose inputs are gone cannot be refined: say so
    Q = synth.population_cooccurrence(A[:V], 0.1)
    st.CooccurrenceStore.from_array(Q, synth.default_vocab(V), tmp_path / "p.zarr", n_docs=10)
    with pytest.raises(ModelError, match="refinement reads the training corpus"):
        AnchorTopicModel(K, method="plain", refine_passes=1).fit(tmp_path / "p.zarr")


def test_refinement_learns_an_asymmetric_alpha(tmp_path):
    """``learn_alpha``: Minka's fixed point after each pass moves a symmetric starting α
    towards the documents' true asymmetric α (their order and their sum), and the E-step
    uses it; a fixed α stays where it is."""
    A, _ = synth.dirichlet_topics_with_anchors(300, 5, beta=0.05, seed=5)
    true = np.array([0.8, 0.4, 0.2, 0.1, 0.05])
    H = synth.sample_documents(A, 3000, alpha=true, doc_length=80, seed=6).tocsr()
    vocab = synth.default_vocab(300)
    with st.corpus.HDF5CorpusWriter(tmp_path / "c.h5") as w:
        w.append(H, vocab)
    start = A.T
    learned = refine_topics(start, str(tmp_path / "c.h5"), vocab, passes=40, alpha=0.3,
                            learn_alpha=True)
    fixed = refine_topics(start, str(tmp_path / "c.h5"), vocab, passes=2, alpha=0.3)
    np.testing.assert_array_equal(fixed.alpha, np.full(5, 0.3, np.float32))
    # topics are matched to the truth by their start (A itself): same order
    a = learned.alpha.astype(float)
    assert list(np.argsort(-a)) == [0, 1, 2, 3, 4], a
    assert abs(a.sum() - true.sum()) < 0.35 * true.sum(), a
    np.testing.assert_allclose(a / a.sum(), true / true.sum(), atol=0.06)
    with pytest.raises(ValueError, match="alpha="):
        refine_topics(start, str(tmp_path / "c.h5"), vocab, passes=1, alpha=np.ones(4))


def test_prior_alpha_is_fixed_by_default_or_the_spectral_estimate():
    """A model's refinement takes α from :func:`prior_alpha`: the symmetric ALPHA under the
    default 'fixed' prior, the moments' estimate under 'spectral'."""
    from streamtopic import refinement
    from streamtopic.hyperparameters import estimate_alpha

    alpha = np.array([0.4, 0.2, 0.1])
    a0 = alpha.sum()
    p = alpha / a0
    R = (np.outer(alpha, alpha) + np.diag(alpha)) / (a0 * (a0 + 1))
    assert refinement.PRIOR == "fixed" and not refinement.LEARN_ALPHA
    assert refinement.prior_alpha(R, p) == refinement.ALPHA
    np.testing.assert_allclose(refinement.prior_alpha(R, p, "spectral"), estimate_alpha(R, p))
    np.testing.assert_allclose(refinement.prior_alpha(R, p, "spectral"), alpha, rtol=1e-3)
    with pytest.raises(ValueError, match="prior="):
        refinement.prior_alpha(R, p, "gibbs")
