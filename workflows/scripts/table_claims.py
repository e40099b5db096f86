"""Claims table: each headline claim of the paper checked against this run, vToken against
the best reclamation baseline, and the A/A control beside every comparison.

One row per claim and main setup: the measured value with its 95 % CI, n (pairs) and the
number of distinct request samples, the A/A status of the same metric (a second engine of
the baseline arm; ``vtoken.bench.analysis.verdicts.aa_status``) and a verdict from the fixed
vocabulary of ``vtoken.bench.analysis.verdicts`` (never a zero-width interval printed as a CI; a
claim the grid cannot test says why). A comparison between arms whose live tokens per request
differ beyond ``verdicts.equal_live_tokens`` (max(5 %, B/2) of the baseline's) reads "not
comparable: live tokens X vs Y". Every row names the profile (run) that measured it.
"""

import logging
import math
from pathlib import Path

import figstyle as fs
import pandas as pd
import results
import tablefmt

from vtoken.bench.analysis import paper_numbers, stats, verdicts

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
comps, feas = fs.read(smk.input.comparisons), fs.read(smk.input.feasibility)
best, exact = fs.read(smk.input.best_baseline), fs.read(smk.input.exactness)
plane = fs.read(smk.input.plane)
decode = fs.read(smk.input.decode_cost) if smk.params.decode_cost["enabled"] else pd.DataFrame()
ruler = fs.read(smk.input.ruler) if smk.params.ruler_enabled else pd.DataFrame()
baseline, aa_arm, run = smk.params.baseline, smk.params.aa_control, smk.params.run
sla_cfg = smk.params.sla
fs.use_variants(smk.params.variants, smk.params.variant_labels)
VS = f"vToken vs {fs.label(baseline)}"
# Beyond the paper (issue 19): the pressure-aware vToken, swept like the paper's arm and
# reported beside it on every claim row, never in place of it.
BEYOND = results.BEYOND
TREATED = {"vtoken": VS, BEYOND: f"{fs.label(BEYOND)} vs {fs.label(baseline)}"}  # its label says "beyond the paper"
# claim id -> (paper's claim, metric, direction, claimed range in the estimate's units, unit)
CLAIMS = {
    "retained": ("vToken retains 27.2–72.3 % fewer KV blocks per request than Naive-Evict", "retained_blocks",
                 "lower", (1 - 0.723, 1 - 0.272), "ratio"),
    "sla": ("up to 1.37× SLA-constrained throughput", "sla_throughput", "higher", (1.0, 1.37), "ratio"),
    "sla_tpot": ("up to 1.37× SLA-constrained throughput (per-token variant: p95 TPOT bound)",
                 "sla_throughput_tpot", "higher", (1.0, 1.37), "ratio"),
    "capacity": ("up to 2× feasible concurrency under a fixed pool", "feasible_c", "higher", (1.0, 2.0), "ratio"),
    "exactness": ("relocation changes no output: vToken token-identical to Naive-Evict and HoleFill", None, None,
                  None, "requests"),
    "indirection": ("token-view indirection costs < 1 % of the run time", "indirection_share", "higher", (0.0, 0.01),
                    "share"),
    "indirection_e2e": ("token-view indirection costs < 1 % (end to end: decode step of Native through the plugin "
                        "vs stock vLLM)", None, "higher", (1.0, 1.01), "ratio"),
    "policy_loc": ("each eviction policy is < 50 lines of code", None, None, None, "lines"),
    "policy_dropin": ("eviction policies are drop-in modules: a third party's scorer (NVIDIA kvpress) runs unchanged "
                      "as a vToken policy, vToken token-identical to Naive-Evict under it", None, None, None, "requests"),
}
BEST = {  # vToken vs the best baseline: no magnitude claimed by the paper, direction only
    "retained_blocks": ("lower", "ratio", "retained blocks"), "live_tokens": ("equal", "ratio", "live tokens kept"),
    "sla_throughput": ("higher", "ratio", "SLA throughput"),
    "feasible_c": ("higher", "difference", "feasible C"), "rouge_l_mean": ("higher", "difference", "ROUGE-L vs Native"),
}
AA_METRICS = ("retained_blocks", "sla_throughput", "feasible_c", "output_tok_per_s", "e2e_p95_s", "rouge_l_mean")
rows = []


