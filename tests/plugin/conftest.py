"""Fixtures of the plugin's engine tests: ShareGPT prompts and greedy generation helpers."""

from __future__ import annotations

import os

import pytest

from vtoken.assets.prompts import first_human_turns
from vtoken.bench.harness.arm_engine import release  # noqa: F401 (tests import release from here)
from vtoken.cpu_host import trim_memory


@pytest.fixture(scope="session")
def sharegpt_prompts(sharegpt_dir) -> list[str]:
    return first_human_turns(sharegpt_dir)


def greedy(llm, prompts, max_tokens: int = 32) -> list[list[int]]:
    """Greedy token ids, always ``max_tokens`` of them (EOS ignored, so every position counts)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]


def in_process_llm(**kwargs):
    """A ``vllm.LLM`` whose engine runs in this process (starts in ~20 s instead of ~60 s), with
    the dtype ``kwargs`` name (float32, bfloat16 or float16; anything else is refused).

    Several such engines live side by side in one process (the first ~1 GiB with the embedded
    model, each further one ~0.15 GiB: they share its weights). Engines the tests share are session
    fixtures; an engine one module needs is freed by :func:`release` (the module's ``_runs`` entries are released when the module ends).
    """
    from vtoken.engine_args import CPU_DTYPES

    if kwargs.get("dtype") not in CPU_DTYPES:  # the suite's engines never let the CPU choose
        raise ValueError(f"dtype={kwargs.get('dtype')!r}: a test engine names one of {list(CPU_DTYPES)}")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    return LLM(**kwargs)


def in_child(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a fresh (spawned) process, its picklable result returned: for tests that
    start several engines with the plugin's classes patched, whose memory a long test process does
    not get back (glibc keeps freed arenas; the suite's process would grow ~1 GiB per engine).
    ``fn`` must be importable by name (a module-level function)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args, kwargs)


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
        trim_memory()


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


def watch_readonly_bytes(log: dict):
    """Wrap ``RequestRecords.after_forward``: after each step, every block some request holds
    read-only must hold the bytes it held when first seen read-only (after its forward).

    ``log`` collects ``bytes`` (block -> first bytes), ``changed`` (blocks whose bytes
    changed), ``hashed_writable`` (blocks in vLLM's prefix-cache index that a table holds
    writable), ``checked`` (block checks), ``seen`` (blocks checked), ``first_rows`` (each
    request's block row when first seen), ``moves`` (tokens relocated) and needs ``llm`` (the
    in-process engine). Returns ``(original, wrapped)``: install the second, restore the first."""
    import numpy as np
    import torch

    from vtoken.plugin.request_records import RequestRecords

    original = RequestRecords.after_forward

    def after_forward(self, step, pool, copy):
        report = original(self, step, pool, copy)
        kv, b = copy.__self__, self.block_size
        held = set()
        for st in (record.state for record in self.requests.values()):
            ids = st.table.blocks.held_block_ids()
            held.update(int(x) for x in ids if st.table.blocks.is_readonly(int(x)))
        for bid in held:
            data = kv.read(np.arange(bid * b, (bid + 1) * b))
            if bid not in log["bytes"]:
                log["bytes"][bid] = data
            elif not torch.equal(log["bytes"][bid], data):
                log["changed"].add(bid)
        for bid in set(log["bytes"]) - held:  # back in the pool: may be handed out again
            del log["bytes"][bid]
        # A block in the prefix-cache index (hashed) is read-only in every table that holds it.
        manager = log["llm"].llm_engine.engine_core.engine_core.scheduler.vt_manager
        for req_id, row in manager.req_to_blocks.items():
            blocks = self.requests[req_id].state.table.blocks if req_id in self.requests else None
            for blk in row:
                if blk.block_hash is not None and blocks is not None and blocks.is_held(blk.block_id) \
                        and not blocks.is_readonly(blk.block_id):
                    log["hashed_writable"].add(blk.block_id)
        log["checked"] += len(held)
        log.setdefault("seen", set()).update(held)
        for req_id, row in manager.req_to_blocks.items():  # each request's row when first seen
            log.setdefault("first_rows", {}).setdefault(req_id, [blk.block_id for blk in row])
        log["moves"] += report.stats.moves
        return report

    return original, after_forward
