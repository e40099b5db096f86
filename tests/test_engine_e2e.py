"""The real vLLM CPU engine on the real converted model (no mocks)."""

import os

import pytest

from vtoken.engine_args import engine_args

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def llm(model_dir):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: one engine, faster start
    from vllm import LLM

    engine = LLM(**engine_args(model_dir))
    yield engine
    del engine


def _greedy(max_tokens):
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


def test_greedy_answer_is_factual(llm):
    out = llm.chat([[{"role": "user", "content": "What is the capital of France?"}]], _greedy(24))
    assert "Paris" in out[0].outputs[0].text


def test_greedy_runs_are_token_identical(llm, sharegpt_dir):
    from vtoken.assets import sharegpt

    ds = sharegpt.load(sharegpt_dir)
    prompts = [conv["conversations"][0]["value"][:600] for conv in ds.select(range(4))]
    first = llm.generate(prompts, _greedy(32))
    second = llm.generate(prompts, _greedy(32))
    tokens = [o.outputs[0].token_ids for o in first]
    assert all(len(t) > 0 for t in tokens)
    assert tokens == [o.outputs[0].token_ids for o in second]


def test_engine_args_rejects_missing_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="model="):
        engine_args(tmp_path / "nothing")
