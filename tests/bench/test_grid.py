"""The pipeline's grid (vtoken.bench.grid: setups, validate, pool, job_args): the setups and
trial arguments of the committed default config, exactly, the pressing pool rule on the real
manifest, and the cross-key errors naming their key."""

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from vtoken.bench.grid import job_args, validate
from vtoken.bench.grid import pool as grid_pool
from vtoken.bench.grid import setups as grid
from vtoken.bench.raw.trials import pair_sample

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())
# the default with the extended profile's further policies (policy_grid and its overrides are checked then)
CONFIG3 = copy.deepcopy(CONFIG)
CONFIG3["trial"]["policies"] = ["h2o", "scissorhands", "vk_norm"]
# the arms, then every other arm variant, the A/A control last
MAIN_ARMS = ("full", "naive", "vtoken", "paged_eviction", "zipage", "diffkv", "paged_eviction_policy",
             "diffkv_budget", "vtoken_pressure", "vtoken_eager", "vtoken_limit", "vtoken_limit_b56", "paged_eviction_b64",
             "paged_eviction_policy_b64", "zipage_b56", "naive_aa")
# the main setup of every further policy (policy_grid)
POLICY_ARMS = ("full", "naive", "vtoken", "vtoken_eager", "vtoken_limit", "vtoken_limit_b56", "paged_eviction_policy",
               "paged_eviction_policy_b64", "naive_aa")
# vk_norm's (policy_grid.overrides): one scorer at both granularities, both protections, at C_ref
VK_ARMS = ("full", "naive", "vtoken", "vtoken_eager", "paged_eviction", "paged_eviction_b64", "paged_eviction_policy",
           "paged_eviction_policy_b64")
# the second budget of each block-granular mechanism (config arm_variants.<name>.budget_of)
PARTNERS = ("paged_eviction_b64", "paged_eviction_policy_b64", "zipage_b56")
M, W = "smollm2-135m", "contract-128-s0"
VARIANTS = tuple(f"vtoken_tf{tf}_wm0.2" for tf in (0.3, 0.5, 0.7))


# the factorial's cells of the default: mechanism x budget (decode), mechanism x kept fraction (prefill)
# (vToken eager at the default's budget only: factorial.<phase>.only)
CELLS = (*(f"vtoken_limit.b{b}" for b in (48, 56, 64, 88, 128)), "vtoken_eager.b64",
         *(f"paged_eviction_policy.b{b}" for b in (48, 56, 64, 88, 128)))
PREFILL_CELLS = (*(f"vtoken_limit.k{k}" for k in (15, 20, 24, 28, 33, 50)), "vtoken_eager.k24",
                 *(f"paged_eviction_policy.k{k}" for k in (15, 20, 24, 28, 33, 50)))


def test_default_setups_in_run_order():
    got = [(s.name, s.role, s.arms, s.concurrency, s.block_size, s.budget, s.first_pair, s.pairs)
           for s in grid.setups(CONFIG)]
    assert got == [
        (f"{M}.{W}.select", "select", ("naive", *VARIANTS), (8,), 16, 64, 4, 2),
        (f"{M}.{W}.h2o.main", "main", MAIN_ARMS, (4, 8, 12), 16, 64, 0, None),
        (f"{M}.{W}.scissorhands.main", "main", POLICY_ARMS, (4, 8), 16, 64, 0, None),
        (f"{M}.contract-128-s1.h2o.factorial", "factorial", ("full", *CELLS), (32,), 16, 48, 0, 8),
        (f"{M}.ruler-niah-512-s0.vk_norm.factorial_prefill", "factorial_prefill", ("full", *PREFILL_CELLS), (8,), 16,
         50, 0, 3),
    ]
    assert [s.policy for s in grid.setups(CONFIG)] == ["h2o", "h2o", "scissorhands", "h2o", "vk_norm"]


