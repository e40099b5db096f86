"""`naive` (Naive-Evict, the paper's paired baseline): victims leave holes that are never
reused; new tokens append at the tail; a block is released only once it holds no live token
(the tail excepted while it has unwritten room, see `vtoken.arms.base`)."""

from __future__ import annotations

from vtoken.arms.base import ArmDisplay, KVArm
from vtoken.arms.registry import register_arm


@register_arm
class NaiveArm(KVArm):
    """Token-level eviction with block-level reclamation only."""

    name = "naive"
    display = ArmDisplay("Naive-Evict", "#E69F00", "o", "-")

