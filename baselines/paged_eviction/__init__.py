"""PagedEviction: the core arm (:mod:`.arm`) and its engine side (:mod:`.engine`, imported by
the plugin only)."""

from baselines.paged_eviction.arm import PagedEvictionArm, PagedEvictionConfig, token_score

__all__ = ["PagedEvictionArm", "PagedEvictionConfig", "token_score"]
