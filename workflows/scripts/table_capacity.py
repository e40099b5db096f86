"""Capacity as measured (``vtoken.bench.analysis.capacity``): per setup, each swept arm against the
baseline arm and against each swept block mechanism, pair by pair as intervals between the last
feasible and the first infeasible C measured, a sign test over the pairs whose intervals separate,
at equal live tokens at C_ref."""

import logging

import figstyle as fs
import pandas as pd
import tablefmt

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
cap, setups = fs.read(smk.input.capacity), fs.read(smk.input.setups)
rows = [{"setup": fs.setup_title(setups, r.setup), "comparison": f"{fs.label(r.arm)} vs {fs.label(r.reference)}",
         "per pair (feasible C: arm vs reference)": r.intervals,
         "live tokens at C_ref": "—" if pd.isna(r.arm_live_tokens) else
         f"{r.arm_live_tokens:.1f} vs {r.reference_live_tokens:.1f}",
         "pairs": int(r.n), "verdict": r.verdict} for r in cap.itertuples()] if len(cap) else []
shown = pd.DataFrame(rows) if rows else pd.DataFrame([{"setup": "—", "verdict": "no capacity measured in this run"}])
caption = ("Capacity as measured: per pair, each arm's feasible C as the interval from the largest C it passed to the "
           "first C measured above it, minus one (one number where the two are adjacent; '>= C' where nothing above "
           "failed). An arm holds more requests than another in a pair only where its interval lies entirely above; "
           "over pairs, a two-sided sign test on those pairs (p < 0.05: more / fewer; four pairs of four can never "
           "reach it: p = 0.125). A comparison whose arms keep live tokens more than x1.05 apart at C_ref is not "
           "comparable (a budget would decide it).")
tablefmt.write(cap, shown, dict(smk.output.items()), caption, "tab:capacity")
