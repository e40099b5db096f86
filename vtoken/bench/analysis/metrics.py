"""docs/design.md §6 metrics over the raw tables of ``vtoken.bench.raw.schema``.

Per-trial metrics (one row per ``trial_id``) come from the request, step and engine-step
tables; the concurrency-grid metrics (SLA-constrained throughput, feasible concurrency) come
from per-trial rows joined with the trial table. Exact definitions, including the choices
docs/design.md §6 leaves open (which rows, which aggregation), are in ``docs/metrics.md``; each
function's docstring states the formula it computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

COMPLETED = ("stop", "length")


def request_latencies(requests: pd.DataFrame) -> pd.DataFrame:
    """Per-request latencies.

    Adds ``completed`` (finish_reason in stop/length and a finish time), ``e2e_s`` =
    finish - arrival, ``ttft_s`` = first_token - arrival, and ``tpot_s`` =
    (finish - first_token) / (output_tokens - 1), NaN for requests with < 2 output tokens
    (as vLLM's benchmark). Latencies are NaN for requests that did not complete.
    """
    out = requests.copy()
    out["completed"] = out.finish_reason.isin(COMPLETED) & out.finish_s.notna()
    done = out.completed
    out["e2e_s"] = (out.finish_s - out.arrival_s).where(done)
    out["ttft_s"] = (out.first_token_s - out.arrival_s).where(done)
    decode = (out.output_tokens - 1).where(out.output_tokens > 1)
    out["tpot_s"] = ((out.finish_s - out.first_token_s) / decode).where(done)
    return out


def throughput_latency(requests: pd.DataFrame, percentiles: tuple[int, ...] = (50, 95)) -> pd.DataFrame:
    """Throughput and latency percentiles per trial.

    duration_s = last finish of a completed request - first arrival; output_tok_per_s =
    output tokens of completed requests / duration_s; req_per_s = completed requests /
    duration_s. Percentiles of e2e, TTFT and TPOT are over completed requests, numpy's
    linear interpolation. Counts: num_requests, num_completed, num_contract_met
    (completed with output_tokens == max_tokens), num_preemptions (sum over requests).

    Returns:
        One row per trial_id.
    """
    req = request_latencies(requests)
    rows = []
    for trial_id, g in req.groupby("trial_id", sort=True):
        done = g[g.completed]
        duration = done.finish_s.max() - g.arrival_s.min() if len(done) else np.nan
        row = {
            "trial_id": trial_id, "num_requests": len(g), "num_completed": len(done),
            "num_contract_met": int((done.output_tokens == done.max_tokens).sum()),
            "num_preemptions": int(g.num_preemptions.sum()), "output_tokens": int(done.output_tokens.sum()),
            "duration_s": duration,
            "output_tok_per_s": done.output_tokens.sum() / duration if len(done) else np.nan,
            "req_per_s": len(done) / duration if len(done) else np.nan,
        }
        for name in ("e2e_s", "ttft_s", "tpot_s"):
            values = done[name].dropna().to_numpy()
            for p in percentiles:
                row[f"{name[:-2]}_p{p}_s"] = float(np.percentile(values, p)) if len(values) else np.nan
        rows.append(row)
    return pd.DataFrame(rows) if rows else pd.DataFrame({"trial_id": pd.Series(dtype="string")})


def ideal_blocks(live_tokens: pd.Series, block_size: pd.Series) -> pd.Series:
    """ideal blocks = ceil(live / B) (integer arithmetic, no float rounding)."""
    return -(-live_tokens // block_size)


def block_metrics(steps: pd.DataFrame) -> pd.DataFrame:
    """Block-level metrics per trial over decode-step rows.

    - retained_blocks: mean over requests of (mean of blocks_held + side_blocks over the
      request's decode steps, each step weighing equally): side storage (Zipage's query cache,
      DiffKV's low tier) counts at its exact, fractional size in blocks, docs/design.md §3.5;
    - retained_blocks_peak: mean over requests of the request's largest blocks_held + side_blocks;
    - allocated_blocks: retained_blocks with each step's releases added back (blocks_held + released
      + side_blocks: what the request held when the step was scheduled, before its evictions and
      plans gave blocks back) -- the blocks the scheduler had to hand out; equal to retained_blocks
      for an arm that releases nothing mid-request;
    - live_tokens: mean over requests of the request's mean live tokens over its decode steps
      (a low tier's included): the budget each arm really keeps (equal-budget check);
    - kv_demand_blocks: sum over the trial's requests of each request's largest
      blocks_held + charged_blocks (side storage in the whole blocks the pool hands out) --
      the blocks the C requests of a one-wave trial need to be co-resident at their peaks (Fig. 10's KV-block demand; ``kv_demand_share`` divides
      it by the usable pool);
    - packing_efficiency: sum(ideal) / sum(held) over the trial's decode rows, pool blocks
      only: ideal = ceil((live - low) / B), the live tokens that sit in the pool;
    - waste_f: 1 - sum(live - low) / (B * sum(held)), i.e. 1 - mean utilisation live_b/B of
      every allocated pool block at every decode step (block-steps weigh equally);
    - frac_util_le_25, frac_util_25_50: share of allocated block-steps in those bins;
    - retained_prefix_blocks: retained_blocks' share in prefix blocks (full prompt blocks in the
      prefix cache, read-only; shared with other requests or not), retained_private_blocks the
      rest, shared_blocks_mean the part another running request holds too (all three NaN for a
      trial without prefix caching: no prefix block at any step).

    ``charged_blocks`` and ``low_tokens`` are 0 when the table has no such column, and
    ``side_blocks`` is ``charged_blocks``.

    Returns:
        One row per trial_id.
    """
    dec = decode_rows(steps)
    per_req = request_blocks(dec)
    per_trial = per_req.groupby("trial_id").agg(retained_blocks=("mean", "mean"), retained_blocks_peak=("max", "mean"),
                                                allocated_blocks=("allocated", "mean"),
                                                live_tokens=("live", "mean"), kv_demand_blocks=("demand", "sum"),
                                                prefix=("prefix", "mean"), shared=("shared", "mean"))
    cached = dec.groupby("trial_id").prefix.max() > 0
    sums = dec.groupby("trial_id")[["ideal", "blocks_held", "pool_live", "capacity",
                                     "blocks_util_le_25", "blocks_util_25_50"]].sum()
    out = pd.DataFrame({
        "retained_blocks": per_trial.retained_blocks,
        "retained_blocks_peak": per_trial.retained_blocks_peak,
        "allocated_blocks": per_trial.allocated_blocks,
        "live_tokens": per_trial.live_tokens,
        "kv_demand_blocks": per_trial.kv_demand_blocks,
        "packing_efficiency": sums.ideal / sums.blocks_held,
        "waste_f": 1.0 - sums.pool_live / sums.capacity,
        "frac_util_le_25": sums.blocks_util_le_25 / sums.blocks_held,
        "frac_util_25_50": sums.blocks_util_25_50 / sums.blocks_held,
        "retained_prefix_blocks": per_trial.prefix.where(cached),
        "retained_private_blocks": (per_trial.retained_blocks - per_trial.prefix).where(cached),
        "shared_blocks_mean": per_trial.shared.where(cached),
        "num_decode_rows": dec.groupby("trial_id").size(),
    })
    return out.reset_index()


def decode_rows(steps: pd.DataFrame) -> pd.DataFrame:
    """The decode-step rows with the per-row columns of ``block_metrics``: ideal, capacity,
    retained (pool blocks + side storage), allocated (retained + the step's releases), demand (pool
    blocks + charged), prefix, shared."""
    dec = _pool_tokens(steps[steps.phase == "decode"])
    charged = dec.get("charged_blocks", 0)
    retained = dec.blocks_held + dec.get("side_blocks", charged)
    return dec.assign(ideal=ideal_blocks(dec.pool_live, dec.block_size), capacity=dec.blocks_held * dec.block_size,
                      retained=retained, allocated=retained + dec.get("released", 0), demand=dec.blocks_held + charged,
                      prefix=dec.get("prefix_blocks", 0), shared=dec.get("shared_blocks", 0))


def request_blocks(dec: pd.DataFrame) -> pd.DataFrame:
    """Per (trial_id, req_id) of ``decode_rows`` over the request's decode steps (each step
    weighing equally): ``mean`` / ``max`` retained blocks, ``demand`` (largest pool + charged
    blocks), ``live`` (mean live tokens), ``prefix`` and ``shared`` (mean blocks); the
    per-request values that ``block_metrics`` averages over a trial; ``allocated``: mean retained blocks
    plus the step's releases."""
    return dec.groupby(["trial_id", "req_id"]).agg(mean=("retained", "mean"), max=("retained", "max"),
                                                   allocated=("allocated", "mean"),
                                                   demand=("demand", "max"), live=("live_tokens", "mean"),
                                                   prefix=("prefix", "mean"), shared=("shared", "mean"))


