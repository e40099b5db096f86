"""The factorial (issue 44): the grid expands granularity x scorer x budget exactly and refuses what a
mechanism cannot run before any job; the equal-memory reading off hand-made frontiers, exactly; the
capability verdict of the claims table on hand-made levels."""

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from vtoken.bench.analysis import factorial as F
from vtoken.bench.analysis import verdicts as v
from vtoken.bench.grid import factorial as grid_factorial
from vtoken.bench.grid import setups as grid

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())
BUDGETS = (48, 64, 96, 128)
MECHS = ("naive", "vtoken", "vtoken_eager", "paged_eviction_policy")


# ---- the grid -------------------------------------------------------------------------------------

def test_the_default_factorial_is_every_mechanism_at_every_budget_per_scorer():
    # H2O in the default since issue 47 (vk_norm in the extended profile): both, as there
    assert [s.policy for s in grid.setups(CONFIG) if s.role == "factorial"] == ["h2o"]
    config = copy.deepcopy(CONFIG)
    config["factorial"]["scorers"] = ["h2o", "vk_norm"]
    got = [s for s in grid.setups(config) if s.role == "factorial"]
    assert [(s.name, s.policy, s.concurrency) for s in got] == [
        ("smollm2-135m.contract-128-s0.h2o.factorial", "h2o", (8,)),
        ("smollm2-135m.contract-128-s0.vk_norm.factorial", "vk_norm", (8,))]
    h2o, vk = got
    cells = [f"{m}.b{b}" for m in MECHS for b in BUDGETS]
    assert h2o.arms == ("full", *cells)
    assert h2o.factors["vtoken_eager.b96"] == {"mechanism": "vtoken_eager", "granularity": "token", "budget": 96}
    assert h2o.factors["paged_eviction_policy.b48"] == {"mechanism": "paged_eviction_policy", "granularity": "block",
                                                        "budget": 48}
    assert h2o.variants == {c: ("paged_eviction" if c.startswith("paged") else "naive" if c.startswith("naive")
                                else "vtoken") for c in cells}
    # every cell keeps its own budget; the block mechanism ranks by the setup's scorer, with its protections
    assert h2o.arm_settings["naive.b48"] == {"budget": 48}
    assert h2o.arm_settings["vtoken_eager.b128"] == {"arm_options": {"packing": "eager"}, "budget": 128}
    assert vk.arm_settings["paged_eviction_policy.b64"] == {"budget": 64, "arm_options": {"score": "vk_norm",
                                                                                          "protect": "policy"}}
    args = grid.trial_args(config, vk, "r", "p")
    for expected in ("--policy=vk_norm", "--concurrency=8", "--pairs=4", "--first-pair=0", "--num-gpu-blocks=65",
                     "--arms=full," + ",".join(cells), "--budget=48", "--arm-concurrency={}"):
        assert expected in args, expected
    assert not any(a.startswith("--ratio") for a in args)
    settings = json.loads(next(a for a in args if a.startswith("--arm-settings="))[len("--arm-settings="):])
    assert sorted(settings) == sorted(cells) and settings["paged_eviction_policy.b128"]["budget"] == 128
    assert json.loads(h2o.row()["factors"]) == h2o.factors  # the setups table carries the design


def test_no_scorers_no_factorial():
    cfg = copy.deepcopy(CONFIG)
    cfg["factorial"]["scorers"] = []
    grid.check(cfg, root=str(REPO))
    assert not [s for s in grid.setups(cfg) if s.role == "factorial"]


@pytest.mark.parametrize(("change", "key", "message"), [
    # a scorer the block mechanism cannot rank by (a kvpress press has no per-token keep score)
    (lambda f: f.update(scorers=["h2o", "kvpress:KnormPress"]), "factorial.scorers", "cannot rank by it"),
    (lambda f: f.update(scorers=["nope"]), "factorial.scorers", "nope"),
    # a self-evicting baseline is no token granularity; PagedEviction with its own first-block rule is not
    # the mechanism under the scorer
    (lambda f: f["granularity"].update(token=["naive", "zipage"]), "factorial.granularity.token", "zipage"),
    (lambda f: f["granularity"].update(block=["paged_eviction"]), "factorial.granularity.block", "score: policy"),
    (lambda f: f["granularity"].update(block=["nope"]), "factorial.granularity.block", "not an arm or variant"),
    # PagedEviction's own assert: budget >= 3 B
    (lambda f: f["decode"].update(budgets=[32, 64]), "factorial.decode.budgets", ">= 3 x block_size = 48"),
    (lambda f: f["decode"].update(workload="nope-s0"), "factorial.decode.workload", "not one of workloads"),
    (lambda f: f.update(concurrency=32), "factorial.concurrency", "trial.num_requests"),
    (lambda f: f["prefill"].update(kept=[1.5]), "factorial.prefill.kept", "(0, 1)"),
])
def test_what_a_mechanism_cannot_run_is_refused_before_any_job(change, key, message):
    cfg = copy.deepcopy(CONFIG)
    change(cfg["factorial"])
    with pytest.raises(ValueError) as err:
        grid.check(cfg, root=str(REPO))
    assert f"config key {key!r}" in str(err.value) and message in str(err.value), str(err.value)


