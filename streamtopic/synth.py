"""Semi-synthetic corpora from known topics, generated and written in bounded memory.

The generative model is LDA's: topics are the columns of a column-stochastic V×K matrix ``A``
(each column a distribution over the V words); a document draws proportions
θ ~ Dirichlet(α) (K,), or correlated proportions from a logistic normal
(:class:`LogisticNormal`), then each of its n tokens draws a topic z ~ Cat(θ) and a word
w ~ Cat(A[:, z]).

Functions
---------
:func:`dirichlet_topics`, :func:`dirichlet_topics_with_anchors`
    Random topics, column by column from a symmetric Dirichlet(β), optionally with one planted
    anchor word per topic (Arora et al., 2013).
:func:`sample_documents`, :func:`iter_documents`
    Document-term count matrices (D×V, CSR).
:func:`write_corpus`
    The same documents streamed to disk as HDF5, UCI bag-of-words or plain text.
:func:`population_cooccurrence`, :func:`dirichlet_second_moment`
    The exact expected co-occurrence Q = A E[θθᵀ] Aᵀ (the "infinite data" limit of the
    estimator in :mod:`streamtopic.cooccurrence`).
:class:`LogisticNormal`, :func:`parse_theta`, :func:`second_moment`, :func:`population_store`
    Correlated topic proportions (block-structured covariance), E[θθᵀ] for any θ law (by
    Monte Carlo for the logistic normal) and the population Q written as a store.
:func:`topics_from_model`, :func:`plant_anchors`
    Semi-synthetic topics from a saved model, optionally with planted anchors.
:func:`synthesize`, :func:`save_topics`, :func:`load_topics`
    A corpus and its ground truth (``OUTPUT.topics.npz``), generated in parallel Dask tasks
    with output identical to the serial path: the entry point of ``streamtopic synth``.
    With ``shards``/``shard_tokens``, a directory of HDF5 shards written by one process
    per shard (:func:`shard_bounds`, :func:`shard_paths`), for corpora of billions of tokens.

Determinism
-----------
Documents are generated in fixed *units* of consecutive documents; unit ``u`` draws from its
own stream, ``SeedSequence(seed).entropy`` with ``spawn_key + (u,)``. Unit boundaries depend
only on ``n_docs`` and ``doc_length``, so a seed gives the same documents whatever the
``block_docs`` of :func:`iter_documents` or :func:`write_corpus`, and :func:`sample_documents`
returns exactly the documents that :func:`write_corpus` writes with the same arguments.
Shards are runs of whole units, so a sharded corpus, read shard after shard, is the same
corpus again, whatever the number of shards or of processes writing them.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, NamedTuple, cast

import numpy as np
import scipy.sparse as sp

from ._io import remove_path, temp_beside, written_aside
from .cluster import current_client, n_workers
from .corpus import HDF5CorpusWriter
from .model import AnchorTopicModel
from .store import CooccurrenceStore, remove_store
from .vocabulary import Tokenizer

__all__ = [
    "SeedLike",
    "default_vocab",
    "dirichlet_topics",
    "dirichlet_topics_with_anchors",
    "dirichlet_second_moment",
    "population_cooccurrence",
    "sample_documents",
    "iter_documents",
    "write_corpus",
    "WRITE_FORMATS",
    "SYNTH_FORMATS",
    "LogisticNormal",
    "ThetaSpec",
    "parse_theta",
    "theta_dict",
    "second_moment",
    "population_store",
    "plant_anchors",
    "topics_from_model",
    "infer_format",
    "topics_path",
    "save_topics",
    "load_topics",
    "synthesize",
    "TOPICS_SUFFIX",
    "POPULATION_SUFFIX",
    "unit_docs",
    "shard_bounds",
    "shard_paths",
    "SHARD_NAME",
]

SeedLike = int | np.random.SeedSequence | np.random.Generator | None
"""Anything that seeds the generators: an int, a ``SeedSequence``, a ``Generator`` (whose
state is advanced) or None (fresh entropy)."""

WRITE_FORMATS = ("hdf5", "uci", "text")
"""Formats of :func:`write_corpus`."""
SYNTH_FORMATS = ("hdf5", "uci", "text", "jsonl")
"""Formats of :func:`synthesize`."""

_UNIT_TOKENS = 2**20  # target tokens per generation unit
_UNIT_MIN_DOCS = 64
_UNIT_MAX_DOCS = 16_384
_STOCHASTIC_TOL = 1e-6  # allowed deviation of a column sum of A from 1


# ----------------------------------------------------------------------------- seeds


def _rng(seed: SeedLike) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _seed_sequence(seed: SeedLike) -> np.random.SeedSequence:
    """A SeedSequence from any seed; a Generator contributes fresh draws from its stream."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(seed.integers(0, 2**63, size=4).tolist())
    return np.random.SeedSequence(seed)


def _entropy(root: np.random.SeedSequence) -> int | list[int]:
    """The entropy of ``root``: an int, or a list of ints (a Generator's draws, an int
    sequence given as seed)."""
    entropy = root.entropy
    if isinstance(entropy, (int, np.integer)):
        return int(entropy)
    assert entropy is not None  # a SeedSequence draws entropy when given none
    return [int(e) for e in entropy]


def _entropy_text(entropy: int | list[int]) -> str | list[str]:
    """:func:`_entropy` for JSON: decimal strings, since JSON readers may round large ints."""
    return str(entropy) if isinstance(entropy, int) else [str(e) for e in entropy]


def _unit_rng(root: np.random.SeedSequence, unit: int) -> np.random.Generator:
    """The stream of generation unit ``unit``: a child of ``root`` that does not depend on
    how many children were spawned before (``root`` is not modified)."""
    child = np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (unit,))
    return np.random.default_rng(child)


# ----------------------------------------------------------------------------- topics


def default_vocab(n_words: int) -> list[str]:
    """Tokenizer-safe names of ``n_words`` words: ``xaaaa``, ``xaaab``, …, ``xaaba``, ….

    Word ``i`` is ``x`` and ``i`` in base 26 written with the letters ``a``-``z``, at least 4
    of them (more as ``n_words`` grows past 26⁴). Every name is letters only, 5 to 15 of
    them, and no English stop word starts with ``x``, so the default tokenizer reads each
    name back as one token. The list is in lexicographic order.

    Returns
    -------
    list of str, length V
    """
    if n_words < 0:
        raise ValueError(f"n_words={n_words!r}: must be >= 0")
    width = 4
    while 26**width < n_words:
        width += 1
    codes = np.full((n_words, 1 + width), ord("x"), dtype=np.uint8)
    index = np.arange(n_words, dtype=np.int64)
    for column in range(width, 0, -1):
        codes[:, column] = ord("a") + index % 26
        index //= 26
    return cast("list[str]", codes.view(f"S{1 + width}").ravel().astype(str).tolist())


def dirichlet_topics_with_anchors(
    n_words: int, n_topics: int, beta: float = 0.05, *, seed: SeedLike = None
) -> tuple[np.ndarray, np.ndarray]:
    """Random topics with one planted anchor word per topic, and the anchors.

    Each column is drawn from a symmetric Dirichlet(β) over the words. Then, as in Arora et
    al. (2013), K distinct words are drawn uniformly as anchors; the row of each anchor is
    zeroed in every topic, the anchor of topic k gets topic k's largest entry (taken before
    the zeroing), and the columns are renormalised. So word ``anchors[k]`` occurs only in
    topic k and is (one of) its most probable words.

    Parameters
    ----------
    n_words : int
        V, the vocabulary size (>= ``n_topics``).
    n_topics : int
        K, the number of topics (>= 1).
    beta : float
        Dirichlet concentration of each topic (> 0); small values give sparse topics.
    seed : int, SeedSequence, Generator or None

    Returns
    -------
    A : ndarray of shape (V, K), float64
        Column-stochastic topic matrix. Equal to ``dirichlet_topics(..., planted_anchors=True)``
        with the same seed.
    anchors : ndarray of shape (K,), int64
        ``anchors[k]`` is the anchor word (row of ``A``) of topic k.
    """
    return _topics(n_words, n_topics, beta, True, seed)


def dirichlet_topics(
    n_words: int,
    n_topics: int,
    beta: float = 0.05,
    *,
    planted_anchors: bool = False,
    seed: SeedLike = None,
) -> np.ndarray:
    """Random topics: the columns of A drawn from a symmetric Dirichlet(β).

    Parameters
    ----------
    n_words : int
        V, the vocabulary size.
    n_topics : int
        K, the number of topics (>= 1).
    beta : float
        Dirichlet concentration of each topic (> 0).
    planted_anchors : bool
        Plant one anchor word per topic; use :func:`dirichlet_topics_with_anchors` to also
        get which words they are.
    seed : int, SeedSequence, Generator or None

    Returns
    -------
    A : ndarray of shape (V, K), float64
        Column-stochastic: every column sums to 1. With the same seed, the topics with
        planted anchors are made from the same draw as those without. For small β some
        entries underflow to exactly 0 (a word absent from a topic).
    """
    return _topics(n_words, n_topics, beta, planted_anchors, seed)[0]


def _topics(
    n_words: int, n_topics: int, beta: float, planted: bool, seed: SeedLike
) -> tuple[np.ndarray, np.ndarray]:
    V, K = int(n_words), int(n_topics)
    if K < 1:
        raise ValueError(f"n_topics={n_topics!r}: must be >= 1")
    if V < 1:
        raise ValueError(f"n_words={n_words!r}: must be >= 1")
    if planted and V < K:
        raise ValueError(f"planted anchors need n_words >= n_topics (got V={V}, K={K})")
    if not beta > 0:
        raise ValueError(f"beta={beta!r}: must be > 0")
    rng = _rng(seed)
    A = np.ascontiguousarray(rng.dirichlet(np.full(V, float(beta)), size=K).T)  # V×K
    anchors = _plant_in_place(A, rng) if planted else np.zeros(0, np.int64)
    sums = A.sum(axis=0)
    if np.any(sums <= 0) or not np.all(np.isfinite(sums)):
        raise FloatingPointError(
            f"a topic drew all-zero weights (beta={beta!r} is too small for float64)"
        )
    A /= sums
    return A, anchors