def add(claim_id, claim, setup, comparison, measured, n=None, n_samples=None, est=None, lo=None, hi=None,
        unit="", verdict="", aa=""):
    rows.append({"claim_id": claim_id, "claim": claim, "profile": run, "setup": setup, "comparison": comparison,
                 "measured": measured, "n": n, "n_samples": n_samples, "estimate": est, "ci_low": lo, "ci_high": hi,
                 "unit": unit, "aa": aa, "verdict": verdict})


def fmt(comp, kind):
    """A comparison as text: ratios as % change (retained) or ×, differences as ±. A
    zero-width interval is not printed as one: every pair gave the same value."""
    if not pd.isna(comp.ci_low) and abs(comp.ci_high - comp.ci_low) <= verdicts.TOLERANCE * max(1.0, abs(comp.estimate)):
        one = pd.Series({"estimate": comp.estimate, "ci_low": float("nan"), "ci_high": float("nan")})
        return fmt(one, kind) + f" in each of {int(comp.n)} pairs (no spread, no interval)"
    if kind == "pct":
        return tablefmt.pct_change(comp.estimate, comp.ci_low, comp.ci_high)
    if kind == "difference":
        return tablefmt.ci(comp.estimate, comp.ci_low, comp.ci_high, "{:+.3f}")
    return tablefmt.ci(comp.estimate, comp.ci_low, comp.ci_high) + "×"


def n_samples(comp):
    return None if comp is None or pd.isna(comp.get("n_samples")) else int(comp.n_samples)


def aa_of(setup, metric, c):
    """A/A status of ``metric`` in ``setup`` at C (None: a grid metric)."""
    if aa_arm is None:
        return "no A/A arm in this run"
    comp = results.comparison(comps, setup, metric, aa_arm, c)
    if comp is None:
        return "A/A not measured"
    null = 0.0 if comp.kind == "difference" else 1.0
    status = verdicts.aa_status(comp.estimate, comp.ci_low, comp.ci_high, n=int(comp.n),
                                deterministic=bool(comp.deterministic), null=null)
    return status if comp.deterministic else f"{tablefmt.ci(comp.estimate, comp.ci_low, comp.ci_high)}: {status}"


def judged(comp, direction, claimed, untestable=None, live=None):
    """The verdict of a comparison; ``live``: ``live_tokens(...)`` of the compared arm (None:
    not a comparison between arms), refused when outside the equal-live-tokens rule."""
    null = 0.0 if comp is not None and comp.kind == "difference" else 1.0
    if untestable is None and (comp is None or pd.isna(comp.estimate)):
        untestable = "not measured on this run (no paired trials)"
    if untestable is not None:
        return verdicts.verdict(None, None, None, n=0, n_samples=0, direction=direction, untestable=untestable)
    return verdicts.verdict(comp.estimate, comp.ci_low, comp.ci_high, n=int(comp.n), n_samples=n_samples(comp) or 0,
                            direction=direction, null=null, claimed=claimed, live_tokens=live)


def live_tokens(setup, arm, c):
    """(``arm``'s, the baseline's live tokens per request at C, B) for
    ``verdicts.equal_live_tokens``; None when either was not measured there."""
    live = results.at(summary, setup, "live_tokens", c)
    if arm not in live.index or baseline not in live.index or live.loc[[arm, baseline], "mean"].isna().any():
        return None
    return live.loc[arm, "mean"], live.loc[baseline, "mean"], int(setups.set_index("setup").loc[setup, "block_size"])


