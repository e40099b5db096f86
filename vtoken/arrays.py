"""Array helpers shared by the preallocated per-request structures (token table, policies,
arms): the initial size and growth by doubling."""

from __future__ import annotations

import numpy as np

# Logical tokens preallocated per request before the first growth (token table, scores,
# policy accumulators, DiffKV tiers): one name, one default.
INITIAL_CAPACITY = 256


def grow(arr: np.ndarray, need: int, fill) -> np.ndarray:
    """Return `arr` if it holds `need` entries, else a copy grown by doubling, padded."""
    if need <= arr.shape[0]:
        return arr
    new = np.full(max(need, 2 * arr.shape[0]), fill, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new
