"""docs/design.md §6 metrics on hand-made tables with answers worked out by hand."""

import numpy as np
import pandas as pd
import pytest

from vtoken.bench.analysis import metrics
from vtoken.bench.analysis.metrics import SlaConfig


def _requests():
    # trial t1: three completed requests and one aborted one (worked out in the comments).
    rows = [
        # req, arrival, first, finish, out, max, reason, preempt
        ("r0", 0.0, 1.0, 5.0, 5, 5, "stop", 0),     # e2e 5, ttft 1, tpot 4/4 = 1
        ("r1", 1.0, 2.0, 4.0, 3, 8, "length", 0),   # e2e 3, ttft 1, tpot 2/2 = 1
        ("r2", 2.0, 4.0, 10.0, 4, 4, "length", 0),  # e2e 8, ttft 2, tpot 6/3 = 2
        ("r3", 0.0, np.nan, np.nan, 0, 4, "abort", 2),
    ]
    df = pd.DataFrame(rows, columns=["req_id", "arrival_s", "first_token_s", "finish_s", "output_tokens",
                                     "max_tokens", "finish_reason", "num_preemptions"])
    return df.assign(trial_id="t1", arm="naive", req_index=range(4))


def test_request_latencies_exact():
    lat = metrics.request_latencies(_requests())
    assert lat.completed.tolist() == [True, True, True, False]
    assert lat.e2e_s.tolist()[:3] == [5.0, 3.0, 8.0]
    assert lat.ttft_s.tolist()[:3] == [1.0, 1.0, 2.0]
    assert lat.tpot_s.tolist()[:3] == [1.0, 1.0, 2.0]
    assert np.isnan(lat.e2e_s[3]) and np.isnan(lat.tpot_s[3])


def test_throughput_latency_exact():
    row = metrics.throughput_latency(_requests()).iloc[0]
    assert (row.num_requests, row.num_completed, row.num_contract_met, row.num_preemptions) == (4, 3, 2, 2)
    assert row.duration_s == 10.0  # last finish 10 - first arrival 0
    assert row.output_tok_per_s == pytest.approx(12 / 10)
    assert row.req_per_s == pytest.approx(3 / 10)
    assert row.e2e_p50_s == 5.0
    assert row.e2e_p95_s == pytest.approx(5 + 0.9 * 3)  # linear between 5 and 8 at rank 1.9
    assert row.ttft_p95_s == pytest.approx(1.9)
    assert row.tpot_p50_s == 1.0


def test_throughput_latency_of_no_requests_is_empty():
    assert metrics.throughput_latency(_requests().iloc[:0]).empty


def test_tpot_undefined_for_single_token_output():
    df = _requests().iloc[:1].assign(output_tokens=1, max_tokens=1)
    assert np.isnan(metrics.request_latencies(df).tpot_s[0])


def _steps():
    # B = 4. Request a: prefill row (excluded) then 3 decode rows; request b: 2 decode rows.
    rows = [
        # req, phase, held, live, le25, 25_50     block fills
        ("a", "prefill", 3, 10, 0, 1),            # [4,4,2]
        ("a", "decode", 3, 6, 2, 0),              # [4,1,1]
        ("a", "decode", 3, 5, 1, 2),              # [2,2,1]
        ("a", "decode", 2, 5, 1, 0),              # [4,1]
        ("b", "decode", 1, 4, 0, 0),              # [4]
        ("b", "decode", 2, 5, 1, 0),              # [4,1]
    ]
    df = pd.DataFrame(rows, columns=["req_id", "phase", "blocks_held", "live_tokens",
                                     "blocks_util_le_25", "blocks_util_25_50"])
    return df.assign(trial_id="t1", arm="naive", step=range(6), t_s=0.0, num_tokens=12, block_size=4)


def test_block_metrics_exact():
    row = metrics.block_metrics(_steps()).iloc[0]
    assert row.retained_blocks == pytest.approx(((3 + 3 + 2) / 3 + (1 + 2) / 2) / 2)
    assert row.retained_blocks_peak == pytest.approx((3 + 2) / 2)
    assert row.packing_efficiency == pytest.approx(9 / 11)  # ideal 2+2+2+1+2 over held 11
    assert row.waste_f == pytest.approx(1 - 25 / 44)        # live 25 over capacity 11*4
    assert row.frac_util_le_25 == pytest.approx(5 / 11)
    assert row.frac_util_25_50 == pytest.approx(2 / 11)
    assert row.num_decode_rows == 5
    assert row.allocated_blocks == row.retained_blocks  # no step released a block