def comparison_row(claim_id, setup, where, comp, c, kind, untestable=None, comparison=VS, arm="vtoken"):
    claim, metric, direction, claimed, unit = CLAIMS[claim_id]
    verdict = judged(comp, direction, claimed, untestable, live_tokens(setup, arm, c or C_REF))
    shown = "—" if untestable or comp is None else fmt(comp, kind)
    add(claim_id, claim, where, comparison, shown, None if comp is None else int(comp.n), n_samples(comp),
        None if comp is None else comp.estimate, None if comp is None else comp.ci_low,
        None if comp is None else comp.ci_high, unit, verdict, aa_of(setup, metric, c))


def equal_budget(setup, arm, c):
    """(text, holds): ``arm``'s live tokens per request against the baseline's
    (``verdicts.equal_live_tokens``); holds None when not measured."""
    live = live_tokens(setup, arm, c)
    if live is None:
        return "not measured", None
    got, ref, b = live
    return (f"{got:.1f} vs {fs.label(baseline)}'s {ref:.1f} live tokens per request (tolerance max(5 %, B/2) = "
            f"{verdicts.live_tolerance(ref, b):.1f})"), verdicts.equal_live_tokens(*live)


def capacity_untestable(setup):
    """Why feasible concurrency cannot be compared in ``setup`` (None: it can)."""
    f = feas[feas.setup == setup] if len(feas) else feas
    if f is None or not len(f):
        return "feasibility is measured on contract workloads only"
    top = int(f.grid_max.max())
    naive = f[f.arm == baseline]
    if len(naive) and (naive.feasible_c == top).all():
        return (f"{fs.label(baseline)} is feasible at the grid's largest C = {top} in every pair: the pool never "
                "presses it inside the grid, so no arm can show more capacity")
    return None


def sla_untestable(setup):
    """Why SLA-constrained throughput cannot be compared in ``setup`` (None: it can)."""
    grid, c_ref = results.grid(setups, setup), int(sla_cfg["c_ref"])
    if c_ref not in grid:
        return f"C_ref = {c_ref} is not on the grid {grid}"
    if c_ref == max(grid):
        return (f"C_ref = {c_ref} is the grid's largest C: no arm can meet the bound at a higher C, so the ratio "
                "is only a makespan ratio at C ≤ C_ref")
    return None


def capacity(setup, arm):
    """Feasible C of ``arm`` vs the baseline in ``setup`` as the paper states it, a paired ratio
    over the pairs where both are feasible at some C (the difference when fewer than two)."""
    cap = results.comparison(comps, setup, "feasible_c", arm, None)
    if cap is not None and not capacity_untestable(setup):
        f = feas[feas.setup == setup].pivot(index="pair", columns="arm", values="feasible_c")
        ok = f[(f[baseline] > 0) & (f[arm] > 0)] if {arm, baseline} <= set(f) else f.iloc[:0]
        if len(ok) >= 2:
            res = stats.paired_ci(ok[arm], ok[baseline], "ratio")
            cap = pd.Series({"estimate": res.estimate, "ci_low": res.ci_low, "ci_high": res.ci_high, "n": res.n,
                             "n_samples": cap.n_samples, "kind": "ratio", "concurrency": None})
    return cap


mains = results.main_setups(setups)
C_REF = int(sla_cfg["c_ref"])
for setup in mains:
    title, c, grid = fs.setup_title(setups, setup), results.max_c(setups, setup), results.grid(setups, setup)
    for arm in [a for a in TREATED if a in results.swept_arms(setups, setup)]:
        vs = TREATED[arm]
        for at in sorted({C_REF, c}):
            comp = results.comparison(comps, setup, "retained_blocks", arm, at)
            comparison_row("retained", setup, f"{title}, {results.pool_text(setups, setup)}, C = {at}", comp, at,
                           "pct", comparison=vs, arm=arm)
        comparison_row("sla", setup, f"{title}, grid {grid}, C_ref = {C_REF}, k = {sla_cfg['k']} on "
                       f"{sla_cfg['latency']}", results.comparison(comps, setup, "sla_throughput", arm, None),
                       None, "ratio", sla_untestable(setup), comparison=vs, arm=arm)
        comparison_row("sla_tpot", setup, f"{title}, grid {grid}, C_ref = {C_REF}, k = {sla_cfg['k_tpot']} on p95 "
                       "TPOT", results.comparison(comps, setup, "sla_throughput_tpot", arm, None), None, "ratio",
                       sla_untestable(setup), comparison=vs, arm=arm)
        comparison_row("capacity", setup, f"{title}, {results.pool_text(setups, setup)}, grid {grid}",
                       capacity(setup, arm), None, "ratio", capacity_untestable(setup), comparison=vs, arm=arm)

