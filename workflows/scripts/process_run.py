"""Raw trials of the configured setups -> the processed tables of one run.

Reads exactly the trials each setup's completion marker lists (``rawio.read_done``: every
planned trial of the setup and every capacity-search probe, each checked to exist); nothing else in
the raw folders.

Writes under ``data/processed/<run>/`` (every figure and table reads these only):

- ``trials``, ``comparisons``, ``sla``, ``feasibility``, ``quality_requests``, ``exactness``,
  ``best_baseline``, ``capacity``, ``capacity_probes``: ``vtoken.bench.analysis.process``
  (docs/metrics.md; the probes count for ``feasibility`` and ``capacity`` only, ``trials`` and
  everything per C hold the fixed grid's trials), plus per-trial derived columns: ``passes``
  (contract met, no preemption, all C requests co-resident: the feasibility test of one trial;
  each condition also as its own column) and the overhead shares
  of the trial's duration (``planner_share``, ``copy_share``, ``indirection_share``);
- ``summary``: per setup x C x arm x metric, n, n_samples (distinct request samples), mean
  and the 95 % t interval of the mean over pairs (``vtoken.bench.analysis.stats.mean_interval``); C is empty for the grid metrics
  (SLA throughput, feasible C);
- ``pool_steps``: pool-wide blocks held and ideal blocks per trial x decode step
  (``metrics.step_waste``), for the block-demand figure;
- ``setups``: what each setup varies (model, workload, role, block size, ratio, θ_F, a factorial
  cell's factors);
- ``frontiers``, ``equal_memory``, ``factorial_exactness``: the factorial's memory-quality frontiers,
  its equal-memory comparisons and the token mechanisms' per-token exactness per budget
  (``vtoken.bench.analysis.factorial``; header only without a factorial);
- ``forced_requests``, ``forced_curve``: the teacher-forced quality per trial x request and per
  output position (``vtoken.bench.analysis.forced``; header only without a forced setup).

A table with no rows (e.g. no contract workload, so no feasibility) is written with its
header only, so every output exists.
"""

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from vtoken.bench.analysis import capacity, factorial, forced, metrics, plane, process, stats
from vtoken.bench.raw import rawio

logger = logging.getLogger("process_run")

SUMMARISED = (
    "retained_blocks", "retained_blocks_peak", "allocated_blocks", "packing_efficiency", "waste_f", "frac_util_le_25",
    "frac_util_25_50", "output_tok_per_s", "req_per_s", "e2e_p95_s", "ttft_p95_s", "tpot_p95_s",
    "passes", "contract_met", "no_preemption", "co_resident", "max_waiting", "planner_share", "copy_share",
    "indirection_share", "overhead_share",
    "bytes_per_block_freed", "rouge_l_mean", "length_ratio_median", "num_preemptions",
    "kl_mean", "dnll_mean", "top1_mean", "nll_mean", "answer_nll_mean",
    "live_tokens", "kv_demand_blocks", "kv_demand_share",
    "retained_prefix_blocks", "retained_private_blocks", "shared_blocks_mean", "pool_blocks_used",
    "step_ms", "tokens_relocated_per_step", "bytes_relocated_per_step", "prefill_evicted_share", "evicted_tokens",
)
GRID_SUMMARISED = {"sla": "sla_throughput", "sla_tpot": "sla_throughput_tpot", "feasibility": "feasible_c"}
EMPTY_COLUMNS = {
    "sla": ["setup", "pair", "arm", "sla_bound_s", "sla_throughput", "sla_concurrency", "meets_sla",
            "sla_throughput_interp", "sla_concurrency_interp"],
    "sla_tpot": ["setup", "pair", "arm", "sla_bound_s", "sla_throughput_tpot", "sla_concurrency", "meets_sla",
                 "sla_throughput_tpot_interp", "sla_concurrency_interp"],
    "feasibility": ["setup", "pair", "arm", "feasible_c", "failed_above_c", "monotone", "grid_max", "contract_met_c", "no_preemption_c",
                    "co_resident_c", "sample_sha256"],
    "quality_requests": ["trial_id", "req_index", "rouge_l", "length_ratio", "identical"],
    "comparisons": ["setup", "concurrency", "metric", "arm", "baseline", "kind", "n", "n_samples", "n_excluded",
                    "estimate", "ci_low", "ci_high", "confidence", "method", "deterministic"],
    "exactness": ["setup", "concurrency", "pair", "req_index", "arms_present", "checked", "reason", "identical",
                  "differing_arms", "rouge_l_min"],
}
EMPTY_COLUMNS["best_baseline"] = EMPTY_COLUMNS["comparisons"] + ["selected_by", "chosen_at", "arm_live_tokens",
                                                                    "baseline_live_tokens", "reference_live_tokens"]
