"""`full`: full retention. Nothing is evicted; blocks are freed when the request ends."""

from __future__ import annotations

from vtoken.arms.base import ArmDisplay, KVArm
from vtoken.arms.registry import register_arm


@register_arm
class FullArm(KVArm):
    """Native vLLM behaviour: sequential appends, no eviction, no relocation."""

    name = "full"
    display = ArmDisplay("Native (no eviction)", "#7f7f7f", "s", "-")
    applies_policy_evictions = False