# Claims the default profile does not measure: named, with the profile that does.
EXTENDED = (("capacity", "the second, larger pool (the paper's second budget)", "pool"),
            ("retained", "the second workload (ShareGPT, the data's own reply lengths)", None),
            ("retained", "block-size sensitivity at equal usable tokens (B = 16, 32, 64)", "block_size"),
            ("retained", "the eviction-ratio sweep (r = 0.3, 0.5, 0.7 per policy)", "ratio"))
for claim_id, what, role in EXTENDED:
    present = role is not None and (setups.role == role).any()
    if claim_id == "retained" and role is None:
        present = setups[setups.role == "main"].workload.nunique() > 1
    if not present:
        add(claim_id, CLAIMS[claim_id][0] + f" -- {what}", "—", VS, "—",
            verdict=verdicts.measured_in("extended"))
        rows[-1]["profile"] = "extended"
for setup in setups[setups.role == "pool"].setup:
    title, grid = fs.setup_title(setups, setup), results.grid(setups, setup)
    comparison_row("capacity", setup, f"{title}, {results.pool_text(setups, setup)}, grid {grid}",
                   results.comparison(comps, setup, "feasible_c", "vtoken", None), None, "difference",
                   capacity_untestable(setup))

for setup in setups[setups.role == "ratio"].setup:  # the eviction-ratio sweep: each setting at each policy x r
    title, c = fs.setup_title(setups, setup), results.max_c(setups, setup)
    row = setups.set_index("setup").loc[setup]
    for arm in [a for a in TREATED if a in str(row.arms).split(",")]:
        where = f"{title}, eviction ratio r = {row.ratio:g}, {results.pool_text(setups, setup)}, C = {c}"
        comparison_row("retained", setup, where, results.comparison(comps, setup, "retained_blocks", arm, c), c,
                       "pct", comparison=TREATED[arm], arm=arm)

for setup in mains:  # each vToken setting vs the strongest baseline (process.best_baseline's rule), at C_ref
    title, c = fs.setup_title(setups, setup), C_REF
    part = best[best.setup == setup] if len(best) else best
    if not len(part):
        add("vs_best", "vToken vs the strongest reclamation baseline", title, "—", "—",
            verdict=judged(None, "lower", None, "no reclamation baseline arm or variant within the equal-live-tokens "
                                                "rule in this setup"))
        continue
    name = part.baseline.iloc[0]
    for arm in [a for a in TREATED if a in set(part.arm)]:
        mine = part[part.arm == arm]
        for metric, (direction, kind, what) in BEST.items():
            m = mine[(mine.metric == metric) & (mine.concurrency.isna() | (mine.concurrency == c))]
            comp = m.iloc[0] if len(m) else None
            untestable = {"feasible_c": capacity_untestable, "sla_throughput": sla_untestable}.get(
                metric, lambda _: None)(setup)
            if untestable is None and comp is None and metric in ("sla_throughput", "feasible_c"):
                untestable = (f"{fs.label(name)} runs at C_ref only in this profile (its grid metrics: profile "
                              "extended)")
            where = f"{title}" + ("" if metric in ("sla_throughput", "feasible_c") else f", C = {c}")
            if direction == "equal":  # the budgets' check: within max(5 %, B/2 tokens) of the baseline's
                if arm != "vtoken":
                    continue  # one check per baseline
                text, holds = equal_budget(setup, name, c)
                add("vs_best", f"one budget: {fs.label(name)} keeps {fs.label(baseline)}'s live tokens", where,
                    f"{fs.label(name)} vs {fs.label(baseline)}", text, None if comp is None else int(comp.n),
                    n_samples(comp), unit="tokens", verdict="" if holds is None else verdicts.exact_verdict(holds))
                continue
            verdict = judged(comp, direction, None, untestable, live_tokens(setup, name, c))
            add("vs_best", f"{fs.label(arm)} vs the strongest baseline ({fs.label(name)}): {what}", where,
                f"{fs.label(arm)} vs {fs.label(name)} ({mine.selected_by.iloc[0]})",
                "—" if untestable or comp is None else fmt(comp, kind), None if comp is None else int(comp.n),
                n_samples(comp), None if comp is None else comp.estimate, None if comp is None else comp.ci_low,
                None if comp is None else comp.ci_high, kind, verdict)


