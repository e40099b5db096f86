"""What each arm's engine is given: its vtoken settings, its policy, its ``vllm.LLM`` arguments.

Every engine of a run gets the same engine settings (block size, pool, scheduler limits,
engine seed, ``RunConfig.engine``) and differs only in its vtoken dict: the shared settings
(``RunConfig.vtoken``), the arm's name, the eviction its engine side takes
(``vtoken.plugin.adapter``: a policy-driven arm gets ``policy`` and ratio|budget, a
self-evicting baseline only ``budget``, ``full`` none), then the arm's own ``arm_settings``.
The engine arguments are built (and validated) by ``vtoken.engine_args.engine_args``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vtoken.engine_args import engine_args
from vtoken.plugin.adapter import adapter_class

if TYPE_CHECKING:
    from vtoken.bench.run_config import RunConfig

# PluginConfig fields the runner sets itself (per arm, or per engine).
OWN_VTOKEN_KEYS = ("arm", "policy", "ratio", "budget", "metrics_path")
# ... of which a per-arm setting (``arm_settings``) may still set the eviction ones.
NOT_PER_ARM_KEYS = ("arm", "metrics_path")
# RunConfig fields passed to vLLM when set, under vLLM's name.
_OPTIONAL_ENGINE_FIELDS = {"num_gpu_blocks": "num_gpu_blocks_override",
                           "max_num_batched_tokens": "max_num_batched_tokens",
                           "enable_chunked_prefill": "enable_chunked_prefill"}


def vtoken_dict(cfg: RunConfig, arm: str, metrics_path: str | None = None) -> dict[str, Any]:
    """The vtoken settings of ``arm``: shared settings + the arm's name (+ eviction),
    then the arm's own ``arm_settings`` settings (null values unset a setting).

    Args:
        cfg: the run.
        arm: an arm of ``cfg.arms`` (a variant runs its implemented arm).
        metrics_path: the engine's metrics sink (None: not set).
    """
    base = cfg.base_arm(arm)
    out: dict[str, Any] = {"arm": base, **cfg.vtoken, **eviction(base, cfg.policy, cfg.ratio, cfg.budget)}
    out.update(cfg.arm_settings.get(arm, {}))
    if metrics_path is not None:
        out["metrics_path"] = metrics_path
    return {k: v for k, v in out.items() if v is not None}


def eviction(arm: str, policy: str | None, ratio: float | None, budget: int | None) -> dict[str, Any]:
    """The eviction settings an implemented arm takes: a policy-driven arm the policy and the
    ratio (else the budget), a self-evicting baseline only the budget, ``full`` none."""
    side = adapter_class(arm)
    if side.evicts and not side.takes_policy:  # a baseline that is its own policy
        return {"budget": budget} if budget is not None else {}
    if side.takes_policy:
        return {"policy": policy} | ({"ratio": ratio} if ratio is not None else {"budget": budget})
    return {}


def policy_of(cfg: RunConfig, arm: str) -> str:
    """The eviction policy ``arm`` runs ("none" for arms that evict nothing, "builtin"
    for baselines that are their own policy)."""
    if not adapter_class(cfg.base_arm(arm)).evicts:
        return "none"
    return str(vtoken_dict(cfg, arm).get("policy") or "builtin")


def engine_overrides(cfg: RunConfig) -> dict[str, Any]:
    """The engine settings every arm of the run shares (``engine_args`` overrides): block size,
    ``max_num_seqs`` = the largest C, engine seed, pool and scheduler limits, ``cfg.engine``."""
    overrides = {"block_size": cfg.block_size, "max_num_seqs": max(cfg.concurrency), "seed": cfg.seed,
                 **cfg.engine}
    for name, vllm_name in _OPTIONAL_ENGINE_FIELDS.items():
        value = getattr(cfg, name)
        if value is not None:
            overrides[vllm_name] = value
    return overrides


def llm_kwargs(cfg: RunConfig, arm: str, metrics_path: str) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments of ``arm``; equal for every arm but the vtoken dict.

    Raises:
        FileNotFoundError, ValueError: from ``vtoken.engine_args.engine_args``.
    """
    return engine_args(cfg.model_dir, vtoken=vtoken_dict(cfg, arm, metrics_path), device=cfg.device,
                       **engine_overrides(cfg))