def test_allocated_blocks_add_each_steps_releases_back():
    # request a gives one block back in its 3rd decode row (3 -> 2 held), b one in its 1st: what the
    # scheduler handed out at those steps is one block more than what is held after them
    row = metrics.block_metrics(_steps().assign(released=[0, 0, 0, 1, 1, 0])).iloc[0]
    assert row.retained_blocks == pytest.approx(((3 + 3 + 2) / 3 + (1 + 2) / 2) / 2)
    assert row.allocated_blocks == pytest.approx(((3 + 3 + 3) / 3 + (2 + 2) / 2) / 2)


def test_block_metrics_count_side_storage_and_exclude_low_tier_from_packing():
    # Request b's second decode row: 2 low-tier tokens outside the pool, charged as 1 block.
    steps = _steps().assign(charged_blocks=[0, 0, 0, 0, 0, 1], low_tokens=[0, 0, 0, 0, 0, 2],
                            live_tokens=[10, 6, 5, 5, 4, 7])
    row = metrics.block_metrics(steps).iloc[0]
    assert row.retained_blocks == pytest.approx(((3 + 3 + 2) / 3 + (1 + 3) / 2) / 2)
    assert row.retained_blocks_peak == pytest.approx((3 + 3) / 2)
    assert row.packing_efficiency == pytest.approx(9 / 11)  # pool live of b's row is 5: ideal 2
    assert row.waste_f == pytest.approx(1 - 25 / 44)


def test_live_tokens_and_kv_demand_exact():
    """Fig. 10's demand on the hand-made steps: request a peaks at 3 decode blocks, b at 2
    (+1 charged in the second variant); demand = their sum, share = demand / (pool - 1)."""
    row = metrics.block_metrics(_steps()).iloc[0]
    assert row.live_tokens == pytest.approx(((6 + 5 + 5) / 3 + (4 + 5) / 2) / 2)
    assert row.kv_demand_blocks == 3 + 2
    charged = metrics.block_metrics(_steps().assign(charged_blocks=[0, 0, 0, 0, 0, 1])).iloc[0]
    assert charged.kv_demand_blocks == 3 + 3


def test_side_storage_is_fractional_in_retained_blocks_and_whole_in_demand():
    """Zipage at B = 16: the query cache is 1.5 block-equivalents, handed out as 2 blocks.
    Retained blocks (memory per request) count 1.5; the pool's demand counts 2."""
    steps = _steps().assign(charged_blocks=2, side_blocks=1.5)
    row = metrics.block_metrics(steps).iloc[0]
    assert row.retained_blocks == pytest.approx(((3 + 3 + 2) / 3 + (1 + 2) / 2) / 2 + 1.5)
    assert row.retained_blocks_peak == pytest.approx((3 + 2) / 2 + 1.5)
    assert row.kv_demand_blocks == (3 + 2) + (2 + 2)
    trials = pd.DataFrame({"trial_id": ["t1"], "num_gpu_blocks": [6]})
    reqs = _requests().assign(trial_id="t1")
    got = metrics.trial_metrics(trials, reqs, _steps()).iloc[0]
    assert got.kv_demand_share == pytest.approx(5 / 5)  # 6 blocks, one of them the null block


def test_ideal_blocks_is_ceiling():
    got = metrics.ideal_blocks(pd.Series([0, 1, 16, 17, 32]), pd.Series([16] * 5))
    assert got.tolist() == [0, 1, 1, 2, 2]


def test_step_waste_pools_requests_per_step():
    steps = pd.DataFrame({"trial_id": "t", "step": [0, 0, 1], "blocks_held": [2, 1, 4], "live_tokens": [3, 4, 4],
                          "block_size": 4})
    got = metrics.step_waste(steps)
    assert got.waste_f.tolist() == pytest.approx([1 - 7 / 12, 1 - 4 / 16])
    assert got.packing_efficiency.tolist() == pytest.approx([2 / 3, 1 / 4])


def test_overheads_bytes_per_block_freed():
    eng = pd.DataFrame({"trial_id": ["v", "v", "n"], "planner_cpu_s": [0.1, 0.2, 0.0], "copy_s": [0.01, 0.02, 0.0],
                        "indirection_s": [0.0, 0.1, 0.0], "tokens_relocated": [10, 30, 0],
                        "bytes_relocated": [1000, 3000, 0],
                        "blocks_freed": [1, 3, 0]})
    got = metrics.overheads(eng).set_index("trial_id")
    assert got.loc["v", "bytes_per_block_freed"] == 1000.0
    assert got.loc["v", "planner_cpu_s"] == pytest.approx(0.3)
    assert np.isnan(got.loc["n", "bytes_per_block_freed"])


def _grid():
    # p95 latency and throughput per arm x concurrency; naive at C_ref = 8 sets the bound.
    rows = [("naive", 4, 2.0, 1.0), ("naive", 8, 4.0, 1.8), ("naive", 16, 9.0, 2.0),
            ("vtoken", 4, 1.5, 1.1), ("vtoken", 8, 3.0, 2.0), ("vtoken", 16, 4.1, 2.6),
            ("holefill", 4, 4.3, 1.2), ("holefill", 8, 5.0, 1.9)]
    df = pd.DataFrame(rows, columns=["arm", "concurrency", "e2e_p95_s", "req_per_s"])
    return df.assign(setup="s", pair=0, num_requests=8, num_completed=8)


