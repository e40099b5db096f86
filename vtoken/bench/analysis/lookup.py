"""Look-ups over the processed tables (``data/processed/<run>/``) that the claims table and the
figures share: which setups are main or capacity setups, the C each reads, the paired comparison
of an arm with the baseline, a metric's per-arm summary rows."""

from __future__ import annotations

import pandas as pd


def main_setups(setups: pd.DataFrame) -> list[str]:
    return list(setups[setups.role == "main"].setup)


def first_policy(setups: pd.DataFrame) -> pd.DataFrame:
    """The setups of the first policy (the one the operating points, the sensitivity and the
    selection run; ``trial.policies[0]``): every setup when the table names no policy."""
    if "policy" not in setups or not (setups.role == "main").any():
        return setups
    return setups[setups.policy == setups[setups.role == "main"].policy.iloc[0]]


def pool_setups(setups: pd.DataFrame) -> list[str]:
    """The capacity setups: every main and further-pool setup of a contract workload, main first."""
    part = setups[setups.role.isin(["main", "pool"]) & setups.workload.str.startswith("contract-")]
    return list(part.sort_values("role", key=lambda r: r.map({"main": 0, "pool": 1}), kind="stable").setup)


def swept_arms(setups: pd.DataFrame, setup: str) -> list[str]:
    """The arms a setup sweeps over its whole grid (the others run at C_ref only)."""
    value = setups.set_index("setup").loc[setup].get("swept_arms", "")
    return [a for a in str(value).split(",") if a and a != "nan"]


def swept_rows(summary: pd.DataFrame, setups: pd.DataFrame, setup: str, metric: str | None = None) -> pd.DataFrame:
    """Per-C summary rows of a setup's swept arms (of one metric, or every metric)."""
    rows = summary[(summary.setup == setup) & summary.concurrency.notna()
                   & summary.arm.isin(swept_arms(setups, setup))]
    return rows if metric is None else rows[rows.metric == metric]


def pool_text(setups: pd.DataFrame, setup: str) -> str:
    """'pool P blocks (c_press c)' of a setup, for titles."""
    r = setups.set_index("setup").loc[setup]
    press = "" if pd.isna(r.get("c_press")) else f", holds {int(r.c_press)} unevicted requests"
    return f"pool {int(r.num_gpu_blocks)} blocks{press}" if not pd.isna(r.get("num_gpu_blocks")) else "pool: vLLM's"


def grid(setups: pd.DataFrame, setup: str) -> list[int]:
    """A setup's concurrency grid (the setups table stores it comma-separated)."""
    return [int(c) for c in str(setups.set_index("setup").loc[setup, "concurrency"]).split(",")]


def capacity_searched(setups: pd.DataFrame, setup: str) -> bool:
    """Whether a setup's swept arms had their capacity searched beyond the grid (the setups
    table's ``capacity_search``; False where the table predates it)."""
    value = setups.set_index("setup").loc[setup].get("capacity_search")
    return value is not None and not pd.isna(value) and value in (True, "True")


def capacity_text(setups: pd.DataFrame, setup: str) -> str:
    """What a setup's feasible C was read from, for the claims: 'grid [4, 8, 12]', plus
    ', capacity searched per pair' where it was."""
    return f"grid {grid(setups, setup)}" + (", capacity searched per pair" if capacity_searched(setups, setup) else "")


def max_c(setups: pd.DataFrame, setup: str) -> int:
    """The largest C of a setup's grid (figures of one C read this one)."""
    return max(grid(setups, setup))


def shared_c(setups: pd.DataFrame, setup: str) -> int:
    """The largest C every arm of a setup ran (figures of one C that show every arm read
    this one: C_ref when the non-swept arms run only there)."""
    row = setups.set_index("setup").loc[setup]
    value = row.get("shared_c")
    return int(value) if value is not None and not pd.isna(value) else max_c(setups, setup)


def compared_cs(summary: pd.DataFrame, setups: pd.DataFrame, setup: str, metric: str) -> list[int]:
    """C_ref (``shared_c``: every arm) then each larger C of the setup's grid at which at least
    two arms ran ``metric`` (the swept arms: a comparison there), ascending."""
    ref = shared_c(setups, setup)
    rows = summary[(summary.setup == setup) & (summary.metric == metric)]
    arms = rows.groupby("concurrency").arm.nunique()
    return [ref] + [c for c in grid(setups, setup) if c > ref and arms.get(c, 0) >= 2]


def presses(setups: pd.DataFrame, setup: str, concurrency: int) -> bool | None:
    """Whether a setup's pool presses at C: C > c_press, the requests the pool holds with no
    eviction (None: a fixed pool, no c_press)."""
    c_press = setups.set_index("setup").loc[setup].get("c_press")
    return None if c_press is None or pd.isna(c_press) else concurrency > int(c_press)


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


# vToken beyond the paper: the arm variant with the pressure-aware theta_F and
# compaction before preemption (config arm_variants), shown beside the paper's setting.