def _plant_in_place(A: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Plant one anchor word per topic in ``A`` (V×K, modified in place, not renormalised).

    K distinct words are drawn uniformly; each one's row is zeroed in every topic, and the
    anchor of topic k gets topic k's largest entry (taken before the zeroing).

    Returns
    -------
    anchors : ndarray of shape (K,), int64
    """
    V, K = A.shape
    anchors = np.asarray(rng.choice(V, size=K, replace=False), dtype=np.int64)
    top = A.max(axis=0)  # (K,) each topic's largest entry
    A[anchors, :] = 0.0
    A[anchors, np.arange(K)] = top
    return anchors


def plant_anchors(A: np.ndarray, seed: SeedLike = None) -> tuple[np.ndarray, np.ndarray]:
    """Plant one anchor word per topic into given topics, by the rule of
    :func:`dirichlet_topics_with_anchors`.

    K distinct words are drawn uniformly as anchors; the row of each anchor is zeroed in
    every topic, the anchor of topic k gets topic k's largest entry, and the columns are
    renormalised. Useful for semi-synthetic topics taken from a fitted model
    (:func:`topics_from_model`), which need not be separable.

    Parameters
    ----------
    A : ndarray of shape (V, K)
        Column-stochastic topics (V >= K); not modified.
    seed : int, SeedSequence, Generator or None

    Returns
    -------
    A_planted : ndarray of shape (V, K), float64
        Column-stochastic; word ``anchors[k]`` occurs only in topic k.
    anchors : ndarray of shape (K,), int64
    """
    A = np.array(_check_topics(A), dtype=np.float64, order="C")  # a fresh copy
    V, K = A.shape
    if V < K:
        raise ValueError(f"planted anchors need n_words >= n_topics (got V={V}, K={K})")
    anchors = _plant_in_place(A, _rng(seed))
    sums = A.sum(axis=0)
    if np.any(sums <= 0):  # pragma: no cover - the anchor keeps the column's maximum
        raise FloatingPointError("a topic lost all its weight while planting anchors")
    A /= sums
    return A, anchors


def topics_from_model(path: str | os.PathLike[str]) -> tuple[np.ndarray, list[str]]:
    """The topics of a saved :class:`~streamtopic.model.AnchorTopicModel`, as semi-synthetic
    ground truth (as in Arora et al., 2013, who generate from topics learned on real data).

    Parameters
    ----------
    path : path
        A model saved by :meth:`AnchorTopicModel.save` (zarr group or HDF5 file).

    Returns
    -------
    A : ndarray of shape (V, K), float64
        ``components_.T``, with tiny negative round-off clipped to 0 and the columns
        renormalised to sum to exactly 1.
    vocab : list of str, length V
        The model's words, one per row of ``A``.
    """
    model = AnchorTopicModel.load(path)
    A = np.array(np.asarray(model.components_, dtype=np.float64).T, order="C")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{os.fspath(path)}: the model's topics are not finite")
    np.maximum(A, 0.0, out=A)
    sums = A.sum(axis=0)
    if np.any(sums <= 0):
        raise ValueError(f"{os.fspath(path)}: topic {int(np.argmin(sums))} has no weight")
    A /= sums
    return A, list(model.vocab_)


def dirichlet_second_moment(alpha: float | np.ndarray, n_topics: int) -> np.ndarray:
    """E[θθᵀ] for θ ~ Dirichlet(α).

    With α0 = Σ_k α_k: E[θθᵀ] = (α αᵀ + diag α) / (α0 (α0 + 1)).

    Parameters
    ----------
    alpha : float or ndarray of shape (K,)
        Symmetric concentration (a float: α·1_K) or the K concentrations.
    n_topics : int
        K.

    Returns
    -------
    R : ndarray of shape (K, K)
        Symmetric, entries sum to 1.
    """
    a = _alpha_vector(alpha, n_topics)
    a0 = a.sum()
    return cast("np.ndarray", (np.outer(a, a) + np.diag(a)) / (a0 * (a0 + 1.0)))


def population_cooccurrence(A: np.ndarray, alpha: float | np.ndarray) -> np.ndarray:
    """The exact population co-occurrence Q = A E[θθᵀ] Aᵀ for θ ~ Dirichlet(α).

    This is the expectation of each document's unbiased estimate Q_d (see
    :func:`streamtopic.cooccurrence.document_cooccurrence`), whatever the document lengths:
    the limit of the store's ``Q`` as the number of documents grows.

    Parameters
    ----------
    A : ndarray of shape (V, K)
        Column-stochastic topics.
    alpha : float or ndarray of shape (K,)
        Dirichlet concentration of the topic proportions (a float: symmetric α·1_K).

    Returns
    -------
    Q : ndarray of shape (V, V), float64
        Dense, symmetric, non-negative; entries sum to 1.
    """
    A = _check_topics(A)
    K = A.shape[1]
    a = _alpha_vector(alpha, K)
    a0 = a.sum()
    # A (ααᵀ + diag α) Aᵀ = (Aα)(Aα)ᵀ + (A diag α) Aᵀ, without a K×K detour
    Aa = A @ a  # (V,)
    Q = (A * a) @ A.T
    Q += np.outer(Aa, Aa)
    Q /= a0 * (a0 + 1.0)
    return cast("np.ndarray", Q)


def _alpha_vector(alpha: float | np.ndarray, K: int) -> np.ndarray:
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(int(K), float(a))
    if a.shape != (int(K),):
        raise ValueError(f"alpha has shape {a.shape}; expected a float or ({K},)")
    if not np.all(a > 0) or not np.all(np.isfinite(a)):
        raise ValueError("alpha must be positive and finite")
    return a


def _check_topics(A: np.ndarray) -> np.ndarray:
    """A as a float64 V×K array whose columns sum to exactly 1 (renormalised)."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise ValueError(f"A has shape {A.shape}; expected a non-empty V×K matrix")
    if not np.all(np.isfinite(A)) or np.any(A < 0):
        raise ValueError("A must be finite and non-negative")
    sums = A.sum(axis=0)
    bad = np.flatnonzero(np.abs(sums - 1.0) > _STOCHASTIC_TOL)
    if bad.size:
        raise ValueError(
            f"A must be column-stochastic: column {int(bad[0])} sums to {sums[bad[0]]!r}"
        )
    return cast("np.ndarray", A / sums)


# ----------------------------------------------------------------------------- topic proportions


@dataclass(frozen=True)
class LogisticNormal:
    """Correlated topic proportions: θ = softmax(η), η ~ N(μ, Σ) (the logistic normal).

    The topics are split into consecutive groups of ``group_size`` (topic k is in group
    ``k // group_size``; the last group is smaller when ``group_size`` does not divide K).
    The covariance is block-structured,

        Σ = σ² [(1 − ρ) I + ρ B],   B_ij = 1 if topics i and j share a group, else 0,

    so every η_k has variance σ², two topics of the same group have correlation ρ and
    topics of different groups are independent. This is the kind of correlated-topic
    experiment of Arora et al. (2013, Fig. 4), who use ρ = 0.05 and 0.1.

    The mean is μ = 0: every η_k has the same marginal N(0, σ²), so E[θ] is exactly
    uniform (1/K each) when ``group_size`` divides K, by symmetry, and nearly uniform
    otherwise. ``group_size`` defaults to 10 (with K = 100: ten groups of ten) and σ to 1;
    larger σ gives sparser, more peaked θ. A fixed σ gives flatter θ as K grows: at K = 50,
    σ = 1 gives E[Σ_k θ_k²] = 0.048, about 22 topics per document in effect, where
    Dirichlet(0.1) gives 0.18; :meth:`matching_dirichlet` chooses σ to match a Dirichlet.

    Sampling is η = σ (√(1−ρ) z + √ρ g[group]), with z ~ N(0, I_K) and one g ~ N(0, 1)
    per group, which has exactly the covariance above.

    Parameters
    ----------
    rho : float
        Within-group correlation of η, in [0, 1).
    group_size : int
        Topics per group (>= 1).
    sigma : float
        Standard deviation of each η_k (> 0).
    """

    rho: float = 0.0
    group_size: int = 10
    sigma: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.rho) < 1.0):
            raise ValueError(f"rho={self.rho!r}: must be in [0, 1)")
        if int(self.group_size) != self.group_size or self.group_size < 1:
            raise ValueError(f"group_size={self.group_size!r}: must be a positive integer")
        if not (np.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"sigma={self.sigma!r}: must be positive and finite")
        object.__setattr__(self, "rho", float(self.rho))
        object.__setattr__(self, "group_size", int(self.group_size))
        object.__setattr__(self, "sigma", float(self.sigma))

    @classmethod
    def matching_dirichlet(
        cls, alpha: float | np.ndarray, n_topics: int, *, rho: float = 0.0,
        group_size: int = 10, n_samples: int = 20_000, seed: SeedLike = 0,
    ) -> LogisticNormal:
        """The logistic normal as concentrated as θ ~ Dirichlet(α) on K topics.

        σ is chosen so that, without correlation (ρ = 0), E[Σ_k θ_k²], the chance that two
        tokens of a document draw the same topic, equals the Dirichlet's. Both laws are
        then exchangeable for a symmetric α, so E[θθᵀ] = a I + b 11ᵀ (K×K, entries summing
        to 1) is fixed by that trace: the uncorrelated law has the Dirichlet's population
        Q = A E[θθᵀ] Aᵀ, and ``rho`` adds within-group correlation at the same σ.

        The trace is a Monte Carlo mean over ``n_samples`` fixed draws z ~ N(0, I_K) of
        Σ_k softmax(σ z)_k², increasing in σ; :func:`scipy.optimize.brentq` solves for
        log σ. Its relative standard error is about 0.5% with the default draws.

        Parameters
        ----------
        alpha : float or ndarray of shape (K,)
            Dirichlet concentration to match.
        n_topics : int
            K (>= 2).
        rho, group_size : float, int
            Correlation and group size of the returned law.
        n_samples : int
            Monte Carlo draws (memory ``8 · n_samples · K`` bytes, a few times over).
        seed : int, SeedSequence, Generator or None
            Seed of the draws.

        Returns
        -------
        LogisticNormal
        """
        from scipy.optimize import brentq

        K = int(n_topics)
        if K < 2:
            raise ValueError(f"n_topics={n_topics!r}: must be >= 2")
        if int(n_samples) != n_samples or n_samples < 1:
            raise ValueError(f"n_samples={n_samples!r}: must be a positive integer")
        target = float(np.trace(dirichlet_second_moment(alpha, K)))
        z = _rng(seed).standard_normal((int(n_samples), K))

        def excess(log_sigma: float) -> float:
            theta = _softmax_rows(np.exp(log_sigma) * z)
            return cast("float", float(np.einsum("ij,ij->", theta, theta)) / z.shape[0] - target)

        lo, hi = np.log(1e-3), np.log(1e3)
        if not excess(lo) < 0 < excess(hi):
            raise ValueError(f"alpha={alpha!r}: no σ in [1e-3, 1e3] matches Dirichlet(alpha)")
        sigma = float(np.exp(brentq(excess, lo, hi, xtol=1e-6)))
        return cls(rho=rho, group_size=group_size, sigma=sigma)

    def groups(self, n_topics: int) -> np.ndarray:
        """Group of each topic, ``k // group_size``: int64 array of shape (K,)."""
        return np.arange(int(n_topics), dtype=np.int64) // self.group_size

    def covariance(self, n_topics: int) -> np.ndarray:
        """Σ = σ² [(1 − ρ) I + ρ B], shape (K, K)."""
        g = self.groups(n_topics)
        same = (g[:, None] == g[None, :]).astype(np.float64)
        return cast("np.ndarray",
                    self.sigma**2 * ((1.0 - self.rho) * np.eye(int(n_topics)) + self.rho * same))

    def sample_eta(self, n: int, n_topics: int, rng: np.random.Generator) -> np.ndarray:
        """η ~ N(0, Σ): ndarray of shape (n, K)."""
        g = self.groups(n_topics)
        eta = rng.standard_normal((int(n), int(n_topics)))
        if self.rho > 0:
            eta *= np.sqrt(1.0 - self.rho)
            eta += np.sqrt(self.rho) * rng.standard_normal((int(n), int(g[-1]) + 1))[:, g]
        eta *= self.sigma
        return eta

    def sample(self, n: int, n_topics: int, rng: np.random.Generator) -> np.ndarray:
        """θ = softmax(η): ndarray of shape (n, K), rows sum to 1."""
        return _softmax_rows(self.sample_eta(n, n_topics, rng))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "logistic_normal", "rho": self.rho, "group_size": self.group_size,
                "sigma": self.sigma}


