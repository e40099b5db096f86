"""The real vLLM CPU engine on the real converted model (no mocks), as a user gets it: the one
engine of the suite whose dtype the CPU's rule chooses (vtoken.cpu_host: bfloat16 with AVX512_BF16
and no AMX, float32 elsewhere), on purpose, with the dtype it got checked. Its checks hold in either
dtype: a factual answer, and two runs of the same batch token-identical."""

import os

import pytest

from vtoken.engine_args import engine_args

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def llm(model_dir):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: one engine, faster start
    from vllm import LLM

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("VTOKEN_REQUIRE_DTYPE")  # this engine exercises the CPU's rule (tests/test_dtype_pinned.py)
        args = engine_args(model_dir)
    engine = LLM(**args)
    yield engine
    del engine


def test_the_engine_runs_in_the_dtype_the_cpus_rule_picks(llm):
    from vtoken.cpu_host import cpu_dtype, cpu_flags

    assert str(llm.llm_engine.model_config.dtype) == f"torch.{cpu_dtype(cpu_flags())}"


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
