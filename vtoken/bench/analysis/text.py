"""How the tables print a number with its interval: "est [lo, hi]", "est (no spread)", "—"."""

from __future__ import annotations

import math


def ci(est: float, lo: float, hi: float, fmt: str = "{:.2f}") -> str:
    """'est [lo, hi]', or 'est' without an interval, or '—' when not measured; a zero-width
    interval (every pair gave the same value) is never printed as a CI: 'est (no spread)'."""
    if est is None or (isinstance(est, float) and math.isnan(est)):
        return "—"
    if lo is None or hi is None or any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
        return fmt.format(est)
    if abs(hi - lo) <= 1e-9 * max(1.0, abs(est)):
        return f"{fmt.format(est)} (no spread)"
    return f"{fmt.format(est)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def pct_change(est: float, lo: float, hi: float) -> str:
    """A ratio as a change in percent with its interval."""
    if est is None or math.isnan(est):
        return "—"
    return ci(100 * (est - 1), 100 * (lo - 1), 100 * (hi - 1), "{:+.1f} %")
