"""A mechanism's memory-quality frontier as an envelope, and two envelopes read alike.

One pair's frontier of one mechanism is its points over the budgets it ran: retained blocks per
request ``x`` and a quality *loss* ``y`` against Native (lower is better: the teacher-forced KL;
a score where higher is better is negated first). Its **envelope** (``envelope``) is what the
mechanism can achieve: the points that no other point of the same mechanism and pair dominates
(no more blocks and no more loss, one of them strictly less) -- a budget whose point another
budget beats on both axes is not on it, and of two budgets at equal blocks only the lower loss
is. Sorted by blocks, the envelope's loss then strictly falls as blocks rise; between two of its
points it is a straight line, and it is never extrapolated beyond its first or last point.

Two mechanisms A and B are read by one rule, whichever is the treatment:

- ``loss_at(env, m)``: the envelope's loss at ``m`` blocks (NaN outside its range);
- ``blocks_at(env, q)``: the fewest blocks at which it reaches loss ``q`` (the same line read the
  other way; NaN outside its loss range);
- ``mean_gap(a, b)``: the mean vertical gap A(m) - B(m) over their **common memory range**
  [max of the two first blocks, min of the two last], the exact integral of the difference of two
  piecewise-linear functions divided by the range's width (at one common point: the gap there;
  no common range: NaN). ``mean_gap(b, a) == -mean_gap(a, b)`` exactly (the same breakpoints, the
  same arithmetic with the sign flipped);
- ``mean_log_ratio(a, b)``: the horizontal reading, the mean of log(A_blocks(q) / B_blocks(q)) over
  their **common loss range** [max of the two lowest losses, min of the two highest]: each envelope
  read the other way (``blocks_at``, linear between its points), the log ratio integrated by the
  trapezoid rule on the union of both envelopes' loss breakpoints, each interval cut into
  ``LOG_STEPS`` equal steps (the log of a linear function is not linear; 16 steps put the rule's
  error under 1e-4 of the log ratio between points one budget step apart); at one common loss the
  log ratio there; none: NaN. ``mean_log_ratio(b, a) == -mean_log_ratio(a, b)`` exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def envelope(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The envelope of one pair's points (module docstring): blocks ascending, loss strictly
    descending; NaN points left out."""
    pts = sorted((float(a), float(b)) for a, b in zip(x, y) if np.isfinite(a) and np.isfinite(b))
    xs, ys = [], []
    for a, b in pts:  # by blocks, then loss: a point is kept when it beats every cheaper one on loss
        if ys and b >= ys[-1]:
            continue
        if xs and a == xs[-1]:
            continue  # same blocks, higher loss than the one kept (sorted by loss within equal blocks)
        xs.append(a)
        ys.append(b)
    return np.asarray(xs), np.asarray(ys)


def loss_at(env: tuple[np.ndarray, np.ndarray], m: float) -> float:
    """The envelope's loss at ``m`` blocks, linear between its points; NaN outside them."""
    xs, ys = env
    if not len(xs) or m < xs[0] or m > xs[-1]:
        return float("nan")
    return float(np.interp(m, xs, ys))


def blocks_at(env: tuple[np.ndarray, np.ndarray], q: float) -> float:
    """The fewest blocks at which the envelope's loss is ``q`` (linear between its points, which
    fall strictly); NaN when ``q`` lies outside its loss range."""
    xs, ys = env
    if not len(xs) or q > ys[0] or q < ys[-1]:
        return float("nan")
    return float(np.interp(q, ys[::-1], xs[::-1]))


def common_range(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """[low, high] blocks both envelopes cover (low > high: none)."""
    if not len(a[0]) or not len(b[0]):
        return float("nan"), float("nan")
    return max(a[0][0], b[0][0]), min(a[0][-1], b[0][-1])


LOG_STEPS = 16


def common_loss(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """[low, high] loss both envelopes reach (low > high: none)."""
    if not len(a[1]) or not len(b[1]):
        return float("nan"), float("nan")
    return max(a[1][-1], b[1][-1]), min(a[1][0], b[1][0])


def mean_log_ratio(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """The mean of log(A_blocks(q) / B_blocks(q)) over the common loss range (module docstring)."""
    low, high = common_loss(a, b)
    if not (low <= high):
        return float("nan")
    if low == high:
        return float(np.log(blocks_at(a, low)) - np.log(blocks_at(b, low)))
    knots = np.unique(np.concatenate([[low, high], a[1], b[1]]))
    knots = knots[(knots >= low) & (knots <= high)]
    grid = np.unique(np.concatenate([np.linspace(x, y, LOG_STEPS + 1) for x, y in zip(knots, knots[1:])]))
    diff = np.log(np.interp(grid, a[1][::-1], a[0][::-1])) - np.log(np.interp(grid, b[1][::-1], b[0][::-1]))
    return float(np.sum((diff[1:] + diff[:-1]) * np.diff(grid)) / 2 / (high - low))


def mean_gap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """The mean of A(m) - B(m) over the common memory range (module docstring)."""
    low, high = common_range(a, b)
    if not (low <= high):
        return float("nan")
    if low == high:
        return loss_at(a, low) - loss_at(b, low)
    grid = np.unique(np.concatenate([[low, high], a[0], b[0]]))
    grid = grid[(grid >= low) & (grid <= high)]
    diff = np.interp(grid, *a) - np.interp(grid, *b)
    return float(np.sum((diff[1:] + diff[:-1]) * np.diff(grid)) / 2 / (high - low))
