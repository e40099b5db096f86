"""`full`: full retention. Nothing is evicted; blocks are freed when the request ends."""

from __future__ import annotations

from vtoken.arms.base import KVArm
from vtoken.arms.registry import register_arm


@register_arm
class FullArm(KVArm):
    """Native vLLM behaviour: sequential appends, no eviction, no relocation."""

    name = "full"
    applies_policy_evictions = False

    def _place(self, state, num_new, new_ids):
        return self._place_sequential(state, num_new, new_ids)

    _place_one = KVArm._place_one_sequential
    _place_one_new = KVArm._place_one_new_sequential
