"""Raw trial folders -> tidy processed tables (``data/processed/``).

Reads every ``<raw_root>/**/trial.json`` folder written by the trial runner (layout in
``vtoken.bench.raw.schema``), validates each table, and writes byte-stable CSVs:

- ``trials.csv``: one row per trial: trial columns, docs/design.md §6 metrics, quality summary;
- ``quality_requests.csv``: one row per trial x request: ROUGE-L, length ratio, identical,
  each against the ``full`` arm's output for the same request (Native, the reference a
  user cares about; no ``full`` arm in a setup: no quality for it), at the smallest C Native
  ran it (Native runs at C_ref only by default: a one-wave trial at a larger C is scored on
  its first C_ref requests, the ones Native ran);
- ``exactness.csv``: per paired set x request, whether Naive-Evict, HoleFill and vToken
  produced identical outputs (checked on requests no arm preempted; docs/design.md §3.2);
- ``sla.csv``: SLA-constrained throughput per setup x pair x arm (setups with the
  reference arm at C_ref; swept arms only), ``sla_tpot.csv`` its per-token variant;
- ``feasibility.csv``: feasible concurrency per setup x pair x arm (contract workloads), over the
  fixed grid's trials and the capacity search's probes of the arm;
- ``capacity_probes.csv``: one row per capacity-search probe (``capacity_probe`` trials,
  ``vtoken.bench.harness.capacity_search``): its C, its counts and the feasibility conditions
  (``metrics.feasibility_conditions``); header only where no search ran;
- ``comparisons.csv``: every arm vs the baseline arm, per metric, with n, the number of
  distinct request samples, a 95 % CI and whether the metric is deterministic for a fixed
  sample (``DETERMINISTIC``: the A/A control must then give exactly 1);
- ``best_baseline.csv``: vToken and vToken-under-pressure vs the best reclamation baseline of
  each setup, per metric: among the arms whose base arm is a reclamation baseline (variants
  included) whose live tokens per request are equal to the baseline arm's
  (``verdicts.equal_live_tokens``), the one with the fewest mean retained blocks at the
  largest C they and the baseline arm all ran (equal means: the first arm name);
- ``plane.csv``: each vToken setting vs each reclamation baseline arm and variant on the
  memory–quality plane, with the dominance verdict (``vtoken.bench.analysis.plane``).

Every trial of a paired set must have run the same request sample (``sample_sha256``);
a mismatch stops processing (``check_pairing``).

A capacity-search probe runs its arm alone at a C off the fixed grid: it counts for feasible
concurrency (and the capacity table built on it) only. Every other table -- trials, quality,
exactness, comparisons, SLA throughput, the best baseline, the plane -- is computed from the fixed
grid's trials alone, exactly as without probes (``split_probes``).

Command line: ``python -m vtoken.bench.analysis.process RAW_ROOT OUT_DIR [--k 1.05 --c-ref 8]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from vtoken.arms.registry import baseline_names
from vtoken.bench.analysis import capacity, equal_live, forced, metrics, plane, quality, stats, verdicts
from vtoken.bench.raw import schema

logger = logging.getLogger(__name__)

# (metric, comparison kind) reported in comparisons.csv when present in trials.csv.
COMPARED = (
    ("output_tok_per_s", "ratio"), ("req_per_s", "ratio"), ("e2e_p50_s", "ratio"), ("e2e_p95_s", "ratio"),
    ("ttft_p95_s", "ratio"), ("tpot_p95_s", "ratio"), ("retained_blocks", "ratio"),
    ("retained_blocks_peak", "ratio"), ("allocated_blocks", "ratio"), ("packing_efficiency", "ratio"), ("waste_f", "difference"),
    ("live_tokens", "ratio"), ("kv_demand_share", "ratio"),
    ("rouge_l_mean", "difference"), ("length_ratio_median", "ratio"),
    ("retained_prefix_blocks", "ratio"), ("retained_private_blocks", "ratio"), ("pool_blocks_used", "ratio"),
    # what packing costs and where evictions happen; moves are 0 for Naive-Evict: differences
    ("step_ms", "ratio"), ("tokens_relocated_per_step", "difference"), ("bytes_relocated_per_step", "difference"),
    ("prefill_evicted_share", "difference"),
    # teacher-forced quality vs Native (forced setups only): per-token KL, NLL increase, top-1 agreement
    ("kl_mean", "difference"), ("dnll_mean", "difference"), ("top1_mean", "difference"),
    ("answer_nll_mean", "difference"),
)
# Metrics of prefix-cached trials only (NaN elsewhere): compared among the trials that have them.
PREFIX_METRICS = ("retained_prefix_blocks", "retained_private_blocks")
# Metrics some trials lack by design (prefix-cached trials only; teacher-forced trials only, where the
# free-running ones have no tokens table): compared among the trials that have them.
PARTIAL_METRICS = PREFIX_METRICS + ("kl_mean", "dnll_mean", "top1_mean", "answer_nll_mean")
CONTRACT_PREFIX = "contract-"
# Quality reference: Native (no eviction).
QUALITY_REFERENCE = "full"
# Metrics fixed by the request sample (greedy decoding, step-synchronous closed loop): two
# engines of one arm on one sample must agree exactly (A/A = 1); timings are not.
DETERMINISTIC = ("retained_blocks", "retained_blocks_peak", "allocated_blocks", "packing_efficiency", "waste_f", "rouge_l_mean",
                 "length_ratio_median", "feasible_c", "live_tokens", "kv_demand_share", "retained_prefix_blocks",
                 "retained_private_blocks", "prefill_evicted_share", "kl_mean", "dnll_mean", "top1_mean",
                 "answer_nll_mean")
# Reclamation baselines a "best baseline" is chosen from: every arm whose base_arm is one of these
# (the implemented arms and their variants), at equal live tokens (``best_baseline``): the
# registry's baselines (``vtoken.arms.registry.baseline_names``), so a new one is compared unlisted.
RECLAMATION_BASELINES = tuple(baseline_names())
# (metric, kind, table) of the vToken-vs-best-baseline rows; None: the per-trial table.
BEST_COMPARED = (("retained_blocks", "ratio", None), ("live_tokens", "ratio", None),
                 ("rouge_l_mean", "difference", None), ("sla_throughput", "ratio", "sla"),
                 ("sla_throughput_tpot", "ratio", "sla_tpot"), ("feasible_c", "difference", "feasibility"))


def load_raw(raw_root: Path | Sequence[Path]) -> dict[str, pd.DataFrame]:
    """Concatenate and validate the tables of every trial folder under ``raw_root`` (one
    folder, or several: the pipeline passes the setups its config names, nothing stale).

    Returns:
        {"trials", "requests", "steps", "engine_steps", "tokens"} -> DataFrame (empty tables keep
        their schema).
    """
    roots = [Path(raw_root)] if isinstance(raw_root, (str, Path)) else [Path(r) for r in raw_root]
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in schema.TABLES}
    for root in roots:
        for trial_json in sorted(root.rglob(schema.RAW_FILES["trial"])):
            if any(part.startswith(".") for part in trial_json.relative_to(root).parts):
                continue  # a temporary folder of an unfinished write
            record = json.loads(trial_json.read_text(encoding="utf-8"))
            parts["trials"].append(pd.DataFrame([{c.name: record[c.name] for c in schema.TRIAL_COLUMNS
                                                  if c.name in record}]))
            for name in ("requests", "steps", "engine_steps", "tokens"):
                path = trial_json.parent / schema.RAW_FILES[name]
                if path.exists():
                    parts[name].append(pd.read_parquet(path))
    return {name: schema.validate(pd.concat(dfs, ignore_index=True) if dfs else
                                  schema.empty_frame(schema.TABLES[name]), name)
            for name, dfs in parts.items()}


# capacity_probes.csv: the probe's identity, the counts its feasibility is read from, the conditions.
PROBE_COLUMNS = ["trial_id", "setup", "arm", "pair", "concurrency", "num_requests", "num_contract_met",
                 "num_preemptions", "max_waiting", *metrics.FEASIBILITY_CONDITIONS, "passes"]


def split_probes(raw: dict[str, pd.DataFrame]) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """``load_raw``'s tables split into the fixed grid's trials and the capacity-search probes
    (``capacity_probe``), each table filtered to its trials' rows."""
    probe_ids = set(raw["trials"].trial_id[raw["trials"].capacity_probe])
    fixed = {name: df[~df.trial_id.isin(probe_ids)].reset_index(drop=True) for name, df in raw.items()}
    probes = {name: df[df.trial_id.isin(probe_ids)].reset_index(drop=True) for name, df in raw.items()}
    return fixed, probes


