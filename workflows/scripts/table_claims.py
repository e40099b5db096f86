"""Claims table: each headline claim of the paper checked against this run, vToken against
the best reclamation baseline, and the A/A control beside every comparison.

One row per claim and main setup: the measured value with its 95 % CI, n (pairs) and the
number of distinct request samples, the A/A status of the same metric (a second engine of
the baseline arm; ``vtoken.bench.analysis.verdicts.aa_status``) and a verdict from the fixed
vocabulary of ``vtoken.bench.analysis.verdicts`` (never a zero-width interval printed as a CI; a
claim the grid cannot test says why). A comparison between arms whose live tokens per request
differ beyond ``verdicts.equal_live_tokens`` (5 % of the baseline's) reads "not
comparable: live tokens X vs Y"; a strongest baseline interpolated between two of its budgets
(``vtoken.bench.analysis.equal_live``) is named with both. Every row names the profile (run) that measured it.
"""

import logging
import math
from pathlib import Path

import figstyle as fs
import pandas as pd
import results
import tablefmt

from vtoken.bench.analysis import claims, factorial, stats, verdicts
from vtoken.policies.kvpress_catalog import REDUCTION

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
summary, setups = fs.read(smk.input.summary), fs.read(smk.input.setups)
comps, feas = fs.read(smk.input.comparisons), fs.read(smk.input.feasibility)
best, exact = fs.read(smk.input.best_baseline), fs.read(smk.input.exactness)
plane = fs.read(smk.input.plane)
equal = fs.read(smk.input.equal_memory)
decode = fs.read(smk.input.decode_cost) if smk.params.decode_cost["enabled"] else pd.DataFrame()
ruler = fs.read(smk.input.ruler) if smk.params.ruler_enabled else pd.DataFrame()
baseline, aa_arm, run = smk.params.baseline, smk.params.aa_control, smk.params.run
sla_cfg = smk.params.sla
fs.use_variants(smk.params.variants, smk.params.variant_labels)
VS = f"vToken vs {fs.label(baseline)}"
# Beyond the paper (issue 19): the pressure-aware vToken, swept like the paper's arm and
# reported beside it on every claim row, never in place of it.
BEYOND = results.BEYOND
# vToken at its packing limit (issue 43): every plan that frees a block, every step.
EAGER = "vtoken_eager"
TREATED = {"vtoken": VS, EAGER: f"{fs.label(EAGER)} vs {fs.label(baseline)}",
           BEYOND: f"{fs.label(BEYOND)} vs {fs.label(baseline)}"}  # its label says "beyond the paper"
CLAIMS = claims.CLAIMS  # every claim a record: statement, metric, unit, bound, setting (claims.py decides)
BEST = {  # vToken vs the best baseline: no magnitude claimed by the paper, direction only
    metric: claims.Claim(f"vs_best_{metric}", what, metric, unit, "direction", direction)
    for metric, (direction, unit, what) in {
        "retained_blocks": ("lower", "ratio", "retained blocks"), "sla_throughput": ("higher", "ratio", "SLA throughput"),
        "feasible_c": ("higher", "difference", "feasible C"),
        "rouge_l_mean": ("higher", "difference", "ROUGE-L vs Native")}.items()}
AA_METRICS = ("retained_blocks", "sla_throughput", "feasible_c", "output_tok_per_s", "e2e_p95_s", "rouge_l_mean")
rows = []


def add(claim_id, claim, setup, comparison, measured, n=None, n_samples=None, est=None, lo=None, hi=None,
        unit="", verdict="", aa="", n_excluded=None):
    rows.append({"claim_id": claim_id, "claim": claim, "profile": run, "setup": setup, "comparison": comparison,
                 "measured": measured, "n": n, "n_excluded": n_excluded, "n_samples": n_samples, "estimate": est,
                 "ci_low": lo, "ci_high": hi, "unit": unit, "aa": aa, "verdict": verdict})



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


def judged(comp, claim, untestable=None, live=None):
    """The verdict of ``claim`` (a ``claims.Claim``) on a comparison (``claims.decide``); ``live``:
    ``live_tokens(...)`` of the compared arm (None: not a comparison between arms), refused
    when outside the equal-live-tokens rule; a comparison that left pairs out is untestable
    (``claims.left_out_reason``)."""
    return claims.decide(claim, comp, untestable or claims.left_out_reason(comp, claim), live)