def kv_demand_share(demand_blocks: pd.Series, num_gpu_blocks: pd.Series) -> pd.Series:
    """KV-block demand normalised by the usable budget: demand / (pool - 1), vLLM's null
    block being unusable (Fig. 10; > 1: the C requests cannot all be co-resident)."""
    return demand_blocks / (num_gpu_blocks - 1)


def _pool_tokens(steps: pd.DataFrame) -> pd.DataFrame:
    """A copy with ``pool_live`` = live tokens in the pool (live - low tier)."""
    return steps.assign(pool_live=steps.live_tokens - steps.get("low_tokens", 0))


def step_waste(steps: pd.DataFrame) -> pd.DataFrame:
    """Pool-wide occupancy per trial x step (for time-series figures): blocks held, ideal
    blocks, live tokens, waste_f = 1 - live / (B * held) and packing = ideal / held (live:
    the tokens in the pool, a low tier's excluded)."""
    s = _pool_tokens(steps)
    s = s.assign(ideal=ideal_blocks(s.pool_live, s.block_size), capacity=s.blocks_held * s.block_size)
    g = s.groupby(["trial_id", "step"])[["blocks_held", "ideal", "live_tokens", "pool_live", "capacity"]].sum()
    g = g.reset_index()
    g["waste_f"] = 1.0 - g.pool_live / g.capacity
    g["packing_efficiency"] = g.ideal / g.blocks_held
    return g.drop(columns=["capacity", "pool_live"])


