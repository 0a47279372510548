"""The Dirichlet prior of the topic proportions, estimated from a fitted model's moments.

Under LDA a document's topic proportions are θ ~ Dirichlet(α), α (K,) positive, α₀ = Σ_k α_k.
Its first two moments are (Arora, Ge and Moitra 2012; Arora et al. 2013)

    p = E[θ] = α / α₀,        R = E[θθᵀ] = (α αᵀ + diag α) / (α₀ (α₀ + 1)),

so the anchor-word fit, which estimates p (the topic prevalence) and R (the topic-topic
matrix), determines α. Writing c = 1 / (α₀ + 1) ∈ (0, 1),

    R = (1 − c) p pᵀ + c diag p,    that is    R − p pᵀ = c (diag p − p pᵀ):

the centred second moment (the covariance of θ) is a known K×K matrix times the scalar c.
:func:`estimate_alpha` fits that scalar to *all* the distinct entries of a noisy R at once,
then α = α₀ p.

Choices, measured on semi-synthetic corpora with known α (``benchmarks/alpha.py``):

* The centring uses R's own row sums r = R 1 (equal to p for an exact R, since Σ_k θ_k = 1), so
  that R − r rᵀ and diag r − r rᵀ both have rows summing to zero whatever the error of R. The
  prevalence passed in gives α's direction only. A fit whose R and prevalence come from
  different stages (the spectral R, the refined prevalence) then still gives the right α₀.
* The fit is robust: a Cauchy loss on the residuals, scaled by their median absolute
  deviation, started from the least-squares solution (:func:`scipy.optimize.least_squares`).
  Errors in R come mostly from a few badly recovered topics, whose rows and columns are off
  together; ordinary least squares lets them move c. Over 30 semi-synthetic fits
  (V = 2,000, K = 20, 10k to 100k documents, α₀ from 0.1 to 5, symmetric and asymmetric α),
  the Cauchy fit on the default fit's spectral R kept the relative L1 error of α below 0.17,
  where least squares reached 0.82.
* Which R: the model (``AnchorTopicModel.alpha_``) uses, after refinement, R = Â† Q Â†ᵀ of
  the refined topics Â (:func:`topic_cooccurrence_from_topics`) with the refined prevalence.
  On the same 30 fits its error had median 0.035 and max 0.082, against 0.042 and 0.167 from
  the spectral R (``benchmarks/results/alpha.json``).
* α₀ is kept within [:data:`ALPHA0_MIN`, :data:`ALPHA0_MAX`]: an R more diagonal than any
  Dirichlet's (c ≥ 1) gives the smallest α₀, one as flat as the same θ in every document
  (c ≤ 0) the largest.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from scipy.optimize import least_squares

from .recovery import pinv_topic_cooccurrence

__all__ = ["ALPHA0_MAX", "ALPHA0_MIN", "LOSSES", "estimate_alpha", "fit_concentration",
           "topic_cooccurrence_from_topics"]

#: The losses of the fit of α₀ (:func:`scipy.optimize.least_squares`'s).
LOSSES = ("cauchy", "soft_l1", "huber", "arctan", "linear")
#: Bounds of the estimated concentration α₀ = Σ_k α_k.
ALPHA0_MIN = 1e-4
ALPHA0_MAX = 1e4
_MAD_TO_SIGMA = 1.4826  # a normal law's standard deviation per median absolute deviation


def _check_moments(
    R: np.ndarray, prevalence: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """R symmetrised and normalised to sum 1 (K×K), and p normalised (K,; uniform when
    None); ValueError for shapes that do not match, values that are not finite, or a p
    without mass."""
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or R.shape[0] != R.shape[1] or R.shape[0] < 1:
        raise ValueError(f"R has shape {R.shape}; expected a square K×K matrix")
    p = np.asarray(np.ones(R.shape[0]) if prevalence is None else prevalence,
                   dtype=np.float64)
    if p.shape != (R.shape[0],):
        raise ValueError(f"prevalence has shape {p.shape}; expected ({R.shape[0]},) like R")
    if not (np.all(np.isfinite(R)) and np.all(np.isfinite(p))):
        raise ValueError("R and prevalence must be finite")
    if np.any(p < 0) or not p.sum() > 0:
        raise ValueError("prevalence must be non-negative with a positive sum")
    R = 0.5 * (R + R.T)
    total = R.sum()
    if not total > 0:
        raise ValueError("R must have a positive sum")
    return R / total, p / p.sum()


def fit_concentration(R: np.ndarray, loss: str = "cauchy") -> float:
    """α₀ of the Dirichlet law whose second moment best fits R (K×K).

    With r = R 1 (R's row sums, the first moment), fits the scalar c of
    R − r rᵀ ≈ c (diag r − r rᵀ) over the K(K+1)/2 distinct entries (the upper triangle with
    the diagonal) by least squares under a robust ``loss`` (scale: 1.4826 times the median
    absolute residual of the ordinary least-squares fit; that fit itself when its residuals
    vanish, as for an exact R), with c in [1/(1 + ALPHA0_MAX), 1/(1 + ALPHA0_MIN)]; then
    α₀ = 1/c − 1.

    Parameters
    ----------
    R : ndarray of shape (K, K)
        A topic-topic matrix E[θθᵀ] (symmetrised and normalised to sum 1 here).
    loss : {'cauchy', 'soft_l1', 'huber', 'arctan', 'linear'}
        The loss of :func:`scipy.optimize.least_squares`; 'linear' is ordinary least squares
        (closed form).

    Returns
    -------
    float
        α₀ in [ALPHA0_MIN, ALPHA0_MAX].
    """
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r}: expected one of {', '.join(LOSSES)}")
    R, _ = _check_moments(R)
    r = R.sum(axis=1)
    iu = np.triu_indices(R.shape[0])
    d = (np.diag(r) - np.outer(r, r))[iu]  # the covariance of θ per unit of c
    e = (R - np.outer(r, r))[iu]
    lo, hi = 1.0 / (1.0 + ALPHA0_MAX), 1.0 / (1.0 + ALPHA0_MIN)
    dd = float(d @ d)
    if not dd > 0:  # K = 1 or all mass on one topic: nothing to fit
        return ALPHA0_MAX
    c0 = float(np.clip((d @ e) / dd, lo, hi))
    scale = _MAD_TO_SIGMA * float(np.median(np.abs(e - c0 * d)))
    if loss != "linear" and scale > 1e-12 * float(np.abs(e).max()):
        fit = least_squares(lambda c: c[0] * d - e, [c0], bounds=([lo], [hi]),
                            loss=loss, f_scale=scale, xtol=1e-12, ftol=1e-12, gtol=1e-12)
        c0 = float(fit.x[0])
    return float(np.clip(1.0 / c0 - 1.0, ALPHA0_MIN, ALPHA0_MAX))


def estimate_alpha(R: np.ndarray, prevalence: np.ndarray, loss: str = "cauchy") -> np.ndarray:
    """The Dirichlet parameter α of the topic proportions, from a fit's moments.

    α = α₀ p, with p the prevalence normalised to sum 1 and α₀ from R by
    :func:`fit_concentration` (see the module notes for the model and the fit). Exact, up to
    rounding, for the R and p of a Dirichlet law:
    R = (α αᵀ + diag α)/(α₀(α₀ + 1)) (:func:`streamtopic.synth.dirichlet_second_moment`)
    and p = α/α₀.

    Parameters
    ----------
    R : ndarray of shape (K, K)
        Topic-topic matrix E[θθᵀ] (a model's ``topic_cooccurrence_``, or
        :func:`topic_cooccurrence_from_topics`); symmetrised and normalised to sum 1 here.
    prevalence : ndarray of shape (K,)
        p(z) = E[θ] (a model's ``topic_prevalence_``); non-negative, normalised here.
    loss : str
        The loss of the fit of α₀ (:func:`fit_concentration`).

    Returns
    -------
    alpha : ndarray of shape (K,)
        Non-negative (zero only where the prevalence is), summing to α₀.

    Raises
    ------
    ValueError
        For shapes that do not match, values that are not finite, a negative prevalence or
        one without mass, or another ``loss``.
    """
    _, p = _check_moments(R, prevalence)
    return fit_concentration(R, loss) * p


def topic_cooccurrence_from_topics(A: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """R = A† Q A†ᵀ (K×K), normalised to sum 1: the topic-topic matrix of given topics.

    For Q = A R Aᵀ and A of full column rank this is R exactly. ``A`` may be the rows of some
    words only (not renormalised) and ``Q`` the co-occurrence of those words (any scale): the
    block of a larger Q is the same product restricted to those rows.

    Parameters
    ----------
    A : ndarray of shape (n, K)
        p(w | z) of n words (n >= K).
    Q : ndarray of shape (n, n)
        Their co-occurrence.

    Returns
    -------
    R : ndarray of shape (K, K)
        Symmetric, summing to 1.
    """
    A = np.asarray(A, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    if A.ndim != 2 or Q.shape != (A.shape[0], A.shape[0]):
        raise ValueError(f"A has shape {A.shape} and Q {Q.shape}; expected (n, K) and (n, n)")
    R = pinv_topic_cooccurrence(A, A.T @ (Q @ A))
    total = R.sum()
    if not total > 0:
        raise ValueError("A† Q A†ᵀ has no positive mass (Q empty on these words?)")
    return cast("np.ndarray", R / total)