def live_tokens(setup, arm, c, reference=None):
    """(``arm``'s, ``reference``'s (default: the baseline's) live tokens per request at C) for
    ``verdicts.equal_live_tokens``; None when either was not measured there."""
    reference = reference or baseline
    live = results.at(summary, setup, "live_tokens", c)
    if arm not in live.index or reference not in live.index or live.loc[[arm, reference], "mean"].isna().any():
        return None
    return live.loc[arm, "mean"], live.loc[reference, "mean"]


def live_pair(*values):
    """(an arm's, its reference's) live tokens as floats for ``verdicts.equal_live_tokens``, or
    None when either is missing."""
    return None if any(verdicts.is_missing(v) for v in values) else tuple(float(v) for v in values)


def comparison_row(claim_id, setup, where, comp, c, kind, untestable=None, comparison=VS, arm="vtoken", claim=None):
    claim = claim or CLAIMS[claim_id]
    verdict = judged(comp, claim, untestable, live_tokens(setup, arm, c or C_REF))
    shown = "—" if untestable or comp is None or pd.isna(comp.estimate) else fmt(comp, kind)
    add(claim_id, claim.statement, where, comparison, shown, None if comp is None else int(comp.n), n_samples(comp),
        None if comp is None else comp.estimate, None if comp is None else comp.ci_low,
        None if comp is None else comp.ci_high, claim.unit, verdict, aa_of(setup, claim.metric, c), claims.left_out(comp))


def equal_budget(live):
    """(text, holds): (an arm's, the baseline's) live tokens per request against each other
    (``verdicts.equal_live_tokens``); holds None when not measured."""
    if live is None:
        return "not measured", None
    got, ref = live
    return (f"{got:.1f} vs {fs.label(baseline)}'s {ref:.1f} live tokens per request (tolerance 5 % = "
            f"{verdicts.live_tolerance(ref):.1f})"), verdicts.equal_live_tokens(*live)


def capacity_untestable(setup):
    """Why feasible concurrency cannot be compared in ``setup`` (None: it can; ``claims``)."""
    return claims.capacity_untestable(feas[feas.setup == setup] if len(feas) else feas, baseline, fs.label(baseline))


def sla_untestable(setup):
    """Why SLA-constrained throughput cannot be compared in ``setup`` (None: it can; ``claims``)."""
    return claims.sla_untestable(results.grid(setups, setup), int(sla_cfg["c_ref"]))


def capacity(setup, arm):
    """(comparison, claim, kind) of ``arm``'s feasible C against the baseline in ``setup``, in the
    unit the paper states it (``claims.capacity_reading``)."""
    cap = results.comparison(comps, setup, "feasible_c", arm, None)
    if cap is None or capacity_untestable(setup):
        return cap, CLAIMS["capacity"], "ratio"
    return claims.capacity_reading(feas[feas.setup == setup], cap, arm, baseline)


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
        comp, claim, kind = capacity(setup, arm)
        comparison_row("capacity", setup, f"{title}, {results.pool_text(setups, setup)}, grid {grid}", comp, None,
                       kind, capacity_untestable(setup), comparison=vs, arm=arm, claim=claim)

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
        add(claim_id, CLAIMS[claim_id].statement + f" -- {what}", "—", VS, "—",
            verdict=verdicts.measured_in("extended"))
        rows[-1]["profile"] = "extended"
for setup in setups[setups.role == "pool"].setup:
    title, grid = fs.setup_title(setups, setup), results.grid(setups, setup)
    comp, claim, kind = capacity(setup, "vtoken")
    comparison_row("capacity", setup, f"{title}, {results.pool_text(setups, setup)}, grid {grid}", comp, None, kind,
                   capacity_untestable(setup), claim=claim)