ThetaSpec = str | LogisticNormal
"""How documents draw θ: ``"dirichlet"`` (θ ~ Dirichlet(α), using ``alpha``) or a
:class:`LogisticNormal`."""


def _softmax_rows(eta: np.ndarray) -> np.ndarray:
    eta = eta - eta.max(axis=1, keepdims=True)
    np.exp(eta, out=eta)
    eta /= eta.sum(axis=1, keepdims=True)
    return eta


def parse_theta(spec: ThetaSpec) -> ThetaSpec:
    """A θ specification from a :class:`LogisticNormal` or a string (for command lines).

    Strings: ``"dirichlet"``, or ``"logistic-normal"`` (also ``"logistic_normal"``,
    ``"ln"``), optionally followed by ``:key=value,...`` with keys ``rho``,
    ``group_size`` and ``sigma``, e.g. ``"ln:rho=0.1,group_size=5"``.

    Returns
    -------
    ``"dirichlet"`` or LogisticNormal
    """
    if isinstance(spec, LogisticNormal):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"theta={spec!r}: expected 'dirichlet', a string or a LogisticNormal")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind == "dirichlet":
        if rest.strip():
            raise ValueError(f"theta={spec!r}: 'dirichlet' takes no options (use alpha)")
        return "dirichlet"
    if kind not in ("logistic-normal", "logistic_normal", "ln", "logisticnormal"):
        raise ValueError(f"theta={spec!r}: expected 'dirichlet' or 'logistic-normal[:k=v,...]'")
    kwargs: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in ("rho", "group_size", "sigma"):
            raise ValueError(f"theta={spec!r}: bad option {item!r} (rho, group_size, sigma)")
        try:
            kwargs[key] = int(value) if key == "group_size" else float(value)
        except ValueError:
            raise ValueError(f"theta={spec!r}: bad value in {item!r}") from None
    return LogisticNormal(**kwargs)


def _theta_law(theta: ThetaSpec) -> LogisticNormal | None:
    """None for the Dirichlet, else the LogisticNormal."""
    spec = parse_theta(theta)
    return spec if isinstance(spec, LogisticNormal) else None


def theta_dict(theta: ThetaSpec = "dirichlet", alpha: float | np.ndarray = 0.1) -> dict[str, Any]:
    """A JSON-ready description of the θ law: ``{"kind": "dirichlet", "alpha": ...}`` or
    ``{"kind": "logistic_normal", "rho": ..., "group_size": ..., "sigma": ...}``."""
    law = _theta_law(theta)
    if law is not None:
        return law.to_dict()
    a = np.asarray(alpha, dtype=np.float64)
    return {"kind": "dirichlet", "alpha": float(a) if a.ndim == 0 else a.tolist()}


def _orbit_average(M: np.ndarray, law: LogisticNormal) -> np.ndarray:
    """Average the entries of a K×K estimate of E[θθᵀ] over the symmetries of ``law``.

    Permuting topics within a group, or whole groups of equal size, leaves the law of θ
    unchanged, so E[θθᵀ]_ij only depends on whether i = j, i and j share a group, and the
    sizes of their groups. Averaging each such class keeps the expectation and lowers the
    Monte Carlo variance.
    """
    K = M.shape[0]
    g = law.groups(K)
    size = np.bincount(g)[g]  # (K,) size of each topic's group
    kind = np.where(np.eye(K, dtype=bool), 0, np.where(g[:, None] == g[None, :], 1, 2))
    s_lo = np.minimum(size[:, None], size[None, :])
    s_hi = np.maximum(size[:, None], size[None, :])
    keys = np.stack([kind.ravel(), s_lo.ravel(), s_hi.ravel()], axis=1)
    _, label = np.unique(keys, axis=0, return_inverse=True)
    label = label.ravel()
    means = np.bincount(label, weights=M.ravel()) / np.bincount(label)
    return means[label].reshape(K, K)


def second_moment(
    theta: ThetaSpec,
    n_topics: int,
    *,
    alpha: float | np.ndarray = 0.1,
    n_samples: int = 200_000,
    seed: SeedLike = 0,
    monte_carlo: bool | None = None,
    chunk: int = 50_000,
) -> tuple[np.ndarray, bool]:
    """E[θθᵀ] of the topic proportions, exact when known, else by Monte Carlo.

    The Dirichlet has the closed form :func:`dirichlet_second_moment`. The logistic normal
    has none: its moment is estimated as the mean of θθᵀ over ``n_samples`` draws (in
    chunks of ``chunk`` draws, so memory is O(chunk · K)), then averaged over the law's
    symmetries (topics of one group are exchangeable, and so are groups of equal size),
    which keeps the expectation and lowers the variance. Each entry's standard error is
    at most about sqrt(E[θ_i² θ_j²] / n_samples).

    Parameters
    ----------
    theta : 'dirichlet', str or LogisticNormal
        The law of θ (see :func:`parse_theta`).
    n_topics : int
        K.
    alpha : float or ndarray of shape (K,)
        Dirichlet concentration (used only by the Dirichlet).
    n_samples : int
        Monte Carlo draws (>= 1).
    seed : int, SeedSequence, Generator or None
        Seed of the Monte Carlo draws.
    monte_carlo : bool, optional
        Force the Monte Carlo estimate (True; for the Dirichlet, a check of the estimator
        against the closed form, without the symmetry averaging) or refuse it (False).
        Default: exact when possible.
    chunk : int
        Draws per chunk.

    Returns
    -------
    M : ndarray of shape (K, K), float64
        Symmetric, non-negative, entries sum to 1.
    is_exact : bool
        False when ``M`` is a Monte Carlo estimate.
    """
    K = int(n_topics)
    if K < 1:
        raise ValueError(f"n_topics={n_topics!r}: must be >= 1")
    law = _theta_law(theta)
    if law is None and not monte_carlo:
        return dirichlet_second_moment(alpha, K), True
    if monte_carlo is False:
        raise ValueError("the logistic normal has no closed-form E[θθᵀ]; use monte_carlo")
    if int(n_samples) != n_samples or n_samples < 1:
        raise ValueError(f"n_samples={n_samples!r}: must be a positive integer")
    if chunk < 1:
        raise ValueError(f"chunk={chunk!r}: must be >= 1")
    a = _alpha_vector(alpha, K) if law is None else None
    rng = _rng(seed)
    M = np.zeros((K, K))
    done = 0
    while done < n_samples:
        n = min(int(chunk), int(n_samples) - done)
        if law is not None:
            T = law.sample(n, K, rng)  # (n, K)
        else:
            assert a is not None
            T = rng.dirichlet(a, size=n)
        M += T.T @ T
        done += n
    M /= n_samples
    M = 0.5 * (M + M.T)
    if law is not None:
        M = _orbit_average(M, law)
    M /= M.sum()  # each θθᵀ sums to 1; remove the round-off
    return M, False


class _LowRankQ:
    """Q = A M Aᵀ (V×V), computed block by block on indexing: never held whole."""

    def __init__(self, A: np.ndarray, M: np.ndarray) -> None:
        self._A = A
        self._AM = A @ M  # (V, K)
        self.shape = (A.shape[0], A.shape[0])

    def __getitem__(self, key: tuple[slice, slice]) -> np.ndarray:
        rows, cols = key
        return cast("np.ndarray", self._AM[rows] @ self._A[cols].T)


def population_store(
    path: str | os.PathLike[str],
    A: np.ndarray,
    theta: ThetaSpec = "dirichlet",
    *,
    alpha: float | np.ndarray = 0.1,
    vocab: Sequence[str] | None = None,
    n_docs: int = 10**6,
    n_samples: int = 200_000,
    seed: SeedLike = 0,
    chunk_size: int | None = None,
) -> dict[str, Any]:
    """Write the population co-occurrence Q = A E[θθᵀ] Aᵀ as a co-occurrence store.

    The "infinite data" limit of ingesting documents drawn from ``A`` and ``theta``: fitting
    a model to this store isolates the algorithm's error from the sampling error. E[θθᵀ]
    comes from :func:`second_moment`: exact for the Dirichlet, a Monte Carlo estimate for
    the logistic normal. Q is computed block by block (one store chunk at a time), so
    memory is O(V·K + chunk²), not O(V²). Written by
    :meth:`streamtopic.CooccurrenceStore.from_array` (word counts and document
    frequencies are marked unknown).

    Parameters
    ----------
    path : path
        The store to create (must not exist).
    A : ndarray of shape (V, K)
        Column-stochastic topics.
    theta : 'dirichlet', str or LogisticNormal
    alpha : float or ndarray of shape (K,)
        Dirichlet concentration (Dirichlet only).
    vocab : sequence of str of length V, optional
        Default :func:`default_vocab`.
    n_docs : int
        The nominal document count recorded in the store (its sum is Q · n_docs).
    n_samples, seed
        Monte Carlo draws and their seed (logistic normal only).
    chunk_size : int, optional
        The store's chunk size (default: the store's default).

    Returns
    -------
    dict
        ``path``, ``V``, ``K``, ``n_docs``, ``theta`` (see :func:`theta_dict`),
        ``second_moment`` (``"exact"`` or ``"monte_carlo"``), ``monte_carlo`` (bool),
        ``n_samples`` (0 when exact) and ``store_version``.
    """
    A = _check_topics(A)
    V, K = A.shape
    terms = _check_vocab(vocab, V, "hdf5")
    M, exact = second_moment(theta, K, alpha=alpha, n_samples=n_samples, seed=seed)
    store = CooccurrenceStore.from_array(
        _LowRankQ(A, M), terms, path, n_docs=int(n_docs), chunk_size=chunk_size
    )
    return {
        "path": store.path,
        "V": V,
        "K": K,
        "n_docs": int(n_docs),
        "theta": theta_dict(theta, alpha),
        "second_moment": "exact" if exact else "monte_carlo",
        "monte_carlo": not exact,
        "n_samples": 0 if exact else int(n_samples),
        "store_version": store.version,
    }


# ----------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class _Model:
    """Everything a generation unit needs, precomputed once."""

    A_t: np.ndarray  # (K, V) topics as contiguous rows
    cdf_t: np.ndarray  # (K, V) cumulative sums, clipped to 1, last entry exactly 1
    alpha: np.ndarray  # (K,)
    doc_length: int
    poisson: bool
    unit_docs: int
    theta: LogisticNormal | None = None  # None: θ ~ Dirichlet(alpha)

    @property
    def V(self) -> int:
        return int(self.A_t.shape[1])

    @property
    def K(self) -> int:
        return int(self.A_t.shape[0])