def overheads(engine_steps: pd.DataFrame) -> pd.DataFrame:
    """Reclamation overheads per trial: totals of planner CPU, copy and indirection time,
    bytes relocated, blocks freed, bytes_per_block_freed = bytes / blocks (NaN when no
    block was freed), and mean_free_blocks over the steps with a request running."""
    cols = ["planner_cpu_s", "copy_s", "indirection_s", "tokens_relocated", "bytes_relocated", "blocks_freed"]
    out = engine_steps.groupby("trial_id")[cols].sum()
    out["num_steps"] = engine_steps.groupby("trial_id").size()
    # A request waiting after a step was not admitted (or was preempted): the C requests of
    # the closed loop were then not all co-resident in the pool.
    if "num_waiting" in engine_steps:
        out["max_waiting"] = engine_steps.groupby("trial_id").num_waiting.max()
    if {"num_running", "num_free_blocks"} <= set(engine_steps):
        running = engine_steps[engine_steps.num_running > 0]
        out["mean_free_blocks"] = running.groupby("trial_id").num_free_blocks.mean()
    freed = out.blocks_freed.where(out.blocks_freed > 0)
    out["bytes_per_block_freed"] = out.bytes_relocated / freed
    # Per engine step (what packing costs): tokens and bytes moved, and the mean step time
    # (each step from the end of the previous one, the first from the trial's start; the planner,
    # copies and apply of a step are inside it) over the steps with a request running.
    out["tokens_relocated_per_step"] = out.tokens_relocated / out.num_steps
    out["bytes_relocated_per_step"] = out.bytes_relocated / out.num_steps
    if {"step", "t_s"} <= set(engine_steps):
        es = engine_steps.sort_values(["trial_id", "step"])
        took = es.t_s - es.groupby("trial_id").t_s.shift(fill_value=0.0)
        busy = es.num_running > 0 if "num_running" in es else took.notna()
        out["step_ms"] = 1e3 * took[busy].groupby(es.trial_id[busy]).mean()
    return out.reset_index()


