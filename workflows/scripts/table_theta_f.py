"""θ_F re-selection table: per workload, vToken vs the baseline on the selection metric at
the fixed θ_F and at the best θ_F of the sweep (paired ratios, 95 % CI), and every θ_F."""

import logging

import figstyle as fs
import pandas as pd
import results
import tablefmt

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
setups, comps = fs.read(smk.input.setups), fs.read(smk.input.comparisons)
fixed, select = smk.params.theta_f_fixed, smk.params.select_metric
model = setups[setups.role == "main"].model.iloc[0]
raw_rows, shown_rows = [], []
for workload in setups[(setups.role == "main") & (setups.model == model)].workload:
    pts = results.theta_f_points(setups, comps, select, model, workload)
    best = results.best_theta_f(pts, select, fixed) if len(pts) else None
    fix = pts[pts.theta_f == fixed].iloc[0] if len(pts) and (pts.theta_f == fixed).any() else None
    raw = {"model": model, "workload": workload, "metric": select, "fixed_theta_f": fixed,
           "fixed_estimate": None if fix is None else fix.estimate,
           "fixed_ci_low": None if fix is None else fix.ci_low, "fixed_ci_high": None if fix is None else fix.ci_high,
           "best_theta_f": None if best is None else best.theta_f,
           "best_estimate": None if best is None else best.estimate,
           "best_ci_low": None if best is None else best.ci_low, "best_ci_high": None if best is None else best.ci_high,
           "n": None if best is None else int(best.n), "concurrency": None if best is None else int(best.concurrency)}
    sweep = "; ".join(f"{p.theta_f:g}: {tablefmt.ci(p.estimate, p.ci_low, p.ci_high)}" for p in pts.itertuples())
    raw_rows.append(raw)
    shown_rows.append({"workload": workload, "C": raw["concurrency"], "n": raw["n"],
                       f"fixed θ_F = {fixed}": "—" if fix is None else tablefmt.ci(fix.estimate, fix.ci_low, fix.ci_high),
                       "best θ_F": "—" if best is None else f"{best.theta_f:g}",
                       "at best θ_F": "—" if best is None else tablefmt.ci(best.estimate, best.ci_low, best.ci_high),
                       "all θ_F": sweep or "—"})
caption = (f"θ_F re-selected per workload ({model}): {select}, vToken / Naive-Evict, geometric mean of per-pair "
           "ratios [95 % CI]; best = best point estimate of the sweep (a selection on the same data, so its "
           "interval is optimistic).")
tablefmt.write(pd.DataFrame(raw_rows), pd.DataFrame(shown_rows), dict(smk.output.items()), caption, "tab:thetaf")
