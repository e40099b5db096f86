"""docs/extending.md's example policy, exactly as the page writes it: its code block loaded as the
module ``vtoken.policies.keep_head`` and run -- on a replayed request, then through one real trial
on the engine -- with every decision checked against the rule the page states: once a request
holds L > T tokens, its live tokens are exactly positions 0 .. T-R-1 and L-R .. L-1, R = floor(T / 4)."""

import importlib.util
import re
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from vtoken.policies import registry

PAGE = REPO / "docs" / "extending.md"
MARKER = "<!-- example policy: vtoken/policies/keep_head.py"
MODULE = "vtoken.policies.keep_head"
NAME = "keep_head"
BUDGET = 16


def example_code() -> str:
    """The page's code block after the example marker, verbatim."""
    text = PAGE.read_text(encoding="utf-8")
    after = text[text.index(MARKER):]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


@pytest.fixture
def keep_head(tmp_path):
    """The example policy's class, its module loaded from the page's block (unregistered after)."""
    path = tmp_path / "keep_head.py"
    path.write_text(example_code(), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
        yield registry.get_policy_class(NAME)
    finally:
        registry._POLICIES.pop(NAME, None)
        sys.modules.pop(MODULE, None)


def expected_live(num_tokens: int, budget: int = BUDGET) -> np.ndarray:
    """The rule the page states: every token while L <= T, else the head and the window."""
    if num_tokens <= budget:
        return np.arange(num_tokens)
    recent = budget // 4
    return np.concatenate([np.arange(budget - recent), np.arange(num_tokens - recent, num_tokens)])


def test_the_example_is_registered_and_valid_wherever_a_policy_is(keep_head):
    assert NAME in registry.policy_names() and keep_head.__module__ == MODULE
    policy = registry.get_policy(NAME, budget=BUDGET)
    assert policy.config.recent_fraction == 0.25 and not policy.reads_scores


def test_the_example_keeps_the_head_and_the_window_on_a_replayed_request(keep_head):
    """A 40-token prompt, then 12 decode steps, one token each: after every step exactly the
    positions the rule names are live."""
    policy = registry.get_policy(NAME, budget=BUDGET)
    state = policy.new_request("r0")
    live = np.arange(40)
    for num_tokens in range(40, 53):
        if num_tokens > 40:
            live = np.append(live, num_tokens - 1)
        victims = policy.observe(state, num_tokens, live, np.ones(live.size))
        live = np.setdiff1d(live, victims)
        np.testing.assert_array_equal(live, expected_live(num_tokens))


@pytest.mark.engine
def test_the_example_runs_one_real_trial_deciding_as_the_rule_says(keep_head, monkeypatch, tmp_path, model_dir,
                                                                   sharegpt_dir):
    from vtoken.bench.analysis import process
    from vtoken.bench.harness.run_config import RunConfig
    from vtoken.bench.harness.runner import TrialRunner

    calls = []
    original = keep_head.observe

    def recording(self, state, num_tokens, live_pos, scores, **kw):
        victims = original(self, state, num_tokens, live_pos, scores, **kw)
        calls.append((state.req_id, num_tokens, np.asarray(live_pos).copy(), np.asarray(victims).copy()))
        return victims

    monkeypatch.setattr(keep_head, "observe", recording)
    cfg = RunConfig(manifest=REPO / "data/workloads/contract-128-s0.jsonl", arms=("vtoken",), pairs=1,
                    concurrency=(2,), num_requests=2, one_wave=True, max_tokens=8, policy=NAME, ratio=None,
                    budget=BUDGET, block_size=16, warmup=1, engine={"dtype": "float32", "max_model_len": 256},
                    model_dir=model_dir, sharegpt_dir=sharegpt_dir, raw_root=tmp_path / "raw")
    TrialRunner(cfg).run(progress=False)
    raw = process.load_raw(tmp_path / "raw")

    requests = raw["requests"]
    assert len(requests) == 2 and (requests.output_tokens == 8).all() and (requests.prompt_tokens > BUDGET).all()
    # the policy's own decisions, at every observed step of every request (the warm-up's too)
    by_request: dict[str, list] = {}
    for req_id, num_tokens, live_in, victims in calls:
        by_request.setdefault(req_id, []).append(num_tokens)
        np.testing.assert_array_equal(np.setdiff1d(live_in, victims), expected_live(num_tokens),
                                      err_msg=f"{req_id} at {num_tokens} tokens")
    assert len(by_request) >= 3  # the warm-up request and the trial's two
    assert sum(v.size for *_, v in calls) > 0
    # what the engine measured, step by step: after every step min(L, T) tokens live, T once L > T
    steps = raw["steps"]
    assert set(steps.req_id) == set(requests.req_id) and (steps.num_tokens > BUDGET).all()
    assert (steps.live_tokens == np.minimum(steps.num_tokens, BUDGET)).all(), steps[["req_id", "num_tokens",
                                                                                      "live_tokens"]]