def per_trial(raw: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """``metrics.trial_metrics`` of ``load_raw``'s tables (one row per trial)."""
    return metrics.trial_metrics(raw["trials"], raw["requests"], raw["steps"], raw["engine_steps"])


def trial_feasible(folder: Path) -> bool:
    """Whether the trial written in ``folder`` is feasible, read from its own tables exactly as
    processing reads every trial (``load_raw``, ``per_trial``, ``metrics.feasibility_conditions``):
    what the capacity search of the runner decides on."""
    trials = per_trial(load_raw(Path(folder)))
    if len(trials) != 1:
        raise ValueError(f"{folder}: {len(trials)} trials there, expected one trial folder")
    return bool(metrics.feasibility_conditions(trials).passes.iloc[0])


def probe_table(probes: pd.DataFrame) -> pd.DataFrame:
    """``capacity_probes.csv``: each probe's ``PROBE_COLUMNS``, sorted by setup, arm, pair, C."""
    if not len(probes):
        return pd.DataFrame(columns=PROBE_COLUMNS)
    out = probes.join(metrics.feasibility_conditions(probes))
    if "max_waiting" not in out:
        out["max_waiting"] = float("nan")
    return out[PROBE_COLUMNS].sort_values(["setup", "arm", "pair", "concurrency"]).reset_index(drop=True)


def process(raw_root: Path | Sequence[Path], out_dir: Path, sla: metrics.SlaConfig = metrics.SlaConfig(),
            baseline: str = "naive", seed: int = 0, k_tpot: float | None = None,
            partners: dict[str, str] | None = None) -> dict[str, Path]:
    """Compute every processed table from the raw trials under ``raw_root`` (one folder or
    several) and write them. The grid metrics (SLA throughput, its per-token variant with
    ``k_tpot`` (default: ``sla.k``), feasible C) are computed for the swept arms only
    (``swept``). ``partners``: {variant: the arm or variant it is another budget of} (the
    config's ``budget_of``), the families ``best_baseline`` and the plane interpolate.

    Returns:
        {table name: path written}.
    """
    raw, probe_raw = split_probes(load_raw(raw_root))
    samples = check_pairing(raw["trials"])
    trials = per_trial(raw)
    probes = per_trial(probe_raw) if len(probe_raw["trials"]) else pd.DataFrame(columns=["setup", "arm"])
    tables = {}
    # A teacher-forced trial decodes Native's text (or the reference's): its output says nothing of
    # quality, its tokens table does (``forced``); ROUGE-L and output identity are free-running only.
    free = raw["trials"][raw["trials"].forcing == ""]
    free_requests = raw["requests"][raw["requests"].trial_id.isin(free.trial_id)]
    if (free.arm == QUALITY_REFERENCE).any():
        q = quality.quality_table(free_requests, free, reference_arm=QUALITY_REFERENCE, across=("concurrency",))
        trials = trials.merge(quality.quality_summary(q), on="trial_id", how="left")
        tables["quality_requests"] = q
    tables["exactness"] = quality.exactness_report(free_requests, free)
    if len(raw["tokens"]):
        tq = forced.token_quality(raw["tokens"], raw["trials"])
        rq = forced.request_quality(tq)
        trials = trials.merge(forced.trial_quality(rq), on="trial_id", how="left")
        tables["forced_requests"] = rq
        tables["forced_curve"] = forced.curve(tq)
        tables["forced_exactness"] = forced.exactness(tq, raw["trials"], quality.EXACTNESS_ARMS)
    tables["trials"] = trials
    comparisons = [stats.compare_arms(trials[trials[m].notna()] if m in PARTIAL_METRICS else trials, m, baseline,
                                      kind, seed=seed)
                   for m, kind in COMPARED if m in trials and trials[m].notna().any()]
    grid_trials = swept(trials)
    sla_setups = grid_trials[(grid_trials.arm == sla.reference_arm) & (grid_trials.concurrency == sla.c_ref)].setup
    if len(sla_setups):
        for table, cfg in (("sla", sla), ("sla_tpot", per_token(sla, k_tpot))):
            tables[table] = metrics.sla_throughput(grid_trials[grid_trials.setup.isin(sla_setups.unique())],
                                                   cfg).merge(samples, on=["setup", "pair"], how="left")
            comparisons.append(stats.compare_arms(tables[table], cfg.name, baseline, "ratio", group_by=("setup",),
                                                  seed=seed))
        # the paper's SLA read between the grid's C too (``metrics.sla_between``)
        comparisons.append(stats.compare_arms(tables["sla"], f"{sla.name}_interp", baseline, "ratio",
                                              group_by=("setup",), seed=seed))
    contract = grid_trials[grid_trials.workload.str.startswith(CONTRACT_PREFIX)]
    if len(contract):
        # the probes of the swept arms of these setups: their capacity searches
        searched = set(zip(contract.setup, contract.arm))
        found = probes.loc[[(s, a) in searched for s, a in zip(probes.setup, probes.arm)]]
        measured = pd.concat([contract, found], ignore_index=True) if len(found) else contract
        tables["feasibility"] = metrics.feasible_concurrency(measured).merge(samples, on=["setup", "pair"], how="left")
        comparisons.append(stats.compare_arms(tables["feasibility"], "feasible_c", baseline, "difference",
                                              group_by=("setup",), seed=seed))
        tables["capacity"] = capacity_table(tables["feasibility"], grid_trials, baseline, sla.c_ref)
    comparisons = [c for c in comparisons if len(c)]
    tables["comparisons"] = _mark_deterministic(pd.concat(comparisons, ignore_index=True)) if comparisons \
        else pd.DataFrame()
    tables["best_baseline"] = best_baseline(trials, tables, seed, baseline=baseline, partners=partners)
    tables["plane"] = plane.plane(trials, RECLAMATION_BASELINES, seed, partners=partners)
    tables["capacity_probes"] = probe_table(probes)
    return {name: write_csv(df, Path(out_dir) / f"{name}.csv") for name, df in tables.items()}


def capacity_table(feasibility: pd.DataFrame, grid_trials: pd.DataFrame, baseline: str, c_ref: int) -> pd.DataFrame:
    """``capacity.table`` of every swept arm against the baseline arm and against every swept
    reclamation baseline, at equal live tokens at C_ref (the arms' mean live tokens there)."""
    arms = sorted(set(feasibility.arm))
    blocks = sorted(set(grid_trials[grid_trials.base_arm.isin(RECLAMATION_BASELINES)].arm))
    pairs = [(a, baseline) for a in arms if a != baseline]
    pairs += [(a, r) for r in blocks for a in arms if a not in blocks and a != baseline]
    at_ref = grid_trials[grid_trials.concurrency == c_ref]
    live = at_ref.groupby(["setup", "arm"], as_index=False).live_tokens.mean() if "live_tokens" in at_ref else \
        pd.DataFrame(columns=["setup", "arm", "live_tokens"])
    return capacity.table(feasibility, live, pairs)


def swept(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials of the arms that ran every C of their setup's grid, in setups of >= 2 C: the
    grid metrics (SLA throughput, feasible C) of an arm run at one C would only say whether
    that C passes, so they are left out (the tables say "at C_ref only"). ``trials`` are the fixed
    grid's (capacity-search probes are not: ``split_probes``), so an arm's probes never change
    which arms are swept."""
    grids = trials.groupby("setup").concurrency.agg(lambda c: frozenset(c))
    per_arm = trials.groupby(["setup", "arm"]).concurrency.agg(lambda c: frozenset(c))
    keep = {(setup, arm) for (setup, arm), cs in per_arm.items() if cs == grids[setup] and len(cs) >= 2}
    return trials[[(s, a) in keep for s, a in zip(trials.setup, trials.arm)]]


def per_token(sla: metrics.SlaConfig, k_tpot: float | None = None) -> metrics.SlaConfig:
    """The per-token variant of an SLA: p95 TPOT bounded by k_tpot x the same reference."""
    return replace(sla, k=sla.k if k_tpot is None else k_tpot, latency="tpot_p95_s", name="sla_throughput_tpot")


def check_pairing(trials: pd.DataFrame) -> pd.DataFrame:
    """The request sample of every paired set, checked: all trials of one (setup, pair, C)
    must have run one sample (every arm at that C of the pair; in a one-wave run the trial
    at C runs the first C rows of the pair's sample, so the C of a pair differ).

    Returns:
        One row per (setup, pair): setup, pair, sample_sha256 -- the sample of the pair's
        largest C (in a one-wave run it holds every smaller C's rows), for the grid tables.

    Raises:
        ValueError: a paired set whose trials ran different samples, naming it and the arms.
    """
    cols = ["setup", "pair", "sample_sha256"]
    per_set = trials.groupby(["setup", "pair", "concurrency"], sort=True).sample_sha256.nunique()
    bad = per_set[per_set > 1]
    if len(bad):
        setup, pair, c = bad.index[0]
        g = trials[(trials.setup == setup) & (trials.pair == pair) & (trials.concurrency == c)]
        raise ValueError(f"setup {setup!r} pair {pair} C = {c}: trials ran {len(g.sample_sha256.unique())} different "
                         f"request samples ({dict(zip(g.trial_id, g.sample_sha256.str[:8]))}); the arms of a paired "
                         "set must run one sample")
    top = trials.sort_values("concurrency").groupby(["setup", "pair"], sort=True).tail(1)
    return top[cols].sort_values(["setup", "pair"]).reset_index(drop=True)


def _mark_deterministic(comparisons: pd.DataFrame) -> pd.DataFrame:
    return comparisons.assign(deterministic=comparisons.metric.isin(DETERMINISTIC))


# The strongest baseline is chosen on the first pair(s) of a setup and judged on the others:
# chosen and judged on the same pairs it would win by its own noise -- the winner's curse.
HELD_OUT_PAIRS = 1


def best_baseline(trials: pd.DataFrame, tables: dict[str, pd.DataFrame], seed: int = 0,
                  arms: Sequence[str] = plane.TREATMENTS, baseline: str = "naive",
                  held_out: int = HELD_OUT_PAIRS, partners: dict[str, str] | None = None) -> pd.DataFrame:
    """Each of ``arms`` vs the best reclamation baseline of each setup, for ``BEST_COMPARED``.

    The rule, per setup:

    - candidates: every arm whose ``base_arm`` is in ``RECLAMATION_BASELINES``, the
      implemented arms and their variants (e.g. ``paged_eviction_policy``, ``diffkv_budget``);
    - the choice is made at the largest C that every candidate and ``baseline`` ran;
    - a candidate is eligible only at equal live tokens (``verdicts.equal_live_tokens``: its
      mean live tokens per request there within 5 % of ``baseline``'s), or as a **mix**: a
      family of budgets of one mechanism (``partners``, the config's ``budget_of``) whose live
      tokens bracket ``baseline``'s is interpolated to them (``equal_live``), and the mix
      replaces its members. A candidate outside the rule is never chosen, however few blocks it
      retains (it would win by its budget, not by its mechanism);
    - among the eligible, the fewest mean retained blocks per request **at the reference's
      live tokens** wins: a measured candidate's blocks scaled by reference live / its live
      (blocks taken as proportional to live tokens over the 5 % the rule allows), a mix's as
      they are (it is at the reference), so a candidate that keeps fewer tokens does not win
      by its budget (on raw blocks Zipage-style at ~56 live tokens would beat PagedEviction at
      ~60); equal values (to ``verdicts.TOLERANCE``) go to the first name in
      alphabetical order, never to row order.

    **Held out**: the choice (and a mix's weight) is made on the setup's ``held_out`` lowest
    pair ids and the comparisons use the other pairs only, as θ_F is chosen on samples the
    evaluation never sees; a setup with fewer than ``held_out`` + 2 pairs chooses and judges on
    the same pairs, and ``selected_by`` says so.

    A setup with a treatment arm where nothing is chosen gets one row with no baseline and
    ``selected_by`` saying why (no candidate ran, no C shared by every candidate and
    ``baseline``, ``baseline``'s live tokens not measured, none within the rule), so the claims
    table gives the right reason.

    Each arm of ``arms`` the setup ran (absent ones skipped) is then compared with the chosen
    baseline, paired like ``compare_arms``, on every C (per-trial metrics) or per setup (the
    sla, sla_tpot and feasibility tables; a mix's rows mixed the same way). A setup without
    ``baseline``, without a shared C or without an eligible candidate gets no rows.

    Returns:
        ``compare_arms`` rows (``arm`` the treatment, ``baseline`` the chosen arm or mix
        ``"<low>~<high>"``) plus ``selected_by`` (the rule and the means it was applied to),
        ``chosen_at`` (the C of the choice, where the claims table also reports it), and the
        mean live tokens per request at that C on the judged pairs: ``arm_live_tokens``,
        ``baseline_live_tokens`` (the chosen) and ``reference_live_tokens`` (``baseline``);
        empty when no setup has a treatment arm.

    Raises:
        ValueError: a setup whose trials at the chosen C mix block sizes.
    """
    arms = (arms,) if isinstance(arms, str) else tuple(arms)
    rows = []
    for setup, g in trials.groupby("setup", sort=True):
        treated = [a for a in arms if a in set(g.arm)]
        if not treated:
            continue
        pairs = sorted(set(g.pair))
        choice = set(pairs[:held_out]) if held_out and len(pairs) >= held_out + 2 else set(pairs)
        judged = set(pairs) - choice or set(pairs)
        best, reason, chosen_at, m = _choose_baseline(setup, g[g.pair.isin(choice)], baseline, partners or {})
        if best is not None and judged != choice:
            reason += (f" (chosen on pair {', '.join(map(str, sorted(choice)))}, judged on pairs "
                       f"{', '.join(map(str, sorted(judged)))})")
        elif best is not None and held_out:
            reason += f" (chosen and judged on the same {len(pairs)} pairs: too few to hold {held_out} out)"
        if best is None:
            rows.append(pd.DataFrame([{"setup": setup, "metric": None, "arm": treated[0], "baseline": None,
                                       "selected_by": reason, "chosen_at": chosen_at}]))
            continue
        if m is not None:
            g = pd.concat([g, equal_live.mix(g, m)], ignore_index=True)
        at_c = g[(g.concurrency == chosen_at) & g.pair.isin(judged)].groupby("arm").live_tokens.mean() \
            if "live_tokens" in g else pd.Series(dtype=float)
        for metric, kind, table in BEST_COMPARED:
            if table is not None and m is not None:
                continue  # capacity and SLA throughput are not linear in live tokens: a mix has none
            source = g if table is None else tables.get(table, pd.DataFrame())
            if table is not None and len(source):
                source = source[source.setup == setup]
            if metric not in source or not source[metric].notna().any():
                continue
            part = source[source.arm.isin([*treated, best]) & source.pair.isin(judged)]
            group = ("setup", "concurrency") if table is None else ("setup",)
            comp = stats.compare_arms(part, metric, best, kind, group_by=group, seed=seed)
            if len(comp):
                rows.append(comp.assign(selected_by=reason, chosen_at=chosen_at,
                                        arm_live_tokens=comp.arm.map(at_c), baseline_live_tokens=at_c.get(best),
                                        reference_live_tokens=at_c.get(baseline)))
    return _mark_deterministic(pd.concat(rows, ignore_index=True)) if rows else pd.DataFrame()


def _choose_baseline(setup: str, g: pd.DataFrame, baseline: str, partners: dict[str, str]
                     ) -> tuple[str | None, str, int | None, equal_live.Mix | None]:
    """(chosen arm or mix name, selected_by text, the C it was chosen at, the mix or None) of
    one setup's trials by ``best_baseline``'s rule; (None, why, C or None, None) when nothing is
    chosen."""
    candidates = g[g.base_arm.isin(RECLAMATION_BASELINES) & (g.arm != baseline)]
    if not len(candidates):
        return None, "no reclamation baseline arm or variant ran in this setup", None, None
    if baseline not in set(g.arm):
        return None, f"{baseline} did not run in this setup", None, None
    ran = {arm: set(c) for arm, c in g[g.arm.isin([*candidates.arm, baseline])].groupby("arm").concurrency}
    shared = set.intersection(*ran.values())
    if not shared:
        each = ", ".join(f"{arm}: C = {sorted(int(x) for x in cs)}" for arm, cs in sorted(ran.items()))
        return None, f"no C that every reclamation baseline and {baseline} ran ({each})", None, None
    c = max(shared)
    # sorted first: the means do not depend on the row order, to the last bit
    top = g[g.concurrency == c].sort_values(["arm", "pair"], kind="stable")
    sizes = top.block_size.unique()
    if len(sizes) != 1:
        raise ValueError(f"setup {setup!r} C = {c}: trials of block sizes {sorted(sizes)}; one setup, one block size")
    means = top.groupby("arm", sort=True)[["retained_blocks", "live_tokens"]].mean()
    reference = means.live_tokens.get(baseline, float("nan"))
    if pd.isna(reference):
        return None, f"{baseline}'s live tokens not measured at C = {c}", c, None
    names = sorted(set(candidates.arm))
    mixes, mixed = [], set()  # a family that brackets the reference is judged as its mix, not its members
    for family in equal_live.families(partners):
        family = [a for a in family if a in names]
        if (m := equal_live.bracket(means.live_tokens, family, reference)) is not None:
            mixes.append(m)
            mixed |= set(family)
    eligible, outside, unmeasured = [], [], []
    for arm in names:
        live, blocks = means.live_tokens[arm], means.retained_blocks[arm]
        if pd.isna(live) or pd.isna(blocks):
            unmeasured.append(arm)
        elif arm not in mixed:
            (eligible if verdicts.equal_live_tokens(live, reference) else outside).append(arm)
    at_reference = {a: means.retained_blocks[a] * reference / means.live_tokens[a] for a in eligible}
    at_reference |= {m.name: m.at(means.retained_blocks[m.low], means.retained_blocks[m.high]) for m in mixes}

    def shown(arm):
        blocks, live = means.retained_blocks[arm], means.live_tokens[arm]
        return (f"{arm} {blocks:.3f}" if pd.notna(blocks) else f"{arm} blocks not measured") + \
            (f" (live {live:.1f})" if pd.notna(live) else " (live not measured)")

    tolerance = f"5 % = {verdicts.live_tolerance(reference):.2f} tokens"
    if not at_reference:
        return None, (f"no reclamation baseline arm or variant within the equal-live-tokens rule in this setup "
                      f"(C = {c}, {baseline}'s live tokens {reference:.1f}, {tolerance}; no budgets of one "
                      f"mechanism bracket it: " + ", ".join(shown(a) for a in outside + unmeasured) + ")"), c, None
    fewest = min(at_reference.values())
    best = next(a for a in sorted(at_reference)  # alphabetical: the first of the tied
                if abs(at_reference[a] - fewest) <= verdicts.TOLERANCE * max(1.0, abs(fewest)))
    reason = (f"fewest retained blocks at {baseline}'s live tokens ({reference:.1f}) at C = {c} among the "
              f"baselines within {tolerance} (blocks x {reference:.1f} / live) or interpolated to them: "
              + ", ".join(f"{shown(a)} -> {at_reference[a]:.3f}" for a in eligible)
              + "".join(f"{', ' if eligible or i else ''}{equal_live.describe(m)} -> {at_reference[m.name]:.3f}"
                        for i, m in enumerate(mixes))
              + (f"; outside the rule: {', '.join(shown(a) for a in outside)}" if outside else "")
              + (f"; not measured: {', '.join(shown(a) for a in unmeasured)}" if unmeasured else ""))
    return best, reason, c, next((m for m in mixes if m.name == best), None)


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """Write a table as CSV, byte-stable (fixed float format, LF), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    df.to_csv(tmp, index=False, float_format="%.10g", lineterminator="\n")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m vtoken.bench.analysis.process")
    parser.add_argument("raw_root", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--k", type=float, default=metrics.SlaConfig.k)
    parser.add_argument("--c-ref", type=int, default=metrics.SlaConfig.c_ref)
    parser.add_argument("--baseline", default="naive")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sla = metrics.SlaConfig(k=args.k, c_ref=args.c_ref, reference_arm=args.baseline)
    for name, path in process(args.raw_root, args.out_dir, sla, args.baseline).items():
        logger.info("wrote %s: %s", name, path)


if __name__ == "__main__":
    main()
