"""θ_F and watermark selection table: every (θ_F, watermark) of the held-out selection
(vToken / Naive-Evict on retained blocks, output throughput and p95 latency, paired ratios
[95 % CI] over the held-out pairs), the selected setting, and that setting evaluated on the
main setup's own samples; and, when the run has it, vToken beyond the paper (pressure-aware θ_F
from the selected θ_F, compaction before preemption) on the same main samples."""

import json
import logging

import figstyle as fs
import pandas as pd
import results
import tablefmt

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
setups, comps = fs.read(smk.input.setups), fs.read(smk.input.comparisons)
chosen = json.loads(open(smk.input.selected).read())
select = smk.params.select_metric
parts = {m: results.selection_points(setups, comps, m) for m, _ in results.SELECTION_METRICS}
held = pd.read_csv(smk.input.selection).set_index("arm")  # per variant: preemptions, tokens relocated
raw_rows, shown_rows = [], []
base = parts.get(select, parts["retained_blocks"])
for r in base.itertuples():
    is_main = r.role in ("main", "beyond")
    picked = (not is_main) and r.theta_f == chosen["theta_f"] and r.watermark == chosen["watermark"]
    raw = {"role": r.role, "theta_f": chosen["theta_f"] if is_main else r.theta_f,
           "watermark": chosen["watermark"] if is_main else r.watermark, "concurrency": r.concurrency, "n": r.n,
           "selected": picked or r.role == "main", "select_metric": select}
    samples = {"main": "main (evaluation)", "beyond": "main, beyond the paper: pressure θ_F + compaction before "
               "preemption"}.get(r.role, "held-out")
    shown = {"samples": samples, "θ_F": f"{raw['theta_f']:g}",
             "watermark": f"{raw['watermark']:g}", "C": int(r.concurrency), "n": int(r.n),
             "selected": "yes" if picked else ("(evaluated)" if r.role == "main" else ""),
             "preemptions / trial": "" if is_main else f"{held.loc[r.arm, 'preemptions_mean']:g}",
             "tokens moved / trial": "" if is_main else f"{held.loc[r.arm, 'tokens_relocated_mean']:g}"}
    if not is_main:
        raw |= {k: held.loc[r.arm, k] for k in ("preemptions_mean", "tokens_relocated_mean")}
    for metric, name in results.SELECTION_METRICS:
        p = parts[metric]
        row = p[(p.role == r.role) & (p.arm == r.arm)]
        row = row.iloc[0] if len(row) else None
        for col in ("estimate", "ci_low", "ci_high"):
            raw[f"{metric}_{col}"] = None if row is None else row[col]
        shown[name] = "—" if row is None else tablefmt.ci(row.estimate, row.ci_low, row.ci_high)
    raw_rows.append(raw)
    shown_rows.append(shown)
how = ("fewest preemptions, then fewest tokens relocated (both fixed by the sample)" if select == "preemptions"
       else f"the best mean vToken / Naive-Evict {select}")
caption = (f"θ_F and watermark selected on held-out request samples by {how}; metrics: vToken / Naive-Evict, "
           f"geometric mean of per-pair ratios [95 % CI]; selected: θ_F {chosen['theta_f']:g}, watermark "
           f"{chosen['watermark']:g}, then evaluated on the main samples, which the selection never saw (with vToken beyond "
           f"the paper on the same samples when the run has it, at its C).")
tablefmt.write(pd.DataFrame(raw_rows), pd.DataFrame(shown_rows), dict(smk.output.items()), caption, "tab:thetaf")
