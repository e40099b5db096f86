"""Look-ups over the processed tables shared by the figure and table scripts: which setups
are main / sweeps, the concurrency each figure reads, paired comparisons, θ_F selection."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vtoken.bench.analysis.lookup import (  # noqa: F401 -- the figure scripts read them from here
    main_setups,
    first_policy,
    pool_setups,
    swept_arms,
    swept_rows,
    pool_text,
    grid,
    max_c,
    shared_c,
    compared_cs,
    presses,
    at,
    comparison,
)

BEYOND = "vtoken_pressure"
SELECTION_METRICS = (("retained_blocks", "retained blocks"), ("output_tok_per_s", "output tokens/s"),
                     ("e2e_p95_s", "p95 e2e latency"))


def selection_points(setups: pd.DataFrame, comparisons: pd.DataFrame, metric: str) -> pd.DataFrame:
    """vtoken / baseline ``metric`` of every (θ_F, watermark) variant of the held-out
    selection setup, and the main setup's vtoken at the selection's C (``role`` "main":
    the selected setting evaluated on the main samples). Empty without a selection setup."""
    import json

    sel = setups[setups.role == "select"]
    if sel.empty:
        return pd.DataFrame()
    r = sel.iloc[0]
    c = grid(setups, r.setup)[0]
    rows = []
    for arm, settings in json.loads(r.arm_settings).items():
        if "theta_f" not in settings:
            continue
        comp = comparison(comparisons, r.setup, metric, arm, c)
        if comp is not None:
            rows.append({"role": "select", "arm": arm, "theta_f": settings["theta_f"],
                         "watermark": settings["watermark"], "concurrency": c, "estimate": comp.estimate,
                         "ci_low": comp.ci_low, "ci_high": comp.ci_high, "n": comp.n})
    main = setups[(setups.role == "main") & (setups.workload == r.workload)]
    if "policy" in setups:  # the main setup of the selection's policy (the first)
        main = main[main.policy == r.policy]
    if len(main) and c in grid(setups, main.setup.iloc[0]):
        # The selected setting on the main samples, and vToken beyond the paper.
        # A variant runs at C_ref only: the latter at the selection's C when there, else at its own.
        for role, arm in (("main", "vtoken"), ("beyond", BEYOND)):
            comp = comparison(comparisons, main.setup.iloc[0], metric, arm, c)
            if comp is None and role == "beyond":
                comp = comparison(comparisons, main.setup.iloc[0], metric, arm, None)
            if comp is not None:
                at = int(comp.concurrency) if "concurrency" in comp and not pd.isna(comp.concurrency) else c
                rows.append({"role": role, "arm": arm, "theta_f": np.nan, "watermark": np.nan, "concurrency": at,
                             "estimate": comp.estimate, "ci_low": comp.ci_low, "ci_high": comp.ci_high,
                             "n": comp.n})
    return pd.DataFrame(rows)


def frontier_series(g: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One mechanism's frontier points (rows of ``frontiers.csv``) of ``metric`` against its
    retained blocks, in budget order: x, x_lo, x_hi, y, y_lo, y_hi, n."""
    x = g[g.metric == "retained_blocks"].set_index("budget")
    y = g[g.metric == metric].set_index("budget")
    return pd.DataFrame({"x": x["mean"], "x_lo": x.ci_low, "x_hi": x.ci_high, "y": y["mean"], "y_lo": y.ci_low,
                         "y_hi": y.ci_high, "n": y["n"]}).sort_index()
