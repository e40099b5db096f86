"""A tiny engine stand-in for tests: one arm, one pool, several requests, every check on."""

from __future__ import annotations

import numpy as np

from vtoken.arms import get_arm
from vtoken.block_pool import BlockPool
from vtoken.invariants import ShadowKV, check_pool


class Sim:
    """Drive an arm like the replay loop does, checking I1-I4 after every operation."""

    def __init__(self, arm_name: str, num_blocks: int = 64, num_reserved: int = 0, **kw):
        self.arm = get_arm(arm_name, debug=True, **kw)
        self.b = self.arm.block_size
        self.pool = BlockPool(num_blocks, num_reserved)
        self.shadow = ShadowKV(num_blocks * self.b)
        self.states: dict[str, object] = {}
        self.index: dict[str, int] = {}
        self.freed_log: list[int] = []

    def state(self, req: str):
        if req not in self.states:
            self.states[req] = self.arm.new_request(req)
            self.index.setdefault(req, len(self.index))
        return self.states[req]

    def append(self, req: str, n: int, scores=None) -> np.ndarray | None:
        st = self.state(req)
        ids = self.pool.allocate(self.arm.blocks_needed(st, n))
        if ids is None:
            return None
        slots = self.arm.assign_slots(st, n, ids)
        pos = np.arange(st.table.num_tokens - n, st.table.num_tokens)
        self.shadow.write(slots, ShadowKV.token_id(self.index[req], pos))
        if scores is not None:
            self.arm.observe_scores(st, pos, scores)
        self.check()
        return slots

    def evict(self, req: str, pos) -> np.ndarray:
        freed = self.arm.evict(self.states[req], pos)
        self._free(freed)
        return freed

    def plan(self):
        plans = self.arm.plan(list(self.states.values()), self.pool)
        for p in plans:
            self.shadow.copy(p.src_slots, p.dst_slots)
            self.arm.apply(self.states[p.req_id], p)
            self._free(p.freed_block_ids)
        self.check()
        return plans

    def finish(self, req: str) -> None:
        self._free(self.arm.finish(self.states.pop(req)))
        self.check()

    def _free(self, ids) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        for st in self.states.values():  # freed blocks are never still referenced
            assert not np.isin(ids, st.table.blocks.held_block_ids()).any(), "freed block still held"
        self.pool.free(ids)
        self.freed_log.extend(ids.tolist())
        self.check()

    def check(self) -> None:
        states = list(self.states.values())
        check_pool(states, self.pool)
        for st in states:
            self.shadow.check(st, self.index[st.req_id])
