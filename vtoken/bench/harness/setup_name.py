"""The setup's name: the first part of every trial id and raw folder of a run.

``--setup`` when given, else derived from the settings that make trials comparable, so runs
with other settings never share raw folders (``docs/trials.md``)::

    <workload>.<policy>-<r|b><value>.pool<N|auto>[.arms<hash>][.poisson<rate>][.n<N>][.max<M>][.prefix<d>x<L>]
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from vtoken.policies.kvpress_catalog import slug

if TYPE_CHECKING:
    from vtoken.bench.harness.run_config import RunConfig


def setup_name(cfg: RunConfig) -> str:
    """``cfg.setup``, or the name derived from the run's settings (module docstring)."""
    if cfg.setup:
        return cfg.setup
    evict = f"r{cfg.ratio}" if cfg.ratio is not None else f"b{cfg.budget}"
    parts = [cfg.workload_name, f"{slug(cfg.policy)}-{evict}", f"pool{cfg.num_gpu_blocks or 'auto'}"]
    digest = per_arm_digest(cfg)
    parts += [f"arms{digest}"] if digest else []
    parts += [f"poisson{cfg.rate}"] if cfg.rate else []
    parts += [f"n{cfg.num_requests}"] if cfg.num_requests else []
    parts += [f"max{cfg.max_tokens}"] if cfg.max_tokens else []
    parts += [f"prefix{cfg.prefix_degree}x{cfg.prefix_tokens}"] if cfg.prefix_degree else []
    return ".".join(parts)


def per_arm_digest(cfg: RunConfig) -> str | None:
    """First 8 hex of the sha256 of the per-arm settings (``arm_settings``, with the
    ``arm_variants`` if any), or None when the run has neither."""
    if not (cfg.arm_settings or cfg.arm_variants):
        return None
    per_arm = cfg.arm_settings if not cfg.arm_variants else {"settings": cfg.arm_settings, "variants": cfg.arm_variants}
    return hashlib.sha256(json.dumps(per_arm, sort_keys=True).encode()).hexdigest()[:8]