def test_cell_names_are_valid_variant_names():
    assert grid_factorial.cell_name("paged_eviction_policy", 48) == "paged_eviction_policy.b48"


# ---- the frontiers, by hand -----------------------------------------------------------------------

def test_quality_at_interpolates_between_the_bracketing_budgets_and_never_extrapolates():
    x, y = [3, 4, 6, 8], [0.5, 0.6, 0.8, 0.9]
    assert F.quality_at(x, y, 5.0) == pytest.approx(0.7)
    assert F.quality_at(x, y, 3.0) == pytest.approx(0.5)
    assert F.quality_at(x, y, 8.0) == pytest.approx(0.9)
    assert np.isnan(F.quality_at(x, y, 2.9)) and np.isnan(F.quality_at(x, y, 8.1))
    assert F.quality_at([4, 3, 6], [0.6, 0.5, 0.8], 3.5) == pytest.approx(0.55)  # budgets in any order
    assert F.quality_at([4, 4, 6], [0.5, 0.7, 0.8], 4.0) == pytest.approx(0.6)  # equal blocks: their mean


def test_blocks_at_is_the_first_crossing_and_refuses_a_frontier_that_starts_above():
    x, y = [3, 4, 6, 8], [0.5, 0.6, 0.8, 0.9]
    assert F.blocks_at(x, y, 0.7) == pytest.approx(5.0)
    assert F.blocks_at(x, y, 0.5) == pytest.approx(3.0)
    assert np.isnan(F.blocks_at(x, y, 0.95)) and np.isnan(F.blocks_at(x, y, 0.4))
    # not monotone: the fewest blocks that reach q
    assert F.blocks_at([2, 4, 6], [0.5, 0.9, 0.7], 0.8) == pytest.approx(3.5)


def _run(token_x, token_y, block_x, block_y, pairs=3, jitter=0.1):
    """A processed run of one factorial setup: T (token) and K (block) at four budgets, pair p's T
    blocks shifted by ``jitter`` x p (so the intervals have spread)."""
    setups = pd.DataFrame([{"setup": "s", "role": "factorial", "policy": "h2o", "workload": "w", "factors": json.dumps(
        {f"{m}.b{b}": {"mechanism": m, "granularity": g, "budget": b} for m, g in (("T", "token"), ("K", "block"))
         for b in BUDGETS})}, {"setup": "main", "role": "main", "policy": "h2o", "workload": "w", "factors": ""}])
    rows = []
    for p in range(pairs):
        for m, xs, ys, shift in (("T", token_x, token_y, jitter * p), ("K", block_x, block_y, 0.0)):
            for b, x, y in zip(BUDGETS, xs, ys):
                rows.append({"setup": "s", "arm": f"{m}.b{b}", "pair": p, "concurrency": 8, "sample_sha256": f"p{p}",
                             "retained_blocks": x + shift, "rouge_l_mean": y, "live_tokens": b, "step_ms": 40.0 + p,
                             "bytes_relocated_per_step": 100.0 * p, "tokens_relocated_per_step": p,
                             "num_preemptions": 0})
    rows.append({"setup": "main", "arm": "naive", "pair": 0, "concurrency": 8, "retained_blocks": 1.0})
    return pd.DataFrame(rows), setups


def _levels(table, axis):
    return table[table.axis == axis].set_index("level_budget")


def test_a_token_frontier_left_of_the_block_frontier_reads_better_at_equal_memory_with_exact_values():
    trials, setups = _run([3, 4, 6, 8], [0.5, 0.6, 0.8, 0.9], [4, 5, 7, 9], [0.5, 0.6, 0.8, 0.9])
    front = F.frontiers(F.points(trials, setups))
    blocks = front[(front.mechanism == "T") & (front.metric == "retained_blocks")].set_index("budget")
    assert blocks.loc[48, "mean"] == pytest.approx(3.1) and blocks.loc[48, "n"] == 3
    assert set(front.setup) == {"s"}  # the main setup is not a factorial cell
    table = F.equal_memory(F.points(trials, setups))
    mem = _levels(table, F.AT_MEMORY)
    # at K's 4 blocks (budget 48): T's quality 0.6 - 0.01 p, K's 0.5 -> 0.1, 0.09, 0.08
    assert mem.loc[48, "level"] == pytest.approx(4.0)
    assert mem.loc[48, "estimate"] == pytest.approx(0.09) and mem.loc[64, "estimate"] == pytest.approx(0.09)
    assert mem.loc[96, "estimate"] == pytest.approx(0.05 - 0.005)  # between (6.1p, .8) and (8.1p, .9)
    assert (mem.loc[[48, 64, 96], "status"] == v.AXIS_BETTER).all()
    assert mem.loc[128, "status"] == v.NOT_COMPARABLE and "3 of 3 pairs" in mem.loc[128, "reason"]  # 9 > T's 8.2
    qual = _levels(table, F.AT_QUALITY)
    # at K's quality 0.5 (budget 48): T needs 3 + 0.1 p blocks, K 4 -> ratios .75, .775, .8
    expected = np.exp(np.mean(np.log([0.75, 0.775, 0.8])))
    assert qual.loc[48, "estimate"] == pytest.approx(expected) and qual.loc[48, "status"] == v.AXIS_BETTER
    assert F.overall(mem) == v.AXIS_BETTER and F.overall(qual) == v.AXIS_BETTER
    verdict, cell = F.capability(table)
    assert verdict == v.SUPPORTED and cell.status == v.AXIS_BETTER
    # the review's sentence: the same budget, T / K blocks and T - K quality
    same = _levels(table, F.SAME_BUDGET_BLOCKS)
    assert same.loc[64, "estimate"] == pytest.approx(np.exp(np.mean(np.log([4 / 5, 4.1 / 5, 4.2 / 5]))))
    assert _levels(table, F.SAME_BUDGET_QUALITY).loc[64, "status"] == v.AXIS_SAME  # 0 in every pair: no effect