for setup in setups[setups.role == "ratio"].setup:  # the eviction-ratio sweep: each setting at each policy x r
    title, c = fs.setup_title(setups, setup), results.max_c(setups, setup)
    row = setups.set_index("setup").loc[setup]
    for arm in [a for a in TREATED if a in str(row.arms).split(",")]:
        where = f"{title}, eviction ratio r = {row.ratio:g}, {results.pool_text(setups, setup)}, C = {c}"
        comparison_row("retained", setup, where, results.comparison(comps, setup, "retained_blocks", arm, c), c,
                       "pct", comparison=TREATED[arm], arm=arm)

for setup in mains:  # each vToken setting vs the strongest baseline (process.best_baseline's rule)
    title = fs.setup_title(setups, setup)
    part = best[best.setup == setup] if len(best) else best
    if not len(part) or part.baseline.isna().all():  # nothing chosen: process.best_baseline says why
        why = part.selected_by.iloc[0] if len(part) else "no vToken arm ran in this setup"
        add("vs_best", "vToken vs the strongest reclamation baseline", title, "—", "—",
            verdict=judged(None, BEST["retained_blocks"], why))
        continue
    chosen = part[part.baseline.notna()]
    name = chosen.baseline.iloc[0]
    c = int(chosen.chosen_at.iloc[0])  # chosen and reported at one C (issue 42 item 9)
    # the budgets' check on the judged pairs: within 5 % of the baseline's (a mix: by construction on the choice pairs)
    text, holds = equal_budget(live_pair(chosen.baseline_live_tokens.iloc[0], chosen.reference_live_tokens.iloc[0]))
    add("vs_best", f"one budget: {fs.label(name)} keeps {fs.label(baseline)}'s live tokens", f"{title}, C = {c}",
        f"{fs.label(name)} vs {fs.label(baseline)}", text, unit="tokens",
        verdict="" if holds is None else verdicts.exact_verdict(holds))
    for arm in [a for a in TREATED if a in set(part.arm)]:
        mine = part[part.arm == arm]
        for metric, claim in BEST.items():
            m = mine[(mine.metric == metric) & (mine.concurrency.isna() | (mine.concurrency == c))]
            comp = m.iloc[0] if len(m) else None
            untestable = {"feasible_c": capacity_untestable, "sla_throughput": sla_untestable}.get(
                metric, lambda _: None)(setup)
            if untestable is None and comp is None and metric in ("sla_throughput", "feasible_c"):
                untestable = (f"{fs.label(name)} runs at C_ref only in this profile (its grid metrics: profile "
                              "extended)")
            where = f"{title}" + ("" if metric in ("sla_throughput", "feasible_c") else f", C = {c}")
            # the treated arm against the chosen baseline: both at equal live tokens, or no verdict
            verdict = judged(comp, claim, untestable,
                             live_pair(mine.arm_live_tokens.iloc[0], mine.baseline_live_tokens.iloc[0]))
            add("vs_best", f"{fs.label(arm)} vs the strongest baseline ({fs.label(name)}): {claim.statement}", where,
                f"{fs.label(arm)} vs {fs.label(name)} ({mine.selected_by.iloc[0]})",
                "—" if untestable or comp is None else fmt(comp, claim.unit), None if comp is None else int(comp.n),
                n_samples(comp), None if comp is None else comp.estimate, None if comp is None else comp.ci_low,
                None if comp is None else comp.ci_high, claim.unit, verdict, n_excluded=claims.left_out(comp))


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
    """(vToken's comparison for one paper number in ``setup`` (at C for a per-trial metric), why
    it cannot be read in the number's unit or None)."""
    if number.metric == "feasible_c":
        comp, claim, _ = capacity(setup, "vtoken")
        if claim is not CLAIMS["capacity"]:
            return comp, ("the paper states a ratio, undefined here: an arm is feasible at no C of the grid in some "
                          "pair (the capacity row gives the difference)")
        return comp, None
    return results.comparison(comps, setup, number.metric, "vtoken", None if number.metric.startswith("sla") else c), None