def test_further_policies_run_the_policy_grid():
    """The extended profile's policies: policy_grid and its overrides."""
    config = copy.deepcopy(CONFIG)
    config["trial"]["policies"] = ["h2o", "scissorhands", "vk_norm"]
    got = [(s.name, s.arms, s.concurrency) for s in grid.setups(config) if s.role == "main"]
    assert got == [(f"{M}.{W}.h2o.main", MAIN_ARMS, (4, 8, 12)),
                   (f"{M}.{W}.scissorhands.main", POLICY_ARMS, (4, 8)),
                   (f"{M}.{W}.vk_norm.main", VK_ARMS, (4,))]
    main, other, vk = [s for s in grid.setups(config) if s.role == "main"]
    # swept arms and variants run every C; the others and the A/A control only C_ref = 4
    assert main.arm_concurrency == {a: (4,) for a in ("full", "zipage", "diffkv", "paged_eviction_policy",
                                                      "diffkv_budget", "vtoken_pressure", *PARTNERS, "naive_aa")}
    assert other.arm_concurrency == {"full": (4,), "paged_eviction_policy_b64": (4,), "naive_aa": (4,)}
    assert vk.arm_concurrency == {a: (4,) for a in VK_ARMS if a != "naive"}
    assert main.shared_c == other.shared_c == vk.shared_c == 4  # C_ref
    # the block mechanism under vk_norm ranks by its own norms, protecting the policy's sinks and recent window
    assert vk.arm_settings["paged_eviction_policy"] == {"budget": 60, "arm_options": {"score": "vk_norm",
                                                                                      "protect": "policy"}}
    assert vk.arm_settings["paged_eviction"] == {"budget": 60}  # PagedEviction's first block: the other protection
    # vToken eager (the tail left alone) and at its packing limit (the tail packed too), the limit also at budget 56
    assert main.arm_settings["vtoken_eager"] == {"arm_options": {"packing": "eager"}}
    assert main.arm_settings["vtoken_limit"] == {"arm_options": {"packing": "limit"}}
    # (ratio null: the budget holds in a profile that sets a ratio, as the smoke's does)
    assert main.arm_settings["vtoken_limit_b56"] == {"budget": 56, "ratio": None, "arm_options": {"packing": "limit"}}
    # a variant takes its arm's settings, then its own: PagedEviction's calibrated budget, and the
    # setup's policy as its scores
    assert main.arm_settings["paged_eviction_policy"] == {"budget": 60, "arm_options": {"score": "h2o",
                                                                                        "protect": "policy"}}
    assert other.arm_settings["paged_eviction_policy"] == {"budget": 60, "arm_options": {"score": "scissorhands",
                                                                                         "protect": "policy"}}
    # DiffKV-style's calibrated point: its arm's (no budget) overridden by the variant's own
    assert main.arm_settings["diffkv_budget"] == {"budget": 64, "arm_options": {"kv_buffer": 32}}
    assert main.variants == {"paged_eviction_policy": "paged_eviction", "diffkv_budget": "diffkv",
                             "vtoken_pressure": "vtoken", "vtoken_eager": "vtoken", "vtoken_limit": "vtoken",
                             "vtoken_limit_b56": "vtoken", "paged_eviction_b64": "paged_eviction",
                             "paged_eviction_policy_b64": "paged_eviction", "zipage_b56": "zipage", "naive_aa": "naive"}
    # each budget partner: its mechanism's settings at its own nominal budget
    assert main.arm_settings["paged_eviction_b64"] == {"budget": 64}
    assert main.arm_settings["zipage_b56"] == {"budget": 56}
    assert other.arm_settings["paged_eviction_policy_b64"] == {"budget": 64, "arm_options": {
        "score": "scissorhands", "protect": "policy"}}
    assert grid.budget_partners(CONFIG) == {"paged_eviction_b64": "paged_eviction",
                                            "paged_eviction_policy_b64": "paged_eviction_policy",
                                            "zipage_b56": "zipage"}
    # vToken beyond the paper: the pressure-aware theta and compaction before preemption
    assert main.arm_settings["vtoken_pressure"] == {"arm_options": {"theta_rule": "pressure",
                                                                    "before_preemption": True}}


