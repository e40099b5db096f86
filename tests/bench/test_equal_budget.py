"""One budget for every evicting arm: on a tiny real trial with the committed
default's budgets -- H2O at trial.budget for Naive-Evict and vToken, the calibrated nominal
budgets of PagedEviction and Zipage-style, and every arm variant of the main setups but the
A/A control (PagedEviction with H2O scores) with its settings as the grid builds them
(workflows/config/config.yaml arm_settings, arm_variants) -- every evicting arm keeps live
tokens per request within 5 % of Naive-Evict's (``verdicts.equal_live_tokens``, the rule the
claims table and the baselines figure apply), or, for an arm whose budget is calibrated to another
arm's live tokens (``arm_variants.<name>.live_of``: vToken's limit at the block mechanism's), its own
budget within that tolerance, or, for a
block-granular mechanism whose budget
moves in whole blocks, its budgets (``budget_of``) bracket Naive-Evict's, so the analysis
compares it at interpolated equal live tokens (``equal_live``)."""

from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

CONFIG = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())


@pytest.mark.engine
def test_live_tokens_per_request_equal_within_tolerance(tmp_path: Path, model_dir, sharegpt_dir):
    from vtoken.bench.grid import setups as grid
    from vtoken.bench.analysis import equal_live, metrics, process, verdicts
    from vtoken.bench.harness.run_config import RunConfig
    from vtoken.bench.harness.runner import TrialRunner

    trial = CONFIG["trial"]
    main = next(s for s in grid.setups(CONFIG) if s.role == "main")
    variants = {a: base for a, base in main.variants.items() if a != CONFIG["aa_control"]}
    arms = ("naive", "vtoken", "paged_eviction", "zipage", *variants)
    assert "paged_eviction_policy" in variants  # PagedEviction both ways (its own scores and the setup's policy's)
    cfg = RunConfig(manifest=REPO / f"data/workloads/{CONFIG['workloads'][0]}.jsonl", arms=arms, pairs=1,
                    concurrency=(4,), policy=main.policy, ratio=None, budget=trial["budget"],
                    block_size=trial["block_size"], num_requests=4, one_wave=True, num_gpu_blocks=200, warmup=1,
                    engine=trial["engine"], arm_variants=variants,
                    arm_settings={a: main.arm_settings[a] for a in arms[2:] if a in main.arm_settings},
                    model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=tmp_path / "raw")
    TrialRunner(cfg).run(progress=False)
    raw = process.load_raw(tmp_path / "raw")
    per_trial = metrics.trial_metrics(raw["trials"], raw["requests"], raw["steps"]).set_index("arm")
    assert (per_trial.num_contract_met == 4).all()  # 128 tokens each: decode-time eviction happened
    live = per_trial.live_tokens
    ref = live["naive"]
    assert live["vtoken"] == ref  # one policy, one budget: the same tokens
    assert 40 < ref <= trial["budget"]
    family = {a: f for f in equal_live.families(grid.budget_partners(CONFIG)) for a in f}
    assert set(family) <= set(arms), family  # every budget partner ran here
    matched = {a: v["live_of"] for a, v in CONFIG["arm_variants"].items() if v.get("live_of") and a in arms}
    assert matched == {"vtoken_limit_b56": "paged_eviction"}
    for arm in matched:  # its own budget (calibrated on the main setup's sample, not this tiny one's)
        budget = CONFIG["arm_variants"][arm]["settings"]["budget"]
        assert budget - verdicts.live_tolerance(budget) < live[arm] <= budget, (arm, live[arm], budget)
    for arm in [a for a in arms[2:] if a not in matched]:
        bracketed = arm in family and equal_live.bracket(live, family[arm], ref) is not None
        assert verdicts.equal_live_tokens(live[arm], ref) or bracketed, (
            f"{arm}: {live[arm]:.1f} live tokens vs Naive-Evict's {ref:.1f} (tolerance "
            f"{verdicts.live_tolerance(ref):.2f}), and no two budgets of its mechanism bracket it "
            f"({ {a: round(live[a], 1) for a in family.get(arm, ())} })")