def test_crossing_frontiers_read_trade_off():
    trials, setups = _run([3, 4, 6, 8], [0.5, 0.6, 0.7, 0.75], [4, 5, 7, 9], [0.5, 0.6, 0.8, 0.9])
    table = F.equal_memory(F.points(trials, setups))
    mem = _levels(table, F.AT_MEMORY)
    assert mem.loc[48, "status"] == v.AXIS_BETTER and mem.loc[96, "status"] == v.AXIS_WORSE
    assert F.overall(mem) == v.TRADE_OFF
    assert F.capability(table)[0] == v.TRADE_OFF


def test_a_frontier_that_does_not_reach_the_others_memory_is_not_comparable():
    trials, setups = _run([10, 11, 12, 13], [0.5, 0.6, 0.8, 0.9], [4, 5, 7, 9], [0.5, 0.6, 0.8, 0.9])
    table = F.equal_memory(F.points(trials, setups))
    mem = _levels(table, F.AT_MEMORY)
    assert (mem.status == v.NOT_COMPARABLE).all() and mem.estimate.isna().all()
    assert F.overall(mem) == v.NOT_COMPARABLE


def test_a_block_mechanism_as_good_at_less_memory_refutes_the_capability():
    trials, setups = _run([4, 5, 7, 9], [0.5, 0.6, 0.8, 0.9], [3, 4, 6, 8], [0.5, 0.6, 0.8, 0.9])
    table = F.equal_memory(F.points(trials, setups))
    verdict, cell = F.capability(table)
    assert verdict == v.REFUTED and cell.status == v.AXIS_WORSE


def test_identical_frontiers_are_not_resolved():
    trials, setups = _run([4, 5, 7, 9], [0.5, 0.6, 0.8, 0.9], [4, 5, 7, 9], [0.5, 0.6, 0.8, 0.9], jitter=0.0)
    trials.loc[trials.arm.str.startswith("T") & (trials.pair == 1), "rouge_l_mean"] += 0.01
    trials.loc[trials.arm.str.startswith("T") & (trials.pair == 2), "rouge_l_mean"] -= 0.01
    table = F.equal_memory(F.points(trials, setups))
    assert F.overall(_levels(table, F.AT_MEMORY)) == v.NOT_RESOLVED
    verdict, cell = F.capability(table)
    assert verdict == v.NOT_RESOLVED and cell is not None


def test_exactness_per_budget_compares_the_token_mechanisms_on_requests_none_preempted():
    setups = pd.DataFrame([{"setup": "s", "role": "factorial", "policy": "h2o", "workload": "w", "factors": json.dumps(
        {f"{m}.b{b}": {"mechanism": m, "granularity": g, "budget": b}
         for m, g in (("naive", "token"), ("vtoken", "token"), ("K", "block")) for b in (48, 64)})}])
    trials, requests = [], []
    for arm in ("naive.b48", "vtoken.b48", "K.b48", "naive.b64", "vtoken.b64", "K.b64"):
        trials.append({"trial_id": arm, "setup": "s", "arm": arm, "concurrency": 8, "pair": 0})
        for i in range(3):
            # budget 64: request 1 differs between the token arms; request 2 preempted in Naive-Evict at both
            # budgets; the block mechanism answers otherwise everywhere and is never compared
            out = f"{i}-{arm}" if arm.startswith("K") else f"{i}-x" if (arm == "vtoken.b64" and i == 1) else f"{i}"
            requests.append({"trial_id": arm, "req_index": i, "output_sha256": out, "output_text": out,
                             "num_preemptions": int(arm.startswith("naive") and i == 2)})
    got = F.exactness(pd.DataFrame(requests), pd.DataFrame(trials), setups)
    assert got.to_dict("records") == [
        {"setup": "s", "scorer": "h2o", "budget": 48, "n_checked": 2, "n_identical": 2, "n_skipped_preempted": 1,
         "arms": "naive.b48,vtoken.b48"},
        {"setup": "s", "scorer": "h2o", "budget": 64, "n_checked": 2, "n_identical": 1, "n_skipped_preempted": 1,
         "arms": "naive.b64,vtoken.b64"}]
