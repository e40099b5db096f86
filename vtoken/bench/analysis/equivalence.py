"""One paired test with a stated margin: better, worse, equivalent or not resolved.

A comparison is n per-pair differences d_p (treatment - reference; on the log scale for a ratio)
of a metric with a direction (``lower`` or ``higher`` is better) and a **margin** m > 0 stated
before any run (the smallest difference that matters; a ratio's margin is a factor, read as
log m). ``test`` reads it with the t distribution over pairs:

- **better** / **worse**: the two-sided 95 % interval of the mean difference excludes 0 on that
  side (p < alpha); "within the margin" is added when the interval also lies inside (-m, m): a
  resolved difference smaller than anything that matters;
- **equivalent**: otherwise, when the 90 % interval lies inside (-m, m) -- two one-sided tests at
  level alpha each (TOST);
- **not resolved**: neither.

A comparison whose pairs all give the same difference has no interval: "equivalent" when that
difference is 0 (identical in every pair), else "no spread over the samples, no CI" -- never a
zero-width interval read as resolved.

Several secondary readings of one comparison are corrected for their number by Holm's step-down
rule (``holm``) before they are read: a level is resolved only when its adjusted p is below alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

BETTER, WORSE, EQUIVALENT, NOT_RESOLVED = "better", "worse", "equivalent", "not resolved"
WITHIN_MARGIN = "within the margin"
TOO_FEW = "too few pairs"
NO_SPREAD = "no spread over the samples, no CI"  # every pair the same nonzero difference (verdicts.NO_SPREAD)
STATUSES = (BETTER, WORSE, EQUIVALENT, NOT_RESOLVED, TOO_FEW, NO_SPREAD)
ALPHA = 0.05


@dataclass(frozen=True)
class Test:
    """One comparison read against its margin (module docstring). ``estimate`` and the intervals
    are on the metric's own scale (a ratio back-transformed); ``sd`` is the per-pair SD of the
    differences on the test's scale (the log for a ratio)."""

    n: int
    estimate: float
    ci_low: float
    ci_high: float
    ci90_low: float
    ci90_high: float
    p: float
    sd: float
    status: str
    within_margin: bool

    @property
    def verdict(self) -> str:
        """The status as a table prints it ("worse, within the margin", ...)."""
        if self.status in (BETTER, WORSE) and self.within_margin:
            return f"{self.status}, {WITHIN_MARGIN}"
        return self.status


def _interval(d: np.ndarray, level: float) -> tuple[float, float]:
    n, mean = len(d), float(np.mean(d))
    sd = float(np.std(d, ddof=1))
    half = sps.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def test(treatment, reference, margin: float, better: str = "lower", kind: str = "difference",
         alpha: float = ALPHA) -> Test:
    """Read treatment against reference (aligned per pair; NaN pairs dropped) against ``margin``.

    Args:
        better: "lower" or "higher" (which side of 0 the treatment's advantage lies on).
        kind: "difference" (t - r, margin in the metric's units) or "ratio" (t / r on the log
            scale, margin a factor > 1).

    Raises:
        ValueError: unknown ``better`` / ``kind``, or a margin that is not positive (> 1 for a ratio).
    """
    if better not in ("lower", "higher") or kind not in ("difference", "ratio"):
        raise ValueError(f"better={better!r} / kind={kind!r}: allowed lower|higher, difference|ratio")
    if not (margin > (1 if kind == "ratio" else 0)):
        raise ValueError(f"margin={margin!r}: must be > {1 if kind == 'ratio' else 0} for kind={kind!r}")
    t, r = np.asarray(treatment, dtype=float), np.asarray(reference, dtype=float)
    keep = np.isfinite(t) & np.isfinite(r) & ((t > 0) & (r > 0) if kind == "ratio" else True)
    d = np.log(t[keep]) - np.log(r[keep]) if kind == "ratio" else t[keep] - r[keep]
    m = math.log(margin) if kind == "ratio" else margin
    back = np.exp if kind == "ratio" else float
    n = len(d)
    if n < 2:
        est = float(back(d.mean())) if n else float("nan")
        return Test(n, est, *(float("nan"),) * 4, float("nan"), float("nan"), TOO_FEW, False)
    sd = float(np.std(d, ddof=1))
    mean = float(np.mean(d))
    if sd <= 1e-12 * max(1.0, abs(mean)):  # every pair the same difference (to rounding): no interval
        mean = 0.0 if abs(mean) <= 1e-12 else mean
        status = EQUIVALENT if mean == 0 else NO_SPREAD
        v = float(back(mean))
        return Test(n, v, v, v, v, v, 1.0 if mean == 0 else float("nan"), 0.0, status, mean == 0)
    else:
        p = float(2 * sps.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
        lo, hi = _interval(d, 1 - alpha)
        lo90, hi90 = _interval(d, 1 - 2 * alpha)
    inside = -m < lo and hi < m
    if lo > 0 or hi < 0:
        status = (WORSE if lo > 0 else BETTER) if better == "lower" else (BETTER if lo > 0 else WORSE)
    elif -m < lo90 and hi90 < m:
        status = EQUIVALENT
    else:
        status = NOT_RESOLVED
    return Test(n, float(back(mean)), float(back(lo)), float(back(hi)), float(back(lo90)), float(back(hi90)), p, sd,
                status, inside)


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN; each adjusted p at most 1)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    running, k = 0.0, len(order)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * p[i]))
        out[i] = running
    return out