def plane_text(r):
    """Both axes of a memory–quality comparison as text."""
    def axis(prefix, kind):
        comp = pd.Series({"estimate": getattr(r, f"{prefix}_estimate"), "ci_low": getattr(r, f"{prefix}_ci_low"),
                          "ci_high": getattr(r, f"{prefix}_ci_high"), "n": r.n})
        return "not measured" if pd.isna(comp.estimate) else fmt(comp, kind)
    live = "" if pd.isna(r.live_tokens) else f"; live tokens {r.live_tokens:.1f} vs {r.baseline_live_tokens:.1f}"
    if live and str(r.equal_live_tokens) != "True":
        live += " (outside the equal-live-tokens rule: the budget differs, not only the mechanism)"
    return (f"blocks {axis('memory', 'pct')} ({r.memory}); ROUGE-L vs Native {axis('quality', 'difference')} "
            f"({r.quality}){live}")


for setup in mains:  # the memory–quality plane: each vToken setting vs each baseline arm and variant
    title = fs.setup_title(setups, setup)
    for r in (plane[plane.setup == setup] if len(plane) else plane).itertuples():
        add("plane", f"memory–quality plane: {fs.label(r.arm)} vs {fs.label(r.baseline)}",
            f"{title}, C = {int(r.concurrency)}", f"{fs.label(r.arm)} vs {fs.label(r.baseline)}", plane_text(r),
            None if pd.isna(r.n) else int(r.n), None if pd.isna(r.n_samples) else int(r.n_samples),
            r.memory_estimate, r.memory_ci_low, r.memory_ci_high, "ratio / difference", r.verdict)

def paper_comparison(number, setup, c):
    """vToken's comparison for one paper number in ``setup`` (at C for a per-trial metric)."""
    if number.metric == "feasible_c":
        return capacity(setup, "vtoken")
    return results.comparison(comps, setup, number.metric, "vtoken", None if number.metric.startswith("sla") else c)


policy_of = setups.set_index("setup").policy.to_dict() if "policy" in setups else {}
prefix_setups = list(setups[setups.role == "prefix"].setup)
for number in paper_numbers.NUMBERS:  # every paper number, with its setting and the setups that test it
    claim = f"{number.text} ({number.setting})" + (f"; {number.note}" if number.note else "")
    tested = prefix_setups[-1:] if number.role == "prefix" else [
        s for s in mains if paper_numbers.tested_by(number, policy_of.get(s, ""))]
    if number.role == "prefix" and not tested:
        add("paper", claim, "—", VS, "—", verdict=verdicts.measured_in("extended"))
        rows[-1]["profile"] = "extended"
        continue
    if not tested:
        add("paper", claim, "—", VS, "—", verdict=judged(None, number.direction, None,
                                                        f"no main setup runs policy {number.policy} in this run"))
    for setup in tested:
        c = results.max_c(setups, setup)
        comp = paper_comparison(number, setup, c)
        untestable = {"feasible_c": capacity_untestable, "sla_throughput": sla_untestable}.get(
            number.metric, lambda _: None)(setup)
        where = fs.setup_title(setups, setup) + ("" if number.metric in ("feasible_c", "sla_throughput")
                                                 else f", C = {c}")
        kind = "pct" if number.metric.startswith("retained") else "ratio"
        add("paper", claim, where, VS + " (does it reach the paper's number?)",
            "—" if untestable or comp is None or pd.isna(comp.estimate) else fmt(comp, kind),
            None if comp is None else int(comp.n), n_samples(comp), None if comp is None else comp.estimate,
            None if comp is None else comp.ci_low, None if comp is None else comp.ci_high, "ratio",
            judged(comp, number.direction, number.claimed, untestable))