by_setup = setups.set_index("setup")
prefix_setups = list(setups[setups.role == "prefix"].setup)
for number in claims.PAPER_NUMBERS:  # every paper number, with its setting and the setups that test it
    text = f"{number.statement} ({number.setting.text()})" + (f"; {number.note}" if number.note else "")
    candidates = prefix_setups if number.role == "prefix" else mains
    if number.role == "prefix" and not candidates:
        add("paper", text, "—", VS, "—", verdict=verdicts.measured_in("extended"))
        rows[-1]["profile"] = "extended"
        continue
    why = {s: claims.setting_verdict(number, {**by_setup.loc[s].to_dict(), "setup": s}) for s in candidates}
    tested = [s for s in candidates if why[s] is None]
    if not tested:
        policy = number.setting.policy
        verdict = (f"{verdicts.NOT_TESTABLE}: no main setup runs policy {policy} in this run"
                   if policy and policy not in set(by_setup.loc[candidates, "policy"]) else next(iter(why.values())))
        add("paper", text, "—", VS, "—", verdict=verdict)
        continue
    for setup in tested:
        c = results.max_c(setups, setup)
        comp, unreadable = paper_comparison(number, setup, c)
        untestable = unreadable or {"feasible_c": capacity_untestable, "sla_throughput": sla_untestable}.get(
            number.metric, lambda _: None)(setup)
        per_trial = number.metric not in ("feasible_c", "sla_throughput")
        degree = by_setup.loc[setup].get("prefix_degree")
        where = (fs.setup_title(setups, setup) + (f", C = {c}" if per_trial else "")
                 + ("" if number.role != "prefix" or pd.isna(degree) else f", sharing degree {int(degree)}"))
        kind = "pct" if number.metric.startswith("retained") else "ratio"
        add("paper", text, where, VS + " (does it reach the paper's number?)",
            "—" if untestable or comp is None or pd.isna(comp.estimate) else fmt(comp, kind),
            None if comp is None else int(comp.n), n_samples(comp), None if comp is None else comp.estimate,
            None if comp is None else comp.ci_low, None if comp is None else comp.ci_high, number.unit,
            judged(comp, number, untestable, live_tokens(setup, "vtoken", c if per_trial else C_REF)),
            n_excluded=claims.left_out(comp))

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
        add("exactness", CLAIMS["exactness"].statement, title, "naive, holefill, vtoken", "—",
            verdict=f"{verdicts.NOT_TESTABLE}: fewer than two of naive, holefill, vtoken ran")
        continue
    same = int(part.identical.astype(bool).sum())
    differing = part[~part.identical.astype(bool)]
    text = f"identical on {same} of {len(part)} checked requests ({skipped} skipped: preempted)"
    if len(differing):
        text += "; differ: " + ", ".join(f"C{int(r.concurrency)}/p{int(r.pair)}/r{int(r.req_index)} "
                                         f"({r.differing_arms})" for r in differing.head(5).itertuples())
    add("exactness", CLAIMS["exactness"].statement, title, "naive, holefill, vtoken (token hashes)", text, len(part),
        int(part.pair.nunique()), unit="requests", verdict=verdicts.exact_verdict(len(differing) == 0))

for setup in mains:
    title, c = fs.setup_title(setups, setup), results.max_c(setups, setup)
    r = results.at(summary, setup, "indirection_share", c)
    claim = CLAIMS["indirection"]
    where = (f"{title}, C = {c}, vToken arm: slot assignment, slot_mapping rewrite and token-view build "
             "(attention over the view is inside the attention time, not counted)")
    if "vtoken" not in r.index or math.isnan(r.loc["vtoken", "mean"]):
        add("indirection", claim.statement, where, "share of run time", "—", verdict=judged(None, claim))
        continue
    m = r.loc["vtoken"]
    ns = int(m.n_samples) if "n_samples" in m and not pd.isna(m.n_samples) else 0
    share = pd.Series({"estimate": m["mean"], "ci_low": m.ci_low, "ci_high": m.ci_high, "n": int(m.n), "n_samples": ns})
    add("indirection", claim.statement, where, "share of run time (mean over pairs)",
        f"{tablefmt.ci(100 * m['mean'], 100 * m.ci_low, 100 * m.ci_high)} %", int(m.n), ns, m["mean"], m.ci_low,
        m.ci_high, claim.unit, judged(share, claim))

