"""What the run shows, in one short table: each of the paper's headline claims and the review's
question, this run's estimate with its interval, and the verdict -- rows taken from the claims
table (``claims_table``) and the capacity table (``capacity``), never written by hand. The
README quotes this table (``paper_tables/summary.md``) from a named run.

Rows, in order: retained blocks against Naive-Evict where the pool presses (the largest C), the
SLA-constrained throughput and the capacity against Naive-Evict (per vToken setting), the
token table's capacity against the block mechanism, the review's question at the same budget and
at equal memory (per scorer and phase), exactness, the token table's overhead, and the A/A
control's width on the timing metrics (what the machine alone moves).
"""

from __future__ import annotations

import pandas as pd

COLUMNS = ["claim", "where", "comparison", "this run", "verdict"]
TREATED = ("vToken vs", "vToken (eager) vs", "vToken (pressure")  # the comparisons' labels start so
NOT_MEASURED = "—"  # the claims table's measured column for a claim this run does not measure
AA_TIMING = ("A/A control: e2e_p95_s", "A/A control: output_tok_per_s")


def _pick(claims: pd.DataFrame, claim_id: str) -> pd.DataFrame:
    return claims[claims.claim_id == claim_id]


def _row(r, claim: str | None = None) -> dict:
    return {"claim": claim or r.claim, "where": r.setup, "comparison": r.comparison, "this run": r.measured,
            "verdict": r.verdict if isinstance(r.verdict, str) and r.verdict else r.aa}


def summary(claims: pd.DataFrame, capacity: pd.DataFrame, label=str) -> pd.DataFrame:
    """The summary rows (module docstring) from the claims table's rows and ``capacity.csv``."""
    rows = []
    claims = claims[claims.measured != NOT_MEASURED]  # a claim another profile measures
    retained = _pick(claims, "retained")
    retained = retained[retained.comparison.str.startswith(TREATED) & ~retained.setup.str.startswith("RULER")]
    top = retained.groupby("comparison", sort=False).tail(1)  # each setting at its setup's largest C
    rows += [_row(r) for r in top.itertuples()]
    for claim_id in ("sla", "capacity"):
        part = _pick(claims, claim_id)
        rows += [_row(r) for r in part[part.comparison.str.startswith(TREATED)].itertuples()]
    for r in capacity.itertuples() if len(capacity) else ():
        if r.reference != "naive":
            rows.append({"claim": "the token table holds as many requests as the block mechanism", "where": r.setup,
                         "comparison": f"{label(r.arm)} vs {label(r.reference)}",
                         "this run": r.intervals, "verdict": r.verdict})
    for claim_id in ("without_table", "capability", "exactness", "indirection"):
        rows += [_row(r) for r in _pick(claims, claim_id).itertuples()]
    aa = claims[claims.claim.isin(AA_TIMING)]
    rows += [_row(r, "the machine alone: " + r.claim.removeprefix("A/A control: ")) for r in aa.itertuples()]
    return pd.DataFrame(rows, columns=COLUMNS)
