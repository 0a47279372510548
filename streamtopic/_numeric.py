"""Small numerical helpers shared by the stages."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["safe_inverse"]


def safe_inverse(p: Any) -> Any:
    """1/p where p > 0, else 0, elementwise (numpy or dask; the dtype is kept).

    Words never seen have zero rows and zero sums: scaling by this never divides by zero.
    """
    if hasattr(p, "__dask_graph__"):
        import dask.array as da

        return da.where(p > 0, 1.0 / da.where(p > 0, p, 1.0), 0.0)
    return np.where(p > 0, 1.0 / np.where(p > 0, p, 1.0), 0.0)
