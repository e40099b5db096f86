"""A mechanism at the reference's live tokens, interpolated between two of its budgets.

Comparisons are at equal live tokens (``verdicts.equal_live_tokens``: within 5 % of the
reference's). A block-granular budget moves in whole blocks: PagedEviction keeps ~60 live
tokens per request at nominal budgets 56-63 and ~70 at 64, Zipage-style 55.8 or 70.4, so no
nominal budget lands within 5 % of H2O's 63.4 (docs/trials.md "Equal budgets"). Such a
mechanism is compared at **interpolated** equal live tokens:

- a **budget partner** is the same mechanism at another nominal budget, declared in the config
  (``arm_variants.<name>.budget_of``); an arm and its partners form a **family**;
- where a family's mean live tokens bracket the reference's (one member at or below it, one at
  or above; the nearest on each side), the mechanism at the reference is the **mix** of those
  two: every metric of every paired set is (1 - w) * low + w * high, with
  w = (reference - low's live) / (high's live - low's live) from the means the caller gives
  (the baseline choice: its held-out pairs), so the mix keeps the reference's live tokens there;
- a mix is made per paired set (setup, pair[, C]) from two trials that ran one request sample,
  so it stays paired with the treatment; a set where either budget is missing is left out.

The assumption: between the two budgets, each per-trial metric (retained blocks, ROUGE-L, step
time) is linear in live tokens. Grid metrics are not mixed: feasible C and SLA-constrained
throughput are steps in C, not linear in live tokens, so a mix has none. Nothing is extrapolated:
a family that does not bracket the reference gives no mix, and its members are judged as measured
(docs/metrics.md §5b).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

SEPARATOR = "~"  # a mix's arm name: "<low>~<high>"
KEYS = ("setup", "pair", "concurrency")  # a paired set (those present in a table)


@dataclass(frozen=True)
class Mix:
    """A family's two budgets that bracket ``reference`` live tokens, and their weight."""
    low: str
    high: str
    low_live: float
    high_live: float
    reference: float

    @property
    def name(self) -> str:
        return f"{self.low}{SEPARATOR}{self.high}"

    @property
    def weight(self) -> float:
        """w of the high budget: (1 - w) * low_live + w * high_live == reference."""
        return (self.reference - self.low_live) / (self.high_live - self.low_live)

    def at(self, low, high):
        """A metric of the mix from its value at the low and at the high budget."""
        return (1 - self.weight) * low + self.weight * high


def is_mix(arm) -> bool:
    return isinstance(arm, str) and SEPARATOR in arm


def families(partners: Mapping[str, str]) -> list[tuple[str, ...]]:
    """The families of ``partners`` ({variant: the arm or variant it is a budget of}): each a
    sorted tuple of two or more arms, the families sorted."""
    groups: list[set[str]] = []
    for variant, of in sorted(partners.items()):
        if variant == of:
            raise ValueError(f"budget_of of {variant!r} names itself; name the arm it is another budget of")
        touching = [g for g in groups if variant in g or of in g]
        merged = set().union({variant, of}, *touching)
        groups = [g for g in groups if g not in touching] + [merged]
    return sorted(tuple(sorted(g)) for g in groups)


def bracket(live: Mapping[str, float], family: Iterable[str], reference: float) -> Mix | None:
    """The mix of ``family`` at ``reference`` live tokens from the members' mean ``live`` tokens
    (members absent or NaN ignored): the nearest member at or below and the nearest at or above;
    None when one side is empty or when a member is exactly at the reference (it is measured
    there: no mix is needed)."""
    measured = sorted((float(live[a]), a) for a in family if a in live and pd.notna(live[a]))
    below = [(v, a) for v, a in measured if v <= reference]
    above = [(v, a) for v, a in measured if v >= reference]
    if not below or not above or below[-1][0] == reference or above[0][0] == reference:
        return None
    (low_live, low), (high_live, high) = below[-1], above[0]
    return Mix(low, high, low_live, high_live, float(reference))


def mix(table: pd.DataFrame, m: Mix) -> pd.DataFrame:
    """The rows of ``m`` in ``table`` (one row per paired set both budgets ran): the numeric
    columns mixed (1 - w) * low + w * high, the other columns taken from the low budget's row,
    ``arm`` = ``m.name``; a column equal in both rows (B, the pool) is kept as it is. Empty (with ``table``'s columns) when no paired set has both."""
    keys = [k for k in KEYS if k in table]
    low, high = (table[table.arm == a].set_index(keys) for a in (m.low, m.high))
    shared = low.index.intersection(high.index)
    if not len(shared):
        return table.iloc[0:0]
    low, high = low.loc[shared].sort_index(), high.loc[shared].sort_index()
    out = low.copy()
    for col in out.columns:
        if pd.api.types.is_numeric_dtype(out[col]) and not pd.api.types.is_bool_dtype(out[col]):
            mixed = m.at(low[col].astype(float), high[col].astype(float))
            out[col] = low[col].where(low[col] == high[col], mixed)  # equal (B, the pool): kept exactly
    out["arm"] = m.name
    return out.reset_index()[list(table.columns)]


def describe(m: Mix) -> str:
    """The mix in words, for the tables' selected_by column."""
    return (f"{m.low} (live {m.low_live:.1f}) and {m.high} (live {m.high_live:.1f}) interpolated to "
            f"{m.reference:.1f} live tokens (w = {m.weight:.3f} on {m.high})")