EMPTY_COLUMNS["plane"] = plane.COLUMNS
EMPTY_COLUMNS["capacity"] = ["setup", *capacity.COLUMNS[1:]]
EMPTY_COLUMNS["forced_requests"] = ["trial_id", "req_index", *forced.TOKEN_METRICS, "answer_nll", "tokens"]
EMPTY_COLUMNS["forced_curve"] = ["setup", "concurrency", "arm", "pos", "n", "kl", "dnll", "top1"]


def derive(trials: pd.DataFrame) -> pd.DataFrame:
    """Per-trial columns the figures need beyond ``metrics.trial_metrics``."""
    out = trials.copy()
    for name, col in metrics.feasibility_conditions(out).items():  # contract_met, no_preemption, co_resident, passes
        out[name] = col.astype(float)
    for name in ("planner", "copy", "indirection"):
        col = "planner_cpu_s" if name == "planner" else f"{name}_s"
        out[f"{name}_share"] = out[col] / out.duration_s if col in out else np.nan
    out["overhead_share"] = out[["planner_share", "copy_share", "indirection_share"]].sum(axis=1, min_count=1)
    return out


def main(smk) -> None:
    out = dict(smk.output.items())
    setups = pd.DataFrame(smk.params.setups)
    raw_dirs = [folder for done in smk.input.done for folder in rawio.read_done(done)]
    sla = metrics.SlaConfig(k=float(smk.params.sla["k"]), c_ref=int(smk.params.sla["c_ref"]),
                            reference_arm=smk.params.baseline, latency=smk.params.sla["latency"])
    written = process.process(raw_dirs, Path(out["trials"]).parent, sla, smk.params.baseline, smk.params.seed,
                              k_tpot=float(smk.params.sla["k_tpot"]), partners=dict(smk.params.budget_partners))
    trials = derive(pd.read_csv(written["trials"]))
    probes = pd.read_csv(written["capacity_probes"])
    if len(trials) + len(probes) != len(raw_dirs):
        raise ValueError(f"{len(trials)} trials and {len(probes)} capacity-search probes processed, but the setups' "
                         f"markers list {len(raw_dirs)}")
    process.write_csv(trials, Path(out["trials"]))
    for name in ("sla", "sla_tpot", "feasibility", "quality_requests", "comparisons", "exactness", "best_baseline",
                 "plane", "forced_requests", "forced_curve", "capacity"):
        if name not in written or _empty(written[name]):
            process.write_csv(pd.DataFrame(columns=EMPTY_COLUMNS[name]), Path(out[name]))
    parts = [stats.summarise(trials, ["setup", "concurrency", "arm"], SUMMARISED)]
    for name, col in GRID_SUMMARISED.items():
        grid = pd.read_csv(out[name])
        if len(grid):
            parts.append(stats.summarise(grid.assign(concurrency=np.nan), ["setup", "concurrency", "arm"], [col]))
    process.write_csv(pd.concat(parts, ignore_index=True), Path(out["summary"]))
    raw = process.load_raw(raw_dirs)
    decode = raw["steps"][(raw["steps"].phase == "decode") & raw["steps"].trial_id.isin(trials.trial_id)]
    pool = metrics.step_waste(decode).merge(
        trials[["trial_id", "setup", "arm", "concurrency", "pair"]], on="trial_id", how="left")
    process.write_csv(pool, Path(out["pool_steps"]))
    process.write_csv(setups, Path(out["setups"]))
    tq = forced.token_quality(raw["tokens"], raw["trials"])
    process.write_csv(factorial.exactness(tq, raw["trials"], raw["requests"], setups), Path(out["factorial_exactness"]))
    cells = factorial.points(trials, setups)
    process.write_csv(factorial.frontiers(cells), Path(out["frontiers"]))
    process.write_csv(factorial.equal_memory(cells, dict(smk.params.margins)), Path(out["equal_memory"]))
    logger.info("%d trials of %d setups -> %s", len(trials), len(setups), sorted(out))


def _empty(path) -> bool:
    """True for a CSV without rows (then rewritten with its known header)."""
    try:
        return pd.read_csv(path).empty
    except pd.errors.EmptyDataError:
        return True


if __name__ == "__main__":
    logging.basicConfig(filename=snakemake.log[0], level=logging.INFO,  # noqa: F821
                        format="%(levelname)s %(name)s: %(message)s")
    main(snakemake)  # noqa: F821
