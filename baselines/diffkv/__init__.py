"""DiffKV-style tiers: the core arm (:mod:`.arm`) and its engine side (:mod:`.engine`: the tier
decisions of :mod:`.tiers`, the quantised low tier of :mod:`.lowtier` / :mod:`.quant`, the
attention over both tiers of :mod:`.tiered_attention`; imported by the plugin only)."""

from baselines.diffkv.arm import DiffKVArm, DiffKVConfig, DiffKVState

__all__ = ["DiffKVArm", "DiffKVConfig", "DiffKVState"]
