"""Benchmark: collapsed Gibbs sweeps after the refinement (issue 28's unmeasured lever).

For each corpus and K: the default fit, ``AnchorTopicModel(n_topics=K, seed=SEED).fit(store)``
(spectral topics, then EM), is scored; then a prototype collapsed Gibbs sampler for LDA
(Griffiths and Steyvers 2004; plain, O(K) per token, compiled with numba) runs over the
training documents (the refinement's sample: these corpora fit in ``SAMPLE_TOKENS``):

* the start: the documents' expected topic counts N_d from one CVB0 E-step at the refined
  topics (α = ``refinement.ALPHA``, :func:`streamtopic._kernels.cvb0_estep`), and each token's
  topic drawn ∝ (N_dk + α_k) β_kw (for reference, ``--random-variants`` also run from a
  uniform draw, to ``--random-sweeps``);
* S sweeps, with a variant's priors (``VARIANTS``): the refinement's (α = ``ALPHA``,
  η = ``ETA``) or tomotopy's defaults (α = 0.1, η = 0.01), α fixed or learned as tomotopy
  learns it (``optim_interval`` 10: after every 10 sweeps, ``MINKA_ITERATIONS`` steps of
  Minka's fixed point on the documents' topic counts);
* the topics read off the counts, β_k ∝ n_k· + η, and scored, at each S of ``--sweeps``
  (the sweeps continue from one S to the next); and the same counts, read with the
  refinement's η, refined again by EM with the defaults (``refine_topics`` from them, on
  the store's corpus): does EM keep the gain?

Every model is scored by ``benchmarks/real_corpora.py``'s one scorer on its shared tokens
(held-out log-likelihood per token by document completion, NPMI of the top 10 words from
document co-occurrence in the training documents, unique words). Seconds: wall time of the
sweeps (the draw of the start and Minka's steps included; the E-step for N_d apart,
``estep_seconds``; scoring not), one thread; run it on one core (``taskset -c 1``,
``NUMBA_NUM_THREADS=1``). The kernels compile before the timer.

The data: ``real_corpora.py``'s preparation (the same splits) in ``--workdir``, the store of
``streamtopic fit RAW -k 20 --seed 0 --store STORE`` (as ``real_corpora.py`` makes it), and
its shared tokens (``real_corpora.shared_tokens``); made once, reused when present.

Usage::

    python benchmarks/gibbs.py [--corpora 20ng,kos] [--topics 20,50] [--sweeps 10,30,100,300]
        [--variants NAME,...] [--no-em-after] [--random-variants NAME,...]
        [--random-sweeps 100,300,1000] [--seeds 0,1]
        [--workdir DIR] [--out PATH]

Results go to stdout (JSON) and ``benchmarks/results/gibbs.json`` (there: ``--seeds 0,1``,
the other defaults; ``summary`` holds the means over the seeds); a line per measurement to
stderr. The figures are in ``streamtopic/refinement.py``'s docstring (issue 28).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from numba import njit

import fit as fitbench  # benchmarks/fit.py: the streamtopic command
import real_corpora as rc
from _common import load_shared_tokens, machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "gibbs.json")
DEFAULT_WORKDIR = "/tmp/streamtopic-gibbs"
PREPARE = {"20ng": rc.prepare_20ng, "kos": rc.prepare_kos, "sotu": rc.prepare_sotu}
STORE_K = 20  # the fit that makes the store (its vocabulary does not depend on K)
TOMOTOPY_ALPHA, TOMOTOPY_ETA = 0.1, 0.01  # tomotopy.LDAModel's defaults
OPTIM_INTERVAL = 10  # tomotopy's default: α re-estimated every 10 iterations
MINKA_ITERATIONS = 10
ALPHA_MIN, ALPHA_MAX = 1e-4, 1e2
# name -> (α, η, learn α); None: the refinement's own (refinement.ALPHA, refinement.ETA)
VARIANTS: dict[str, tuple[float | None, float | None, bool]] = {
    "refinement": (None, None, False),
    "refinement+learned": (None, None, True),
    "tomotopy": (TOMOTOPY_ALPHA, TOMOTOPY_ETA, False),
    "tomotopy+learned": (TOMOTOPY_ALPHA, TOMOTOPY_ETA, True),
}


def log(msg: str) -> None:
    print(f"[gibbs {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ the sampler


@njit(nogil=True, cache=True)
def seed_sampler(seed: int) -> None:
    """Seed numba's generator (the sampler's draws)."""
    np.random.seed(seed)


@njit(nogil=True, cache=True)
def tokens_of(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The documents' tokens (CSR counts, n_docs × V) as word ids (n_tokens,) int32, in CSR
    order: document d's are ``[t_d, t_{d+1})``, t the cumulative row sums."""
    n = 0
    for i in range(data.size):
        n += int(data[i])
    words = np.empty(n, np.int32)
    t = 0
    for d in range(indptr.size - 1):
        for p in range(indptr[d], indptr[d + 1]):
            for _ in range(int(data[p])):
                words[t] = indices[p]
                t += 1
    return words