for setup in mains:  # the A/A control itself, every headline metric, where it runs (every arm's C)
    title, c = fs.setup_title(setups, setup), results.shared_c(setups, setup)
    for metric in AA_METRICS:
        at = None if metric in ("sla_throughput", "feasible_c") else c
        comp = results.comparison(comps, setup, metric, aa_arm, at) if aa_arm else None
        where = title + ("" if at is None else f", C = {c}")
        if comp is None or pd.isna(comp.estimate):
            why = "A/A not measured" if aa_arm else "no A/A arm in this run"
            if aa_arm and at is None and aa_arm not in results.swept_arms(setups, setup):
                why = f"A/A not measured: {aa_arm} runs at C_ref only, a grid metric needs the whole grid"
            if metric == "feasible_c" and capacity_untestable(setup):
                why = f"not measured: {capacity_untestable(setup)}"
            add("aa", f"A/A control: {metric}", where, f"{aa_arm} vs {baseline}", "—", verdict="", aa=why)
            continue
        kind = "difference" if comp.kind == "difference" else "ratio"
        add("aa", f"A/A control: {metric}", where, f"{aa_arm} vs {baseline} (second engine, same settings)",
            fmt(comp, kind), int(comp.n), n_samples(comp), comp.estimate, comp.ci_low, comp.ci_high, kind,
            "", aa_of(setup, metric, at))

checked = exact[exact.checked.astype(bool)] if len(exact) else exact
for setup in mains:
    title = fs.setup_title(setups, setup)
    part = checked[checked.setup == setup] if len(checked) else checked
    skipped = int((~exact[exact.setup == setup].checked.astype(bool)).sum()) if len(exact) else 0
    if not len(part):
        add("exactness", CLAIMS["exactness"][0], title, "naive, holefill, vtoken", "—",
            verdict=judged(None, "higher", None, "fewer than two of naive, holefill, vtoken ran"))
        continue
    same = int(part.identical.astype(bool).sum())
    differing = part[~part.identical.astype(bool)]
    text = f"identical on {same} of {len(part)} checked requests ({skipped} skipped: preempted)"
    if len(differing):
        text += "; differ: " + ", ".join(f"C{int(r.concurrency)}/p{int(r.pair)}/r{int(r.req_index)} "
                                         f"({r.differing_arms})" for r in differing.head(5).itertuples())
    add("exactness", CLAIMS["exactness"][0], title, "naive, holefill, vtoken (token hashes)", text, len(part),
        int(part.pair.nunique()), unit="requests", verdict=verdicts.exact_verdict(len(differing) == 0))

for setup in mains:
    title, c = fs.setup_title(setups, setup), results.max_c(setups, setup)
    r = results.at(summary, setup, "indirection_share", c)
    claim, metric, direction, claimed, unit = CLAIMS["indirection"]
    where = (f"{title}, C = {c}, vToken arm: slot assignment, slot_mapping rewrite and token-view build "
             "(attention over the view is inside the attention time, not counted)")
    if "vtoken" not in r.index or math.isnan(r.loc["vtoken", "mean"]):
        add("indirection", claim, where, "share of run time", "—", verdict=judged(None, direction, claimed))
        continue
    m = r.loc["vtoken"]
    ns = int(m.n_samples) if "n_samples" in m and not pd.isna(m.n_samples) else 0
    verdict = verdicts.verdict(m["mean"], m.ci_low, m.ci_high, n=int(m.n), n_samples=ns, direction=direction,
                               null=0.0, claimed=claimed)
    add("indirection", claim, where, "share of run time (mean over pairs)",
        f"{tablefmt.ci(100 * m['mean'], 100 * m.ci_low, 100 * m.ci_high)} %", int(m.n), ns, m["mean"], m.ci_low,
        m.ci_high, unit, verdict)