def test_trial_arguments_of_the_main_setup_and_the_selection():
    three = copy.deepcopy(CONFIG)  # the extended profile's further policies
    three["trial"]["policies"] = ["h2o", "scissorhands", "vk_norm"]
    select, main, other = grid.setups(three)[:3]
    args = job_args.trial_args(CONFIG, main, "data/raw/default", "data/processed/default")
    assert args[:4] == [f"data/workloads/{W}.jsonl", "--arms=" + ",".join(MAIN_ARMS), "--pairs=4", "--first-pair=0"]
    for expected in ("--budget=64", "--block-size=16", "--device=cpu", "--one-wave", "--capacity-search",
                     "--num-requests=17", "--num-gpu-blocks=65",
                     "--vtoken-file=data/processed/default/theta_f_selected.json",
                     '--arm-settings={"diffkv": {"budget": null}, "diffkv_budget": {"arm_options": {"kv_buffer": 32}, '
                     '"budget": 64}, "paged_eviction": {"budget": 60}, "paged_eviction_b64": {"budget": 64}, '
                     '"paged_eviction_policy": {"arm_options": {"protect": "policy", "score": "h2o"}, "budget": 60}, '
                     '"paged_eviction_policy_b64": {"arm_options": {"protect": "policy", "score": "h2o"}, '
                     '"budget": 64}, "vtoken_eager": {"arm_options": {"packing": "eager"}}, '
                     '"vtoken_limit": {"arm_options": {"packing": "limit"}}, '
                     '"vtoken_limit_b56": {"arm_options": {"packing": "limit"}, "budget": 56, "ratio": null}, '
                     '"vtoken_pressure": {"arm_options": {"before_preemption": true, "theta_rule": "pressure"}}, '
                     '"zipage": {"budget": 64}, "zipage_b56": {"budget": 56}}',
                     '--arm-variants={"diffkv_budget": "diffkv", "naive_aa": "naive", "paged_eviction_b64": '
                     '"paged_eviction", "paged_eviction_policy": "paged_eviction", "paged_eviction_policy_b64": '
                     '"paged_eviction", "vtoken_eager": "vtoken", "vtoken_limit": "vtoken", "vtoken_limit_b56": "vtoken", '
                     '"vtoken_pressure": "vtoken", "zipage_b56": "zipage"}'):
        assert expected in args
    assert "--policy=h2o" in args and f"--setup={M}.{W}.h2o.main" in args
    # the further policy's setup: its policy for the policy-driven arms, its scores for PagedEviction's mechanism
    args = job_args.trial_args(three, other, "data/raw/default", "data/processed/default")
    for expected in ("--policy=scissorhands", "--arms=" + ",".join(POLICY_ARMS), "--concurrency=4,8",
                     '--arm-concurrency={"full": [4], "naive_aa": [4], "paged_eviction_policy_b64": [4]}', "--budget=64",
                     "--num-gpu-blocks=65",
                     '--arm-settings={"paged_eviction_policy": {"arm_options": {"protect": "policy", "score": '
                     '"scissorhands"}, "budget": 60}, "paged_eviction_policy_b64": {"arm_options": {"protect": '
                     '"policy", "score": "scissorhands"}, "budget": 64}, "vtoken_eager": {"arm_options": '
                     '{"packing": "eager"}}, "vtoken_limit": {"arm_options": {"packing": "limit"}}, '
                     '"vtoken_limit_b56": {"arm_options": {"packing": "limit"}, "budget": 56, "ratio": null}}',
                     '--arm-variants={"naive_aa": "naive", "paged_eviction_policy": "paged_eviction", '
                     '"paged_eviction_policy_b64": "paged_eviction", "vtoken_eager": "vtoken", "vtoken_limit": "vtoken", '
                     '"vtoken_limit_b56": "vtoken"}'):
        assert expected in args
    # the selection runs on pairs 4 and 5 (held out), never reads its own output
    sel = job_args.trial_args(CONFIG, select, "r", "p")
    assert "--first-pair=4" in sel and "--pairs=2" in sel and not any(a.startswith("--vtoken-file") for a in sel)
    settings = json.loads(next(a for a in sel if a.startswith("--arm-settings="))[len("--arm-settings="):])
    assert settings["vtoken_tf0.3_wm0.2"] == {"theta_f": 0.3, "watermark": 0.2}
    # the capacity search: main and pool setups of >= 2 C (their swept arms), with trial.capacity_search
    vk = next(s for s in grid.setups(three) if s.name.endswith("vk_norm.main"))
    assert "--capacity-search" in job_args.trial_args(three, other, "r", "p")
    assert "--capacity-search" not in sel and "--capacity-search" not in job_args.trial_args(three, vk, "r", "p")  # one C
    off = copy.deepcopy(CONFIG)
    off["trial"]["capacity_search"] = False
    assert "--capacity-search" not in job_args.trial_args(off, main, "r", "p")
    factorial = next(s for s in grid.setups(CONFIG) if s.role == "factorial")
    assert "--capacity-search" not in job_args.trial_args(CONFIG, factorial, "r", "p")
    # timed alone (off in the default): the main setups' fixed trials (their latency is what the
    # claims read), nothing else's
    assert "--timing-alone" not in job_args.trial_args(CONFIG, main, "r", "p")
    alone = copy.deepcopy(three)
    alone["trial"]["timing_alone"] = True
    assert "--timing-alone" in job_args.trial_args(alone, main, "r", "p")
    assert "--timing-alone" in job_args.trial_args(alone, other, "r", "p")
    assert "--timing-alone" not in job_args.trial_args(alone, select, "r", "p")
    assert "--timing-alone" not in job_args.trial_args(alone, factorial, "r", "p")
    # interleaved (on in the default): the free-running main and pool setups' paired sets, nothing else's
    assert "--interleave" in job_args.trial_args(CONFIG, main, "r", "p")
    assert "--interleave" in job_args.trial_args(three, other, "r", "p")
    assert "--interleave" not in sel and "--interleave" not in job_args.trial_args(CONFIG, factorial, "r", "p")
    forced = [s for s in grid.setups(CONFIG) if s.forcing is not None]
    assert forced and all("--interleave" not in job_args.trial_args(CONFIG, s, "r", "p") for s in forced)
    plain = copy.deepcopy(CONFIG)
    plain["trial"]["interleave"] = False
    assert "--interleave" not in job_args.trial_args(plain, main, "r", "p")
    cfg = copy.deepcopy(CONFIG)  # an operating point (the extended profile's) moves the budget
    cfg["operating_points"]["enabled"] = True
    cfg["operating_points"]["points"] = [{"budget": 48, "arm_settings": {"paged_eviction": {"budget": 48}}}]
    op1 = next(s for s in grid.setups(cfg) if s.role == "point")
    assert "--budget=48" in job_args.trial_args(cfg, op1, "r", "p")
    assert job_args.decode_cost_args(CONFIG)[:2] == ["--arms=stock,full", "--distinct-prompts"]


