"""The factorial's memory-quality frontiers and its equal-memory comparisons.

A *point* is one factorial trial (``vtoken.bench.grid.factorial``): a mechanism at a budget, in one
pair, under one scorer and phase, with its retained blocks per request (x) and its teacher-forced
quality against Native (``vtoken.bench.analysis.forced``): the **loss** ``LOSS`` = mean KL(Native ||
mechanism) per token, lower is better -- the quality axis stated before any run -- beside the
NLL increase, the top-1 agreement and the answer's NLL. ``frontiers`` summarises each cell over
pairs (mean, 95 % t interval; ``frontiers.csv``).

**Equal memory** (``equal_memory``; docs/metrics.md "Equal memory"): each token mechanism T
against each block mechanism K of the same scorer, phase and C, pair by pair, both read by one rule
(``vtoken.bench.analysis.envelope``: each pair's envelope of each mechanism, the points it dominates
itself removed; swapping T and K flips every estimate exactly):

- **primary** (two per comparison, each stated before the run): the mean vertical gap T - K of the
  KL envelopes over their common memory range, a paired t test over pairs against the phase's KL
  margin (``margins``), and the mean horizontal gap, the blocks ratio T / K of the envelopes read
  the other way over their common quality range (``envelope.mean_log_ratio``), against the blocks
  margin (``vtoken.bench.analysis.equivalence``: better / worse / equivalent / not resolved), each
  with the power the comparison had to resolve a gap of its margin (``vtoken.bench.analysis.power``,
  from the per-pair SD it measured); both again with blocks read as ``allocated_blocks`` (what the
  scheduler handed out before each step's releases), a sensitivity reading beside them;
- **secondary**: at each budget b, the memory level (per pair, the mean of T's and K's blocks at
  b) and the KL gap there; the quality level (the mean of their KL at b) and the blocks ratio
  T / K there, against ``margins.blocks``. Holm-corrected over the comparison's secondary levels;
  a level outside an envelope in some pair is not comparable (never extrapolated);
- **same budget** (the review's sentence): T / K blocks and T - K KL at each budget both ran, with
  the live tokens each kept there (the claims table refuses a same-budget reading outside
  ``verdicts.equal_live_tokens``: a block mechanism rounds its budget to whole blocks).

**The tail** (``tail_rows``): each token mechanism whose tail block is open (vToken eager) against
each whose tail is packed (vToken at its packing limit), of the same scorer, phase and C, at every
budget both ran, pair by pair: their blocks ratio open / packed against ``margins.blocks`` (what the
unpacked tail block costs) and their KL difference against the KL margin (exact eviction: the same
victims, so the same forced numbers; a difference is a defect, not an effect).

``capability`` reads the paper's claim for one comparison off its primary row.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from vtoken.bench.analysis import envelope, equivalence, power, stats, verdicts

MEMORY = "retained_blocks"
LOSS = "kl_mean"  # the quality axis: KL vs Native per token (lower is better)
# What a frontier point reports: memory, live tokens, quality and what the point costs.
POINT_METRICS = (MEMORY, "allocated_blocks", "live_tokens", "packing_efficiency", LOSS, "dnll_mean", "top1_mean", "answer_nll_mean", "rouge_l_mean",
                 "step_ms", "bytes_relocated_per_step", "tokens_relocated_per_step", "num_preemptions")
POINT_KEYS = ["setup", "scorer", "phase", "workload", "concurrency", "mechanism", "granularity", "tail", "budget"]
FRONTIER_COLUMNS = [*POINT_KEYS, "metric", "n", "n_samples", "mean", "ci_low", "ci_high"]
EQUAL_COLUMNS = ["setup", "scorer", "phase", "concurrency", "treatment", "reference", "axis", "level_budget", "level",
                 "n", "n_samples", "kind", "margin", "estimate", "ci_low", "ci_high", "ci90_low", "ci90_high", "p",
                 "p_holm", "sd", "power", "status", "verdict", "reason", "treatment_live_tokens",
                 "reference_live_tokens"]
PRIMARY = "primary: mean KL gap over the common memory range"
PRIMARY_BLOCKS = "primary: mean blocks ratio over the common quality range"
ALLOCATED = "allocated_blocks"  # retained blocks plus each step's releases: what the scheduler handed out
ALLOCATED_SUFFIX = " (allocated blocks)"
AT_MEMORY = "equal retained blocks"  # the KL gap T - K at a memory level
AT_QUALITY = "equal quality"  # the blocks ratio T / K at a quality level
SAME_BUDGET_BLOCKS = "same budget: retained blocks"
SAME_BUDGET_QUALITY = "same budget: KL"
TAIL_BLOCKS = "tail: retained blocks at the same budget"
TAIL_QUALITY = "tail: KL at the same budget"
SECONDARY = (AT_MEMORY, AT_QUALITY)
PHASE_OF_ROLE = {"factorial": "decode", "factorial_prefill": "prefill"}
NOT_COMPARABLE = "not comparable"
NOT_REACHED = "not comparable: a level outside an envelope"
SUPPORTED, REFUTED, EQUIVALENT = verdicts.SUPPORTED, verdicts.REFUTED, verdicts.EQUIVALENT_CAPABILITY


def cells(setups: pd.DataFrame) -> pd.DataFrame:
    """One row per factorial cell: setup, scorer (the setup's policy), phase, workload, arm,
    mechanism, granularity, tail, budget (from the setups table's ``factors``; a setups table written
    before the tail factor existed reads ``packed`` for the block mechanism, ``open`` for the rest)."""
    rows = []
    for _, s in setups.iterrows():
        if s.get("role") not in PHASE_OF_ROLE or not isinstance(s.get("factors"), str) or not s["factors"]:
            continue
        for arm, f in json.loads(s["factors"]).items():
            rows.append({"setup": s["setup"], "scorer": s["policy"], "phase": PHASE_OF_ROLE[s["role"]],
                         "workload": s["workload"], "arm": arm, "mechanism": f["mechanism"],
                         "granularity": f["granularity"],
                         "tail": f.get("tail", "packed" if f["granularity"] == "block" else "open"),
                         "budget": f["budget"]})
    return pd.DataFrame(rows, columns=["setup", "scorer", "phase", "workload", "arm", "mechanism", "granularity",
                                       "tail", "budget"])


def points(trials: pd.DataFrame, setups: pd.DataFrame) -> pd.DataFrame:
    """The factorial's points: its trials with their cell's factors (one row per trial)."""
    c = cells(setups)
    if c.empty:
        return pd.DataFrame(columns=POINT_KEYS + ["pair", "sample_sha256", *POINT_METRICS])
    out = trials.merge(c, on=["setup", "arm"], how="inner", suffixes=("", "_cell"))
    for m in POINT_METRICS:
        if m not in out:
            out[m] = np.nan
    return out


def frontiers(p: pd.DataFrame) -> pd.DataFrame:
    """Per cell x C x metric of ``POINT_METRICS``: n, n_samples, mean and its 95 % t interval over
    pairs (NaN interval below 2 pairs; ``stats.summarise``)."""
    return stats.summarise(p, POINT_KEYS, POINT_METRICS).reindex(columns=FRONTIER_COLUMNS)


def _envelopes(g: pd.DataFrame, mechanism: str, memory: str = MEMORY) -> dict:
    """{pair: (envelope, {budget: (blocks, loss)})} of one mechanism's points, blocks read from ``memory``."""
    out = {}
    for pair, h in g[g.mechanism == mechanism].groupby("pair"):
        points_ = {int(b): (float(x), float(y)) for b, x, y in zip(h.budget, h[memory], h[LOSS])}
        out[pair] = (envelope.envelope(h[memory], h[LOSS]), points_)
    return out


def _primaries(t_env: dict, k_env: dict, pairs: list, base: dict, margins: dict, suffix: str = "") -> list[dict]:
    """The two primary rows (vertical, horizontal) of one comparison's envelopes; ``suffix`` names
    another memory axis."""
    gaps = np.array([envelope.mean_gap(t_env[p][0], k_env[p][0]) for p in pairs], dtype=float)
    ratios = np.exp([envelope.mean_log_ratio(t_env[p][0], k_env[p][0]) for p in pairs])
    return [_row(base | {"axis": PRIMARY + suffix, "level_budget": np.nan, "level": np.nan},
                 equivalence.test(gaps, np.zeros_like(gaps), margins["kl"]), margins["kl"], "difference",
                 "" if np.isfinite(gaps).all() else f"{NOT_REACHED}: no common memory range in some pair"),
            _row(base | {"axis": PRIMARY_BLOCKS + suffix, "level_budget": np.nan, "level": np.nan},
                 equivalence.test(ratios, np.ones_like(ratios), margins["blocks"], kind="ratio"), margins["blocks"],
                 "ratio", "" if np.isfinite(ratios).all() else f"{NOT_REACHED}: no common quality range in some pair")]


def _row(head: dict, res: equivalence.Test, margin: float, kind: str, reason: str = "") -> dict:
    sd_pair = res.sd
    pw = power.power(sd_pair, res.n, np.log(margin) if kind == "ratio" else margin) if res.n >= 2 else np.nan
    status, verdict = (NOT_COMPARABLE, NOT_COMPARABLE) if reason else (res.status, res.verdict)
    return head | {"n": res.n, "kind": kind, "margin": margin, "estimate": res.estimate, "ci_low": res.ci_low,
                   "ci_high": res.ci_high, "ci90_low": res.ci90_low, "ci90_high": res.ci90_high, "p": res.p,
                   "sd": sd_pair, "power": pw, "status": status, "verdict": verdict, "reason": reason}


def _clip(x: float, bounds: tuple[float, float]) -> float:
    low, high = bounds
    return float(np.clip(x, low, high)) if low <= high else float("nan")


def _comparison(g: pd.DataFrame, treatment: str, reference: str, margins: dict) -> list[dict]:
    """Every row of one comparison (module docstring) on the points ``g`` of one scorer x phase x C."""
    t_env, k_env = _envelopes(g, treatment), _envelopes(g, reference)
    pairs = sorted(set(t_env) & set(k_env))
    samples = g[g.pair.isin(pairs)].sample_sha256.nunique() if "sample_sha256" in g else len(pairs)
    base = {"treatment": treatment, "reference": reference, "n_samples": samples}
    primary, secondary, rows = _primaries(t_env, k_env, pairs, base, margins), [], []
    for b in sorted({b for p in pairs for b in t_env[p][1]} & {b for p in pairs for b in k_env[p][1]}):
        at = [p for p in pairs if b in t_env[p][1] and b in k_env[p][1]]
        # the level of each pair: the mean of the two points at b, clipped to what both envelopes cover
        mem = np.array([_clip((t_env[p][1][b][0] + k_env[p][1][b][0]) / 2,
                              envelope.common_range(t_env[p][0], k_env[p][0])) for p in at])
        loss = np.array([_clip((t_env[p][1][b][1] + k_env[p][1][b][1]) / 2,
                               envelope.common_loss(t_env[p][0], k_env[p][0])) for p in at])
        t_loss = np.array([envelope.loss_at(t_env[p][0], m) for p, m in zip(at, mem)])
        k_loss = np.array([envelope.loss_at(k_env[p][0], m) for p, m in zip(at, mem)])
        t_blk = np.array([envelope.blocks_at(t_env[p][0], q) for p, q in zip(at, loss)])
        k_blk = np.array([envelope.blocks_at(k_env[p][0], q) for p, q in zip(at, loss)])
        for axis, tv, kv, level, kind, margin in ((AT_MEMORY, t_loss, k_loss, mem, "difference", margins["kl"]),
                                                  (AT_QUALITY, t_blk, k_blk, loss, "ratio", margins["blocks"])):
            missing = int((~(np.isfinite(tv) & np.isfinite(kv))).sum())
            head = base | {"axis": axis, "level_budget": b, "level": float(np.mean(level))}
            if missing:
                secondary.append(_row(head, equivalence.test([], [], margin, kind=kind), margin, kind,
                                      f"{NOT_REACHED} in {missing} of {len(at)} pairs"))
                continue
            secondary.append(_row(head, equivalence.test(tv, kv, margin, kind=kind), margin, kind))
        live = {m: g[(g.mechanism == m) & (g.budget == b) & g.pair.isin(at)].live_tokens.mean()
                for m in (treatment, reference)}  # what "the same budget" keeps, for the live-token check
        for axis, col, kind, margin in ((SAME_BUDGET_BLOCKS, 0, "ratio", margins["blocks"]),
                                        (SAME_BUDGET_QUALITY, 1, "difference", margins["kl"])):
            tv = np.array([t_env[p][1][b][col] for p in at])
            kv = np.array([k_env[p][1][b][col] for p in at])
            rows.append(_row(base | {"axis": axis, "level_budget": b, "level": float(kv.mean()),
                                     "treatment_live_tokens": live[treatment], "reference_live_tokens": live[reference]},
                             equivalence.test(tv, kv, margin, kind=kind), margin, kind))
    adjusted = equivalence.holm([r["p"] if not r["reason"] else np.nan for r in secondary])
    for r, p_holm in zip(secondary, adjusted):
        r["p_holm"] = p_holm
        if np.isfinite(p_holm) and p_holm >= equivalence.ALPHA and r["status"] in (equivalence.BETTER,
                                                                                      equivalence.WORSE):
            r["status"] = r["verdict"] = equivalence.NOT_RESOLVED  # resolved alone, not after Holm
    if ALLOCATED in g and g[ALLOCATED].notna().all():  # the same two readings on the blocks handed out
        ta, ka = _envelopes(g, treatment, ALLOCATED), _envelopes(g, reference, ALLOCATED)
        primary += _primaries(ta, ka, pairs, base, margins, ALLOCATED_SUFFIX)
    return primary + secondary + rows


def tail_rows(g: pd.DataFrame, treatment: str, reference: str, margins: dict) -> list[dict]:
    """The tail's own effect (module docstring): ``treatment`` (tail open) against ``reference`` (tail
    packed), both token mechanisms, on the points ``g`` of one scorer x phase x C."""
    rows = []
    mine, theirs = g[g.mechanism == treatment], g[g.mechanism == reference]
    for b in sorted(set(mine.budget) & set(theirs.budget)):
        t, k = mine[mine.budget == b].set_index("pair"), theirs[theirs.budget == b].set_index("pair")
        pairs = sorted(set(t.index) & set(k.index))
        samples = t.loc[pairs].sample_sha256.nunique() if "sample_sha256" in t else len(pairs)
        head = {"treatment": treatment, "reference": reference, "n_samples": samples, "level_budget": b,
                "treatment_live_tokens": t.loc[pairs].live_tokens.mean(),
                "reference_live_tokens": k.loc[pairs].live_tokens.mean()}
        for axis, col, kind, margin in ((TAIL_BLOCKS, MEMORY, "ratio", margins["blocks"]),
                                        (TAIL_QUALITY, LOSS, "difference", margins["kl"])):
            tv, kv = t.loc[pairs, col].to_numpy(float), k.loc[pairs, col].to_numpy(float)
            rows.append(_row(head | {"axis": axis, "level": float(kv.mean())},
                             equivalence.test(tv, kv, margin, kind=kind), margin, kind))
    return rows


def margins_of(margins: dict, phase: str) -> dict:
    """{"kl", "blocks"} of one phase from the config's ``factorial.margins`` ({"kl": {phase: nats per
    token}, "blocks": a ratio > 1})."""
    kl = margins["kl"]
    return {"kl": kl[phase] if isinstance(kl, dict) else kl, "blocks": margins["blocks"]}


def equal_memory(p: pd.DataFrame, margins: dict) -> pd.DataFrame:
    """Every token mechanism against every block mechanism of the points ``p``, per scorer x phase
    x C, then every token mechanism with an open tail against every one with a packed tail
    (``tail_rows``; module docstring); ``margins``: the config's ``factorial.margins`` (``margins_of``)."""
    rows = []
    for key, g in (p.groupby(["setup", "scorer", "phase", "concurrency"], sort=True) if len(p) else []):
        mech = g.drop_duplicates("mechanism").set_index("mechanism")
        kinds = mech.granularity
        tails = mech["tail"] if "tail" in mech else pd.Series("open", index=mech.index).where(kinds == "token", "packed")
        head = dict(zip(["setup", "scorer", "phase", "concurrency"], key))
        margin = margins_of(margins, key[2])
        for treatment in [m for m, gr in kinds.items() if gr == "token"]:
            for reference in [m for m, gr in kinds.items() if gr == "block"]:
                rows += [head | r for r in _comparison(g, treatment, reference, margin)]
        token = [m for m, gr in kinds.items() if gr == "token"]
        for treatment in [m for m in token if tails[m] == "open"]:
            for reference in [m for m in token if tails[m] == "packed"]:
                rows += [head | r for r in tail_rows(g, treatment, reference, margin)]
    return pd.DataFrame(rows).reindex(columns=EQUAL_COLUMNS)


def capability(levels: pd.DataFrame) -> tuple[str, pd.Series | None]:
    """The paper's capability claim -- the token table holds fewer blocks than a page-aligned
    mechanism for the same quality, i.e. reaches lower loss at equal memory -- for one comparison,
    from its primary row: supported (better), refuted (worse: for this mechanism and setting),
    equivalent (no capability gap, within the margin), else not resolved. Returns the verdict and
    the primary row."""
    primary = levels[levels.axis == PRIMARY]
    if primary.empty:
        return verdicts.NOT_COMPARABLE, None
    row = primary.iloc[0]
    verdict = {equivalence.BETTER: SUPPORTED, equivalence.WORSE: REFUTED, equivalence.EQUIVALENT: EQUIVALENT,
               equivalence.TOO_FEW: verdicts.ONE_SAMPLE, NOT_COMPARABLE: verdicts.NOT_COMPARABLE
               }.get(row.status, verdicts.NOT_RESOLVED)
    return verdict, row


EXACT_COLUMNS = ["setup", "scorer", "phase", "budget", "n_checked", "n_identical", "n_skipped_preempted", "arms"]


def exactness(tokens_quality: pd.DataFrame, trials: pd.DataFrame, requests: pd.DataFrame,
              setups: pd.DataFrame) -> pd.DataFrame:
    """The design's promise in every cell, per token: the token mechanisms at one budget (Naive-Evict,
    vToken, vToken eager: exact eviction) give bit-identical per-token NLL, arg-max and log-probabilities
    on the requests none of them preempted (a recompute restarts a request's token table); one row per
    setup x budget with the counts."""
    from vtoken.bench.analysis import forced

    c = cells(setups)
    token = c[c.granularity == "token"] if len(c) else c
    rows = []
    for (setup, scorer, phase, budget), g in (token.groupby(["setup", "scorer", "phase", "budget"], sort=True)
                                              if len(token) else []):
        arms = tuple(g.arm)
        if len(arms) < 2:
            continue
        part = trials[(trials.setup == setup) & trials.arm.isin(arms)]
        preempted = requests[requests.trial_id.isin(part.trial_id) & (requests.num_preemptions > 0)]
        bad = set(zip(part.set_index("trial_id").loc[preempted.trial_id, "pair"], preempted.req_index))
        report = forced.exactness(tokens_quality[tokens_quality.trial_id.isin(part.trial_id)], part, arms)
        hit = np.array([(p, r) in bad for p, r in zip(report.pair, report.req_index)], dtype=bool)
        checked = report[~hit]
        rows.append({"setup": setup, "scorer": scorer, "phase": phase, "budget": int(budget),
                     "n_checked": len(checked), "n_identical": int(checked.identical.sum()),
                     "n_skipped_preempted": int(hit.sum()), "arms": ",".join(arms)})
    return pd.DataFrame(rows, columns=EXACT_COLUMNS)
