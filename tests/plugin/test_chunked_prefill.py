"""Every prompt token scored whatever the chunking, in the real engine.

vLLM splits a prompt into chunks when a step's token budget (``max_num_batched_tokens``) runs
out; the worker observes a request only once its prompt is complete. The same two requests run
with their prompts whole (one chunk) and split (``max_num_batched_tokens`` 64: a ~190-token
prompt in 3-4 chunks), float32: the kept set right after the prompt (what the policy or
PagedEviction's prune kept) must be the same -- under H2O (attention mass, summed over the
chunks), vk_norm (keys and values read from the pool) and PagedEviction (norms measured as
each chunk is written). Before the fix PagedEviction's earlier chunks had score 0 (pruned
first) and H2O lost their mass.
"""

import pytest

from tests.plugin.conftest import greedy, in_child, in_process_llm, release
from vtoken.plugin.request_records import RequestRecords

pytestmark = pytest.mark.engine

PROMPTS = [
    "Summarise the following passage in two sentences. " + " ".join(
        f"Sentence {i} of the passage talks about the history of the river town and its mills." for i in range(12)),
    "List three facts about the moon, then explain tides. " + " ".join(
        f"Note {i}: the orbit, the phases and the far side are often misunderstood." for i in range(12)),
]


def _kept_after_prompt(model_dir, vtoken: dict, chunk: int | None) -> tuple[dict, int]:
    """{request: live positions right after its prompt's policy step}, and the most chunks a prompt took."""
    from vtoken.engine_args import engine_args

    kept, chunks = {}, {}
    original = RequestRecords.after_forward

    def after_forward(self, step, pool, copy):
        for i, r in enumerate(step.req_ids):
            if r not in kept:
                chunks[r] = chunks.get(r, 0) + 1
        report = original(self, step, pool, copy)
        for i, r in enumerate(step.req_ids):
            if r not in kept and step.num_computed[i] >= self.requests[r].prompt_len:
                kept[r] = self.requests[r].state.table.tokens.live_positions().tolist()
        return report

    limit = {} if chunk is None else {"max_num_batched_tokens": chunk, "enable_chunked_prefill": True}
    llm = in_process_llm(**engine_args(model_dir, vtoken=vtoken, kv_cache_memory_bytes=128 << 20, dtype="float32",
                                       max_model_len=512, block_size=16, **limit))
    RequestRecords.after_forward = after_forward
    try:
        greedy(llm, PROMPTS, 4)
    finally:
        RequestRecords.after_forward = original
        release(llm)
    return {r.split("-")[0]: v for r, v in kept.items()}, max(chunks.values())


def _both_chunkings(model_dir, vtoken: dict):
    """The prompts whole, then split (one spawned process: ``in_child``)."""
    return _kept_after_prompt(model_dir, vtoken, None), _kept_after_prompt(model_dir, vtoken, 64)


# H2O in `make test`; vk_norm and PagedEviction in `make test-slow`.
@pytest.mark.parametrize("vtoken", [
    {"arm": "naive", "policy": "h2o", "budget": 64},
    pytest.param({"arm": "naive", "policy": "vk_norm", "budget": 64}, marks=pytest.mark.slow),
    pytest.param({"arm": "paged_eviction", "budget": 64}, marks=pytest.mark.slow),
], ids=["h2o", "vk_norm", "paged_eviction"])
def test_a_chunked_prompt_keeps_what_the_whole_prompt_keeps(model_dir, vtoken):
    (whole, one), (split, many) = in_child(_both_chunkings, model_dir, vtoken)
    assert one == 1 and many >= 3  # the prompts really were split
    assert all(len(v) <= 64 + 16 for v in whole.values())  # and pruned at completion
    assert split == whole