def test_prefix_setups_turn_the_prefix_cache_on_and_press_every_degree_alike():
    cfg = copy.deepcopy(CONFIG)
    cfg["prefix_sharing"].update(enabled=True, degrees=[1, 2, 4, 8])  # the extended profile's rows (off in the default)
    prefix = {s.prefix_degree: s for s in grid.setups(cfg) if s.role == "prefix"}
    assert sorted(prefix) == [1, 2, 4, 8]
    args = job_args.trial_args(cfg, prefix[8], "r", "p")
    for expected in ("--prefix-degree=8", "--prefix-tokens=256", "--concurrency=8", "--one-wave", "--arms=naive,vtoken",
                     '--engine={"dtype": "float32", "enable_prefix_caching": true, "max_model_len": 512}'):
        assert expected in args
    # 4 unevicted requests of the longest private part (ceil(256 / 16) = 16 blocks each), plus
    # the documents those 4 requests need, each stored once (16 blocks), plus the null block
    assert [grid_pool.pool_blocks(cfg, prefix[d]) for d in (1, 2, 4, 8)] == [4 * 16 + 4 * 16 + 1, 4 * 16 + 2 * 16 + 1,
                                                                         4 * 16 + 16 + 1, 4 * 16 + 16 + 1]
    # the main setups keep their engine: no prefix cache
    assert '--engine={"dtype": "float32", "max_model_len": 256}' in job_args.trial_args(CONFIG, grid.setups(CONFIG)[1], "r")