def _model(
    A: np.ndarray,
    alpha: float | np.ndarray,
    doc_length: int,
    poisson: bool,
    theta: ThetaSpec = "dirichlet",
) -> _Model:
    A = _check_topics(A)
    K = A.shape[1]
    if int(doc_length) != doc_length or doc_length < 1:
        raise ValueError(f"doc_length={doc_length!r}: must be a positive integer")
    if doc_length >= 2**31:
        raise ValueError(f"doc_length={doc_length!r}: too large")
    A_t = np.ascontiguousarray(A.T)
    cdf_t = np.minimum(np.cumsum(A_t, axis=1), 1.0)
    cdf_t[:, -1] = 1.0
    unit = unit_docs(int(doc_length))
    law = _theta_law(theta)
    return _Model(
        A_t, cdf_t, _alpha_vector(alpha, K), int(doc_length), bool(poisson), unit, law
    )


def unit_docs(doc_length: int) -> int:
    """Documents per generation unit (~2^20 tokens) at a given (mean) document length.

    Units are the grain of determinism: unit ``u`` holds documents ``u·n : (u+1)·n`` (the
    last unit fewer) and draws from its own stream, so any split of the corpus along unit
    boundaries (blocks, Dask tasks, shards) gives the same documents.
    """
    return int(np.clip(_UNIT_TOKENS // int(doc_length), _UNIT_MIN_DOCS, _UNIT_MAX_DOCS))


def _draw_words(model: _Model, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` i.i.d. words of topic ``k``, in random order, as int32 (n,).

    Two exact samplers, picked by cost (a deterministic choice): inverse-CDF search for few
    tokens, else the word counts as one multinomial draw, expanded and shuffled.
    """
    if n < model.V:
        return np.searchsorted(model.cdf_t[k], rng.random(n), side="right").astype(np.int32)
    counts = rng.multinomial(n, model.A_t[k])
    words = np.repeat(np.arange(model.V, dtype=np.int32), counts)
    rng.shuffle(words)
    return words


def _sample_unit(model: _Model, n_docs: int, rng: np.random.Generator) -> sp.csr_matrix:
    """One unit: ``n_docs`` documents as an (n_docs × V) int32 CSR count matrix."""
    V = model.V
    if model.theta is None:
        theta = rng.dirichlet(model.alpha, size=n_docs)  # (B, K)
    else:
        theta = model.theta.sample(n_docs, model.K, rng)  # (B, K)
    if model.poisson:
        lengths = np.maximum(rng.poisson(model.doc_length, size=n_docs), 1)
    else:
        lengths = np.full(n_docs, model.doc_length, dtype=np.int64)
    topic_counts = rng.multinomial(lengths, theta)  # (B, K): tokens of each topic per doc
    per_topic = topic_counts.sum(axis=0)  # (K,)
    doc_ids = np.arange(n_docs, dtype=np.int32)
    rows: list[np.ndarray] = []
    words: list[np.ndarray] = []
    for k in np.flatnonzero(per_topic).tolist():  # a loop over topics, vectorised within
        words.append(_draw_words(model, k, int(per_topic[k]), rng))
        rows.append(np.repeat(doc_ids, topic_counts[:, k]))
    row = np.concatenate(rows) if rows else np.zeros(0, np.int32)
    col = np.concatenate(words) if words else np.zeros(0, np.int32)
    H = sp.csr_matrix(
        (np.ones(row.size, dtype=np.int32), (row, col)), shape=(n_docs, V), dtype=np.int32
    )
    H.sum_duplicates()  # canonical: sorted indices, no duplicates
    return H


def _unit_bounds(n_docs: int, unit_docs: int) -> Iterator[tuple[int, int, int]]:
    for u, d0 in enumerate(range(0, n_docs, unit_docs)):
        yield u, d0, min(n_docs, d0 + unit_docs)


def _iter_units(
    model: _Model, n_docs: int, seed: SeedLike, token_order: bool = False
) -> Iterator[tuple[sp.csr_matrix, np.ndarray | None]]:
    """Yield each unit's counts and, with ``token_order``, its tokens in document order (each
    document's tokens shuffled; int32, length = tokens of the unit)."""
    root = _seed_sequence(seed)
    for u, d0, d1 in _unit_bounds(n_docs, model.unit_docs):
        yield _make_unit(model, root, u, d1 - d0, token_order)


def _make_unit(
    model: _Model, root: np.random.SeedSequence, u: int, n_docs: int, token_order: bool
) -> tuple[sp.csr_matrix, np.ndarray | None]:
    """Unit ``u`` (of ``n_docs`` documents): its counts and, with ``token_order``, its tokens
    in document order. Depends only on (model, root, u, n_docs)."""
    rng = _unit_rng(root, u)
    H = _sample_unit(model, n_docs, rng)
    tokens = None
    if token_order:  # drawn after the counts, so the counts do not depend on it
        tokens = np.repeat(H.indices, H.data)
        doc = np.repeat(np.arange(H.shape[0], dtype=np.float64), np.diff(H.indptr))
        doc = np.repeat(doc, H.data)
        tokens = tokens[np.argsort(doc + rng.random(doc.size))]
    return H, tokens


def _check_sampling(n_docs: int) -> int:
    if int(n_docs) != n_docs or n_docs < 0:
        raise ValueError(f"n_docs={n_docs!r}: must be a non-negative integer")
    return int(n_docs)


def iter_documents(
    A: np.ndarray, n_docs: int, *, alpha: float | np.ndarray = 0.1, doc_length: int = 70,
    poisson: bool = False, seed: SeedLike = None, block_docs: int = 10_000,
    theta: ThetaSpec = "dirichlet",
) -> Iterator[sp.csr_matrix]:
    """Generate documents block by block, in bounded memory.

    Parameters
    ----------
    A, alpha, doc_length, poisson, seed, theta
        See :func:`sample_documents`.
    n_docs : int
        D, the total number of documents.
    block_docs : int
        Documents per yielded block (the last may be smaller). The documents do not depend
        on it.

    Yields
    ------
    H : scipy.sparse.csr_matrix of shape (B, V), int32
        Consecutive blocks of B = ``block_docs`` documents (the last may hold fewer);
        stacked, they equal ``sample_documents(A, n_docs, ...)`` with the same arguments.
    """
    n_docs = _check_sampling(n_docs)
    if block_docs < 1:
        raise ValueError(f"block_docs={block_docs!r}: must be >= 1")
    model = _model(A, alpha, doc_length, poisson, theta)
    units = (H for H, _ in _iter_units(model, n_docs, seed))
    yield from _exact_blocks(units, int(block_docs))


def _exact_blocks(units: Iterator[sp.csr_matrix], block_docs: int) -> Iterator[sp.csr_matrix]:
    """Re-cut consecutive document blocks of any sizes into blocks of ``block_docs`` rows."""
    pending: list[sp.csr_matrix] = []
    n_pending = 0
    for H in units:
        start = 0
        if pending:
            take = H[: block_docs - n_pending]
            pending.append(take)
            n_pending += take.shape[0]
            start = take.shape[0]
            if n_pending < block_docs:
                continue
            yield sp.vstack(pending, format="csr")
            pending, n_pending = [], 0
        while H.shape[0] - start >= block_docs:
            yield H[start : start + block_docs]
            start += block_docs
        if start < H.shape[0]:
            pending, n_pending = [H[start:]], H.shape[0] - start
    if pending:
        yield sp.vstack(pending, format="csr") if len(pending) > 1 else pending[0]


def sample_documents(
    A: np.ndarray, n_docs: int, *, alpha: float | np.ndarray = 0.1, doc_length: int = 70,
    poisson: bool = False, seed: SeedLike = None, theta: ThetaSpec = "dirichlet",
) -> sp.csr_matrix:
    """Draw documents from the topic model, as a document-term count matrix.

    Each document draws θ ~ Dirichlet(α) (K,) (or from ``theta``), a length n (``doc_length``, or
    max(1, Poisson(``doc_length``))), its topic counts ~ Multinomial(n, θ), and for each topic
    that many words from the topic's column of ``A``. This is the token-by-token story
    (z ~ Cat(θ), w ~ Cat(A[:, z])) with the tokens' order dropped. Documents are generated in
    vectorised units of thousands (a loop over topics, none over documents or tokens).

    Parameters
    ----------
    A : ndarray of shape (V, K)
        Column-stochastic topics (columns are renormalised in float64).
    n_docs : int
        D, the number of documents.
    alpha : float or ndarray of shape (K,)
        Dirichlet concentration of the topic proportions (a float: symmetric).
        Ignored unless ``theta`` is ``"dirichlet"``.
    doc_length : int
        Tokens per document, or the Poisson mean with ``poisson``.
    poisson : bool
        Draw each length from Poisson(``doc_length``), at least 1.
    seed : int, SeedSequence, Generator or None
        See the module notes on determinism.
    theta : 'dirichlet', str or LogisticNormal
        The law of θ: ``"dirichlet"`` (default: Dirichlet(``alpha``)) or a
        :class:`LogisticNormal` for correlated topics (strings: see :func:`parse_theta`).

    Returns
    -------
    H : scipy.sparse.csr_matrix of shape (D, V), int32
        Canonical (sorted indices, no duplicates); row sums are the document lengths.
    """
    n_docs = _check_sampling(n_docs)
    model = _model(A, alpha, doc_length, poisson, theta)
    blocks = [H for H, _ in _iter_units(model, n_docs, seed)]
    if not blocks:
        return sp.csr_matrix((0, model.V), dtype=np.int32)
    if len(blocks) == 1:
        return blocks[0]
    return sp.vstack(blocks, format="csr")


# ----------------------------------------------------------------------------- writing


def _check_vocab(vocab: Sequence[str] | None, V: int, fmt: str) -> list[str]:
    if vocab is None:
        return default_vocab(V)
    terms = np.asarray(list(vocab), dtype=str).tolist()
    if len(terms) != V:
        raise ValueError(f"vocab has {len(terms)} terms but A has V={V} rows")
    if len(set(terms)) != V:
        raise ValueError("vocab has repeated terms")
    arr = np.asarray(terms, dtype=str)
    if np.any(np.char.str_len(np.char.strip(arr)) == 0):
        raise ValueError("vocab has an empty or blank term")
    joined = "\n".join(terms)
    if joined.count("\n") != V - 1 or "\r" in joined:
        raise ValueError("vocab terms must not contain line breaks")
    if fmt in ("text", "jsonl"):
        if Tokenizer()(" ".join(terms)) != terms:
            raise ValueError(
                f"format={fmt!r} needs terms that the default tokenizer reads back unchanged: "
                "lowercase, 2 to 15 letters each, no English stop word"
            )
    return cast("list[str]", terms)


def _uci_name(path: str) -> tuple[str, bool]:
    """NAME of ``docword.NAME.txt[.gz]`` and whether it is gzipped."""
    base = os.path.basename(path)
    m = re.fullmatch(r"docword\.(.+)\.txt(\.gz)?", base)
    if m is None:
        raise ValueError(
            f"{path}: a UCI corpus must be named docword.NAME.txt or docword.NAME.txt.gz "
            "(its vocabulary goes beside it as vocab.NAME.txt)"
        )
    return m.group(1), m.group(2) is not None


class _GzipOut(gzip.GzipFile):
    """A gzip file with a reproducible header (no file name, mtime 0), so the same documents
    give the same bytes whatever the temporary name or the time of writing."""

    def __init__(self, path: str) -> None:
        self._raw = open(path, "wb")
        try:
            super().__init__(filename="", mode="wb", compresslevel=6, fileobj=self._raw, mtime=0)
        except BaseException:
            self._raw.close()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _open_out(path: str, gz: bool) -> IO[bytes]:
    if gz:
        return _GzipOut(path)  # type: ignore[return-value]
    return open(path, "wb")


def _ascii_ints(values: np.ndarray, suffix: bytes) -> np.ndarray:
    """Decimal ASCII of non-negative ints followed by ``suffix``, as an object array of bytes
    (one element per value)."""
    strs = np.char.add(np.asarray(values, dtype=np.int64).astype("S"), suffix)
    return strs.astype(object)


def _uci_lines(H: sp.csr_matrix, first_doc: int, word_tab: np.ndarray) -> bytes:
    """``docID wordID count`` lines (1-based ids) of the documents of ``H`` (B×V)."""
    if H.nnz == 0:
        return b""
    doc_tab = _ascii_ints(np.arange(first_doc + 1, first_doc + H.shape[0] + 1), b" ")
    cnt_tab = _ascii_ints(np.arange(int(H.data.max()) + 1), b"\n")
    fields = np.empty((H.nnz, 3), dtype=object)
    fields[:, 0] = np.repeat(doc_tab, np.diff(H.indptr))
    fields[:, 1] = word_tab[H.indices]
    fields[:, 2] = cnt_tab[H.data]
    return b"".join(fields.ravel().tolist())


def _text_lines(
    tokens: np.ndarray,
    H: sp.csr_matrix,
    sp_tab: np.ndarray,
    nl_tab: np.ndarray,
    prefix: bytes = b"",
) -> bytes:
    """One line per document of ``H``: ``prefix``, then its ``tokens`` (in document order)
    joined by spaces; ``nl_tab`` ends the line. Every document has at least one token."""
    if tokens.size == 0:
        return b""
    ends = np.cumsum(np.asarray(H.sum(axis=1)).ravel().astype(np.int64)) - 1  # last token/doc
    last = np.zeros(tokens.size, dtype=bool)
    last[ends] = True
    parts = np.where(last, nl_tab[tokens], sp_tab[tokens])
    if prefix:
        starts = np.concatenate(([0], ends[:-1] + 1))  # first token of each document
        parts = np.insert(parts, starts, prefix)
    return b"".join(parts.tolist())


@dataclass(frozen=True)
class _Encoder:
    """How a unit becomes output: the format and its lookup tables (one entry per word)."""

    fmt: str
    word_tab: np.ndarray | None = None  # uci: b"wordID "
    sp_tab: np.ndarray | None = None  # text/jsonl: term + b" "
    nl_tab: np.ndarray | None = None  # text/jsonl: term + line end
    prefix: bytes = b""  # jsonl: the start of each object

    @property
    def token_order(self) -> bool:
        return self.fmt in ("text", "jsonl")


_JSONL_PREFIX = b'{"text": "'
_JSONL_SUFFIX = b'"}\n'


def _encoder(fmt: str, terms: list[str]) -> _Encoder:
    if fmt == "uci":
        return _Encoder(fmt, word_tab=_ascii_ints(np.arange(1, len(terms) + 1), b" "))
    if fmt in ("text", "jsonl"):
        # terms passed the tokenizer check: word characters only, so no JSON escaping
        encoded = np.char.encode(np.asarray(terms, dtype=str), "utf-8")
        end = b"\n" if fmt == "text" else _JSONL_SUFFIX
        return _Encoder(
            fmt,
            sp_tab=np.char.add(encoded, b" ").astype(object),
            nl_tab=np.char.add(encoded, end).astype(object),
            prefix=b"" if fmt == "text" else _JSONL_PREFIX,
        )
    return _Encoder(fmt)


class _Piece(NamedTuple):
    """One generated unit, ready to write: its counts (hdf5) or its encoded bytes."""

    H: sp.csr_matrix | None
    data: bytes | None
    n_docs: int
    n_tokens: int
    nnz: int


def _make_piece(
    shared: tuple[_Model, _Encoder], root: np.random.SeedSequence, u: int, d0: int, d1: int
) -> _Piece:
    """Generate and encode unit ``u`` (documents ``d0:d1``): the task of the parallel path,
    and the step of the serial one, so both give the same bytes."""
    model, enc = shared
    H, tokens = _make_unit(model, root, u, d1 - d0, enc.token_order)
    n_tokens, nnz = int(H.data.sum(dtype=np.int64)), int(H.nnz)
    if enc.fmt == "hdf5":
        return _Piece(H, None, d1 - d0, n_tokens, nnz)
    if enc.fmt == "uci":
        assert enc.word_tab is not None
        return _Piece(None, _uci_lines(H, d0, enc.word_tab), d1 - d0, n_tokens, nnz)
    assert tokens is not None and enc.sp_tab is not None and enc.nl_tab is not None
    data = _text_lines(tokens, H, enc.sp_tab, enc.nl_tab, enc.prefix)
    return _Piece(None, data, d1 - d0, n_tokens, nnz)


def _serial_pieces(
    model: _Model, enc: _Encoder, root: np.random.SeedSequence, n_docs: int
) -> Generator[_Piece, None, None]:
    for u, d0, d1 in _unit_bounds(n_docs, model.unit_docs):
        yield _make_piece((model, enc), root, u, d0, d1)


def _parallel_pieces(
    model: _Model, enc: _Encoder, root: np.random.SeedSequence, n_docs: int, max_in_flight: int
) -> Generator[_Piece, None, None]:
    """The pieces of :func:`_serial_pieces`, generated in parallel Dask tasks (one per unit)
    and yielded in order, with at most ``max_in_flight`` units generated but not yet
    consumed.

    On a ``distributed.Client`` the model and tables are scattered once to every worker and
    units are submitted as futures, ``max_in_flight`` at a time. Otherwise windows of
    ``max_in_flight // 2`` units run through ``dask.compute`` (the configured scheduler,
    threads by default), the next window computing while the previous one is written.
    """
    bounds = _unit_bounds(n_docs, model.unit_docs)
    client = current_client()
    if client is not None:
        shared = client.scatter((model, enc), broadcast=True, hash=False)
        pending: deque[Any] = deque()
        try:
            for u, d0, d1 in bounds:
                pending.append(client.submit(_make_piece, shared, root, u, d0, d1, pure=False))
                if len(pending) >= max_in_flight:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()
        return

    import dask.base
    from dask.delayed import delayed

    tag = uuid.uuid4().hex[:12]
    window = max(1, max_in_flight // 2)

    def run(units: list[tuple[int, int, int]]) -> tuple[_Piece, ...]:
        tasks = [
            delayed(_make_piece, pure=False)(
                (model, enc), root, u, d0, d1, dask_key_name=f"synth-unit-{tag}-{u}"
            )
            for u, d0, d1 in units
        ]
        return cast("tuple[_Piece, ...]", dask.base.compute(*tasks))

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamtopic-synth") as ex:
        running: Future[tuple[_Piece, ...]] | None = None
        while True:
            units = list(itertools.islice(bounds, window))
            nxt = ex.submit(run, units) if units else None
            if running is not None:
                yield from running.result()
            if nxt is None:
                break
            running = nxt


def _with_progress(
    pieces: Iterator[_Piece], n_docs: int, progress: Callable[[int, int], None] | None
) -> Generator[_Piece, None, None]:
    done = 0
    for piece in pieces:
        yield piece
        done += piece.n_docs
        if progress is not None:
            progress(done, n_docs)


def _check_format(format: str, allowed: Sequence[str]) -> str:
    if format not in allowed:
        raise ValueError(f"format={format!r}: expected one of {', '.join(allowed)}")
    return format


def write_corpus(
    path: str | os.PathLike[str],
    A: np.ndarray,
    n_docs: int,
    *,
    format: str = "hdf5",
    vocab: Sequence[str] | None = None,
    alpha: float | np.ndarray = 0.1,
    doc_length: int = 70,
    poisson: bool = False,
    seed: SeedLike = None,
    block_docs: int = 10_000,
    theta: ThetaSpec = "dirichlet",
    parallel: bool = False,
    max_in_flight: int | None = None,
) -> dict[str, Any]:
    """Generate documents and write them to disk, streaming in bounded memory.

    The documents are those of ``sample_documents(A, n_docs, alpha=..., doc_length=...,
    poisson=..., seed=..., theta=...)``; they are generated one unit (~2^20 tokens) at a
    time, encoded, and written, so memory stays bounded by max(``block_docs``, one unit)
    (serial) or ``max_in_flight`` units (parallel). Every file is written under a temporary
    name and renamed into place on success.

    Notes
    -----
    The formats, all read back by :func:`streamtopic.read_corpus`:

    ``hdf5``
        streamtopic's CSR layout, via :class:`streamtopic.corpus.HDF5CorpusWriter` with the
        vocabulary fixed (every term stored, in order, also those that never occur).
    ``uci``
        ``path`` must be ``docword.NAME.txt`` (or ``.txt.gz``); ``vocab.NAME.txt`` is
        written beside it. The header ``D, W, NNZ`` is written once NNZ is known: entries go
        to a temporary file first, then are appended after the header.
    ``text``
        One document per line, each token its term, tokens shuffled (deterministically,
        by the seed) within the document; ``.gz`` paths are gzipped. Terms must survive
        the default tokenizer unchanged (lowercase, 2 to 15 letters, no English stop
        word), as :func:`default_vocab`'s do. Read it back with
        ``format='text'``: a corpus whose terms are all digits could look like UCI to
        format detection.

    :func:`synthesize` also writes JSON Lines.

    Parameters
    ----------
    path : path
        The file to write (replaced if it exists).
    A : ndarray of shape (V, K)
        Column-stochastic topics.
    n_docs : int
        D, the number of documents.
    format : {'hdf5', 'uci', 'text'}
    vocab : sequence of str of length V, optional
        Term of each row of ``A`` (default :func:`default_vocab`).
    alpha, doc_length, poisson, seed, theta
        See :func:`sample_documents`.
    block_docs : int
        Documents per HDF5 append; the output does not depend on it.
    parallel : bool
        Generate and encode the units in parallel Dask tasks (see :func:`synthesize`). The
        output is byte-for-byte that of the serial path (gzip members have a fixed header:
        no name, mtime 0).
    max_in_flight : int, optional
        Parallel only: units generated but not yet written, at most (default: twice
        :func:`streamtopic.cluster.n_workers`).

    Returns
    -------
    dict
        ``format``, ``n_docs``, ``n_tokens``, ``nnz`` (distinct document-term pairs),
        ``vocab_size``, ``path`` (the corpus file) and ``paths`` (every file written).
    """
    _check_format(format, WRITE_FORMATS)
    model = _model(A, alpha, doc_length, poisson, theta)
    return _write(path, model, n_docs, format=format, vocab=vocab, seed=seed,
                  block_docs=block_docs, parallel=parallel, max_in_flight=max_in_flight)


def _write(
    path: str | os.PathLike[str],
    model: _Model,
    n_docs: int,
    *,
    format: str,
    vocab: Sequence[str] | None,
    seed: SeedLike,
    block_docs: int,
    parallel: bool,
    max_in_flight: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    n_docs = _check_sampling(n_docs)
    if block_docs < 1:
        raise ValueError(f"block_docs={block_docs!r}: must be >= 1")
    if max_in_flight is not None and max_in_flight < 1:
        raise ValueError(f"max_in_flight={max_in_flight!r}: must be >= 1")
    terms = _check_vocab(vocab, model.V, format)
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{parent}: directory does not exist")
    if format == "uci":
        _uci_name(path)  # check the name before any work
    root = _seed_sequence(seed)
    enc = _encoder(format, terms)
    if parallel:
        if max_in_flight is None:
            max_in_flight = 2 * n_workers()
        pieces = _parallel_pieces(model, enc, root, n_docs, int(max_in_flight))
    else:
        pieces = _serial_pieces(model, enc, root, n_docs)
    pieces = _with_progress(pieces, n_docs, progress)
    try:
        if format == "hdf5":
            counts = _write_hdf5(path, pieces, terms, int(block_docs))
            paths = [path]
        elif format == "uci":
            counts, vocab_path = _write_uci(path, pieces, terms, n_docs)
            paths = [path, vocab_path]
        else:
            counts = _write_text(path, pieces)
            paths = [path]
    finally:
        pieces.close()  # stop a parallel generator at once on error
    return {
        "format": format,
        "n_docs": n_docs,
        "n_tokens": counts[0],
        "nnz": counts[1],
        "vocab_size": model.V,
        "path": path,
        "paths": paths,
    }


def _write_hdf5(
    path: str, pieces: Iterator[_Piece], terms: list[str], block_docs: int
) -> tuple[int, int]:
    n_tokens = nnz = 0
    with HDF5CorpusWriter(path, vocab=terms) as writer:
        batch: list[sp.csr_matrix] = []
        n = 0
        for piece in pieces:  # append units in batches of at least block_docs documents
            assert piece.H is not None
            batch.append(piece.H)
            n += piece.n_docs
            n_tokens += piece.n_tokens
            nnz += piece.nnz
            if n >= block_docs:
                writer.append(sp.vstack(batch, format="csr") if len(batch) > 1 else batch[0],
                              terms)
                batch, n = [], 0
        if batch:
            writer.append(sp.vstack(batch, format="csr") if len(batch) > 1 else batch[0], terms)
    return n_tokens, nnz


def _write_uci(
    path: str, pieces: Iterator[_Piece], terms: list[str], n_docs: int
) -> tuple[tuple[int, int], str]:
    name, gz = _uci_name(path)
    vocab_path = os.path.join(os.path.dirname(path), f"vocab.{name}.txt")
    n_tokens = nnz = 0
    # the entries go to a scratch file first: the header, which precedes them, needs their count
    entries = temp_beside(path, "entries")
    try:
        with written_aside(path) as out_tmp, written_aside(vocab_path) as vocab_tmp:
            with open(entries, "wb") as fh:
                for piece in pieces:
                    assert piece.data is not None
                    fh.write(piece.data)
                    n_tokens += piece.n_tokens
                    nnz += piece.nnz
            with _open_out(out_tmp, gz) as out, open(entries, "rb") as src:
                out.write(f"{n_docs}\n{len(terms)}\n{nnz}\n".encode("ascii"))
                shutil.copyfileobj(src, out, 2**22)
            with open(vocab_tmp, "wb") as fh:
                fh.write(("\n".join(terms) + "\n").encode("utf-8"))
    finally:
        remove_path(entries)
    return (n_tokens, nnz), vocab_path


def _write_text(path: str, pieces: Iterator[_Piece]) -> tuple[int, int]:
    """Text or JSON Lines: the pieces' bytes, in order; gzipped for ``.gz`` paths."""
    n_tokens = nnz = 0
    with written_aside(path) as tmp, _open_out(tmp, path.endswith(".gz")) as fh:
        for piece in pieces:
            assert piece.data is not None
            fh.write(piece.data)
            n_tokens += piece.n_tokens
            nnz += piece.nnz
    return n_tokens, nnz


# ----------------------------------------------------------------------------- synthesize

TOPICS_SUFFIX = ".topics.npz"
"""The true topics of :func:`synthesize` go to ``OUTPUT + TOPICS_SUFFIX``."""

POPULATION_SUFFIX = ".population.zarr"
"""The population store of :func:`synthesize` goes to ``OUTPUT + POPULATION_SUFFIX``."""

# spawn-key words of the streams of synthesize's topics and Monte Carlo draws, beside the
# document units (0, 1, 2, ...) of the same root: far beyond any unit number
_TOPICS_KEY = 0x7F7F_0000_0001
_POPULATION_KEY = 0x7F7F_0000_0002


def infer_format(path: str | os.PathLike[str]) -> str:
    """The output format a file name implies: ``.h5``/``.hdf5`` → hdf5,
    ``docword.NAME.txt[.gz]`` → uci, ``.jsonl[.gz]`` → jsonl, anything else → text."""
    name = os.path.basename(os.fspath(path)).lower()
    if name.endswith((".h5", ".hdf5")):
        return "hdf5"
    if re.fullmatch(r"docword\..+\.txt(\.gz)?", name):
        return "uci"
    if name.endswith((".jsonl", ".jsonl.gz")):
        return "jsonl"
    return "text"


def topics_path(output: str | os.PathLike[str]) -> str:
    """Where :func:`synthesize` writes the true topics of ``output``."""
    return os.path.abspath(os.fspath(output)) + TOPICS_SUFFIX


def _child(root: np.random.SeedSequence, key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (key,))


def save_topics(
    path: str | os.PathLike[str],
    A: np.ndarray,
    vocab: Sequence[str],
    *,
    anchors: np.ndarray | None = None,
    meta: dict[str, Any] | None = None,
) -> str:
    """Save true topics as an ``.npz`` (no pickles), written aside and renamed into place.

    Arrays: ``A`` (V×K float64), ``vocab`` (V,) unicode, ``anchors`` (K,) int64 (empty
    when none were planted) and ``meta``, a 0-d unicode array holding JSON (the θ law,
    the generation settings). Read it back with :func:`load_topics`.

    Returns
    -------
    str
        The absolute path written.
    """
    path = os.path.abspath(os.fspath(path))
    A = np.asarray(A, dtype=np.float64)
    arrays: dict[str, Any] = {
        "A": A,
        "vocab": np.asarray(list(vocab), dtype=str),
        "anchors": np.zeros(0, np.int64) if anchors is None else np.asarray(anchors, np.int64),
        "meta": np.asarray(json.dumps(meta or {}, sort_keys=True)),
    }
    if arrays["vocab"].shape != (A.shape[0],):
        raise ValueError(f"vocab has {arrays['vocab'].size} terms but A has {A.shape[0]} rows")
    with written_aside(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def load_topics(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a topics file of :func:`save_topics` / :func:`synthesize`.

    Returns
    -------
    dict
        ``A`` (ndarray (V, K) float64), ``vocab`` (list of str, length V), ``anchors``
        (ndarray (K,) int64, or None when none were planted) and ``meta`` (dict).
    """
    with np.load(os.fspath(path), allow_pickle=False) as z:
        A = np.asarray(z["A"])
        vocab = [str(t) for t in z["vocab"]]
        anchors = np.asarray(z["anchors"], dtype=np.int64)
        meta = json.loads(str(z["meta"]))
    return {"A": A, "vocab": vocab, "anchors": anchors if anchors.size else None, "meta": meta}


def synthesize(
    output: str | os.PathLike[str],
    *,
    n_docs: int,
    A: np.ndarray | None = None,
    model: str | os.PathLike[str] | None = None,
    n_words: int | None = None,
    n_topics: int | None = None,
    beta: float = 0.05,
    planted_anchors: bool = False,
    vocab: Sequence[str] | None = None,
    format: str | None = None,
    theta: ThetaSpec = "dirichlet",
    alpha: float | np.ndarray = 0.1,
    doc_length: int = 70,
    poisson: bool = False,
    seed: SeedLike = None,
    block_docs: int = 10_000,
    parallel: bool = True,
    max_in_flight: int | None = None,
    write_topics: bool = True,
    population: bool = False,
    population_docs: int = 10**6,
    population_samples: int = 200_000,
    progress: Callable[[int, int], None] | None = None,
    shards: int | None = None, shard_tokens: int | None = None,
    processes: int | None = None, resume: bool = False,
) -> dict[str, Any]:
    """Make a semi-synthetic corpus and its ground truth: the entry point of ``streamtopic
    synth``.

    The topics come from exactly one source:

    * ``A`` (V×K, column-stochastic), with ``vocab`` or :func:`default_vocab`;
    * ``model``, a saved :class:`~streamtopic.model.AnchorTopicModel`
      (:func:`topics_from_model`: its topics and its vocabulary, unless ``vocab`` is given);
    * ``n_words`` and ``n_topics``: random topics from a symmetric Dirichlet(``beta``)
      (:func:`dirichlet_topics`).

    With ``planted_anchors`` one anchor word per topic is planted (:func:`plant_anchors`,
    the rule of :func:`dirichlet_topics_with_anchors`). Documents are then drawn as by
    :func:`sample_documents` and written as by :func:`write_corpus`, in parallel Dask tasks
    by default: one task per generation unit (~2^20 tokens), at most ``max_in_flight``
    units in memory, written in order. The corpus is byte-for-byte that of the serial path
    and of ``write_corpus(output, A_true, n_docs, seed=seed, ...)`` for the same seed.

    Notes
    -----
    The files written:

    ``OUTPUT``
        The corpus (and ``vocab.NAME.txt`` beside a UCI corpus). A sharded corpus
        (``shards`` or ``shard_tokens``) is a directory of HDF5 files
        ``OUTPUT/part-00000.h5``, … (:data:`SHARD_NAME`), in document order, all over the
        same vocabulary, which ``streamtopic ingest OUTPUT`` reads as one corpus.
    ``OUTPUT.topics.npz`` (:data:`TOPICS_SUFFIX`; unless ``write_topics=False``)
        The true topics, for scoring a fit later (:func:`load_topics`): ``A`` (V×K),
        ``vocab``, ``anchors`` if planted, and ``meta`` (JSON: the θ law, the generation
        settings, the seed's entropy, the source of the topics).
    ``OUTPUT.population.zarr`` (:data:`POPULATION_SUFFIX`; with ``population=True``)
        A co-occurrence store holding the population Q = A E[θθᵀ] Aᵀ
        (:func:`population_store`; E[θθᵀ] by Monte Carlo for the logistic normal).

    Parameters
    ----------
    output : path
        The corpus file (replaced if it exists). Its parent directory must exist.
    n_docs : int
        D, the number of documents.
    A : ndarray of shape (V, K), optional
        The topics.
    model : path, optional
        A saved model whose topics to use.
    n_words, n_topics : int, optional
        V and K of random Dirichlet(``beta``) topics.
    beta : float
        Topic concentration for random topics.
    planted_anchors : bool
        Plant one anchor word per topic.
    vocab : sequence of str of length V, optional
        The terms (default: the model's, else :func:`default_vocab`).
    format : {'hdf5', 'uci', 'text', 'jsonl'}, optional
        Default: from the file name (:func:`infer_format`). ``jsonl`` writes one
        ``{"text": "..."}`` object per line (``.gz``: gzipped), read back by
        ``read_corpus(..., format='jsonl')``.
    theta : 'dirichlet', str or LogisticNormal
        The law of θ (strings: :func:`parse_theta`, e.g. ``"ln:rho=0.1,group_size=5"``).
    alpha : float or ndarray of shape (K,)
        Dirichlet concentration of θ (Dirichlet only).
    doc_length, poisson
        See :func:`sample_documents`.
    seed : int, SeedSequence, Generator or None
        One seed for everything. The documents use it as :func:`write_corpus` does; random
        topics, planted anchors and the Monte Carlo draws use streams of their own (spawn
        keys beyond any unit number). With None, fresh entropy is drawn and recorded.
    block_docs : int
        Documents per HDF5 append.
    parallel : bool
        Generate in parallel Dask tasks: on the active ``distributed.Client`` if any, else
        ``dask.compute`` on the configured scheduler (threads by default).
    max_in_flight : int, optional
        Units generated but not yet written, at most (default: twice the scheduler's
        worker threads).
    write_topics : bool
        Write ``OUTPUT.topics.npz``.
    population : bool
        Also write ``OUTPUT.population.zarr`` (replaced if it is a store from a previous run;
        otherwise it must not exist).
    population_docs : int
        The nominal document count of the population store.
    population_samples : int
        Monte Carlo draws of E[θθᵀ] (logistic normal only).
    progress : callable, optional
        Called as ``progress(docs_written, n_docs)`` after each unit is written (each shard,
        for a sharded corpus).
    shards, shard_tokens : int, optional
        Write a sharded HDF5 corpus: this many shards, or about this many tokens per shard
        (:func:`shard_bounds`: whole generation units, ~2^20 tokens, each). Shard ``s`` is
        documents ``d0:d1`` of the unsharded corpus of the same seed (unit ``u`` draws from
        the stream of (seed, u) whoever writes it), so the corpus does not depend on the
        number of shards or of processes. ``OUTPUT`` is then a directory (created if
        missing) that must hold nothing but shards; other shard files in it are removed.
    processes : int, optional
        Sharded corpus: shards written at once, one process each (default: the CPU count).
        Each process generates its shard one unit after the other, so its memory holds the
        topics (2 V×K arrays), one unit and one block of ``block_docs`` documents.
    resume : bool
        Sharded corpus: keep the shards already in ``OUTPUT`` that an earlier run wrote
        under the same plan (topics, θ law, lengths, seed, shards; recorded in
        ``OUTPUT/.synth-plan.json``); write the others.

    Returns
    -------
    dict
        The keys of :func:`write_corpus` (and for a sharded corpus ``shards``, one dict per
        shard: ``index``, ``path``, ``first_doc``, ``n_docs``, ``n_tokens``, ``nnz``,
        ``seconds``, ``reused``; ``processes`` and ``unit_docs``), plus ``n_topics``,
        ``theta`` (:func:`theta_dict`), ``topics_source`` (``"A"``, ``"model"`` or
        ``"dirichlet"``), ``anchors`` (list of int, or None), ``seed_entropy`` (int; a list
        of int when ``seed`` is a Generator), ``seed_spawn_key`` (list of int),
        ``topics_path`` (or None), ``population`` (the dict of :func:`population_store`,
        or None), ``parallel`` and ``seconds``.
    """
    t0 = time.perf_counter()
    out_path, fmt = _check_synth_output(output, format, (shards, shard_tokens) != (None, None),
                                        A=A, model=model, n_words=n_words, n_topics=n_topics)
    law = parse_theta(theta)
    root = _seed_sequence(seed)
    A_true, anchors, source, terms = _true_topics(
        root, fmt, A=A, model=model, n_words=n_words, n_topics=n_topics, beta=beta,
        vocab=vocab, planted_anchors=planted_anchors)
    gen = _model(A_true, alpha, doc_length, poisson, law)
    if population:
        _check_population_path(out_path + POPULATION_SUFFIX)
    report = _synth_corpus(
        out_path, gen, n_docs, fmt, terms, root, shards=shards,
        shard_tokens=shard_tokens, processes=processes, resume=resume, block_docs=block_docs,
        parallel=parallel, max_in_flight=max_in_flight, progress=progress)
    report.update(format=fmt, n_topics=A_true.shape[1], theta=theta_dict(law, alpha),
                  topics_source=source, anchors=None if anchors is None else anchors.tolist(),
                  seed_entropy=_entropy(root), seed_spawn_key=[int(k) for k in root.spawn_key],
                  parallel=bool(parallel), topics_path=None, population=None)
    if population:
        report["population"] = _write_population(
            out_path + POPULATION_SUFFIX, A_true, law, alpha=alpha, vocab=terms,
            n_docs=population_docs, n_samples=population_samples, seed=root)
        report["paths"].append(report["population"]["path"])
    if write_topics:
        meta = _topics_meta(report, out_path, model=model, beta=beta, poisson=poisson,
                            planted_anchors=planted_anchors, doc_length=doc_length)
        report["topics_path"] = save_topics(topics_path(out_path), A_true, terms,
                                            anchors=anchors, meta=meta)
        report["paths"].append(report["topics_path"])
    report["seconds"] = time.perf_counter() - t0
    return report


def _synth_corpus(
    out_path: str, gen: _Model, n_docs: int, fmt: str, terms: list[str],
    root: np.random.SeedSequence, *, shards: int | None,
    shard_tokens: int | None, processes: int | None, resume: bool, block_docs: int,
    parallel: bool, max_in_flight: int | None, progress: Callable[[int, int], None] | None,
) -> dict[str, Any]:
    """:func:`synthesize`'s corpus: one file (:func:`_write`) or shards
    (:func:`_write_sharded`); the report of :func:`write_corpus`."""
    if shards is not None or shard_tokens is not None:
        return _write_sharded(out_path, gen, n_docs, terms=terms, root=root, shards=shards,
                              shard_tokens=shard_tokens, processes=processes, resume=resume,
                              block_docs=block_docs, progress=progress)
    return _write(out_path, gen, n_docs, format=fmt, vocab=terms, seed=root,
                  block_docs=block_docs, parallel=parallel, max_in_flight=max_in_flight,
                  progress=progress)


def _check_synth_output(
    output: str | os.PathLike[str], format: str | None, sharded: bool, **sources: Any
) -> tuple[str, str]:
    """The absolute output path and its format, once the arguments of :func:`synthesize`
    name exactly one source of topics (``sources``: A, model, n_words, n_topics) and the
    output can be written (a ``sharded`` corpus: HDF5 shards in a directory)."""
    if sharded:
        if format not in (None, "hdf5"):
            raise ValueError(f"format={format!r}: a sharded corpus is HDF5")
        format = "hdf5"
    given = [name for name in ("A", "model") if sources[name] is not None]
    if sources["n_words"] is not None or sources["n_topics"] is not None:
        given.append("n_words/n_topics")
    if len(given) != 1:
        raise ValueError(
            "give exactly one source of topics: A, model, or n_words and n_topics "
            f"(got {', '.join(given) or 'none'})"
        )
    fmt = infer_format(output) if format is None else format
    _check_format(fmt, SYNTH_FORMATS)
    out_path = os.path.abspath(os.fspath(output))
    if not os.path.isdir(os.path.dirname(out_path)):
        raise FileNotFoundError(f"{os.path.dirname(out_path)}: directory does not exist")
    if fmt == "uci":
        _uci_name(out_path)
    return out_path, fmt


def _true_topics(
    root: np.random.SeedSequence,
    fmt: str,
    *,
    A: np.ndarray | None,
    model: str | os.PathLike[str] | None,
    n_words: int | None,
    n_topics: int | None,
    beta: float,
    vocab: Sequence[str] | None,
    planted_anchors: bool,
) -> tuple[np.ndarray, np.ndarray | None, str, list[str]]:
    """The topics of :func:`synthesize` (V×K), the planted anchors (or None), the source of
    the topics (``"A"``, ``"model"`` or ``"dirichlet"``) and their terms. Random topics and
    planted anchors draw from ``root``'s topics stream."""
    rng = np.random.default_rng(_child(root, _TOPICS_KEY))
    terms = vocab
    if A is not None:
        A_true, source = _check_topics(A), "A"
    elif model is not None:
        A_true, model_vocab = topics_from_model(model)
        source, terms = "model", model_vocab if vocab is None else vocab
    elif n_words is None or n_topics is None:
        raise ValueError("random topics need both n_words and n_topics")
    else:
        A_true = dirichlet_topics(int(n_words), int(n_topics), beta, seed=rng)
        source = "dirichlet"
    anchors = None
    if planted_anchors:
        A_true, anchors = plant_anchors(A_true, rng)
    return A_true, anchors, source, _check_vocab(terms, A_true.shape[0], fmt)


def _topics_meta(
    report: dict[str, Any], corpus: str, *, model: str | os.PathLike[str] | None, beta: float,
    planted_anchors: bool, doc_length: int, poisson: bool,
) -> dict[str, Any]:
    """The ``meta`` of the true topics of :func:`synthesize` (from its ``report`` so far)."""
    return {
        "format": "streamtopic-synth-topics",
        "format_version": 1,
        "theta": report["theta"],
        "topics_source": report["topics_source"],
        "model": None if model is None else os.path.abspath(os.fspath(model)),
        "beta": float(beta) if report["topics_source"] == "dirichlet" else None,
        "planted_anchors": bool(planted_anchors),
        "n_docs": report["n_docs"],
        "doc_length": int(doc_length),
        "poisson": bool(poisson),
        "corpus": corpus,
        "corpus_format": report["format"],
        "seed_entropy": _entropy_text(report["seed_entropy"]),
        "seed_spawn_key": report["seed_spawn_key"],
        **({"shards": [{k: r[k] for k in ("path", "first_doc", "n_docs", "n_tokens", "nnz")}
                       for r in report["shards"]]} if "shards" in report else {}),
    }


def _check_population_path(pop_path: str) -> None:
    """Refuse to replace anything at ``pop_path`` but a co-occurrence store."""
    if os.path.exists(pop_path):
        if not CooccurrenceStore.is_store(pop_path):
            raise FileExistsError(f"{pop_path}: exists and is not a co-occurrence store")


def _write_population(
    pop_path: str, A: np.ndarray, law: Any, *, seed: np.random.SeedSequence, **kwargs: Any
) -> dict[str, Any]:
    """:func:`population_store` at ``pop_path``, replacing a store of a previous run; its
    Monte Carlo draws use the stream of ``seed`` (synthesize's root) kept for them."""
    if os.path.exists(pop_path):
        remove_store(pop_path)
    return population_store(pop_path, A, law, seed=_child(seed, _POPULATION_KEY), **kwargs)


# ----------------------------------------------------------------------------- sharded corpora

SHARD_NAME = "part-{:05d}.h5"
"""File name of shard ``s`` of a sharded corpus (``SHARD_NAME.format(s)``)."""

_SHARD_RE = re.compile(r"part-\d{5,}\.h5")
_DEBRIS_RE = re.compile(r"\.part-\d{5,}\.h5\.partial-[0-9a-f]{12}")  # see _io.temp_beside


@dataclass(frozen=True)
class _Shard:
    """Shard ``index``: documents ``d0:d1``, which are the units from ``first_unit`` on."""

    index: int
    first_unit: int
    d0: int
    d1: int
    path: str


def shard_bounds(
    n_docs: int, doc_length: int, *, shards: int | None = None, shard_tokens: int | None = None
) -> list[tuple[int, int, int]]:
    """How :func:`synthesize` cuts a corpus into shards: whole generation units each.

    Shards end on unit boundaries (:func:`unit_docs`), so shard ``s`` holds exactly the
    documents of the same rows of the unsharded corpus of the same seed, and the documents
    do not depend on the number of shards nor on the processes that write them.

    Parameters
    ----------
    n_docs : int
        D, documents in the whole corpus.
    doc_length : int
        Tokens per document (the Poisson mean with Poisson lengths).
    shards : int, optional
        The number of shards wanted (fewer when the corpus has fewer units).
    shard_tokens : int, optional
        Instead of ``shards``: about this many tokens per shard (at least one unit).

    Returns
    -------
    list of (first_unit, d0, d1)
        Shard ``s`` holds documents ``d0:d1``, units ``first_unit`` onwards; the shards
        cover ``0:n_docs`` in order, none empty (none at all when ``n_docs`` is 0).
    """
    if (shards is None) == (shard_tokens is None):
        raise ValueError("give exactly one of shards and shard_tokens")
    n_docs = _check_sampling(n_docs)
    unit = unit_docs(doc_length)
    n_units = -(-n_docs // unit)
    if shards is not None:
        if int(shards) != shards or shards < 1:
            raise ValueError(f"shards={shards!r}: must be a positive integer")
        n = min(int(shards), n_units)  # units shared out as evenly as possible
        starts = [s * n_units // n for s in range(n)]
    else:
        assert shard_tokens is not None
        if not shard_tokens >= 1:
            raise ValueError(f"shard_tokens={shard_tokens!r}: must be >= 1")
        per = max(1, round(float(shard_tokens) / (unit * int(doc_length))))
        starts = list(range(0, n_units, per))
    ends = starts[1:] + [n_units]
    if n_units == 0:
        return []
    return [(u, u * unit, min(n_docs, v * unit)) for u, v in zip(starts, ends, strict=True)]


def shard_paths(directory: str | os.PathLike[str]) -> list[str]:
    """The shards (``part-NNNNN.h5``) in ``directory``, in order."""
    directory = os.fspath(directory)
    names = sorted(n for n in os.listdir(directory) if _SHARD_RE.fullmatch(n))
    return [os.path.join(os.path.abspath(directory), n) for n in names]


_SHARD_STATE: dict[str, Any] = {}  # a worker process's model, terms, seed and block size


def _init_shard_worker(
    model: _Model, terms: list[str], root: np.random.SeedSequence, block_docs: int
) -> None:
    """Initializer of a shard-writing process: what every shard shares, received once."""
    _SHARD_STATE.update(model=model, terms=terms, root=root, block_docs=block_docs)


def _shard_task(shard: _Shard) -> dict[str, Any]:
    """The task of a shard-writing process (see :func:`_init_shard_worker`)."""
    st = _SHARD_STATE
    return _write_shard(st["model"], st["terms"], st["root"], st["block_docs"], shard)


def _write_shard(
    model: _Model, terms: list[str], root: np.random.SeedSequence, block_docs: int,
    shard: _Shard,
) -> dict[str, Any]:
    """Generate the units of ``shard`` one after the other and write them as one HDF5 file
    (aside, then renamed): memory holds the topics, one unit and one block of documents."""
    t0 = time.perf_counter()
    enc = _encoder("hdf5", terms)
    starts = range(shard.d0, shard.d1, model.unit_docs)
    pieces = (
        _make_piece((model, enc), root, u, a, min(shard.d1, a + model.unit_docs))
        for u, a in zip(itertools.count(shard.first_unit), starts)
    )
    n_tokens, nnz = _write_hdf5(shard.path, pieces, terms, block_docs)
    return {"index": shard.index, "path": shard.path, "first_doc": shard.d0,
            "n_docs": shard.d1 - shard.d0, "n_tokens": n_tokens, "nnz": nnz,
            "seconds": time.perf_counter() - t0, "reused": False}


def _shard_counts(shard: _Shard) -> dict[str, Any] | None:
    """The counts of a shard file written earlier, or None if it does not hold the shard's
    number of documents (it is then written again)."""
    import h5py

    try:
        with h5py.File(shard.path, "r") as f:
            ptr = f["indptr"]
            if ptr.shape[0] != shard.d1 - shard.d0 + 1:
                return None
            nnz = int(ptr[-1])
            data = f["data"]
            step = 2**24
            n_tokens = sum(int(data[i : i + step].sum(dtype=np.int64))
                           for i in range(0, nnz, step))
    except (OSError, KeyError):
        return None
    return {"index": shard.index, "path": shard.path, "first_doc": shard.d0,
            "n_docs": shard.d1 - shard.d0, "n_tokens": n_tokens, "nnz": nnz,
            "seconds": 0.0, "reused": True}


def _run_shards(
    model: _Model, terms: list[str], root: np.random.SeedSequence, block_docs: int,
    todo: Sequence[_Shard], processes: int,
) -> Iterator[dict[str, Any]]:
    """Write the shards ``todo``, ``processes`` at a time (one process each), yielding each
    one's report as it finishes. One process: in this process, in order."""
    if processes <= 1 or len(todo) <= 1:
        for shard in todo:
            yield _write_shard(model, terms, root, block_docs, shard)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may run threads
    with ProcessPoolExecutor(min(processes, len(todo)), mp_context=ctx,
                             initializer=_init_shard_worker,
                             initargs=(model, terms, root, block_docs)) as ex:
        futures = [ex.submit(_shard_task, shard) for shard in todo]
        try:
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()


def _prepare_shard_dir(directory: str, keep: set[str]) -> None:
    """Make ``directory`` hold nothing but the shards in ``keep`` (file names): create it,
    remove other shard files (a previous, larger corpus), and refuse other visible files,
    which ``streamtopic ingest DIRECTORY`` would try to read."""
    os.makedirs(directory, exist_ok=True)
    for name in sorted(os.listdir(directory)):
        if _DEBRIS_RE.fullmatch(name):  # a shard a killed run was writing
            remove_path(os.path.join(directory, name))
        if name.startswith("."):
            continue
        if not _SHARD_RE.fullmatch(name):
            raise FileExistsError(
                f"{os.path.join(directory, name)}: a sharded corpus directory holds only "
                "its shards (part-NNNNN.h5); move this file away or choose another directory"
            )
        if name not in keep:
            remove_path(os.path.join(directory, name))


_PLAN_FILE = ".synth-plan.json"  # hidden: ``ingest DIRECTORY`` reads only the shards


def _shard_plan(
    model: _Model, terms: list[str], root: np.random.SeedSequence, n_docs: int,
    bounds: list[tuple[int, int, int]],
) -> dict[str, Any]:
    """What fixes a sharded corpus' bytes: its topics, θ law, lengths, seed and shards."""
    import hashlib

    digest = hashlib.sha256(np.ascontiguousarray(model.A_t).tobytes())
    digest.update("\n".join(terms).encode("utf-8"))
    theta = model.theta.to_dict() if model.theta is not None else {
        "kind": "dirichlet", "alpha": model.alpha.tolist()}
    return {"format": "streamtopic-synth-shards", "format_version": 1,
            "topics_sha256": digest.hexdigest(), "theta": theta, "n_docs": int(n_docs),
            "doc_length": model.doc_length, "poisson": model.poisson,
            "unit_docs": model.unit_docs, "seed_entropy": _entropy_text(_entropy(root)),
            "seed_spawn_key": [int(k) for k in root.spawn_key],
            "shards": [list(b) for b in bounds]}


def _same_plan(directory: str, plan: dict[str, Any]) -> bool:
    try:
        with open(os.path.join(directory, _PLAN_FILE), encoding="utf-8") as fh:
            return bool(json.load(fh) == json.loads(json.dumps(plan)))
    except (OSError, ValueError):
        return False


def _write_sharded(
    directory: str, model: _Model, n_docs: int, *, terms: list[str],
    root: np.random.SeedSequence, shards: int | None, shard_tokens: int | None,
    processes: int | None, resume: bool, block_docs: int,
    progress: Callable[[int, int], None] | None,
) -> dict[str, Any]:
    """:func:`synthesize`'s sharded corpus: ``directory/part-NNNNN.h5``, one process per
    shard at a time. With ``resume``, shards already written under the same plan (topics,
    θ law, lengths, seed, shard bounds) are kept. Returns the report of :func:`write_corpus`
    with ``shards`` (one dict per shard) and ``processes``."""
    n_docs = _check_sampling(n_docs)
    if block_docs < 1:
        raise ValueError(f"block_docs={block_docs!r}: must be >= 1")
    bounds = shard_bounds(n_docs, model.doc_length, shards=shards, shard_tokens=shard_tokens)
    plan = _shard_plan(model, terms, root, n_docs, bounds)
    todo = [_Shard(s, u, d0, d1, os.path.join(directory, SHARD_NAME.format(s)))
            for s, (u, d0, d1) in enumerate(bounds)]
    reuse = resume and os.path.isdir(directory) and _same_plan(directory, plan)
    _prepare_shard_dir(directory, {os.path.basename(sh.path) for sh in todo} if reuse else set())
    with written_aside(os.path.join(directory, _PLAN_FILE)) as tmp, open(tmp, "w") as fh:
        json.dump(plan, fh)
    done = [c for c in (_shard_counts(sh) for sh in todo if reuse and os.path.exists(sh.path))
            if c is not None]
    todo = [sh for sh in todo if sh.index not in {c["index"] for c in done}]
    n_proc = max(1, int(processes if processes is not None else os.cpu_count() or 1))
    docs_done = sum(c["n_docs"] for c in done)
    for rep in _run_shards(model, terms, root, int(block_docs), todo, n_proc):
        done.append(rep)
        docs_done += rep["n_docs"]
        if progress is not None:
            progress(docs_done, n_docs)
    done.sort(key=lambda r: r["index"])
    return {"format": "hdf5", "n_docs": n_docs,
            "n_tokens": sum(r["n_tokens"] for r in done), "nnz": sum(r["nnz"] for r in done),
            "vocab_size": model.V, "path": directory, "paths": [r["path"] for r in done],
            "shards": done, "processes": n_proc, "unit_docs": model.unit_docs}
