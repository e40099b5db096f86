"""What each arm's engine is given beyond its vtoken settings: its policy, its ``vllm.LLM`` arguments.

Every engine of a run gets the same engine settings (block size, pool, scheduler limits,
engine seed, ``RunConfig.engine``) and differs only in its vtoken dict: the shared settings
(``RunConfig.vtoken``), the arm's name, the eviction its engine side takes, then the arm's own
``arm_settings``: its ``PluginConfig`` (``RunConfig.arm_configs``, built once per run), given to
the engine as it is with the engine's metrics sink set.
The engine arguments are built (and validated) by ``vtoken.engine_args.engine_args``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vtoken.bench.harness.run_config import RunConfig
from vtoken.engine_args import engine_args
from vtoken.plugin.adapter import adapter_class

# RunConfig fields passed to vLLM when set, under vLLM's name.
_OPTIONAL_ENGINE_FIELDS = {"num_gpu_blocks": "num_gpu_blocks_override",
                           "max_num_batched_tokens": "max_num_batched_tokens",
                           "enable_chunked_prefill": "enable_chunked_prefill"}


def policy_of(cfg: RunConfig, arm: str) -> str:
    """The eviction policy ``arm`` runs ("none" for arms that evict nothing, "builtin"
    for baselines that are their own policy)."""
    if not adapter_class(cfg.base_arm(arm)).evicts:
        return "none"
    return cfg.arm_configs[arm].policy or "builtin"


def engine_overrides(cfg: RunConfig) -> dict[str, Any]:
    """The engine settings every arm of the run shares (``engine_args`` overrides): block size,
    ``max_num_seqs`` = the largest C a trial runs (``RunConfig.max_concurrency``), engine seed, pool
    and scheduler limits, ``cfg.engine``."""
    overrides = {"block_size": cfg.block_size, "max_num_seqs": cfg.max_concurrency, "seed": cfg.seed,
                 **cfg.engine}
    for name, vllm_name in _OPTIONAL_ENGINE_FIELDS.items():
        value = getattr(cfg, name)
        if value is not None:
            overrides[vllm_name] = value
    return overrides


def pool_of(cfg: RunConfig, arm: str) -> int | None:
    """The pool of ``arm``'s engine: the run's, except Native's in a teacher-forced run, which holds
    the largest C requests at ``max_model_len`` (the reference is never preempted: a recompute
    would compute its later steps through another kernel path)."""
    if cfg.forcing is not None and arm == "full" and cfg.num_gpu_blocks is not None:
        return max(cfg.num_gpu_blocks, max(cfg.concurrency) * -(-cfg.max_model_len // cfg.block_size) + 1)
    return cfg.num_gpu_blocks


def llm_kwargs(cfg: RunConfig, arm: str, metrics_path: str) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments of ``arm``; equal for every arm but the vtoken dict (and the
    pool of a forced run's reference, ``pool_of``).

    Raises:
        FileNotFoundError, ValueError: from ``vtoken.engine_args.engine_args``.
    """
    overrides = engine_overrides(cfg)
    if pool_of(cfg, arm) is not None:
        overrides["num_gpu_blocks_override"] = pool_of(cfg, arm)
    return engine_args(cfg.model_dir, vtoken=replace(cfg.arm_configs[arm], metrics_path=metrics_path), device=cfg.device,
                       **overrides)
