"""One budget for every evicting arm (issue 13): on a tiny real trial with the committed
default's budgets -- H2O at trial.budget for Naive-Evict and vToken, the calibrated nominal
budgets of PagedEviction and Zipage-style (workflows/config/config.yaml arm_settings) --
every evicting arm keeps live tokens per request within max(5 %, B/2) of H2O's."""

from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

CONFIG = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())


@pytest.mark.engine
def test_live_tokens_per_request_equal_within_tolerance(tmp_path: Path, model_dir, sharegpt_dir):
    from vtoken.bench import metrics, process
    from vtoken.bench.run_config import RunConfig
    from vtoken.bench.runner import TrialRunner

    trial, settings = CONFIG["trial"], CONFIG["arm_settings"]
    arms = ("naive", "vtoken", "paged_eviction", "zipage")
    cfg = RunConfig(manifest=REPO / f"data/workloads/{CONFIG['workloads'][0]}.jsonl", arms=arms, pairs=1,
                    concurrency=(4,), policy=trial["policy"], ratio=None, budget=trial["budget"],
                    block_size=trial["block_size"], num_requests=4, one_wave=True, num_gpu_blocks=200, warmup=1,
                    engine=trial["engine"], arm_settings={a: settings[a] for a in ("paged_eviction", "zipage")},
                    model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=tmp_path / "raw")
    TrialRunner(cfg).run(progress=False)
    raw = process.load_raw(tmp_path / "raw")
    per_trial = metrics.trial_metrics(raw["trials"], raw["requests"], raw["steps"]).set_index("arm")
    assert (per_trial.num_contract_met == 4).all()  # 128 tokens each: decode-time eviction happened
    live = per_trial.live_tokens
    ref = live["naive"]
    assert live["vtoken"] == ref  # one policy, one budget: the same tokens
    tolerance = max(0.05 * ref, trial["block_size"] / 2)
    assert 40 < ref <= trial["budget"]
    for arm in ("paged_eviction", "zipage"):
        assert abs(live[arm] - ref) <= tolerance, f"{arm}: {live[arm]:.1f} live tokens vs H2O's {ref:.1f}"