@njit(nogil=True, cache=True, inline="always")
def assign(cum: np.ndarray, s: float, t: int, d: int, w: int, z: np.ndarray, ndk: np.ndarray,
           nkw: np.ndarray, nk: np.ndarray) -> int:
    """Draw token t's topic from the cumulative weights ``cum`` (K,) of total ``s``, record
    it in z and add it to the counts; returns it."""
    u = np.random.random() * s
    k = 0
    while k < cum.size - 1 and cum[k] < u:
        k += 1
    z[t] = k
    ndk[d, k] += 1
    nkw[w, k] += 1
    nk[k] += 1
    return k


@njit(nogil=True, cache=True)
def draw_start(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, beta_t: np.ndarray,
               n_dk: np.ndarray, alpha: np.ndarray, z: np.ndarray, ndk: np.ndarray,
               nkw: np.ndarray, nk: np.ndarray) -> None:
    """Each token's topic z (n_tokens,) drawn ∝ (N_dk + α_k) β_wk (``beta_t`` V×K, ``n_dk``
    n_docs×K expected counts of EM), and the sampler's counts ndk (n_docs×K), nkw (V×K),
    nk (K,) added up."""
    K = beta_t.shape[1]
    cum = np.empty(K)
    t = 0
    for d in range(indptr.size - 1):
        for q in range(indptr[d], indptr[d + 1]):
            w = indices[q]
            s = 0.0
            for k in range(K):
                s += (n_dk[d, k] + alpha[k]) * beta_t[w, k]
                cum[k] = s
            for _ in range(int(data[q])):
                assign(cum, s, t, d, w, z, ndk, nkw, nk)
                t += 1


@njit(nogil=True, cache=True)
def sweeps(tok_ptr: np.ndarray, words: np.ndarray, z: np.ndarray, ndk: np.ndarray,
           nkw: np.ndarray, nk: np.ndarray, alpha: np.ndarray, eta: float, n: int) -> None:
    """``n`` sweeps of collapsed Gibbs sampling for LDA over every token in turn:
    p(z = k) ∝ (ndk_dk + α_k)(nkw_wk + η) / (nk_k + Vη), the token's own count left out.
    ``tok_ptr`` (n_docs+1,) the documents' token offsets, ``words`` and ``z`` (n_tokens,);
    counts as :func:`draw_start`'s, updated in place."""
    K = nk.size
    veta = nkw.shape[0] * eta
    inv = np.empty(K)
    for k in range(K):
        inv[k] = 1.0 / (nk[k] + veta)
    cum = np.empty(K)
    for _ in range(n):
        for d in range(tok_ptr.size - 1):
            for t in range(tok_ptr[d], tok_ptr[d + 1]):
                w = words[t]
                k = z[t]
                ndk[d, k] -= 1
                nkw[w, k] -= 1
                nk[k] -= 1
                inv[k] = 1.0 / (nk[k] + veta)
                s = 0.0
                for j in range(K):
                    s += (ndk[d, j] + alpha[j]) * (nkw[w, j] + eta) * inv[j]
                    cum[j] = s
                k = assign(cum, s, t, d, w, z, ndk, nkw, nk)
                inv[k] = 1.0 / (nk[k] + veta)


def minka(alpha: np.ndarray, ndk: np.ndarray, iterations: int = MINKA_ITERATIONS) -> np.ndarray:
    """Minka's fixed point for a Dirichlet's α (K,) from the documents' topic counts
    (n_docs × K): α_k ← α_k Σ_d [ψ(n_dk + α_k) − ψ(α_k)] / Σ_d [ψ(n_d + α₀) − ψ(α₀)]."""
    from scipy.special import digamma

    n = ndk.astype(np.float64)
    nd = n.sum(axis=1)
    for _ in range(iterations):
        a0 = float(alpha.sum())
        num = (digamma(n + alpha) - digamma(alpha)).sum(axis=0)
        den = float((digamma(nd + a0) - digamma(a0)).sum())
        alpha = np.clip(alpha * num / den, ALPHA_MIN, ALPHA_MAX)
    return alpha


def _compile() -> None:
    """The kernels on a toy corpus, so that no timer counts their compilation."""
    indptr, indices, data = np.array([0, 2]), np.array([0, 1], np.int32), np.array([1.0, 2.0])
    words = tokens_of(indptr, indices, data)
    z, ndk = np.zeros(3, np.int32), np.zeros((1, 2), np.int32)
    nkw, nk = np.zeros((2, 2), np.int32), np.zeros(2, np.int64)
    seed_sampler(0)
    draw_start(indptr, indices, data, np.full((2, 2), 0.5), np.ones((1, 2)), np.ones(2), z, ndk,
               nkw, nk)
    sweeps(np.array([0, 3]), words, z, ndk, nkw, nk, np.ones(2), 0.1, 1)