claim, _, direction, claimed, unit = CLAIMS["indirection_e2e"]
if len(decode) and {"full", "stock"} <= set(decode.arm):
    wide = decode.pivot(index="repeat", columns="arm", values="median_step_s")
    res = stats.paired_ci(wide["full"], wide["stock"], "ratio")
    first = decode.iloc[0].to_dict()
    comp = pd.Series({"estimate": res.estimate, "ci_low": res.ci_low, "ci_high": res.ci_high, "n": res.n,
                      "n_samples": res.n if first["prompts"] == "distinct per repeat" else 1, "kind": "ratio"})
    where = (f"{int(first['num_requests'])} requests × {int(first['prompt_tokens'])} prompt tokens, "
             f"{first['dtype']}, median decode step per repeat ({first['prompts']}), arms alternating")
    add("indirection_e2e", claim, where, "Native through the plugin vs stock vLLM",
        f"{tablefmt.pct_change(res.estimate, res.ci_low, res.ci_high)} per decode step", res.n,
        n_samples(comp), res.estimate, res.ci_low, res.ci_high, unit, judged(comp, direction, claimed))
elif not smk.params.decode_cost["enabled"]:
    add("indirection_e2e", claim, "—", "Native through the plugin vs stock vLLM", "—",
        verdict=verdicts.measured_in("extended"))
    rows[-1]["profile"] = "extended"
else:
    add("indirection_e2e", claim, "—", "Native through the plugin vs stock vLLM", "—",
        verdict=judged(None, direction, claimed, "the decode-cost measurement did not run"))

# RULER through lm-eval at a pressing pool (issue 29): the retained-blocks claim in the
# prefill-heavy regime, and exact eviction on RULER's answers, per cell, policy and kept fraction.
# One lm-eval run per arm: the intervals are over requests, not replicates, so no CI verdict.
if len(ruler):
    kept_cells = ruler[ruler.native_informative.astype(bool) & ruler.policy.notna()]
    for (cell, policy, kept), g in kept_cells.groupby(["cell", "policy", "kept"]):
        arms = g.set_index("arm")
        if not {"naive", "vtoken"} <= set(arms.index):
            continue
        nv, vt = arms.loc["naive"], arms.loc["vtoken"]
        where = f"RULER {cell} / {policy}, {kept:.0%} of the prompt kept, pressing pool (lm-eval run)"
        change = vt.retained_blocks / nv.retained_blocks - 1
        lo, hi = CLAIMS["retained"][3]  # the paper's range as a ratio vToken / Naive-Evict
        place = "inside" if lo <= 1 + change <= hi else "outside"
        add("retained", CLAIMS["retained"][0], where, VS,
            f"{change:+.1%} ({vt.retained_blocks:.1f} [{vt.retained_blocks_ci_low:.1f}, {vt.retained_blocks_ci_high:.1f}]"
            f" vs {nv.retained_blocks:.1f} [{nv.retained_blocks_ci_low:.1f}, {nv.retained_blocks_ci_high:.1f}] blocks per "
            f"request, intervals over requests; point estimate {place} the paper's range)", 1, 1,
            1 + change, None, None, "ratio", verdicts.ONE_SAMPLE)
        add("exactness", CLAIMS["exactness"][0], where, VS,
            f"score {vt.score:.3f} = {nv.score:.3f}; every answer identical (table_ruler's check)", int(vt.n), int(vt.n),
            verdict=verdicts.EXACT_HOLDS)
else:
    add("retained", CLAIMS["retained"][0], "RULER, prefill-heavy, pressing pool (lm-eval run)", VS, "—",
        verdict=verdicts.measured_in("extended"))
    rows[-1]["profile"] = "extended"