claim = CLAIMS["indirection_e2e"]
if len(decode) and {"full", "stock"} <= set(decode.arm):
    wide = decode.pivot(index="repeat", columns="arm", values="median_step_s")
    res = stats.paired_ci(wide["full"], wide["stock"], "ratio")
    first = decode.iloc[0].to_dict()
    comp = pd.Series({"estimate": res.estimate, "ci_low": res.ci_low, "ci_high": res.ci_high, "n": res.n,
                      "n_samples": res.n if first["prompts"] == "distinct per repeat" else 1, "kind": "ratio"})
    where = (f"{int(first['num_requests'])} requests × {int(first['prompt_tokens'])} prompt tokens, "
             f"{first['dtype']}, median decode step per repeat ({first['prompts']}), arms alternating")
    add("indirection_e2e", claim.statement, where, "Native through the plugin vs stock vLLM",
        f"{tablefmt.pct_change(res.estimate, res.ci_low, res.ci_high)} per decode step", res.n,
        n_samples(comp), res.estimate, res.ci_low, res.ci_high, claim.unit, judged(comp, claim))
elif not smk.params.decode_cost["enabled"]:
    add("indirection_e2e", claim.statement, "—", "Native through the plugin vs stock vLLM", "—",
        verdict=verdicts.measured_in("extended"))
    rows[-1]["profile"] = "extended"
else:
    add("indirection_e2e", claim.statement, "—", "Native through the plugin vs stock vLLM", "—",
        verdict=judged(None, claim, "the decode-cost measurement did not run"))

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
        lo, hi = CLAIMS["retained"].low, CLAIMS["retained"].high  # the paper's range, vToken / Naive-Evict
        place = "inside" if lo <= 1 + change <= hi else "outside"
        add("retained", CLAIMS["retained"].statement, where, VS,
            f"{change:+.1%} ({vt.retained_blocks:.1f} [{vt.retained_blocks_ci_low:.1f}, {vt.retained_blocks_ci_high:.1f}]"
            f" vs {nv.retained_blocks:.1f} [{nv.retained_blocks_ci_low:.1f}, {nv.retained_blocks_ci_high:.1f}] blocks per "
            f"request, intervals over requests; point estimate {place} the paper's range)", 1, 1,
            1 + change, None, None, "ratio", verdicts.ONE_SAMPLE)
        add("exactness", CLAIMS["exactness"].statement, where, VS,
            f"score {vt.score:.3f} = {nv.score:.3f}; every answer identical (table_ruler's check)", int(vt.n), int(vt.n),
            verdict=verdicts.EXACT_HOLDS)
else:
    add("retained", CLAIMS["retained"].statement, "RULER, prefill-heavy, pressing pool (lm-eval run)", VS, "—",
        verdict=verdicts.measured_in("extended"))
    rows[-1]["profile"] = "extended"

