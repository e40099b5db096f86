"""Look-ups over the processed tables shared by the figure and table scripts: which setups
are main / sweeps, the concurrency each figure reads, paired comparisons, θ_F selection."""

from __future__ import annotations

import numpy as np
import pandas as pd

# select_metric -> the direction that is better for vtoken / baseline
LOWER_IS_BETTER = {"retained_blocks": True, "e2e_p95_s": True, "output_tok_per_s": False}


def main_setups(setups: pd.DataFrame) -> list[str]:
    return list(setups[setups.role == "main"].setup)


def grid(setups: pd.DataFrame, setup: str) -> list[int]:
    """A setup's concurrency grid (the setups table stores it comma-separated)."""
    return [int(c) for c in str(setups.set_index("setup").loc[setup, "concurrency"]).split(",")]


def max_c(setups: pd.DataFrame, setup: str) -> int:
    """The largest C of a setup's grid (figures of one C read this one)."""
    return max(grid(setups, setup))


def at(summary: pd.DataFrame, setup: str, metric: str, concurrency: int | None) -> pd.DataFrame:
    """Summary rows (one per arm) of a metric in a setup, at C (None: the grid metrics)."""
    rows = summary[(summary.setup == setup) & (summary.metric == metric)]
    rows = rows[rows.concurrency.isna()] if concurrency is None else rows[rows.concurrency == concurrency]
    return rows.set_index("arm")


def comparison(comparisons: pd.DataFrame, setup: str, metric: str, arm: str,
               concurrency: int | None) -> pd.Series | None:
    """The paired comparison of ``arm`` vs the baseline (None when absent)."""
    if comparisons.empty:
        return None
    rows = comparisons[(comparisons.setup == setup) & (comparisons.metric == metric) & (comparisons.arm == arm)]
    if concurrency is not None and "concurrency" in rows:
        rows = rows[rows.concurrency == concurrency]
    return rows.iloc[0] if len(rows) else None


def theta_f_points(setups: pd.DataFrame, comparisons: pd.DataFrame, metric: str, model: str,
                   workload: str) -> pd.DataFrame:
    """vtoken / baseline ``metric`` at each θ_F of a workload: the main setup (fixed θ_F)
    and the θ_F sweep, each at the sweep's C (the main setup's largest C if it lacks it)."""
    part = setups[(setups.model == model) & (setups.workload == workload) & setups.role.isin(["main", "theta_f"])]
    sweep_c = [max_c(setups, s) for s in part[part.role == "theta_f"].setup] or [None]
    rows = []
    for r in part.itertuples():
        c = sweep_c[0] if sweep_c[0] in grid(setups, r.setup) else max_c(setups, r.setup)
        comp = comparison(comparisons, r.setup, metric, "vtoken", c)
        if comp is not None:
            rows.append({"theta_f": r.theta_f, "setup": r.setup, "role": r.role, "concurrency": c,
                         "estimate": comp.estimate, "ci_low": comp.ci_low, "ci_high": comp.ci_high,
                         "n": comp.n, "kind": comp.kind})
    return pd.DataFrame(rows).sort_values("theta_f") if rows else pd.DataFrame()


def best_theta_f(points: pd.DataFrame, metric: str, fixed: float) -> pd.Series | None:
    """The θ_F with the best point estimate (ties: the one nearest the fixed value)."""
    ok = points.dropna(subset=["estimate"])
    if ok.empty:
        return None
    sign = 1.0 if LOWER_IS_BETTER[metric] else -1.0
    key = sign * ok.estimate.to_numpy() + 1e-9 * np.abs(ok.theta_f.to_numpy() - fixed)
    return ok.iloc[int(np.argmin(key))]
