"""Array helper shared by the preallocated structures (token table, policies, arms)."""

from __future__ import annotations

import numpy as np


def grow(arr: np.ndarray, need: int, fill) -> np.ndarray:
    """Return `arr` if it holds `need` entries, else a copy grown by doubling, padded."""
    if need <= arr.shape[0]:
        return arr
    new = np.full(max(need, 2 * arr.shape[0]), fill, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new
