"""Fixtures of the plugin's engine tests: ShareGPT prompts and greedy generation helpers."""

from __future__ import annotations

import gc
import os

import pytest

from vtoken.assets.prompts import first_human_turns


@pytest.fixture(scope="session")
def sharegpt_prompts(sharegpt_dir) -> list[str]:
    return first_human_turns(sharegpt_dir)


def greedy(llm, prompts, max_tokens: int = 32) -> list[list[int]]:
    """Greedy token ids, always ``max_tokens`` of them (EOS ignored, so every position counts)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]


def in_process_llm(**kwargs):
    """A ``vllm.LLM`` whose engine runs in this process (starts in ~20 s instead of ~60 s).

    Several such engines live side by side in one process (~1 GiB each with the embedded
    model). Engines the tests share are session fixtures; an engine one module needs is freed
    by :func:`release` (the module's ``_runs`` entries are released when the module ends).
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    return LLM(**kwargs)


def release(llm) -> None:
    """Shut one in-process engine down and free its memory, leaving the other engines working.

    ``EngineCore.shutdown`` ends with ``cleanup_dist_env_and_memory()``, which destroys the
    process-global parallel groups that every in-process engine of this process shares (the
    next step of any other engine then fails: "pipeline model parallel group is not
    initialized"). The groups are the same for every engine here (world size 1), so they stay;
    the engine's own resources go. Its memory returns once the caller drops its references.
    """
    import vllm.v1.engine.core as core

    teardown = core.cleanup_dist_env_and_memory
    core.cleanup_dist_env_and_memory = lambda *args, **kwargs: (gc.unfreeze(), gc.collect())
    try:
        llm.llm_engine.engine_core.shutdown()
    finally:
        core.cleanup_dist_env_and_memory = teardown


@pytest.fixture(scope="module", autouse=True)
def _release_module_engines(request):
    """Free the engines a module kept in its ``_runs`` cache once the module's tests are done:
    a whole suite's engines at once would not fit in memory."""
    yield
    runs = getattr(request.module, "_runs", None)
    if isinstance(runs, dict):
        for run in runs.values():
            if isinstance(run, dict) and "llm" in run:
                release(run.pop("llm"))
        runs.clear()
        gc.collect()


def attention_impls(llm) -> list[str]:
    """Class names of the attention implementations in the engine's model (all workers)."""

    def impls(worker):
        model = worker.model_runner.model
        return sorted({type(m.impl).__name__ for m in model.modules() if hasattr(m, "impl")})

    return llm.collective_rpc(impls)


def kv_cache_layouts(llm) -> list[str]:
    """The KV cache layout each worker adopted."""
    return llm.collective_rpc(lambda worker: worker.vllm_config.cache_config.kv_cache_layout)


@pytest.fixture(scope="session")
def stock_fp16(model_dir):
    """Stock vLLM (plugin installed, not selected), float16, in-process."""
    from vtoken.engine_args import engine_args

    return in_process_llm(**engine_args(model_dir, dtype="float16"))


@pytest.fixture(scope="session")
def vtoken_fp16(model_dir):
    """The plugin's ``full`` arm, float16, in-process."""
    from vtoken.engine_args import engine_args

    return in_process_llm(**engine_args(model_dir, vtoken={"arm": "full"}, dtype="float16"))


CHUNK_TOKENS = 64


@pytest.fixture(scope="session")
def stock_fp16_chunked(model_dir):
    """Stock vLLM, float16, at most ``CHUNK_TOKENS`` tokens per step (chunked prefill)."""
    from vtoken.engine_args import engine_args

    return in_process_llm(
        **engine_args(model_dir, dtype="float16", max_num_batched_tokens=CHUNK_TOKENS, enable_chunked_prefill=True)
    )


@pytest.fixture(scope="session")
def vtoken_fp16_chunked(model_dir):
    """The ``full`` arm, float16, at most ``CHUNK_TOKENS`` tokens per step."""
    from vtoken.engine_args import engine_args

    return in_process_llm(
        **engine_args(
            model_dir, vtoken={"arm": "full"}, dtype="float16",
            max_num_batched_tokens=CHUNK_TOKENS, enable_chunked_prefill=True,
        )
    )
