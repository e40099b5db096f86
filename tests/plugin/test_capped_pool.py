"""A pool far smaller than the demand: nothing is lost, ``full`` stays exact.

8 ShareGPT prompts (49-239 tokens, 32 output tokens each; 3-9 blocks per request, 48 in all) share 11
usable blocks. With ``admission="projected"`` requests wait for room; with vLLM's own
admission (``"vllm"``) running requests are preempted (recompute) and the worker restarts
their token tables on resume. Either way every request must finish with its 32 tokens, and
the ``full`` arm's tokens must equal the unconstrained run's.
"""

import pytest

from tests.plugin.conftest import greedy, in_process_llm
from vtoken.plugin import sink

pytestmark = pytest.mark.engine

CAP = {"max_model_len": 320, "num_gpu_blocks_override": 12, "dtype": "float16"}
_runs: dict[tuple, dict] = {}


def capped_run(model_dir, prompts, tmp_path_factory, arm: str, policy: str | None, admission: str) -> dict:
    key = (arm, policy, admission)
    if key not in _runs:
        from vtoken.engine_args import engine_args

        path = tmp_path_factory.mktemp(f"capped-{arm}-{admission}") / "sink.jsonl"
        cfg = {"arm": arm, "admission": admission, "metrics_path": str(path)}
        if policy:
            cfg.update(policy=policy, ratio=0.5)
        llm = in_process_llm(**engine_args(model_dir, vtoken=cfg, **CAP))
        tokens = greedy(llm, prompts)
        # The engine stays referenced: deleting an in-process engine tears down vLLM state.
        _runs[key] = {"tokens": tokens, "steps": sink.read(path)[1], "llm": llm}
    return _runs[key]


# The projected gate is an option, not the default: its run is in `make test-slow`.
@pytest.mark.parametrize("admission", [pytest.param("projected", marks=pytest.mark.slow), "vllm"])
def test_full_arm_under_a_capped_pool_equals_unconstrained(model_dir, sharegpt_prompts, tmp_path_factory,
                                                           vtoken_fp16, admission):
    out = capped_run(model_dir, sharegpt_prompts, tmp_path_factory, "full", None, admission)
    assert [len(t) for t in out["tokens"]] == [32] * len(sharegpt_prompts)
    assert out["tokens"] == greedy(vtoken_fp16, sharegpt_prompts)
    steps = out["steps"]
    assert max(s["running"] for s in steps) < len(sharegpt_prompts)
    assert max(s["waiting"] for s in steps) > 0
    assert min(s["free_blocks"] for s in steps) >= 0
    if admission == "projected":
        assert steps[-1]["preemptions"] == 0
    else:
        assert steps[-1]["preemptions"] > 0  # recompute preemption exercised (tables reset)


# vToken in `make test` (it runs Naive-Evict's eviction and preemption plus its compaction); Naive-Evict in
# `make test-slow`.
@pytest.mark.parametrize("arm", [pytest.param("naive", marks=pytest.mark.slow), "vtoken"])
def test_evicting_arms_finish_every_request_under_preemption(model_dir, sharegpt_prompts, tmp_path_factory, arm):
    out = capped_run(model_dir, sharegpt_prompts, tmp_path_factory, arm, "h2o", "vllm")
    assert [len(t) for t in out["tokens"]] == [32] * len(sharegpt_prompts)
    assert sum(s["evicted"] for s in out["steps"]) > 0
