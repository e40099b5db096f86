"""Zipage-style compaction: the core arm (:mod:`.arm`) and its engine side (:mod:`.engine`,
imported by the plugin only)."""

from baselines.zipage.arm import ZipageArm, ZipageConfig

__all__ = ["ZipageArm", "ZipageConfig"]
