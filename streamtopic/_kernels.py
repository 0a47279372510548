"""Compiled inner loops (numba), released from the GIL so that threads run them in parallel.

The co-occurrence sum over a batch of documents, Σ_d w_d h_d h_dᵀ restricted to a rectangle
[r0, r1) × [c0, c1) of Q, costs one multiply-add per pair of (word, word) entries of a
document that fall in the rectangle. Added straight into a dense running sum it needs no
intermediate sparse matrix: scipy's sparse product spends most of its time building the
output's structure, which a dense accumulator does not have. Compiled once per machine and
cached beside the module (``cache=True``).

Ingest runs the C copy of the pair kernels (``streamtopic/_pairs.c``), which loads in a
millisecond where numba takes about 0.3 s per process; the ones here are its fallback when the
extension was not built (:func:`streamtopic.cooccurrence.pair_kernels`). The C extension also
has the tiled kernel ``add_pairs_tiled``, which sends the documents dense in a tile of the
running sum through BLAS (dgemm, in place) and what ingest uses by default; it has no numba
twin: without the extension, ingest counts every pair with :func:`add_pairs_dense`. The EM
kernels of the refinement (:func:`cvb0_estep`) are numba only.

Determinism. With ``fastmath`` a sum is vectorised in an order of its own; in a loop that
also stores to an array, LLVM guards the vector code with a run-time check that the arrays
do not overlap and falls back to the scalar loop (another order, other roundings) when two
allocations happen to lie close together. So the kernels keep every floating-point sum in a
loop that only reads, and results do not depend on where the heap put the arrays (measured:
1 call in 25 differed in its last bits before). The float32 CVB0 kernels also leave out
``arcp`` (:data:`CVB0_FASTMATH`): with it, the code compiled in a process and the code
loaded from numba's cache computed other bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from numba import njit

__all__ = ["add_pairs_dense", "add_rows", "compile_refinement_kernels", "count_pairs",
           "cvb0_documents", "cvb0_estep", "helper_jit", "mixture_weights"]

_F = TypeVar("_F", bound=Callable[..., Any])


@njit(nogil=True, cache=True)
def _span(indices: np.ndarray, p0: int, p1: int, lo: int, hi: int) -> tuple[int, int]:
    """Entries p0:p1 of a sorted row whose column lies in [lo, hi)."""
    a = p0 + np.searchsorted(indices[p0:p1], lo)
    b = p0 + np.searchsorted(indices[p0:p1], hi)
    return a, b


@njit(nogil=True, cache=True)
def _spans(indptr: np.ndarray, indices: np.ndarray, d: int, r0: int, r1: int, c0: int,
           c1: int) -> tuple[int, int, int, int]:
    """Document ``d``'s entries a0:a1 with a column in [r0, r1) and b0:b1 in [c0, c1)
    (b0 = b1 = 0 when it has none of the first)."""
    p0, p1 = indptr[d], indptr[d + 1]
    a0, a1 = _span(indices, p0, p1, r0, r1)
    if a1 == a0:
        return a0, a1, 0, 0
    b0, b1 = _span(indices, p0, p1, c0, c1)
    return a0, a1, b0, b1


@njit(nogil=True, cache=True)
def count_pairs(
    indptr: np.ndarray, indices: np.ndarray, r0: int, r1: int, c0: int, c1: int
) -> int:
    """Number of (row entry, column entry) pairs of the documents in the rectangle: an upper
    bound on the non-zeros their sum adds there.

    Parameters
    ----------
    indptr : ndarray of int64, shape (n_docs + 1,)
    indices : ndarray of int32, shape (nnz,)
        CSR structure of the documents' counts, column indices sorted within each row.
    r0, r1, c0, c1 : int
        The rectangle [r0, r1) × [c0, c1) of Q.
    """
    total = 0
    for d in range(indptr.size - 1):
        a0, a1, b0, b1 = _spans(indptr, indices, d, r0, r1, c0, c1)
        total += (a1 - a0) * (b1 - b0)
    return total


@njit(nogil=True, cache=True)
def add_pairs_dense(
    acc: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    w: np.ndarray,
    r0: int,
    r1: int,
    c0: int,
    c1: int,
) -> None:
    """acc += (Σ_d w_d h_d h_dᵀ)[r0:r1, c0:c1], in place.

    Parameters
    ----------
    acc : ndarray of float64, shape (r1 − r0, c1 − c0), C-contiguous
        Dense running sum of the rectangle.
    indptr, indices : CSR structure (sorted column indices) of the documents' counts.
    data : ndarray of float64, shape (nnz,)
        The counts h_dw.
    w : ndarray of float64, shape (n_docs,)
        Document weights w_d (the store's ``doc_weight``: 1/(n_d − 1) or 1/(n_d (n_d − 1))).
    r0, r1, c0, c1 : int
        The rectangle of Q that ``acc`` holds.
    """
    ncol = acc.shape[1]
    flat = acc.reshape(-1)
    cols = np.empty(256, np.int64)
    vals = np.empty(256)
    for d in range(indptr.size - 1):
        a0, a1, b0, b1 = _spans(indptr, indices, d, r0, r1, c0, c1)
        if a1 == a0:
            continue
        nb = b1 - b0
        if nb > cols.size:
            cols = np.empty(nb, np.int64)
            vals = np.empty(nb)
        for b in range(nb):  # the document's columns, local to the rectangle
            cols[b] = indices[b0 + b] - c0
            vals[b] = data[b0 + b]
        wd = w[d]
        for a in range(a0, a1):
            base = (indices[a] - r0) * ncol
            va = wd * data[a]
            for b in range(nb):
                # unsigned index: no negative-index wraparound test in the hot loop
                flat[np.uint64(base + cols[b])] += va * vals[b]


#: LLVM's fast-math flags of the CVB0 kernels: all but ``arcp``. With ``arcp`` a float32
#: division may become a reciprocal estimate, and the code numba compiles in a process
#: (JIT) and the code it loads from its cache then differ: the same inputs gave other bits
#: in the first process than in every later one (20 Newsgroups, K = 50).
CVB0_FASTMATH = {"nnan", "ninf", "nsz", "contract", "reassoc", "afn"}

#: SQUAREM rounds in a row whose residual is no smaller than the best so far, after which a
#: document's CVB0 iteration goes on with plain maps (:func:`_cvb0_document`). Without this
#: rule a 41-token document stalls at a residual of 3e-4 counts (no convergence at a
#: tolerance of 1e-7·n_d in 1,000 maps; plain iteration: 30). Residuals of SQUAREM rounds
#: go up and down on slowly converging documents: 2 rounds cost 2.4× the maps of no rule
#: on 30 documents of 2,000 tokens with overlapping topics (tolerance 1e-5), 4 rounds 1.4×;
#: on KOS, 20 Newsgroups and the 9.2M-word long documents 4 rounds add 0.1-0.4% maps to a
#: refinement, and the same held-out likelihood to 3e-5 nats/token.
STALLED_ROUNDS = 4


def helper_jit(fastmath: set[str] | bool = False, inline: str = "never"
               ) -> Callable[[_F], _F]:
    """``njit`` for helpers that only other kernels call (and LLVM inlines there: the
    E-step's, :func:`mixture_weights`', the tokenizer's): no wrappers to call them from
    Python (a C function pointer wrapper costs 0.04 s of compilation each) and no cache files
    of their own (their callers' caches hold their code). ``inline="always"`` inlines the
    helper in numba's IR too. With the dtype allocations out of the kernel
    (:func:`cvb0_estep`), one map for both of its modes (:data:`FRESH`) and :func:`_copy`,
    the first compilation of the E-step went from 6.4 to 2.6 s of CPU (numba imported, the
    project's machine under load)."""
    options = {"nogil": True, "fastmath": fastmath, "cache": False,
               "no_cpython_wrapper": True, "no_cfunc_wrapper": True, "inline": inline}
    jit: Any = njit  # numba's stubs do not list the wrapper options
    decorate: Callable[[_F], _F] = jit(**options)
    return decorate


#: :func:`_cvb0_map`'s ``own`` when R holds nothing of the document yet (R holds finite
#: values, never junk, so 0·R = 0), and when each token's own responsibility is left out.
#: A float32 argument rather than a bool: numba compiled the map twice, once for each
#: literal ``True`` and ``False`` of its callers (0.6-1 s of compilation each).
FRESH, LEAVE_OUT = np.float32(0.0), np.float32(1.0)


@helper_jit()
def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` for 1-d arrays of one size, as a loop: numba's slice assignment
    compiles its shape checks' error messages (string formatting), 3.7 s of a first
    compilation of :func:`cvb0_estep` that was 7 s."""
    for i in range(dst.size):
        dst[i] = src[i]


@helper_jit(CVB0_FASTMATH)
def _cvb0_map(
    R: np.ndarray, indices: np.ndarray, data: np.ndarray, p0: int, p1: int,
    beta_t: np.ndarray, n_dk: np.ndarray, alpha: np.ndarray, own: np.float32, out: np.ndarray,
    n32: np.ndarray,
) -> float:
    """One CVB0 map of the document's entries p0:p1: R[e] ∝ (max(N_d − R[e], 0) + α) ⊙ β_w
    (α: (K,) float32, one pseudo-count per topic)
    (one token of the word left out: ``own`` is :data:`LEAVE_OUT`), or, when ``own`` is
    :data:`FRESH` (R holds nothing of this document yet), R[e] ∝ (N_d + α) ⊙ β_w; then
    ``out`` (K,) = Σ_e h_e R[e]. Returns max_k |out_k − N_dk|. R and βᵀ are float32, ``out``
    float64; ``n32`` (K,) float32 is scratch. Rows of words that every topic gives
    probability 0 are set to 0. The clamp at 0 matters only at an extrapolated N_d (below a
    token's own share); at a map's output N_d = Σ h R ≥ R[e]."""
    K = beta_t.shape[1]
    for k in range(K):
        n32[k] = np.float32(n_dk[k])
        out[k] = 0.0
    for e in range(p0, p1):
        b = beta_t[indices[e]]
        r = R[e - p0]
        for k in range(K):
            r[k] = (max(n32[k] - own * r[k], np.float32(0.0)) + alpha[k]) * b[k]
        s = np.float32(0.0)
        for k in range(K):  # a loop that only reads: its vectorised sum has one order
            s += r[k]
        inv = np.float32(1.0) / s if s > 1e-30 else np.float32(0.0)
        h = data[e]
        for k in range(K):
            r[k] *= inv
            out[k] += h * r[k]
    moved = 0.0
    for k in range(K):
        moved = max(moved, abs(out[k] - n_dk[k]))
    return moved


@helper_jit(CVB0_FASTMATH)
def _squarem_counts(t: np.ndarray, t1: np.ndarray, t2: np.ndarray, total: float) -> None:
    """SQUAREM's extrapolation (Varadhan and Roland 2008, scheme S3) of topic counts, in
    place in ``t``, from N, F(N), F(F(N)): x = N − 2s r + s² v with r = F(N) − N,
    v = F(F(N)) − 2F(N) + N, s = min(−‖r‖/‖v‖, −1); clamped at 0 and rescaled to ``total``
    tokens (where F(F(N)) itself when nothing is left)."""
    K = t.size
    rr, vv = 0.0, 0.0
    for k in range(K):
        r = t1[k] - t[k]
        v = t2[k] - 2.0 * t1[k] + t[k]
        rr += r * r
        vv += v * v
    step = min(-np.sqrt(rr / vv), -1.0) if vv > 0.0 else -1.0
    for k in range(K):
        r = t1[k] - t[k]
        v = t2[k] - 2.0 * t1[k] + t[k]
        t[k] = max(t[k] - 2.0 * step * r + step * step * v, 0.0)
    s = 0.0
    for k in range(K):
        s += t[k]
    for k in range(K):
        t[k] = t[k] * (total / s) if s > 0.0 else t2[k]


@helper_jit(CVB0_FASTMATH)
def _cvb0_document(
    R: np.ndarray, work: np.ndarray, n32: np.ndarray, indices: np.ndarray, data: np.ndarray,
    p0: int, p1: int, beta_t: np.ndarray, alpha: np.ndarray, tol: float, max_iter: int,
    n_dk: np.ndarray,
) -> int:
    """Iterate one document's CVB0 map from the ``n_dk`` given (in place) until it moves no
    count more than tol·(n_d + α₀), or ``max_iter`` maps. Accelerated by SQUAREM (two maps,
    one extrapolation, whose map starts the next round) while the extrapolations pay off:
    the map's leave-out reads the previous map's R, so it is not a function of N_d alone,
    and near the fixed point an extrapolation can stall at a residual around 1e-5 of the
    document's tokens; after ``STALLED_ROUNDS`` rounds in a row that end with no smaller
    residual than the best so far, plain maps go on. ``work`` (≥ 2, K) float64 is scratch
    (rows 0 and 1).
    On exit N_d = Σ_w h_dw R[w] (the last map's). Returns the maps evaluated."""
    K = beta_t.shape[1]
    nd = 0.0
    for e in range(p0, p1):
        nd += data[e]
    alpha0 = 0.0
    for k in range(K):
        alpha0 += alpha[k]
    limit = tol * (nd + alpha0)
    t1, t2 = work[0], work[1]
    moved = _cvb0_map(R, indices, data, p0, p1, beta_t, n_dk, alpha, FRESH, t1, n32)
    maps, best, misses = 1, moved, 0
    while moved >= limit and maps < max_iter:
        maps += 1
        if misses >= STALLED_ROUNDS:
            _copy(n_dk, t1)
            moved = _cvb0_map(R, indices, data, p0, p1, beta_t, n_dk, alpha, LEAVE_OUT, t1,
                              n32)
            continue
        plain = _cvb0_map(R, indices, data, p0, p1, beta_t, t1, alpha, LEAVE_OUT, t2, n32)
        if plain < limit or maps >= max_iter:
            _copy(n_dk, t2)
            return maps
        _squarem_counts(n_dk, t1, t2, nd)
        maps += 1
        moved = _cvb0_map(R, indices, data, p0, p1, beta_t, n_dk, alpha, LEAVE_OUT, t1, n32)
        misses = 0 if moved < best else misses + 1
        best = min(best, moved)
    _copy(n_dk, t1)
    return maps


@helper_jit(CVB0_FASTMATH)
def _cvb0_start(N: np.ndarray, step: np.ndarray, nd: float, warm: bool) -> None:
    """A document's starting counts, in place in N (K,): when ``warm``, N + ``step`` (the
    change of its last pass) clamped at 0 and rescaled to ``nd`` tokens, else uniform."""
    K = N.size
    if not warm:
        for k in range(K):
            N[k] = nd / K
        return
    s = 0.0
    for k in range(K):
        N[k] = max(N[k] + step[k], 0.0)
    for k in range(K):
        s += N[k]
    for k in range(K):
        N[k] = N[k] * (nd / s) if s > 0.0 else nd / K


@helper_jit(CVB0_FASTMATH)
def _cvb0_summary(R: np.ndarray, indices: np.ndarray, data: np.ndarray, p0: int, p1: int,
                  beta_t: np.ndarray, alpha: np.ndarray, N: np.ndarray, out_t: np.ndarray,
                  n32: np.ndarray) -> float:
    """Adds a document's expected counts to ``out_t`` (U×K, float64); returns its
    log-likelihood Σ_w h_dw log(θ_d·β_w), θ_d = (N_d + α) / (Σ_k N_dk + α₀), over the words
    some topic gives a probability (the dot products in float32, as the E-step's; ``n32``
    (K,) float32 is scratch)."""
    K = beta_t.shape[1]
    z = 0.0
    for k in range(K):  # a loop that only reads (see the module's note on determinism)
        z += N[k] + alpha[k]
    for k in range(K):
        n32[k] = np.float32(N[k] + alpha[k])
    loglik, counted = 0.0, 0.0
    for e in range(p0, p1):
        b = beta_t[indices[e]]
        o = out_t[indices[e]]
        h = data[e]
        for k in range(K):
            o[k] += h * R[e - p0, k]
        m = np.float32(0.0)
        for k in range(K):
            m += n32[k] * b[k]
        if m > 1e-30:
            loglik += h * np.log(np.float64(m))
            counted += h
    summary: float = loglik - counted * np.log(z)
    return summary


def cvb0_estep(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    beta_t: np.ndarray,
    alpha: np.ndarray,
    tol: float,
    max_iter: int,
    n_dk: np.ndarray,
    step: np.ndarray,
    warm: bool,
    out_t: np.ndarray,
) -> tuple[int, float]:
    """E-step of EM for LDA with the topics fixed, by zero-order collapsed variational Bayes
    (CVB0, Asuncion et al. 2009): per document, each token's topic responsibilities
    r_dw ∝ (N_d − r_dw + α) ⊙ β_w (the document's expected topic counts without that token)
    and N_d = Σ_w h_dw r_dw, iterated to a fixed point (SQUAREM-accelerated); then the
    expected topic-word counts ``out_t[w] += h_dw r_dw`` (in place). Leaving the token out
    keeps a document's own tokens from pulling its topics towards themselves, the bias of
    EM with a point θ_d. Responsibilities are float32, counts and sums float64.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the counts (n_docs × V), float64 data.
    beta_t : ndarray of shape (V, K), float32, C-contiguous
        The topics, word-major.
    alpha : ndarray of shape (K,), float32
        Pseudo-count of each topic (the Dirichlet prior of θ_d; α₀ = Σ_k α_k).
    tol : float
        A document stops when no count of N_d moves more than tol·(n_d + α₀) in a map.
    max_iter : int
        Most maps per document.
    n_dk : ndarray of shape (n_docs, K), float64
        The documents' expected topic counts N_d: the start when ``warm`` (else uniform), and
        the result.
    step : ndarray of shape (n_docs, K), float32
        When ``warm``, each document's change of N_d in the last pass: the start is
        extrapolated by it (N_d + step). Overwritten with this pass' change (0 when cold).
    warm : bool
    out_t : ndarray of shape (V, K), float64
        Expected counts, added to.

    Returns
    -------
    maps : int
        CVB0 maps evaluated, summed over the documents.
    loglik : float
        Σ_dw h_dw log(θ_d·β_w) with θ_d = (N_d + α) / (Σ_k N_dk + α₀), over the tokens some
        topic gives a probability.
    """
    K = beta_t.shape[1]
    width = max(1, int(np.diff(indptr).max(initial=0)))  # the longest document's entries
    R = np.zeros((width, K), dtype=np.float32)
    work, n32 = np.empty((3, K)), np.empty(K, dtype=np.float32)
    maps, loglik = cvb0_documents(indptr, indices, data, beta_t, alpha, tol, max_iter, n_dk,
                                  step, warm, out_t, R, work, n32)
    return int(maps), float(loglik)


@njit(nogil=True, cache=True, fastmath=CVB0_FASTMATH)
def cvb0_documents(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    beta_t: np.ndarray,
    alpha: np.ndarray,
    tol: float,
    max_iter: int,
    n_dk: np.ndarray,
    step: np.ndarray,
    warm: bool,
    out_t: np.ndarray,
    R: np.ndarray,
    work: np.ndarray,
    n32: np.ndarray,
) -> tuple[int, float]:
    """The compiled loop of :func:`cvb0_estep` over the documents, with its scratch arrays
    given: ``R`` (≥ the longest document's entries, K) float32 holding finite values,
    ``work`` (3, K) float64, ``n32`` (K,) float32. They are allocated by the caller because
    numba's ``np.zeros``/``np.empty`` with a dtype compile for about 1 s (a third of the
    kernel's first compilation). Arguments and result as :func:`cvb0_estep`'s."""
    K = beta_t.shape[1]
    before = work[2]
    total, loglik = 0, 0.0
    for d in range(indptr.size - 1):
        p0, p1 = indptr[d], indptr[d + 1]
        N = n_dk[d]
        nd = 0.0
        for e in range(p0, p1):
            nd += data[e]
        _copy(before, N)
        _cvb0_start(N, step[d], nd, warm and p1 > p0)
        if p1 > p0:
            total += _cvb0_document(R, work, n32, indices, data, p0, p1, beta_t, alpha, tol,
                                    max_iter, N)
            loglik += _cvb0_summary(R, indices, data, p0, p1, beta_t, alpha, N, out_t,
                                     n32)
        for k in range(K):
            step[d, k] = N[k] - before[k] if warm else 0.0
    return total, loglik


@njit(nogil=True, cache=True)
def add_rows(out: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``out[rows[i]] += values[i]`` for every i, in order (``rows`` distinct or not)."""
    for i in range(rows.size):
        o = out[rows[i]]
        v = values[i]
        for k in range(o.size):
            o[k] += v[k]


def compile_refinement_kernels() -> None:
    """Compile (or load from numba's cache) the refinement's kernels, :func:`cvb0_documents`
    and :func:`add_rows`, with the argument types the refinement passes them, by one call
    each on a two-word document. Needs nothing but numpy and numba: a process that loads
    this module alone runs it (:mod:`streamtopic._warmup`)."""
    indptr = np.array([0, 2], dtype=np.int64)
    indices = np.array([0, 1], dtype=np.int32)
    data = np.ones(2)
    beta_t = np.full((2, 2), 0.5, dtype=np.float32)  # the partition's U×K rows of βᵀ
    counts, step = np.empty((1, 2)), np.empty((1, 2), dtype=np.float32)
    out = np.zeros((2, 2))
    alpha = np.full(2, 0.01, dtype=np.float32)
    cvb0_estep(indptr, indices, data, beta_t, alpha, 1e-3, 10, counts, step, False, out)
    add_rows(np.zeros((3, 2)), np.array([0, 2], dtype=np.int64), out)


@helper_jit()
def _mixture_step(theta: np.ndarray, acc: np.ndarray, indices: np.ndarray, data: np.ndarray,
                  p0: int, p1: int, At: np.ndarray) -> None:
    """``acc`` (K,) ← Σ_w h_w A_w / (θ·A_w) over one document's entries p0:p1."""
    K = At.shape[1]
    for k in range(K):
        acc[k] = 0.0
    for e in range(p0, p1):
        row = At[indices[e]]
        s = 0.0
        for k in range(K):
            s += theta[k] * row[k]
        r = data[e] / max(s, 1e-300)
        for k in range(K):
            acc[k] += r * row[k]


@helper_jit()
def _mixture_em(t: np.ndarray, out: np.ndarray, acc: np.ndarray, indices: np.ndarray,
                data: np.ndarray, p0: int, p1: int, At: np.ndarray, alpha: np.ndarray, n: float,
                alpha0: float) -> float:
    """One EM map ``out`` ← F(``t``) of a document; returns max_k |out_k − t_k|."""
    _mixture_step(t, acc, indices, data, p0, p1, At)
    moved = 0.0
    for k in range(t.size):
        out[k] = (t[k] * acc[k] + alpha[k]) / (n + alpha0)
        moved = max(moved, abs(out[k] - t[k]))
    return moved


@helper_jit()
def _squarem_point(t: np.ndarray, t1: np.ndarray, t2: np.ndarray, x: np.ndarray) -> None:
    """SQUAREM's extrapolation (Varadhan and Roland 2008, scheme S3) from θ, F(θ), F(F(θ)):
    x = θ − 2s r + s² v with r = F(θ) − θ, v = F(F(θ)) − 2F(θ) + θ, s = −‖r‖/‖v‖ (at most
    −1), renormalised; F(F(θ)) itself when x leaves the simplex."""
    K = t.size
    rr, vv = 0.0, 0.0
    for k in range(K):
        r = t1[k] - t[k]
        v = t2[k] - 2.0 * t1[k] + t[k]
        rr += r * r
        vv += v * v
    step = min(-np.sqrt(rr / vv), -1.0) if vv > 0.0 else -1.0
    total = 0.0
    for k in range(K):
        r = t1[k] - t[k]
        v = t2[k] - 2.0 * t1[k] + t[k]
        x[k] = t[k] - 2.0 * step * r + step * step * v
        if x[k] <= 0.0:
            total = -1.0
            break
        total += x[k]
    for k in range(K):
        x[k] = t2[k] if total <= 0.0 else x[k] / total


@njit(nogil=True, cache=True)
def mixture_weights(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, At: np.ndarray,
                    alpha: np.ndarray, tol: float, max_iter: int, theta: np.ndarray) -> int:
    """Topic proportions of documents with the topics fixed, each document on its own.

    The fixed point of the EM map F: θ_k ← (θ_k Σ_w h_w A_wk / (Aθ)_w + α_k) / (n + α₀),
    from the uniform θ = 1/K, accelerated by SQUAREM (two maps, one extrapolation, one map
    from it; about half the maps of plain EM on 20 Newsgroups), until a map moves no entry
    more than ``tol`` (or ``max_iter`` maps). Every document's iterations depend on its own
    entries only (in their stored order), so its θ does not depend on the other documents
    of the batch: a corpus cut into other batches gives the same bits.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the counts (n_docs×V); ``data`` float64
    At : ndarray of shape (V, K)
        Topic-word probabilities A (columns sum to 1), C-contiguous.
    alpha : ndarray of shape (K,)
        Dirichlet pseudo-counts; a document without entries gets α/α₀.
    theta : ndarray of shape (n_docs, K)
        Output.

    Returns
    -------
    maps : int
        EM maps evaluated, summed over the documents.
    """
    K = At.shape[1]
    alpha0 = 0.0
    for k in range(K):
        alpha0 += alpha[k]
    acc, t1, t2, x = np.empty(K), np.empty(K), np.empty(K), np.empty(K)
    total = 0
    for d in range(indptr.size - 1):
        p0, p1 = indptr[d], indptr[d + 1]
        t = theta[d]
        if p1 == p0:
            for k in range(K):
                t[k] = alpha[k] / alpha0
            continue
        n = 0.0
        for e in range(p0, p1):
            n += data[e]
        for k in range(K):
            t[k] = 1.0 / K
        done = 0
        while done < max_iter:
            done += 1
            if _mixture_em(t, t1, acc, indices, data, p0, p1, At, alpha, n, alpha0) < tol:
                _copy(t, t1)
                break
            done += 1
            if _mixture_em(t1, t2, acc, indices, data, p0, p1, At, alpha, n, alpha0) < tol:
                _copy(t, t2)
                break
            _squarem_point(t, t1, t2, x)
            done += 1
            if _mixture_em(x, t, acc, indices, data, p0, p1, At, alpha, n, alpha0) < tol:
                break
        total += done
    return total
