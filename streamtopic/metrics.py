"""Metrics for topic models.

``matched_l1`` scores learned topics against known ones (semi-synthetic corpora): topics are
matched one to one by ``scipy.optimize.linear_sum_assignment`` on their L1 distances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = ["MatchedL1", "matched_l1"]


@dataclass
class MatchedL1:
    """Result of :func:`matched_l1`.

    Attributes
    ----------
    mean : float
        Mean L1 distance between matched topics (0 = identical, 2 = disjoint).
    per_topic : ndarray of shape (K,)
        L1 distance of true topic k to its matched learned topic.
    matching : ndarray of shape (K,)
        ``matching[k]`` is the learned topic matched to true topic k.
    """

    mean: float
    per_topic: np.ndarray
    matching: np.ndarray


def matched_l1(A_true: np.ndarray, A_hat: np.ndarray) -> MatchedL1:
    """Mean L1 distance between true and learned topics after optimal one-to-one matching.

    Parameters
    ----------
    A_true, A_hat : ndarray of shape (V, K)
        Column-stochastic topic-word matrices over the same V words (a learned model's
        ``components_`` is K×V: pass its transpose).
    """
    A_true = np.asarray(A_true, dtype=np.float64)
    A_hat = np.asarray(A_hat, dtype=np.float64)
    if A_true.shape != A_hat.shape:
        raise ValueError(f"A_true has shape {A_true.shape} but A_hat has {A_hat.shape}")
    # cost[k, l] = ‖A_true[:, k] − A_hat[:, l]‖₁, one K×V slab at a time
    K = A_true.shape[1]
    cost = np.empty((K, K))
    for k in range(K):
        cost[k] = np.abs(A_hat - A_true[:, [k]]).sum(axis=0)
    rows, cols = linear_sum_assignment(cost)
    per_topic = cost[rows, cols]
    return MatchedL1(float(per_topic.mean()), per_topic, cols)