lines = {Path(p).stem: len(Path(p).read_text(encoding="utf-8").splitlines()) for p in smk.input.policies}
worst = max(lines, key=lines.get)
add("policy_loc", CLAIMS["policy_loc"][0], "vtoken/policies/: " + ", ".join(f"{k} {v}" for k, v in sorted(
    lines.items())) + " lines (shared interface base.py not counted)", "exact count",
    f"{lines[worst]} lines ({worst})", len(lines), None, float(lines[worst]), None, None, "lines",
    verdicts.exact_verdict(lines[worst] < 50))

adapter = {Path(p).name: len(Path(p).read_text(encoding="utf-8").splitlines()) for p in smk.input.kvpress_adapter}
size = " + ".join(f"{name} {n} lines" for name, n in adapter.items())
kvpress = pd.read_csv(smk.input.kvpress)  # table_kvpress: one row per press and arm (a note when none ran)
measured = "exact_checked" in kvpress
presses = kvpress[kvpress.arm == "vtoken"] if measured else kvpress.iloc[:0]
for p in presses.itertuples():
    ref = kvpress[(kvpress.press == p.press) & (kvpress.arm == baseline)].iloc[0]
    checked, same = int(ref.exact_checked), int(ref.exact_identical)
    ratio = tablefmt.ci(p.retained_ratio, p.retained_ratio_ci_low, p.retained_ratio_ci_high)
    add("policy_dropin", CLAIMS["policy_dropin"][0], f"{p.setup}, C = {int(p.concurrency)}", VS,
        f"kvpress:{p.press} unchanged through one adapter ({size}); identical on {same} of {checked} checked requests;"
        f" retained blocks vToken / {fs.label(baseline)} {ratio}", checked, None, unit="requests",
        verdict=verdicts.exact_verdict(same == checked) if checked else verdicts.NOT_TESTABLE)
if not len(presses):
    add("policy_dropin", CLAIMS["policy_dropin"][0] + f" (adapter: {size})", "—", VS, "—",
        verdict=verdicts.measured_in("extended"))
    rows[-1]["profile"] = "extended"

raw = pd.DataFrame(rows)
shown = raw[["claim", "profile", "setup", "comparison", "measured", "n", "n_samples", "aa", "verdict"]].copy()
for col in ("n", "n_samples"):
    shown[col] = shown[col].map(lambda v: "" if v is None or pd.isna(v) else str(int(v)))
shown = shown.rename(columns={"claim": "claim (paper)", "measured": "measured [95 % CI]", "n": "pairs",
                              "n_samples": "samples", "aa": "A/A control", "verdict": "verdict"})
caption = (f"Headline claims checked on this run (profile {run}). Ratios: geometric mean of per-pair ratios; "
           "differences: mean of per-pair differences; shares: mean over pairs; 95 % t intervals over pairs, each "
           "pair its own request sample ('samples': distinct samples among the pairs). Verdicts (vtoken/bench/"
           "verdicts.py): " + "; ".join(verdicts.VERDICTS[:-2]) + "; not comparable: live tokens X vs Y (a "
           "comparison between arms whose live tokens per request differ by more than max(5 %, B/2) of "
           f"{fs.label(baseline)}'s, so that a budget never decides it); not testable on this grid: <reason>; exact "
           "checks: " + " / ".join(verdicts.EXACT_VERDICTS) + f". A/A: a second engine of {fs.label(baseline)} "
           "on the same samples; a deterministic metric must give A/A = 1 exactly, a timing metric whose A/A "
           "interval excludes 1 is not resolvable on this machine. Strongest baseline: among every reclamation "
           "baseline arm and variant whose live tokens per request lie within max(5 %, B/2) of "
           f"{fs.label(baseline)}'s at the largest C all of them ran, the one with the fewest mean retained blocks "
           "(ties by arm name; process.best_baseline). Memory-quality plane: retained blocks (paired ratio) and "
           "ROUGE-L vs Native (paired difference) against each baseline; dominates = no worse on either axis and "
           "better on one, the CIs resolving it (verdicts.dominance). Paper rows: each number of the paper with "
           "the setting the paper states for it, and whether vToken reaches it.")
tablefmt.write(raw, shown, dict(smk.output.items()), caption, "tab:claims")
