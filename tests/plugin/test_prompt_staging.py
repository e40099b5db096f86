"""Prompts pruned before they are written (``prompt_prune="before_write"``), in
the real engine (:mod:`vtoken.plugin.staging`).

The same prompts (~190 tokens, budget 64, B = 16, float32) run with the prompt written whole
then pruned (``after_write``, the default) and pruned before it is written (``before_write``):

- the scheduler's first allocation is the post-prune block count, cdiv(kept, B), not
  cdiv(L, B); with a pool too small for two whole prompts, both are admitted in the first step;
- the prune moves nothing in the pool (PagedEviction's after-write prune packs by moves);
- the kept sets after the prompt are equal, and the outputs token-identical.
"""

import pytest

from tests.plugin.conftest import greedy, in_child, in_process_llm, release
from tests.plugin.test_chunked_prefill import PROMPTS  # two ~190-token prompts
from vtoken.plugin.manager import VTokenBlockManager
from vtoken.plugin.request_records import RequestRecords

pytestmark = pytest.mark.engine
B, BUDGET = 16, 64
ARMS = {
    "paged_eviction": {"arm": "paged_eviction", "budget": BUDGET},
    "h2o": {"arm": "naive", "policy": "h2o", "budget": BUDGET},
}


def _run(model_dir, vtoken: dict, prune: str, **engine) -> dict:
    """What one engine did: per request (user id) the first allocation's block count, the kept
    positions and the moves of the step that completed its prompt, its output; the first step's batch."""
    from vtoken.engine_args import engine_args

    out = {"first_alloc": {}, "kept": {}, "moves": {}, "batches": []}
    alloc, after = VTokenBlockManager.allocate_new_blocks, RequestRecords.after_forward

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        new = alloc(self, request_id, num_tokens, num_tokens_main_model)
        out["first_alloc"].setdefault(request_id.split("-")[0], len(new))
        return new

    def after_forward(self, step, pool, copy):
        report = after(self, step, pool, copy)
        out["batches"].append(len(step.req_ids))
        for i, r in enumerate(step.req_ids):
            user = r.split("-")[0]
            if user not in out["kept"] and step.num_computed[i] >= self.requests[r].prompt_len:
                out["kept"][user] = self.requests[r].state.table.tokens.live_positions().tolist()
                out["moves"][user] = report.stats.moves
        return report

    engine = {"kv_cache_memory_bytes": 128 << 20, "max_model_len": 512, **engine}
    llm = in_process_llm(**engine_args(model_dir, vtoken={**vtoken, "prompt_prune": prune}, dtype="float32",
                                       block_size=B, **engine))
    VTokenBlockManager.allocate_new_blocks, RequestRecords.after_forward = allocate_new_blocks, after_forward
    try:
        out["outputs"] = greedy(llm, PROMPTS, 16)
        out["prompt_tokens"] = [len(llm.get_tokenizer().encode(p)) for p in PROMPTS]
    finally:
        VTokenBlockManager.allocate_new_blocks, RequestRecords.after_forward = alloc, after
        release(llm)
    return out


def _both(model_dir, vtoken: dict, **engine) -> tuple[dict, dict]:
    """The same prompts written whole, then pruned before written (one spawned process: ``in_child``)."""
    return _run(model_dir, vtoken, "after_write", **engine), _run(model_dir, vtoken, "before_write", **engine)


# PagedEviction in `make test` (a block-granular prune); H2O in `make test-slow`.
@pytest.mark.parametrize("arm", ["paged_eviction", pytest.param("h2o", marks=pytest.mark.slow)])
def test_a_prompt_pruned_before_it_is_written_is_admitted_at_its_kept_size_and_moves_nothing(model_dir, arm):
    from vtoken.plugin.adapter import adapter_for
    from vtoken.plugin.config import PluginConfig

    written, staged = in_child(_both, model_dir, ARMS[arm])
    keep = adapter_for(PluginConfig.from_dict(ARMS[arm]), B).prompt_keep
    users = sorted(staged["kept"])
    assert len(users) == len(PROMPTS)
    for user, length in zip(users, staged["prompt_tokens"]):
        assert length > BUDGET + B  # the prompts exceed the budget: the prune fires
        assert written["first_alloc"][user] == -(-length // B)  # admitted whole
        assert staged["first_alloc"][user] == -(-keep(length) // B)  # admitted at the post-prune count
        assert staged["first_alloc"][user] < written["first_alloc"][user]
        assert len(staged["kept"][user]) == keep(length)
        assert staged["moves"][user] == 0
    assert staged["kept"] == written["kept"]
    assert staged["outputs"] == written["outputs"]
    if arm == "paged_eviction":  # written whole, its prune packs the survivors by moves
        assert all(written["moves"][u] > 0 for u in users)


def test_a_pool_too_small_for_two_whole_prompts_admits_both_when_they_are_pruned_first(model_dir):
    # 17 blocks (16 usable, vLLM's minimum for 256-token requests): one ~190-token prompt whole
    # needs 12-13; pruned to 64 tokens, 4 each.
    written, staged = in_child(_both, model_dir, ARMS["h2o"], num_gpu_blocks_override=17, max_model_len=256)
    assert written["batches"][0] == 1
    assert staged["batches"][0] == 2


def test_the_settings_a_staged_prompt_needs_are_checked_before_an_engine_starts(model_dir):
    from vtoken.engine_args import engine_args

    args = engine_args(model_dir, vtoken={**ARMS["h2o"], "prompt_prune": "before_write"}, dtype="float32")
    assert args["enable_chunked_prefill"] is False
    with pytest.raises(ValueError, match="enable_chunked_prefill=True with vtoken.prompt_prune='before_write'"):
        engine_args(model_dir, vtoken={**ARMS["h2o"], "prompt_prune": "before_write"}, dtype="float32",
                    enable_chunked_prefill=True)
    with pytest.raises(ValueError, match="enable_prefix_caching=True with vtoken.prompt_prune='before_write'"):
        engine_args(model_dir, vtoken={**ARMS["h2o"], "prompt_prune": "before_write"}, dtype="float32",
                    enable_prefix_caching=True)
    with pytest.raises(ValueError, match="prompt_prune='before_write' with arm='zipage'"):
        engine_args(model_dir, vtoken={"arm": "zipage", "budget": BUDGET, "prompt_prune": "before_write"},
                    dtype="float32")
    # a press in kvpress's prefill-once mode keeps int(L (1 - r)) of the context and the whole question:
    # not the budget the scheduler would allocate blocks for
    with pytest.raises(ValueError, match=r"prompt_prune='before_write' with arm='vtoken'.*'prefill_once'.*keeps its budget"):
        engine_args(model_dir, vtoken={"arm": "vtoken", "policy": "kvpress:KnormPress", "ratio": 0.5,
                                       "policy_options": {"mode": "prefill_once"}, "prompt_prune": "before_write"},
                    dtype="float32")
    with pytest.raises(ValueError, match="vtoken.prompt_prune='early': must be one of"):
        engine_args(model_dir, vtoken={**ARMS["h2o"], "prompt_prune": "early"}, dtype="float32")