def test_sla_throughput_default_bound():
    got = metrics.sla_throughput(_grid()).set_index("arm")
    assert got.loc["naive", "sla_bound_s"] == pytest.approx(4.2)
    assert (got.loc["naive", "sla_throughput"], got.loc["naive", "sla_concurrency"]) == (1.8, 8)
    assert (got.loc["vtoken", "sla_throughput"], got.loc["vtoken", "sla_concurrency"]) == (2.6, 16)
    assert not got.loc["holefill", "meets_sla"] and np.isnan(got.loc["holefill", "sla_throughput"])


def test_sla_read_between_the_grids_c_follows_the_latency_to_the_bound():
    got = metrics.sla_throughput(_grid()).set_index("arm")
    # naive: C = 8 at 4.0 s meets 4.2, C = 16 at 9.0 s does not: the line crosses 4.2 at 4 % of the way
    assert got.loc["naive", "sla_throughput_interp"] == pytest.approx(1.8 + 0.04 * 0.2)
    assert got.loc["naive", "sla_concurrency_interp"] == pytest.approx(8 + 0.04 * 8)
    # vtoken meets the bound at every C: its best measured point, nothing extrapolated beyond C = 16
    assert (got.loc["vtoken", "sla_throughput_interp"], got.loc["vtoken", "sla_concurrency_interp"]) == (2.6, 16)
    assert np.isnan(got.loc["holefill", "sla_throughput_interp"])  # above the bound at every C
    lost = _grid()
    lost.loc[(lost.arm == "naive") & (lost.concurrency == 16), "num_completed"] = 7
    got = metrics.sla_throughput(lost).set_index("arm")
    assert got.loc["naive", "sla_throughput_interp"] == 1.8  # a trial that lost requests cuts the line
    # a point above the bound between two within it: both crossings count, the best point wins
    bumpy = pd.DataFrame([("naive", 4, 2.0, 1.0), ("naive", 8, 4.0, 1.5), ("odd", 4, 5.2, 1.2), ("odd", 8, 3.2, 1.4)],
                         columns=["arm", "concurrency", "e2e_p95_s", "req_per_s"])
    got = metrics.sla_throughput(bumpy.assign(setup="s", pair=0, num_requests=8, num_completed=8),
                                 SlaConfig(c_ref=4, k=2.1)).set_index("arm")
    assert got.loc["odd", "sla_throughput_interp"] == 1.4 and got.loc["odd", "sla_concurrency_interp"] == 8
    assert got.loc["naive", "sla_throughput_interp"] == 1.5


def test_sla_throughput_k_and_cref_are_config():
    tight = metrics.sla_throughput(_grid(), SlaConfig(k=1.0)).set_index("arm")
    assert tight.loc["vtoken", "sla_throughput"] == 2.0  # 4.1 > 4.0 now
    low_ref = metrics.sla_throughput(_grid(), SlaConfig(c_ref=4)).set_index("arm")
    assert low_ref.loc["naive", "sla_bound_s"] == pytest.approx(2.1)
    assert low_ref.loc["vtoken", "sla_throughput"] == 1.1


def test_sla_throughput_skips_trials_with_failed_requests():
    grid = _grid()
    grid.loc[(grid.arm == "vtoken") & (grid.concurrency == 16), "num_completed"] = 7
    got = metrics.sla_throughput(grid).set_index("arm")
    assert got.loc["vtoken", "sla_throughput"] == 2.0


def test_sla_throughput_needs_the_reference_point():
    with pytest.raises(ValueError, match="c_ref=32"):
        metrics.sla_throughput(_grid(), SlaConfig(c_ref=32))


def test_feasible_concurrency():
    rows = [  # arm, C, contract met, preemptions   (num_requests = 16)
        ("naive", 2, 16, 0), ("naive", 4, 16, 0), ("naive", 8, 16, 1), ("naive", 16, 15, 0),
        ("vtoken", 2, 16, 0), ("vtoken", 4, 16, 0), ("vtoken", 8, 16, 0), ("vtoken", 16, 16, 0),
        ("odd", 2, 15, 0), ("odd", 4, 16, 0), ("none", 2, 0, 3),
    ]
    df = pd.DataFrame(rows, columns=["arm", "concurrency", "num_contract_met", "num_preemptions"])
    got = metrics.feasible_concurrency(df.assign(setup="s", pair=0, num_requests=16)).set_index("arm")
    assert got.feasible_c.to_dict() == {"naive": 4, "none": 0, "odd": 4, "vtoken": 16}
    assert got.monotone.to_dict() == {"naive": True, "none": True, "odd": False, "vtoken": True}


