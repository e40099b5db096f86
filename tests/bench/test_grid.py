"""The pipeline's grid (vtoken.bench.grid): the setups and trial arguments of the committed
default config, exactly, and the cross-key errors naming their key."""

import copy
from pathlib import Path

import pytest
import yaml

from vtoken.bench import grid

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())
MAIN_ARMS = ("full", "naive", "holefill", "vtoken", "paged_eviction", "zipage", "diffkv", "naive_aa")


def test_default_setups_in_run_order():
    got = [(s.name, s.role, s.arms, s.concurrency, s.block_size, s.ratio, s.theta_f) for s in grid.setups(CONFIG)]
    m, two = "smollm2-135m", ("naive", "vtoken")
    points = ("full", "naive", "vtoken", "paged_eviction", "zipage", "diffkv")
    assert got == [
        (f"{m}.contract-256-s0.main", "main", MAIN_ARMS, (4, 8), 32, 0.5, 0.25),
        (f"{m}.sharegpt-s0.main", "main", MAIN_ARMS, (4, 8), 32, 0.5, 0.25),
        (f"{m}.contract-256-s0.op1", "point", points, (8,), 32, 0.25, 0.25),
        (f"{m}.contract-256-s0.op2", "point", points, (8,), 32, 0.75, 0.25),
        (f"{m}.contract-256-s0.bs16", "block_size", two, (8,), 16, 0.5, 0.25),
        (f"{m}.contract-256-s0.bs64", "block_size", two, (8,), 64, 0.5, 0.25),
        (f"{m}.contract-256-s0.tf0.1", "theta_f", two, (8,), 32, 0.5, 0.1),
        (f"{m}.contract-256-s0.tf0.5", "theta_f", two, (8,), 32, 0.5, 0.5),
        (f"{m}.sharegpt-s0.tf0.1", "theta_f", two, (8,), 32, 0.5, 0.1),
        (f"{m}.sharegpt-s0.tf0.5", "theta_f", two, (8,), 32, 0.5, 0.5),
    ]


def test_trial_arguments_of_a_point_and_the_pool_in_tokens():
    setups = {s.name: s for s in grid.setups(CONFIG)}
    op1 = setups["smollm2-135m.contract-256-s0.op1"]
    assert op1.arm_settings == {"paged_eviction": {"budget": 192}, "zipage": {"budget": 192},
                                "diffkv": {"arm_options": {"prune_threshold": 0.5}}}
    args = grid.trial_args(CONFIG, op1, "data/raw/default")
    assert args[:3] == ["data/workloads/contract-256-s0.jsonl", "--arms=full,naive,vtoken,paged_eviction,zipage,diffkv",
                        "--pairs=5"]
    assert "--ratio=0.25" in args and "--num-requests=8" in args and "--num-gpu-blocks=48" in args
    assert "--arm-variants={}" in args
    main = setups["smollm2-135m.contract-256-s0.main"]
    assert main.variants == {"naive_aa": "naive"} and main.arm_settings["paged_eviction"] == {"budget": 96}
    assert '--arm-variants={"naive_aa": "naive"}' in grid.trial_args(CONFIG, main, "r")
    # the pool stays 48 x 32 = 1,536 tokens whatever the block size
    assert [grid.pool_blocks(CONFIG, setups[f"smollm2-135m.contract-256-s0.bs{b}"]) for b in (16, 64)] == [96, 24]
    assert grid.decode_cost_args(CONFIG)[:2] == ["--arms=stock,full", "--distinct-prompts"]


@pytest.mark.parametrize(("change", "key"), [
    (lambda c: c.update(baseline="zipage", arms=["naive", "vtoken"]), "baseline"),
    (lambda c: c.update(aa_control="nope"), "aa_control"),
    (lambda c: c["arm_variants"].update(vtoken={"arm": "naive"}), "arm_variants.vtoken"),
    (lambda c: c["arm_settings"].update(nope={"budget": 3}), "arm_settings.nope"),
    (lambda c: c["operating_points"].update(workload="sharegpt-s9"), "operating_points.workload"),
    (lambda c: c.update(workloads=["nope-s0"]), "workloads"),
])
def test_cross_key_errors_name_the_key(change, key):
    cfg = copy.deepcopy(CONFIG)
    change(cfg)
    with pytest.raises(ValueError, match=f"config key '{key}'"):
        grid.check(cfg, root=str(REPO))
    grid.check(CONFIG, root=str(REPO))  # the committed config passes