# ============================================================================ data and scoring


def prepare(name: str, workdir: str, seed: int) -> tuple[str, str]:
    """The store and shared-tokens directory of corpus ``name`` (made when absent)."""
    data = PREPARE[name](os.path.join(workdir, "data", name))
    store, tokens = (os.path.join(workdir, f"{name}.{x}") for x in ("store", "tokens"))
    if not os.path.exists(store):
        log(f"{name}: streamtopic fit (the store)")
        subprocess.run([*fitbench.streamtopic_cmd(), "fit", data["train_input"], "-k",
                        str(STORE_K), "--seed", str(seed), "-o",
                        os.path.join(workdir, f"{name}.model"), "--store", store, "-q"],
                       check=True)
    if not os.path.exists(os.path.join(tokens, "vocab.txt")):
        rc.shared_tokens(store, data["test_input"], tokens)
    return store, tokens


def scored(components: np.ndarray, vocab: list[str], test: Any, train: Any) -> dict[str, Any]:
    s = rc.score(components, vocab, test, train)
    return {"heldout": s["heldout_per_token"], "npmi": s["npmi_mean"],
            "unique": s["unique_words_mean"]}


def em_counts(train: Any, components: np.ndarray, alpha: float) -> np.ndarray:
    """The documents' expected topic counts N_d (n_docs × K) by one CVB0 E-step at the
    topics ``components`` (K×V), from uniform, to the refinement's tolerance."""
    from streamtopic import refinement
    from streamtopic._kernels import cvb0_estep

    K = components.shape[0]
    beta_t = np.ascontiguousarray(components.T, dtype=np.float32)
    n_dk = np.empty((train.shape[0], K))
    step = np.empty((train.shape[0], K), np.float32)
    cvb0_estep(train.indptr.astype(np.int64), train.indices.astype(np.int32),
               train.data.astype(np.float64), beta_t, np.full(K, alpha, np.float32),
               refinement.THETA_TOL, refinement.THETA_MAX_ITER, n_dk, step, False,
               np.zeros(beta_t.shape))
    return n_dk


def refined_again(store: str, components: np.ndarray, vocab: list[str], seed: int
                  ) -> tuple[np.ndarray, int, float]:
    """EM with the defaults from ``components`` on the store's corpus: topics, passes,
    seconds."""
    from streamtopic import CooccurrenceStore
    from streamtopic.corpus import recorded_corpus
    from streamtopic.refinement import refine_topics

    corpus = recorded_corpus(CooccurrenceStore.open(store))
    t0 = time.perf_counter()
    r = refine_topics(components, corpus, vocab, seed=seed)
    return r.components, r.passes, time.perf_counter() - t0


# ============================================================================ the runs


