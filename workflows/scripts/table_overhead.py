"""Overhead table: per main setup and arm, at the largest C, the reclamation overheads as
shares of the trial duration (planner, KV copy, token-view indirection) and the KV bytes
relocated per block freed, mean over pairs [95 % t interval]. The A/A control (a second engine
of the baseline arm, same settings, same samples) has a row of its own: the spread between it
and the baseline's row is what two engines of one arm differ by on this machine."""

import logging

import figstyle as fs
import pandas as pd
import results
import tablefmt

from vtoken.bench.analysis import stats, verdicts

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
summary, setups, trials = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.trials)
COLS = (("planner_share", "planner (%)", 100, "{:.2f}"), ("copy_share", "KV copy (%)", 100, "{:.2f}"),
        ("indirection_share", "indirection (%)", 100, "{:.2f}"), ("overhead_share", "total (%)", 100, "{:.2f}"),
        ("bytes_per_block_freed", "KiB per block freed", 1 / 1024, "{:.1f}"))
raw_rows, shown_rows = [], []
for setup in results.main_setups(setups):
    c = results.shared_c(setups, setup)
    total = results.at(summary, setup, "overhead_share", c)
    aa = smk.params.aa_control
    for arm in fs.ordered(total.index, smk.params.arms) + ([aa] if aa in total.index else []):
        name = f"{fs.label(smk.params.variants[arm])} (A/A engine)" if arm == aa else fs.label(arm)
        raw = {"setup": setup, "arm": arm, "concurrency": c, "n": int(total.loc[arm, "n"])}
        shown = {"setup": fs.setup_title(setups, setup), "arm": name, "C": c, "n": raw["n"]}
        for metric, name, scale, fmt in COLS:
            r = results.at(summary, setup, metric, c)
            m = r.loc[arm] if arm in r.index else None
            for k in ("mean", "ci_low", "ci_high"):
                raw[f"{metric}_{k}"] = None if m is None else m[k]
            shown[name] = "—" if m is None else tablefmt.ci(scale * m["mean"], scale * m.ci_low, scale * m.ci_high, fmt)
        raw_rows.append(raw)
        shown_rows.append(shown)
    if aa in total.index:  # the A/A ratio itself: paired per pair, what two engines of one arm differ by
        base = smk.params.variants[aa]
        at = trials[(trials.setup == setup) & (trials.concurrency == c)]
        raw = {"setup": setup, "arm": f"{aa}/{base}", "concurrency": c, "n": None}
        shown = {"setup": fs.setup_title(setups, setup), "arm": f"A/A ratio ({aa} / {base}, paired)", "C": c, "n": ""}
        for metric, name, scale, fmt in COLS:
            comp = stats.compare_arms(at[at.arm.isin([aa, base])], metric, base, "ratio") if metric in at else None
            row = None if comp is None or comp.empty else comp.iloc[0]
            ok = row is not None and not pd.isna(row.estimate)
            for k in ("estimate", "ci_low", "ci_high"):
                raw[f"{metric}_aa_{k}"] = row[k] if ok else None
            status = verdicts.aa_status(row.estimate, row.ci_low, row.ci_high, n=int(row.n), deterministic=False) \
                if ok else ""
            shown[name] = (tablefmt.ci(row.estimate, row.ci_low, row.ci_high) + "×" +
                           (" (not resolvable)" if status in (verdicts.AA_UNRESOLVABLE, verdicts.AA_WIDE) else "")) if ok else "—"
            raw["n"] = int(row.n) if ok else raw["n"]
        shown["n"] = "" if raw["n"] is None else raw["n"]
        raw_rows.append(raw)
        shown_rows.append(shown)
caption = ("Reclamation overheads at the largest C: share of the trial duration, mean over n pairs [95 % t "
           "interval]; reclamation runs synchronously between engine steps (nothing overlaps compute). "
           "KiB per block freed: — when the arm freed no block mid-request. A/A engine: a second, separately "
           "started engine of the baseline arm on the same samples; A/A ratio: geometric mean of its per-pair "
           "ratios to the baseline [95 % t interval] — an interval that excludes 1 (marked 'not resolvable') means "
           "this machine cannot resolve differences of that size in that column.")
tablefmt.write(pd.DataFrame(raw_rows), pd.DataFrame(shown_rows), dict(smk.output.items()), caption, "tab:overhead")