def eviction_phases(steps: pd.DataFrame) -> pd.DataFrame:
    """Where each trial's evictions happened: ``prefill_evicted_share``, the share of
    the evicted tokens (logical tokens - live tokens, at a request's last row, summed over the
    trial's requests) already gone when its prompt was first complete (its last prefill row before
    its first decode row: a recompute after a preemption is a prefill of tokens that died in
    decode) -- removed from the prompt in the step that completed it -- the rest removed in decode.
    NaN for a trial that evicted nothing."""
    rows = steps.sort_values(["trial_id", "req_id", "step"], ignore_index=True)
    rows = rows.assign(gone=rows.num_tokens - rows.live_tokens)
    last = rows.groupby(["trial_id", "req_id"]).gone.last()
    decoded = (rows.phase == "decode").groupby([rows.trial_id, rows.req_id]).cummax()
    pre = rows[(rows.phase == "prefill") & ~decoded].groupby(["trial_id", "req_id"]).gone.last()
    total = last.groupby("trial_id").sum()
    prefill = pre.reindex(last.index, fill_value=0).groupby("trial_id").sum()
    share = (prefill / total.where(total > 0)).rename("prefill_evicted_share")
    return pd.concat([share, total.rename("evicted_tokens")], axis=1).reset_index()


def trial_metrics(trials: pd.DataFrame, requests: pd.DataFrame, steps: pd.DataFrame | None = None,
                  engine_steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """All per-trial metrics joined onto the trial table (one row per trial)."""
    out = trials.merge(throughput_latency(requests), on="trial_id", how="left")
    if steps is not None and len(steps):
        out = out.merge(block_metrics(steps), on="trial_id", how="left")
        out = out.merge(eviction_phases(steps), on="trial_id", how="left")
        out["kv_demand_share"] = kv_demand_share(out.kv_demand_blocks, out.num_gpu_blocks)
    if engine_steps is not None and len(engine_steps):
        out = out.merge(overheads(engine_steps), on="trial_id", how="left")
        # Physical pool occupancy (a block shared by several requests counts once).
        if "mean_free_blocks" in out:
            out["pool_blocks_used"] = out.num_gpu_blocks - 1 - out.mean_free_blocks
    return out


@dataclass(frozen=True)
class SlaConfig:
    """SLA-constrained throughput parameters (docs/design.md §6; both k and C_ref are config).

    Attributes:
        k: latency bound factor over the reference.
        c_ref: concurrency of the reference point.
        reference_arm: arm whose latency at c_ref sets the bound.
        latency: per-trial latency column bounded (p95 of e2e by default).
        throughput: per-trial throughput column maximised.
        name: the result column (``sla_throughput``; the per-token variant's
            ``sla_throughput_tpot``).
    """

    k: float = 1.05
    c_ref: int = 8
    reference_arm: str = "naive"
    latency: str = "e2e_p95_s"
    throughput: str = "req_per_s"
    name: str = "sla_throughput"

    def __post_init__(self) -> None:
        if not (np.isfinite(self.k) and self.k > 0):
            raise ValueError(f"k={self.k!r}: must be a finite number > 0")
        if not isinstance(self.c_ref, int) or self.c_ref < 1:
            raise ValueError(f"c_ref={self.c_ref!r}: must be an int >= 1")


def sla_throughput(per_trial: pd.DataFrame, cfg: SlaConfig = SlaConfig(),
                   pair_keys: tuple[str, ...] = ("setup", "pair")) -> pd.DataFrame:
    """Highest throughput over the concurrency grid whose latency <= k x reference latency.

    Within each paired set (``pair_keys``), the bound is k x the reference arm's
    ``cfg.latency`` at ``cfg.c_ref``; for every arm, the candidate points are its trials
    that completed every request and meet the bound; the result is the largest
    ``cfg.throughput`` among them (the smaller C on a tie). An arm with no candidate gets
    ``meets_sla = False`` and NaN throughput and concurrency.

    The same bound read **between** the grid's C (``<name>_interp``, ``sla_concurrency_interp``:
    :func:`sla_between`): the arm's measured points joined in C order, latency and throughput
    linear between neighbours, the largest throughput on that line within the bound. The grid's
    reading moves in steps of a whole C interval when a pair's arm crosses the bound between two
    C; this one moves with the latency.

    Returns:
        One row per pair_keys x arm: sla_bound_s, sla_throughput, sla_concurrency, meets_sla,
        sla_throughput_interp (named ``<name>_interp``), sla_concurrency_interp.

    Raises:
        ValueError: a paired set lacks exactly one reference trial at c_ref.
    """
    rows = []
    for key, g in per_trial.groupby(list(pair_keys), sort=True):
        ref = g[(g.arm == cfg.reference_arm) & (g.concurrency == cfg.c_ref)]
        if len(ref) != 1:
            raise ValueError(f"{dict(zip(pair_keys, key))}: {len(ref)} trials of reference_arm="
                             f"{cfg.reference_arm!r} at c_ref={cfg.c_ref}, need exactly 1")
        bound = cfg.k * float(ref[cfg.latency].iloc[0])
        for arm, a in g.groupby("arm", sort=True):
            ok = a[(a.num_completed == a.num_requests) & (a[cfg.latency] <= bound)]
            best = ok.sort_values([cfg.throughput, "concurrency"], ascending=[False, True]).head(1)
            between, at_c = sla_between(a, bound, cfg)
            rows.append({**dict(zip(pair_keys, key)), "arm": arm, "sla_bound_s": bound,
                         cfg.name: float(best[cfg.throughput].iloc[0]) if len(best) else np.nan,
                         "sla_concurrency": float(best.concurrency.iloc[0]) if len(best) else np.nan,
                         "meets_sla": bool(len(best)), f"{cfg.name}_interp": between,
                         "sla_concurrency_interp": at_c})
    return pd.DataFrame(rows)


def sla_between(arm_trials: pd.DataFrame, bound: float, cfg: SlaConfig) -> tuple[float, float]:
    """(throughput, C) of the highest point within ``bound`` on one arm's line through its measured
    points, in C order: every point that completed its requests and meets the bound, and where the
    latency crosses the bound between two neighbouring C (both completed), the crossing, throughput
    and C linear in the latency there. Nothing is extrapolated beyond the measured C; a trial that
    lost requests cuts the line. (NaN, NaN) when no point qualifies."""
    a = arm_trials.sort_values("concurrency")
    done = (a.num_completed == a.num_requests).to_numpy()
    c, lat, thr = (a[col].to_numpy(dtype=float) for col in ("concurrency", cfg.latency, cfg.throughput))
    points = [(thr[i], c[i]) for i in range(len(a)) if done[i] and lat[i] <= bound]
    for i in range(len(a) - 1):
        if done[i] and done[i + 1] and (lat[i] <= bound) != (lat[i + 1] <= bound):
            f = (bound - lat[i]) / (lat[i + 1] - lat[i])
            points.append((thr[i] + f * (thr[i + 1] - thr[i]), c[i] + f * (c[i + 1] - c[i])))
    if not points:
        return float("nan"), float("nan")
    best = max(points, key=lambda p: (p[0], -p[1]))
    return float(best[0]), float(best[1])


FEASIBILITY_CONDITIONS = ("contract_met", "no_preemption", "co_resident")


def feasibility_conditions(per_trial: pd.DataFrame) -> pd.DataFrame:
    """The three conditions of a feasible trial, each on its own (the paper's "feasible":
    the contract completes, nothing is preempted, all C requests are co-resident):
    contract_met (every request met its output contract), no_preemption, co_resident (no
    engine step left a request waiting: ``max_waiting == 0``; a trial without the column
    counts as co-resident, as before it existed) and ``passes`` = all three."""
    out = pd.DataFrame(index=per_trial.index)
    out["contract_met"] = per_trial.num_contract_met == per_trial.num_requests
    out["no_preemption"] = per_trial.num_preemptions == 0
    waiting = per_trial["max_waiting"] if "max_waiting" in per_trial else pd.Series(0, index=per_trial.index)
    out["co_resident"] = waiting.fillna(0) == 0
    out["passes"] = out[list(FEASIBILITY_CONDITIONS)].all(axis=1)
    return out


def feasible_concurrency(per_trial: pd.DataFrame, pair_keys: tuple[str, ...] = ("setup", "pair")) -> pd.DataFrame:
    """Largest C of the grid at which a trial is feasible under the fixed pool (docs/design.md §6):
    every request met its output contract, none was preempted, and all C requests were
    co-resident (none waiting after admission; ``feasibility_conditions``).

    ``feasible_c`` is the largest passing C (0 when none passes); ``failed_above_c`` the smallest
    C measured above it (every such C failed; NaN when none was measured: the capacity is censored
    at the top of what ran), so the capacity lies in [feasible_c, failed_above_c - 1]
    (``vtoken.bench.analysis.capacity``); ``monotone`` says whether every smaller C measured passed
    too (False flags a non-monotone frontier, which the literal definition does not smooth over).
    Per condition, ``<condition>_c`` is the largest C of the grid at which that condition alone
    held, so a reader sees which one failed first.

    Returns:
        One row per pair_keys x arm: feasible_c, failed_above_c, failed_above_sure, monotone,
        grid_max, contract_met_c, no_preemption_c, co_resident_c. Where no C above ``feasible_c``
        was measured but ``feasible_c + 1`` is the arm's sure failure on the pair's sample (the
        trials' ``sure_failure_c``: the C its requests at their budget cannot fit the pool, which
        the capacity search never runs), ``failed_above_c`` is that C and ``failed_above_sure``
        True: the capacity is exact without a trial that could only fail.
    """
    rows = []
    cond = feasibility_conditions(per_trial)
    for key, g in per_trial.groupby(list(pair_keys) + ["arm"], sort=True):
        c = cond.loc[g.index]
        passed = c.passes
        feasible = int(g.concurrency[passed].max()) if passed.any() else 0
        below = g[g.concurrency <= feasible]
        above = g.concurrency[g.concurrency > feasible]
        failed_above = float(above.min()) if len(above) else float("nan")
        # the sure failure (pool arithmetic, never run) right above the last pass closes the interval
        sure = int(g["sure_failure_c"].max()) if "sure_failure_c" in g else 0
        by_sure = not len(above) and sure > 0 and feasible == sure - 1
        row = {**dict(zip(list(pair_keys) + ["arm"], key)), "feasible_c": feasible,
               "failed_above_c": float(sure) if by_sure else failed_above, "failed_above_sure": by_sure,
               "monotone": bool(passed[below.index].all()), "grid_max": int(g.concurrency.max())}
        for name in FEASIBILITY_CONDITIONS:
            row[f"{name}_c"] = int(g.concurrency[c[name]].max()) if c[name].any() else 0
        rows.append(row)
    return pd.DataFrame(rows)
