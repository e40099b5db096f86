"""Table 1 (the rows that exist now): per main setup and arm, at the largest C every arm ran (C_ref in the default), the memory,
throughput and quality metrics with n and 95 % CIs; the change in retained blocks is the
paired ratio vs the baseline. The paper's prefix-sharing degree is not measured yet, so it
has no column (no fake rows)."""

import logging

import figstyle as fs
import pandas as pd
import results
import tablefmt

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
COLS = (("retained_blocks", "retained blocks", "{:.2f}", 1), ("packing_efficiency", "effective KV usage (%)", "{:.1f}", 100),
        ("waste_f", "waste F (%)", "{:.1f}", 100), ("output_tok_per_s", "output tok/s", "{:.1f}", 1),
        ("e2e_p95_s", "p95 e2e (s)", "{:.2f}", 1), ("rouge_l_mean", "ROUGE-L vs baseline", "{:.3f}", 1))
raw_rows, shown_rows = [], []
for setup in results.main_setups(setups):
    c = results.shared_c(setups, setup)
    sla, feas = results.at(summary, setup, "sla_throughput", None), results.at(summary, setup, "feasible_c", None)
    base = results.at(summary, setup, "retained_blocks", c)
    for arm in fs.ordered(base.index, smk.params.arms):
        raw = {"setup": setup, "arm": arm, "concurrency": c, "n": int(base.loc[arm, "n"])}
        shown = {"setup": fs.setup_title(setups, setup), "arm": fs.label(arm), "C": c, "n": raw["n"]}
        for metric, name, fmt, scale in COLS:
            r = results.at(summary, setup, metric, c)
            m = r.loc[arm] if arm in r.index else None
            for k in ("mean", "ci_low", "ci_high"):
                raw[f"{metric}_{k}"] = None if m is None else m[k]
            shown[name] = "—" if m is None else tablefmt.ci(scale * m["mean"], scale * m.ci_low, scale * m.ci_high, fmt)
            if metric == "retained_blocks":
                comp = results.comparison(comps, setup, metric, arm, c)
                raw["retained_blocks_ratio"] = None if comp is None else comp.estimate
                raw["retained_blocks_ratio_ci_low"] = None if comp is None else comp.ci_low
                raw["retained_blocks_ratio_ci_high"] = None if comp is None else comp.ci_high
                shown["Δ retained vs baseline"] = "—" if comp is None else tablefmt.pct_change(
                    comp.estimate, comp.ci_low, comp.ci_high)
        for metric, frame, name, fmt in (("sla_throughput", sla, "SLA throughput (req/s)", "{:.3f}"),
                                         ("feasible_c", feas, "feasible C", "{:.1f}")):
            m = frame.loc[arm] if arm in frame.index else None
            for k in ("mean", "ci_low", "ci_high"):
                raw[f"{metric}_{k}"] = None if m is None else m[k]
            shown[name] = "—" if m is None else tablefmt.ci(m["mean"], m.ci_low, m.ci_high, fmt)
        raw_rows.append(raw)
        shown_rows.append(shown)
caption = ("Main results at the largest C every arm of each setup ran: mean over n pairs [95 % t interval]; Δ retained: "
           "geometric mean of per-pair ratios vs the baseline [95 % CI]; SLA throughput and feasible C over the "
           "concurrency grid. The paper's prefix-sharing degree is not measured by this artifact yet.")
tablefmt.write(pd.DataFrame(raw_rows), pd.DataFrame(shown_rows), dict(smk.output.items()), caption, "tab:main")
