"""Claims table: each headline claim of the paper checked against this run (the rows:
``vtoken.bench.analysis.claims_table``), rendered as CSV, Markdown and LaTeX."""

import logging
from pathlib import Path

import figstyle as fs
import pandas as pd
import tablefmt

from vtoken.bench.analysis import verdicts
from vtoken.bench.analysis.claims_table import ClaimsInputs, ClaimsTable

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
baseline, run = smk.params.baseline, smk.params.run


def lines(paths) -> dict:
    return {Path(p).stem: len(Path(p).read_text(encoding="utf-8").splitlines()) for p in paths}


inputs = ClaimsInputs(
    summary=fs.read(smk.input.summary), setups=fs.read(smk.input.setups), comparisons=fs.read(smk.input.comparisons),
    feasibility=fs.read(smk.input.feasibility), best_baseline=fs.read(smk.input.best_baseline),
    exactness=fs.read(smk.input.exactness), plane=fs.read(smk.input.plane), equal_memory=fs.read(smk.input.equal_memory),
    baseline=baseline, aa_arm=smk.params.aa_control, run=run, sla=smk.params.sla, factorial=smk.params.factorial,
    budget=smk.params.budget,
    decode_cost=fs.read(smk.input.decode_cost) if smk.params.decode_cost["enabled"] else pd.DataFrame(),
    decode_cost_enabled=bool(smk.params.decode_cost["enabled"]),
    ruler=fs.read(smk.input.ruler) if smk.params.ruler_enabled else pd.DataFrame(),
    kvpress=pd.read_csv(smk.input.kvpress), policy_lines=lines(smk.input.policies),
    adapter_lines={Path(p).name: n for p, n in zip(smk.input.kvpress_adapter, lines(smk.input.kvpress_adapter).values())})
raw = ClaimsTable(inputs, fs.label, fs.setup_title).build()
shown = raw[["claim", "profile", "setup", "comparison", "measured", "n", "n_samples", "aa", "verdict"]].copy()
for col in ("n", "n_samples"):
    shown[col] = shown[col].map(lambda v: "" if v is None or pd.isna(v) else str(int(v)))
left_out = raw.n_excluded.map(lambda v: 0 if v is None or pd.isna(v) else int(v))
shown["n"] = [f"{n} (+{k} left out)" if k else n for n, k in zip(shown.n, left_out)]
shown = shown.rename(columns={"claim": "claim (paper)", "measured": "measured [95 % CI]", "n": "pairs",
                              "n_samples": "samples", "aa": "A/A control", "verdict": "verdict"})
caption = (f"Headline claims checked on this run (profile {run}). Ratios: geometric mean of per-pair ratios; "
           "differences: mean of per-pair differences; shares: mean over pairs; 95 % t intervals over pairs, each "
           "pair its own request sample ('samples': distinct samples among the pairs; 'left out': pairs where an arm "
           "has no value). Each claim is read on its CI by the rule of its bound (vtoken/bench/analysis/claims.py, "
           "docs/metrics.md): a range is met when the CI lies inside it, a threshold ('reaches') when the CI's "
           "worse end reaches it, an upper bound when the CI's high end is under it, 'up to X' as the range from no "
           "effect to X. Verdicts: " + "; ".join(verdicts.VERDICTS[:-2]) + "; not comparable: live tokens X vs Y (a "
           "comparison between arms whose live tokens per request differ by more than x1.05, so that a "
           "budget never decides it); not testable on this grid: <reason>; exact "
           "checks: " + " / ".join(verdicts.EXACT_VERDICTS) + f". A/A: a second engine of {fs.label(baseline)} "
           "on the same samples; a deterministic metric must give A/A = 1 exactly, a timing metric whose A/A "
           "interval excludes 1 is not resolvable on this machine. Strongest baseline: among every reclamation "
           "baseline arm and variant whose live tokens per request lie within x1.05 of "
           f"{fs.label(baseline)}'s at the largest C all of them ran, or interpolated to them between two budgets of "
           "one mechanism that bracket them (the mix low~high, vtoken/bench/analysis/equal_live.py), the one with "
           f"the fewest mean retained blocks at {fs.label(baseline)}'s live tokens (ties by arm name; "
           "process.best_baseline), chosen (with a mix's weight) on each "
           "setup's first pair and judged on the others, reported at that C; each vToken setting is judged against it only at equal live tokens. Memory-quality plane: retained blocks (paired ratio) and ROUGE-L vs Native (paired difference) "
           "against each baseline at equal live tokens; dominates = better on one axis and the other's worse CI "
           f"end within its margin (blocks ×{verdicts.MEMORY_MARGIN:g}, ROUGE-L {verdicts.QUALITY_MARGIN:g}), "
           "else 'better on X, Y not resolved' (verdicts.dominance). Paper rows: each number of the paper with the "
           "setting the paper states for it (another model's number is not testable at this model), and whether "
           "vToken reaches it.")
tablefmt.write(raw, shown, dict(smk.output.items()), caption, "tab:claims")