def test_press_pool_rule_makes_naive_infeasible_where_a_budget_still_fits():
    rows = [json.loads(line) for line in (REPO / f"data/workloads/{W}.jsonl").read_text().splitlines()]
    prompts = [r["prompt_tokens"] for r in rows]
    assert max(prompts) == 128 and {r["max_tokens"] for r in rows} == {128}
    pool = grid_pool.press_pool([p + 128 for p in prompts], 16, c_press=4)
    assert pool == 4 * 16 + 1 == 65 == grid_pool.pool_blocks(CONFIG, grid.setups(CONFIG)[1], root=str(REPO))
    usable = pool - 1
    # pair 0's first wave of 8 requests (the trial at C = 8): Native's demand exceeds the
    # usable pool, a 64-token budget packed fits it
    wave = [prompts[i] for i in pair_sample(len(rows), 16, 0, 0)[:8]]
    demand = grid_pool.press_demand(wave, 128, 16, budget=64)
    assert demand == {"no_eviction": sum(-(-(p + 128) // 16) for p in wave), "packed": 8 * 5}
    assert demand["no_eviction"] > usable >= demand["packed"]
    # at C = 4 (= c_press) Native fits by construction, at any sample
    assert all(sum(-(-(p + 128) // 16) for p in prompts[i:i + 4]) <= usable for i in range(0, 124))


def test_block_size_keeps_usable_tokens():
    cfg = copy.deepcopy(CONFIG)
    cfg["sensitivity"]["block_size"] = [16, 32, 64]
    setups = {s.block_size: s for s in grid.setups(cfg) if s.role == "block_size"}
    # 64 usable blocks of 16 = 1,024 tokens = 32 x 32 = 16 x 64, plus one null block each
    assert [grid_pool.pool_blocks(cfg, setups[b], root=str(REPO)) for b in (32, 64)] == [33, 17]


@pytest.mark.parametrize(("change", "key"), [
    (lambda c: c.update(baseline="zipage", arms=["naive", "vtoken"]), "baseline"),
    (lambda c: c.update(aa_control="nope"), "aa_control"),
    (lambda c: c["arm_variants"].update(vtoken={"arm": "naive"}), "arm_variants.vtoken"),
    (lambda c: c["arm_settings"].update(nope={"budget": 3}), "arm_settings.nope"),
    (lambda c: c["operating_points"].update(workload="sharegpt-s9"), "operating_points.workload"),
    (lambda c: c.update(workloads=["nope-s0"]), "workloads"),
    (lambda c: c.update(swept_arms=["vtoken"]), "swept_arms"),
    (lambda c: c["trial"].update(ratio=0.5), "trial.budget"),
    (lambda c: c["trial"].update(num_requests=8), "trial.num_requests"),
    (lambda c: c["pool"].update(num_gpu_blocks=80), "pool"),
    (lambda c: c["operating_points"].update(enabled=True, points=[{"ratio": 0.5, "arm_settings": {}}]), "operating_points.points[0]"),
    (lambda c: c["theta_f"].update(workload="sharegpt-s0"), "theta_f.workload"),
    (lambda c: c["prefix_sharing"].update(enabled=True, degrees=[2], workload="sharegpt-s0"), "prefix_sharing.workload"),
    (lambda c: c["prefix_sharing"].update(enabled=True, degrees=[2], arms=["holefill", "vtoken"]), "prefix_sharing.arms"),
    (lambda c: c["prefix_sharing"].update(enabled=True, degrees=[2], concurrency=32), "prefix_sharing.concurrency"),
    # the policy dimension: only PagedEviction's mechanism ranks by the setup's policy, ...
    (lambda c: c["arm_variants"].update(zp={"arm": "zipage", "settings": {"arm_options": {"score": "policy"}}}),
     "arm_variants.zp.settings.arm_options.score"),
    (lambda c: c["policy_grid"].update(arms=["vtoken", "nope"]), "policy_grid.arms"),
    (lambda c: c["policy_grid"].update(arms=["vtoken", "vtoken_pressure"]), "policy_grid.arms"),
    (lambda c: c["policy_grid"].update(concurrency=[8, 16]), "policy_grid.concurrency"),
    (lambda c: c["policy_grid"].update(swept_arms=["vtoken", "paged_eviction"]), "policy_grid.swept_arms"),
    (lambda c: c["policy_grid"].update(swept_arms=["vtoken"]), "policy_grid.swept_arms"),
    # a policy's own grid is checked like policy_grid, and never the first policy's
    (lambda c: c["policy_grid"]["overrides"]["vk_norm"].update(concurrency=[8]), "policy_grid.overrides.vk_norm.concurrency"),
    (lambda c: c["policy_grid"]["overrides"]["vk_norm"].update(arms=["vtoken", "nope"]),
     "policy_grid.overrides.vk_norm.arms"),
    (lambda c: c["policy_grid"]["overrides"].update(h2o=c["policy_grid"]["overrides"]["vk_norm"]),
     "policy_grid.overrides.h2o"),
    (lambda c: c["policy_grid"]["overrides"].update(nope=c["policy_grid"]["overrides"]["vk_norm"]),
     "policy_grid.overrides.nope"),
    (lambda c: c["compaction_frontier"].update(enabled=True, theta_f=[0.25], workload="nope"), "compaction_frontier.workload"),
    (lambda c: c["swept_arms"].append("nope"), "swept_arms"),
    # ... and a ratio goes to the policy-driven arms only (a self-evicting baseline takes a budget)
    (lambda c: c["ratio_sweep"].update(enabled=True, policies=["random"], ratios=[0.5], arms=["naive", "vtoken", "paged_eviction"]),
     "ratio_sweep.arms"),
    (lambda c: c["ratio_sweep"].update(enabled=True, policies=["random"], ratios=[0.5], arms=["naive", "paged_eviction_policy"]),
     "ratio_sweep.arms"),
    (lambda c: c["arm_variants"]["vtoken_pressure"].update(concurrency=[5]), "arm_variants.vtoken_pressure.concurrency"),
    # third-party policies: a kvpress press that cannot run, a self-evicting arm, a policy-scored variant
    (lambda c: c["kvpress"].update(enabled=True, presses=["kvpress:SnapKVPress"]), "kvpress.presses"),
    (lambda c: c["trial"].update(policies=["h2o", "kvpress:CapPress"]), "trial.policies"),
    (lambda c: c["kvpress"].update(enabled=True, presses=["kvpress:KnormPress"], arms=["naive", "zipage"]), "kvpress.arms"),
    (lambda c: c["kvpress"].update(enabled=True, presses=["kvpress:KnormPress"], arms=["naive", "paged_eviction_policy"]),
     "kvpress.arms"),
    (lambda c: c["kvpress"].update(enabled=True, presses=["kvpress:KnormPress"], workload="sharegpt-s0"), "kvpress.workload"),
    # a switched-on section with nothing to run
    (lambda c: c["kvpress"].update(enabled=True), "kvpress.presses"),
    (lambda c: c["ratio_sweep"].update(enabled=True, policies=["h2o"]), "ratio_sweep.ratios"),
])
def test_cross_key_errors_name_the_key(change, key):
    cfg = copy.deepcopy(CONFIG3)
    change(cfg)
    with pytest.raises(ValueError) as err:
        validate.check(cfg, root=str(REPO))
    assert f"config key {key!r}" in str(err.value)
    validate.check(CONFIG, root=str(REPO))  # the committed config passes
    validate.check(CONFIG3, root=str(REPO))


def test_variants_of_arms_the_config_does_not_run_are_left_out():
    config = {**CONFIG, "arms": ["full", "naive", "vtoken"], "swept_arms": ["naive", "vtoken"]}
    main = next(s for s in grid.setups(config) if s.role == "main")
    # no PagedEviction / DiffKV variants; vToken's runs
    assert main.arms == ("full", "naive", "vtoken", "vtoken_pressure", "vtoken_eager", "vtoken_limit", "vtoken_limit_b56",
                         "naive_aa")


def test_a_policy_that_a_mechanism_cannot_rank_by_is_refused_naming_it(monkeypatch):
    import baselines.paged_eviction.arm as pe

    monkeypatch.setattr(pe, "POLICY_SCORES", ("h2o", "streamingllm", "random"))
    with pytest.raises(ValueError) as err:
        validate.check(CONFIG3, root=str(REPO))
    assert str(err.value) == ("config key 'trial.policies': 'scissorhands': paged_eviction's mechanism (variants "
                              "['paged_eviction_policy', 'paged_eviction_policy_b64']) cannot rank by it (per-token keep scores exist for "
                              "['h2o', 'streamingllm', 'random'])")


def test_a_switched_off_section_plans_no_setup_whatever_its_lists():
    filled = {"ratio_sweep": {"policies": ["h2o"], "ratios": [0.5]}, "kvpress": {"presses": ["kvpress:KnormPress"]},
              "prefix_sharing": {"degrees": [2]},
              "operating_points": {"points": [{"budget": 48, "arm_settings": {"paged_eviction": {"budget": 48}}}]},
              "compaction_frontier": {"theta_f": [0.5], "triggers": ["always"]}}
    assert set(filled) == set(grid.SWITCHED)
    off = copy.deepcopy(CONFIG)
    for section, lists in filled.items():
        off[section].update(lists, enabled=False)
    validate.check(off, root=str(REPO))
    assert [s.name for s in grid.setups(off)] == [s.name for s in grid.setups(CONFIG)]
    on = copy.deepcopy(off)
    for section in filled:
        on[section]["enabled"] = True
    validate.check(on, root=str(REPO))
    names = {s.name for s in grid.setups(off)}
    assert [s.name for s in grid.setups(on) if s.name not in names] == [
        f"{M}.{W}.h2o.r0.5", f"{M}.{W}.kvpress-KnormPress", f"{M}.{W}.op1", f"{M}.{W}.prefix2", f"{M}.{W}.frontier"]


def test_ratio_sweep_one_setup_per_policy_and_ratio_with_the_ratio_not_the_budget():
    cfg = copy.deepcopy(CONFIG)
    cfg["ratio_sweep"].update(enabled=True, policies=["h2o", "random"], ratios=[0.3, 0.7])
    validate.check(cfg, root=str(REPO))
    sweep = [s for s in grid.setups(cfg) if s.role == "ratio"]
    assert [(s.name, s.policy, s.ratio, s.budget) for s in sweep] == [
        (f"{M}.{W}.{p}.r{r:g}", p, r, None) for p in ("h2o", "random") for r in (0.3, 0.7)]
    args = job_args.trial_args(cfg, sweep[-1], "r", "p")
    for expected in ("--policy=random", "--ratio=0.7", "--concurrency=8", "--arms=full,naive,vtoken,vtoken_pressure"):
        assert expected in args
    assert not any(a.startswith("--budget") for a in args)


def test_kvpress_one_setup_per_press_at_the_trial_budget_named_without_a_colon():
    cfg = copy.deepcopy(CONFIG)
    cfg["kvpress"].update(enabled=True, presses=["kvpress:KnormPress", "kvpress:ObservedAttentionPress"])
    validate.check(cfg, root=str(REPO))
    presses = [s for s in grid.setups(cfg) if s.role == "kvpress"]
    assert [(s.name, s.policy, s.budget, s.arms, s.concurrency, s.c_press) for s in presses] == [
        (f"{M}.{W}.kvpress-{p}", f"kvpress:{p}", 64, ("full", "naive", "vtoken", "vtoken_pressure"), (4, 8), 4)
        for p in ("KnormPress", "ObservedAttentionPress")]
    args = job_args.trial_args(cfg, presses[0], "r", "p")
    for expected in ("--policy=kvpress:KnormPress", "--budget=64", "--concurrency=4,8",
                     f"--setup={M}.{W}.kvpress-KnormPress", "--num-gpu-blocks=65"):
        assert expected in args


def test_a_refused_press_is_named_with_why_before_any_job():
    cfg = copy.deepcopy(CONFIG)
    cfg["kvpress"].update(enabled=True, presses=["kvpress:SnapKVPress"])
    with pytest.raises(ValueError, match=r"config key 'kvpress.presses': policy='kvpress:SnapKVPress': SnapKVPress "
                                         r"needs hidden states"):
        validate.check(cfg, root=str(REPO))


def test_a_kvpress_policy_on_the_policy_dimension_names_its_setup_without_a_colon():
    cfg = copy.deepcopy(CONFIG)
    cfg["trial"]["policies"] = ["h2o", "kvpress:KnormPress"]
    for name in ("paged_eviction_policy", "paged_eviction_policy_b64"):  # no per-token keep score for a press
        del cfg["arm_variants"][name]
    cfg["policy_grid"].update(arms=["full", "naive", "vtoken"], swept_arms=["naive", "vtoken"])
    cfg["factorial"]["granularity"]["block"] = []
    cfg["ratio_sweep"].update(enabled=True, policies=["kvpress:KnormPress"], ratios=[0.5])
    validate.check(cfg, root=str(REPO))
    named = {s.name: s.policy for s in grid.setups(cfg) if s.policy.startswith("kvpress")}
    assert named == {f"{M}.{W}.kvpress-KnormPress.main": "kvpress:KnormPress",
                     f"{M}.{W}.kvpress-KnormPress.r0.5": "kvpress:KnormPress"}


@pytest.mark.parametrize(("budget_of", "message"), [
    ("zipage", "'arm_variants.paged_eviction_b64.budget_of': 'zipage' runs 'zipage', not 'paged_eviction': a budget "
               "partner is the same mechanism at another budget"),
    ("pe_absent", "'arm_variants.paged_eviction_b64.budget_of': 'pe_absent' is not an arm or variant of this config"),
])
def test_a_budget_partner_of_another_mechanism_is_refused(budget_of, message):
    cfg = copy.deepcopy(CONFIG)
    cfg["arm_variants"]["paged_eviction_b64"]["budget_of"] = budget_of
    with pytest.raises(ValueError, match=re.escape(message)):
        validate.check(cfg, root=str(REPO))


def test_the_compaction_frontier_setup():
    cfg = copy.deepcopy(CONFIG)
    assert not [s for s in grid.setups(cfg) if s.role == "frontier"]  # off in the default
    cfg["compaction_frontier"].update(enabled=True, theta_f=[0.0, 0.5])
    front = next(s for s in grid.setups(cfg) if s.role == "frontier")
    points = ("vtoken_tf0_pressure", "vtoken_tf0.5_pressure", "vtoken_tf0_always", "vtoken_tf0.5_always")
    assert front.name == f"{M}.{W}.frontier" and front.policy == "h2o" and front.concurrency == (8,)
    assert front.arms == ("naive", *points, "vtoken_pressure", "vtoken_eager")
    assert front.first_pair == 0 and front.pairs is None and front.selected  # main pairs, the selected watermark
    assert front.arm_settings["vtoken_tf0.5_always"] == {"theta_f": 0.5, "arm_options": {"trigger": "always"}}
    assert front.arm_settings["vtoken_eager"] == {"arm_options": {"packing": "eager"}}
    assert front.variants == {**{p: "vtoken" for p in points}, "vtoken_pressure": "vtoken", "vtoken_eager": "vtoken"}
    args = job_args.trial_args(cfg, front, "r", "p")
    assert "--concurrency=8" in args and "--vtoken-file=p/theta_f_selected.json" in args
