"""Teacher forcing in the real engine: a forced request emits exactly the forced ids and reports, per
step, the NLL HF's own forward gives that token; a planted eviction of a RULER needle raises the
answer's NLL against the unpruned run; a bad forcing request is refused naming the field."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from tests.plugin.conftest import in_child, in_process_llm, release
from vtoken.plugin import sink
from vtoken.plugin.forcing import FORCING_KEY, forcing_of
from vtoken.policies import registry
from vtoken.policies.base import EvictionPolicy

PROMPT = "<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n"
FORCED_TEXT = " Purple, gold and the colour of a winter sky over the sea."
TOPK = 8


def _forced_run(model_dir, sink_path) -> dict:
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    from vtoken.engine_args import engine_args

    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    forced = tok.encode(FORCED_TEXT, add_special_tokens=False)
    llm = in_process_llm(**engine_args(model_dir, vtoken={"arm": "full", "metrics_path": str(sink_path)},
                                       dtype="float32", max_model_len=256))
    try:
        params = SamplingParams(temperature=0.0, max_tokens=len(forced), ignore_eos=True,
                                extra_args={FORCING_KEY: {"ids": forced, "topk": TOPK}})
        out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0]
    finally:
        release(llm)
    _, steps = sink.read(sink_path)
    records = sorted((r["forced"] for s in steps for r in s["requests"] if r["forced"]), key=lambda f: f["pos"])
    return {"prompt": prompt, "forced": forced, "emitted": list(out.outputs[0].token_ids), "records": records}


@pytest.fixture(scope="module")
def forced_run(model_dir, tmp_path_factory):
    return in_child(_forced_run, model_dir, tmp_path_factory.mktemp("forcing") / "sink.jsonl")


@pytest.mark.engine
def test_a_forced_request_emits_the_forced_ids_and_its_nll_is_hfs(forced_run, model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    forced, records = forced_run["forced"], forced_run["records"]
    assert forced_run["emitted"] == forced  # not what greedy decoding would give: the text is unusual
    assert [r["pos"] for r in records] == list(range(len(forced)))
    assert [r["token"] for r in records] == forced
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    ids = torch.tensor([forced_run["prompt"] + forced])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    start = len(forced_run["prompt"]) - 1  # the logits row that predicts forced[0]
    hf_nll = np.array([-float(logp[start + k, t]) for k, t in enumerate(forced)])
    nll = np.array([r["nll"] for r in records])
    assert np.abs(nll - hf_nll).max() < 2e-3, (nll, hf_nll)
    assert hf_nll.mean() > 1.0  # an unlikely text: the NLL is not near 0 by accident
    for k, r in enumerate(records):  # the recorded top-k is HF's, most probable first
        top = torch.topk(logp[start + k], TOPK)
        assert r["argmax"] == int(top.indices[0]) and r["ids"][:3] == top.indices[:3].tolist(), k
        assert np.allclose(r["lps"], top.values.numpy(), atol=2e-3)


class NeedlePolicy(EvictionPolicy):
    """Evicts ``victims`` (logical positions) at its first observation, the step that computed the
    prompt, and nothing after (its budget never binds)."""

    name = "needle_for_test"
    victims: ClassVar[tuple[int, ...]] = ()

    def observe(self, state, num_tokens, live_pos, scores):
        state.step += 1
        live = set(np.asarray(live_pos).tolist())
        return np.array(sorted(p for p in self.victims if p in live) if state.step == 1 else [], dtype=np.int64)

    def _select(self, state, cand, num):  # pragma: no cover -- observe never asks
        return cand[:0]


def _needle_run(model_dir, folder) -> dict:
    """One RULER document: its answer forced after the whole prompt (Native), after the prompt with the
    needle's value evicted, and after the prompt with as many haystack tokens evicted far from it.
    Returns each run's answer NLL (summed over the answer's tokens) and what was evicted."""
    from vllm import SamplingParams

    from vtoken.assets import NLTK_DIR, punkt
    from vtoken.bench.lmeval import ruler
    from vtoken.bench.workloads.prompt import PromptRenderer
    from vtoken.engine_args import engine_args

    registry.register_policy(NeedlePolicy)
    punkt.use(NLTK_DIR)
    renderer = PromptRenderer(model_dir)
    doc = ruler.documents("niah_single_1", 1024, 1, renderer.tokenizer, 0)[0]
    prompt = renderer.ids(ruler.prompt(doc))
    answer = renderer.tokenizer.encode(" " + doc["outputs"][0], add_special_tokens=False)
    value = answer[1:]  # the digits, without the leading space token
    start = next(i for i in range(len(prompt)) if prompt[i:i + len(value)] == value)
    needle = tuple(range(start, start + len(value)))
    far = tuple(range(100, 100 + len(value))) if start > 300 else tuple(range(len(prompt) - 100,
                                                                              len(prompt) - 100 + len(value)))
    out = {"needle_pos": needle, "far_pos": far, "answer": len(answer)}
    for name, victims in (("native", None), ("needle", needle), ("haystack", far)):
        vt = {"arm": "full"} if victims is None else {"arm": "naive", "policy": NeedlePolicy.name, "budget": 4096}
        path = f"{folder}/{name}.jsonl"
        NeedlePolicy.victims = victims or ()
        llm = in_process_llm(**engine_args(model_dir, vtoken=vt | {"metrics_path": path}, dtype="float32",
                                           max_model_len=1024, max_num_batched_tokens=1024,
                                           enable_chunked_prefill=False))
        try:
            params = SamplingParams(temperature=0.0, max_tokens=len(answer), ignore_eos=True,
                                    extra_args={FORCING_KEY: {"ids": answer, "topk": 4}})
            emitted = list(llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0].outputs[0].token_ids)
        finally:
            release(llm)
        _, steps = sink.read(path)
        records = [r["forced"] for s in steps for r in s["requests"] if r["forced"]]
        live = [r["live_tokens"] for s in steps for r in s["requests"]]
        out[name] = {"emitted": emitted == answer, "nll": sum(r["nll"] for r in records), "n": len(records),
                     "live_after_prompt": live[0], "prompt": len(prompt)}
    return out


@pytest.fixture(scope="module")
def needle_run(model_dir, nltk_dir, tmp_path_factory):
    return in_child(_needle_run, model_dir, str(tmp_path_factory.mktemp("needle")))


@pytest.mark.engine
def test_a_planted_eviction_of_the_needle_raises_the_answers_nll(needle_run):
    native, needle, haystack = needle_run["native"], needle_run["needle"], needle_run["haystack"]
    for run in (native, needle, haystack):
        assert run["emitted"] and run["n"] == needle_run["answer"]  # every answer token forced, recorded
    k = len(needle_run["needle_pos"])
    assert needle["live_after_prompt"] == haystack["live_after_prompt"] == native["prompt"] - k  # k tokens gone
    assert native["live_after_prompt"] == native["prompt"]
    # Without the needle's value the model cannot copy it: the answer's NLL rises by several nats; as many
    # haystack tokens gone cost next to nothing.
    assert needle["nll"] > native["nll"] + 5.0, needle_run
    assert abs(haystack["nll"] - native["nll"]) < 1.0, needle_run


def test_a_bad_forcing_request_is_refused_naming_the_field():
    class P:
        extra_args = {FORCING_KEY: {"ids": []}}

    with pytest.raises(ValueError, match=r"\['ids'\]=\[\]: the forced continuation is empty"):
        forcing_of(P)
    P.extra_args = {FORCING_KEY: {"ids": [1, 2, 60000]}}
    with pytest.raises(ValueError, match=r"token id 60000 outside the vocabulary \[0, 49152\)"):
        forcing_of(P, vocab_size=49152)
    P.extra_args = {FORCING_KEY: {"ids": [1, 2], "bogus": 1}}
    with pytest.raises(ValueError, match=r"unknown keys \['bogus'\]"):
        forcing_of(P)
    P.extra_args = {FORCING_KEY: {"ids": [1, 2, 3]}}
    with pytest.raises(ValueError, match="3 forced tokens, but max_tokens=2"):
        forcing_of(P, max_tokens=2)
    P.extra_args = {FORCING_KEY: {"topk": 999}}
    with pytest.raises(ValueError, match=r"\['topk'\]=999"):
        forcing_of(P)
    P.extra_args = {}
    assert forcing_of(P) is None
