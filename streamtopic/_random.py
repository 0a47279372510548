"""The seed of a fit: one number, resolved once, that every random stage draws from.

The stages of a fit that draw random numbers are the sketch's projection
(:func:`~streamtopic.sketch.projection_block`: a stream per block of rows, keyed by the
seed and the rows), the rectification's starting basis, the LP anchors' projection and noise
sample, and the refinement's sample of partitions. Each takes the fit's seed as resolved by
:func:`resolve_seed` once per fit (:class:`~streamtopic.spectral.FitSettings`), so that a fit
with the default ``seed=None`` is reproducible in every stage, and equal to a fit with
``seed=DEFAULT_SEED``; the store's cache of rectified arrays keys the resolved seed too.

The stages draw from ``numpy.random.default_rng(seed)`` (the generator of
``SeedSequence(seed)``) or, per block, ``default_rng([seed, *keys])``: the streams that
today's models were fitted with, which per-stage spawned sequences would change.
"""

from __future__ import annotations

from numbers import Integral

__all__ = ["DEFAULT_SEED", "resolve_seed"]

#: The seed of a fit whose ``seed`` is None.
DEFAULT_SEED = 0


def resolve_seed(seed: int | None) -> int:
    """The seed a fit's stages draw from: ``seed``, or :data:`DEFAULT_SEED` for None."""
    if seed is None:
        return DEFAULT_SEED
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"seed={seed!r}: must be an integer >= 0 or None")
    return int(seed)
