"""What packing costs, and where tokens die: per main setup, every arm at C_ref and at
the largest C it ran -- retained blocks and live tokens per request, KV tokens and KiB moved per
engine step, the engine-step time as a paired ratio to the baseline's, the share of the evicted
tokens removed in the step that completed the prompt (the rest died in decode). Means over pairs
[95 % t interval]; the step-time ratio: geometric mean of the per-pair ratios [95 % CI]. Every
arm is one row per C; "—" where an arm did not run at that C."""

import logging

import figstyle as fs
import pandas as pd
import results
import tablefmt

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
baseline, aa = smk.params.baseline, smk.params.aa_control
C_REF = int(smk.params.sla["c_ref"])
COLS = (("retained_blocks", "blocks / request", 1, "{:.2f}"), ("live_tokens", "live tokens", 1, "{:.1f}"),
        ("tokens_relocated_per_step", "tokens moved / step", 1, "{:.2f}"),
        ("bytes_relocated_per_step", "KiB moved / step", 1 / 1024, "{:.1f}"),
        ("prefill_evicted_share", "evicted in prefill (%)", 100, "{:.1f}"))
raw_rows, shown_rows = [], []
for setup in results.main_setups(setups):
    arms = fs.ordered_with_variants(set(summary[summary.setup == setup].arm) - {aa}, smk.params.arms)
    for c in sorted({C_REF, results.max_c(setups, setup)}):
        blocks = results.at(summary, setup, "retained_blocks", c)
        for arm in [a for a in arms if a in blocks.index]:
            raw = {"setup": setup, "arm": arm, "concurrency": c, "n": int(blocks.loc[arm, "n"])}
            shown = {"setup": fs.setup_title(setups, setup), "arm": fs.label(arm), "C": c, "n": raw["n"]}
            for metric, name, scale, fmt in COLS:
                r = results.at(summary, setup, metric, c)
                m = r.loc[arm] if arm in r.index else None
                for k in ("mean", "ci_low", "ci_high"):
                    raw[f"{metric}_{k}"] = None if m is None else m[k]
                shown[name] = "—" if m is None or pd.isna(m["mean"]) else \
                    tablefmt.ci(scale * m["mean"], scale * m.ci_low, scale * m.ci_high, fmt)
            comp = results.comparison(comps, setup, "step_ms", arm, c) if arm != baseline else None
            for k in ("estimate", "ci_low", "ci_high"):
                raw[f"step_ratio_{k}"] = None if comp is None else comp[k]
            ratio = "—" if comp is None else tablefmt.ci(comp.estimate, comp.ci_low, comp.ci_high, "{:.3f}")
            shown[f"step time / {fs.label(baseline)}"] = "1 (reference)" if arm == baseline else \
                ratio + ("" if ratio == "—" else "×")
            raw_rows.append(raw)
            shown_rows.append(shown)
caption = (f"What packing costs and where tokens die, per main setup at C_ref = {C_REF} and the largest C: retained "
           "blocks and live tokens per request (decode steps), KV tokens and KiB moved per engine step (relocation "
           "only: a prompt pruned before it is written is written once and moves nothing), the mean engine-step time "
           f"(its planning, copies and table updates included) as a paired ratio to {fs.label(baseline)}'s, and the "
           "share of the evicted tokens removed in the step that completed the prompt. Mean over n pairs [95 % t "
           "interval]; step-time ratio: geometric mean of per-pair ratios [95 % CI]. '(no spread)': every pair gave "
           "the same value.")
tablefmt.write(pd.DataFrame(raw_rows), pd.DataFrame(shown_rows), dict(smk.output.items()), caption, "tab:packing")