def run_case(name: str, store: str, tokens: str, K: int, seed: int, a: argparse.Namespace
             ) -> list[dict[str, Any]]:
    """The default fit of ``name`` at K, then the Gibbs runs: from EM's state (each of
    ``--variants``, each S of ``--sweeps``, then EM again), and from a random start (each
    of ``--random-variants``, each S of ``--random-sweeps``)."""
    from streamtopic import AnchorTopicModel, refinement

    train, test, vocab = load_shared_tokens(tokens)
    train = train.astype(np.float64)
    V = len(vocab)
    t0 = time.perf_counter()
    model = AnchorTopicModel(n_topics=K, seed=seed).fit(store)
    fit_seconds = time.perf_counter() - t0
    if list(model.vocab_) != vocab:
        raise RuntimeError(f"{store}: vocabulary differs from {tokens}")
    comp = np.asarray(model.components_, dtype=np.float64)
    runs = [{"corpus": name, "K": K, "seed": seed, "start": "spectral", "variant": "default",
             "S": 0, "fit_seconds": fit_seconds, "tokens": int(train.sum()),
             **scored(comp, vocab, test, train)}]
    log(json.dumps(runs[-1]))
    t0 = time.perf_counter()
    n_dk = em_counts(train, comp, refinement.ALPHA)
    estep_seconds = time.perf_counter() - t0
    indptr, indices = train.indptr.astype(np.int64), train.indices.astype(np.int32)
    words = tokens_of(indptr, indices, train.data)
    tok_ptr = np.zeros(train.shape[0] + 1, np.int64)
    tok_ptr[1:] = np.cumsum(np.asarray(train.sum(axis=1)).ravel().astype(np.int64))
    cases = [("em", v, a.sweeps, not a.no_em_after) for v in a.variants.split(",") if v]
    cases += [("random", v, a.random_sweeps, False) for v in a.random_variants.split(",") if v]
    for start, variant, sweep_list, em_after in cases:
        beta_t = np.ascontiguousarray(comp.T)
        n_start = n_dk
        if start == "random":  # every topic equally likely for every token
            n_start, beta_t = np.zeros_like(n_dk), np.ones_like(beta_t)
        steps = [int(s) for s in sweep_list.split(",")]
        base = {"corpus": name, "K": K, "seed": seed, "start": start}
        al, et, learn = VARIANTS[variant]
        alpha = np.full(K, refinement.ALPHA if al is None else al)
        eta = refinement.ETA if et is None else et
        seed_sampler(seed)
        z = np.empty(words.size, np.int32)
        ndk = np.zeros((train.shape[0], K), np.int32)
        nkw, nk = np.zeros((V, K), np.int32), np.zeros(K, np.int64)
        t0 = time.perf_counter()
        draw_start(indptr, indices, train.data, beta_t, n_start, alpha, z, ndk, nkw, nk)
        seconds, done = time.perf_counter() - t0, 0
        for S in steps:
            t0 = time.perf_counter()
            while done < S:
                n = min(OPTIM_INTERVAL - done % OPTIM_INTERVAL, S - done) if learn else S - done
                sweeps(tok_ptr, words, z, ndk, nkw, nk, alpha, eta, n)
                done += n
                if learn and done % OPTIM_INTERVAL == 0:
                    alpha = minka(alpha, ndk)
            seconds += time.perf_counter() - t0
            topics = (nkw.T + eta) / (nk + V * eta)[:, None]
            run = {**base, "variant": variant, "alpha": al, "eta": eta, "learn_alpha": learn,
                   "S": S, "sweep_seconds": seconds, "estep_seconds": estep_seconds,
                   "alpha0": float(alpha.sum()), **scored(topics, vocab, test, train)}
            if em_after:  # from the topics smoothed by the refinement's η (a smaller η's
                # sharper topics have a training likelihood EM's first M-step lowers, which
                # its stopping rule reads as converged)
                smooth = (nkw.T + refinement.ETA) / (nk + V * refinement.ETA)[:, None]
                again, passes, sec = refined_again(store, smooth, vocab, seed)
                run["em_after"] = {**scored(again, vocab, test, train), "passes": passes,
                                   "seconds": sec}
            log(json.dumps(run))
            runs.append(run)
    return runs


def table(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per measurement: corpus, K, variant, S, NPMI, held-out, seconds (then EM's)."""
    out = []
    for r in runs:
        row = {k: r.get(k) for k in ("corpus", "K", "seed", "start", "variant", "S", "npmi",
                                     "heldout", "sweep_seconds")}
        if "em_after" in r:
            row.update(em_npmi=r["em_after"]["npmi"], em_heldout=r["em_after"]["heldout"],
                       em_passes=r["em_after"]["passes"])
        out.append(row)
    return out


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Means over the seeds of :func:`table`'s rows, per corpus, K, start, variant and S."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in ("corpus", "K", "start", "variant", "S")),
                          []).append(r)
    out = []
    for key, rs in groups.items():
        row: dict[str, Any] = dict(zip(("corpus", "K", "start", "variant", "S"), key,
                                       strict=True))
        row["n"] = len(rs)
        for m in ("npmi", "heldout", "sweep_seconds", "em_npmi", "em_heldout"):
            xs = [x[m] for x in rs if x.get(m) is not None]
            if xs:
                row[m] = float(np.mean(xs))
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpora", default="20ng,kos")
    p.add_argument("--topics", default="20,50")
    p.add_argument("--sweeps", default="10,30,100,300", help="S, increasing (cumulative).")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--random-variants", default="tomotopy+learned",
                   help="Variants also run from a random start (none: '').")
    p.add_argument("--random-sweeps", default="100,300,1000")
    p.add_argument("--no-em-after", action="store_true")
    p.add_argument("--seeds", default="0", help="Seeds of the fit and the sampler (a run each).")
    p.add_argument("--workdir", default=DEFAULT_WORKDIR)
    p.add_argument("--out", default=DEFAULT_OUT)
    a = p.parse_args(argv)
    _compile()
    result: dict[str, Any] = {"benchmark": "gibbs", "machine": machine_info(),
                              "argv": sys.argv, "runs": []}
    for name in a.corpora.split(","):
        store, tokens = prepare(name, a.workdir, 0)
        for K in (int(k) for k in a.topics.split(",")):
            for seed in (int(x) for x in a.seeds.split(",")):
                result["runs"] += run_case(name, store, tokens, K, seed, a)
            result["table"] = table(result["runs"])
            result["summary"] = summary(result["table"])
            write_result(result, a.out)
    print(write_result(result, a.out))
    return result


if __name__ == "__main__":
    main()