def test_feasibility_needs_every_request_co_resident():
    rows = [  # arm, C, contract met, preemptions, max waiting after a step   (num_requests = 16)
        ("naive", 2, 16, 0, 0), ("naive", 4, 16, 0, 2), ("naive", 8, 16, 0, 5),  # held back at admission from C = 4
        ("vtoken", 2, 16, 0, 0), ("vtoken", 4, 16, 0, 0), ("vtoken", 8, 16, 1, 1),
    ]
    df = pd.DataFrame(rows, columns=["arm", "concurrency", "num_contract_met", "num_preemptions", "max_waiting"])
    df = df.assign(setup="s", pair=0, num_requests=16)
    cond = metrics.feasibility_conditions(df)
    assert list(cond.co_resident) == [True, False, False, True, True, False]
    assert list(cond.passes) == [True, False, False, True, True, False]
    got = metrics.feasible_concurrency(df).set_index("arm")
    assert got.feasible_c.to_dict() == {"naive": 2, "vtoken": 4}  # naive completes C = 8, but not co-resident
    assert got.contract_met_c.to_dict() == {"naive": 8, "vtoken": 8}
    assert got.no_preemption_c.to_dict() == {"naive": 8, "vtoken": 4}
    assert got.co_resident_c.to_dict() == {"naive": 2, "vtoken": 4}
    # the waiting count comes from the engine steps: the largest num_waiting of the trial
    steps = pd.DataFrame({"trial_id": ["a", "a", "a", "b"], "num_waiting": [0, 3, 0, 0], "planner_cpu_s": 0.0,
                          "copy_s": 0.0, "indirection_s": 0.0, "tokens_relocated": 0, "bytes_relocated": 0,
                          "blocks_freed": 0})
    assert metrics.overheads(steps).set_index("trial_id").max_waiting.to_dict() == {"a": 3, "b": 0}


def test_moves_and_step_time_per_step_exact():
    # trial v: 3 steps ending at 0.10, 0.25, 0.45 s (durations 100, 150, 200 ms), the last with
    # nothing running (not a step of the trial's work); trial n: 2 steps of 50 ms.
    eng = pd.DataFrame({"trial_id": ["v", "v", "v", "n", "n"], "step": [0, 1, 2, 0, 1],
                        "t_s": [0.10, 0.25, 0.45, 0.05, 0.10], "num_running": [2, 1, 0, 1, 1],
                        "planner_cpu_s": 0.0, "copy_s": 0.0, "indirection_s": 0.0,
                        "tokens_relocated": [6, 0, 3, 0, 0], "bytes_relocated": [600, 0, 300, 0, 0],
                        "blocks_freed": [1, 0, 1, 0, 0]})
    got = metrics.overheads(eng.sample(frac=1.0, random_state=0)).set_index("trial_id")  # row order must not matter
    assert got.loc["v", "step_ms"] == pytest.approx(125.0)
    assert got.loc["n", "step_ms"] == pytest.approx(50.0)
    assert got.loc["v", "tokens_relocated_per_step"] == pytest.approx(3.0)
    assert got.loc["v", "bytes_relocated_per_step"] == pytest.approx(300.0)
    assert got.loc["n", "tokens_relocated_per_step"] == 0.0


def test_eviction_phases_split_prefill_from_decode():
    # request a: a 20-token prompt pruned to 12 in the step that completed it (8 gone in prefill),
    # then 3 more gone in decode; request b: nothing gone in prefill, 5 in decode; c evicts nothing.
    # b is preempted after its decode and recomputed (a prefill of 13 tokens, 5 of them dead in decode):
    # those 5 count as decode evictions.
    rows = [("a", 0, "prefill", 10, 10), ("a", 1, "prefill", 20, 12), ("a", 2, "decode", 21, 12),
            ("a", 3, "decode", 23, 12), ("b", 1, "prefill", 8, 8), ("b", 2, "decode", 13, 8),
            ("b", 5, "prefill", 13, 8), ("b", 6, "decode", 14, 9), ("c", 0, "prefill", 4, 4), ("c", 1, "decode", 5, 5)]
    steps = pd.DataFrame(rows, columns=["req_id", "step", "phase", "num_tokens", "live_tokens"]).assign(trial_id="t")
    none = steps[steps.req_id == "c"].assign(trial_id="u")
    got = metrics.eviction_phases(pd.concat([steps, none]).iloc[::-1]).set_index("trial_id")
    assert got.loc["t", "evicted_tokens"] == 16
    assert got.loc["t", "prefill_evicted_share"] == pytest.approx(8 / 16)
    assert np.isnan(got.loc["u", "prefill_evicted_share"])