# The review's sentence, per scorer and phase of the factorial: retained blocks without a token table at
# the same policy and budget (the block mechanism vs vToken eager and the paper's vToken, at the trial's
# budget, with the teacher-forced KL there), then the capability claim: the primary equal-memory test
# (analysis.factorial.capability: the mean KL gap over the envelopes' common memory range, against the
# stated margin).
TABLE_ARMS = ("vtoken_eager", "vtoken")
if len(equal):
    for (scorer, phase, treatment, reference), g in equal.groupby(["scorer", "phase", "treatment", "reference"]):
        if treatment not in TABLE_ARMS:
            continue
        where = f"factorial, {scorer}, {phase} phase, " + (
            f"C = {smk.params.factorial['concurrency']} (pool presses)" if phase == "decode" else
            "RULER, the prompt pruned, the answer forced")
        vs = f"{fs.label(reference)} vs {fs.label(treatment)}"
        same = g[g.axis == factorial.SAME_BUDGET_BLOCKS]
        budgets = sorted(set(same.level_budget.dropna().astype(int)))
        if budgets:
            budget = smk.params.budget if smk.params.budget in budgets else budgets[len(budgets) // 2]
            at = g[g.level_budget == budget].set_index("axis")
            b, q = at.loc[factorial.SAME_BUDGET_BLOCKS], at.loc[factorial.SAME_BUDGET_QUALITY]
            if pd.isna(b.estimate):  # fewer than 2 pairs
                add("without_table", CLAIMS["without_table"].statement, where, vs, "—", int(b.n),
                    verdict=verdicts.ONE_SAMPLE)
            else:
                inv = (1 / b.estimate, 1 / b.ci_high, 1 / b.ci_low)  # block / token
                comp = {"estimate": inv[0], "ci_low": inv[1], "ci_high": inv[2], "n": int(b.n),
                        "n_samples": b.n_samples}
                kl = tablefmt.ci(-q.estimate, -q.ci_high, -q.ci_low, "{:+.4f}") if pd.notna(q.estimate) else "—"
                add("without_table", CLAIMS["without_table"].statement, where, vs,
                    f"budget {budget}: retained blocks ×{tablefmt.ci(*inv, '{:.3f}')} without the table; KL vs "
                    f"Native per token there {kl} (block − token)", int(b.n), int(b.n_samples), *inv, "ratio",
                    claims.decide(CLAIMS["without_table"], comp))
        verdict, row = factorial.capability(g)
        if row is None:
            add("capability", CLAIMS["capability"].statement, where, f"{fs.label(treatment)} vs {fs.label(reference)}",
                "no primary test", verdict=verdicts.NOT_COMPARABLE)
            continue
        value = "—" if pd.isna(row.estimate) else tablefmt.ci(row.estimate, row.ci_low, row.ci_high, "{:+.4f}")
        measured = (f"mean KL gap {fs.label(treatment)} − {fs.label(reference)} over the common memory range "
                    f"{value} nats/token (margin ±{row.margin:g}; power {row.power:.2f} at the margin)"
                    if pd.notna(row.estimate) else row.reason)
        if verdict in (factorial.SUPPORTED, factorial.REFUTED):  # scoped to what was tested
            measured += f"; a verdict on {fs.label(treatment)} at these budgets, not on token tables in general"
        add("capability", CLAIMS["capability"].statement, where, f"{fs.label(treatment)} vs {fs.label(reference)}",
            measured, int(row.n), int(row.n_samples) if pd.notna(row.n_samples) else None, row.estimate, row.ci_low,
            row.ci_high, "difference", verdict)
else:
    for cid in ("without_table", "capability"):
        add(cid, CLAIMS[cid].statement, "factorial (config key factorial)", "—", "—", verdict=verdicts.measured_in("default"))

lines = {Path(p).stem: len(Path(p).read_text(encoding="utf-8").splitlines()) for p in smk.input.policies}
worst = max(lines, key=lines.get)
add("policy_loc", CLAIMS["policy_loc"].statement, "vtoken/policies/: " + ", ".join(f"{k} {v}" for k, v in sorted(
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
    add("policy_dropin", CLAIMS["policy_dropin"].statement, f"{p.setup}, C = {int(p.concurrency)}", VS,
        f"kvpress:{p.press} unchanged through one adapter ({size}), mode {getattr(p, 'mode', 'continuous')}, "
        f"reduction {getattr(p, 'reduction', REDUCTION)}; identical on {same} of {checked} checked requests;"
        f" retained blocks vToken / {fs.label(baseline)} {ratio}", checked, None, unit="requests",
        verdict=verdicts.exact_verdict(same == checked) if checked else verdicts.NOT_TESTABLE)
if not len(presses):
    add("policy_dropin", CLAIMS["policy_dropin"].statement + f" (adapter: {size})", "—", VS, "—",
        verdict=verdicts.measured_in("extended"))
    rows[-1]["profile"] = "extended"

raw = pd.DataFrame(rows)
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
           "comparison between arms whose live tokens per request differ by more than 5 % of the "
           "reference's, so that a budget never decides it); not testable on this grid: <reason>; exact "
           "checks: " + " / ".join(verdicts.EXACT_VERDICTS) + f". A/A: a second engine of {fs.label(baseline)} "
           "on the same samples; a deterministic metric must give A/A = 1 exactly, a timing metric whose A/A "
           "interval excludes 1 is not resolvable on this machine. Strongest baseline: among every reclamation "
           "baseline arm and variant whose live tokens per request lie within 5 % of "
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
