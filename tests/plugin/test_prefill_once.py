"""A kvpress press in mode ``prefill_once`` in the real engine: the request names its
context in ``SamplingParams.extra_args``; when its prompt is complete the press keeps exactly
kvpress's ``int(L (1 - r))`` of the L context tokens and every question token, then prunes no
more; a request naming no context has its whole prompt pruned so."""

import pytest

from tests.plugin.conftest import in_child

pytestmark = pytest.mark.engine

RATIO = 0.5
TEXT = " ".join(f"Line {i}: the archive lists the ledger, the map and the seal of the harbour office." for i in range(14))
QUESTION = " Which three things does the archive list? Answer briefly."


def _kept(model_dir) -> dict:
    import os

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from vtoken.engine_args import engine_args
    from vtoken.plugin.request_fields import CONTEXT_KEY
    from vtoken.plugin.request_records import RequestRecords, user_request_id

    tok = AutoTokenizer.from_pretrained(model_dir)
    context, question = tok.encode(TEXT), tok.encode(QUESTION)
    prompts = {"a": (context, question), "b": (context[:101], question), "whole": (context[:150], question)}
    seen: dict[str, list] = {}
    original = RequestRecords.after_forward

    def after_forward(self, step, pool, copy):
        report = original(self, step, pool, copy)
        for i, r in enumerate(step.req_ids):
            if step.num_computed[i] >= self.requests[r].prompt_len:
                seen.setdefault(user_request_id(r), []).append(self.requests[r].state.table.tokens.live_positions().tolist())
        return report

    cfg = {"arm": "vtoken", "policy": "kvpress:KnormPress", "ratio": RATIO, "policy_options": {"mode": "prefill_once"},
           "watermark": 1.0}
    llm = LLM(**engine_args(model_dir, vtoken=cfg, dtype="float32", kv_cache_memory_bytes=128 << 20, block_size=16,
                            max_model_len=1024, enable_chunked_prefill=False))
    RequestRecords.after_forward = after_forward
    try:
        params = [SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True,
                                 extra_args=None if name == "whole" else {CONTEXT_KEY: len(c)})
                  for name, (c, q) in prompts.items()]
        outs = llm.generate([TokensPrompt(prompt_token_ids=c + q) for c, q in prompts.values()], params, use_tqdm=False)
    finally:
        RequestRecords.after_forward = original
    by_id = {o.request_id: name for o, name in zip(outs, prompts)}
    return {by_id[uid]: {"context": len(prompts[by_id[uid]][0]), "prompt": sum(map(len, prompts[by_id[uid]])),
                         "steps": steps} for uid, steps in seen.items()}


def test_prefill_once_keeps_kvpress_count_of_the_named_context_and_all_of_the_question(model_dir):
    got = in_child(_kept, model_dir)
    assert set(got) == {"a", "b", "whole"}
    for name in ("a", "b"):
        ctx, prompt, steps = got[name]["context"], got[name]["prompt"], got[name]["steps"]
        first = steps[0]
        assert len([p for p in first if p < ctx]) == int(ctx * (1 - RATIO))  # kvpress's compute_n_kept
        assert [p for p in first if p >= ctx] == list(range(ctx, prompt))  # the question, whole
        assert len(steps) == 8  # the prompt's step and 7 decode steps, observed
        assert steps[-1] == first + list(range(prompt, prompt + 7))  # pruned once: nothing evicted after
    whole = got["whole"]
    assert len(whole["steps"][0]) == int(whole["prompt"] * (1 - RATIO))  # no context named: the whole prompt
