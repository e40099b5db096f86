"""Scheduler side of vToken: physical block demand and mid-request release.

vLLM's ``FullAttentionManager`` keeps, per request, a positional row of blocks
(``req_to_blocks``) and asks for ``cdiv(tokens, B) - len(row)`` new blocks. With token-level
eviction that is wrong twice: a request that refills holes (``holefill``) has room without
a new block, and blocks emptied by eviction or compaction must go back to the pool while the
request keeps running. :class:`VTokenBlockManager` changes exactly those two things:

- **demand is physical**: a request writing ``k`` new tokens needs
  ``cdiv(max(0, k - room), B)`` blocks, where ``room`` is what the worker reported after the
  previous step (``KVArm.room``; every arm's ``blocks_needed`` has this form,
  ``tests/core/test_room.py``). Between reports the room is tracked locally (writes use it
  up, new blocks add ``B``), so two allocations in one step stay consistent;
- **release** nulls out row entries and frees their blocks (vLLM's sliding-window idiom,
  ``_remove_blocks_in_range``): the row never shrinks or reorders, so the worker's block
  table, which only ever receives appended ids, stays aligned with it.

The row is therefore the request's blocks *in acquisition order* (the token table's local
order), no longer ``cdiv(tokens, B)`` long for ``holefill``.

With prefix caching (:mod:`vtoken.plugin.prefix_cache`): a request that hits the cache starts
with the hit blocks as its first row entries (vLLM's ``add_local_computed_blocks``; they count
as allocated tokens with no room), and an evicting arm's blocks are hashed only up to the
prompt's last full block (:meth:`VTokenBlockManager.cache_blocks`), the prefix blocks the
worker keeps read-only. Releasing a shared block drops this request's reference only.

Installed by :class:`vtoken.plugin.scheduler.VTokenScheduler` by switching the class of the
one full-attention manager of a single-group model (SmolLM2, Llama-style models).
Device-independent; it has run only with the CPU worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence

from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

from vtoken.plugin import vllm_compat
from vtoken.plugin.admission import Projection


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class VTokenBlockManager(FullAttentionManager):
    """``FullAttentionManager`` with physical demand and :meth:`release`."""

    def vtoken_init(self, charge: int, cache_exact_only: bool, staged=None) -> None:
        """Per-request mirrors and the arm's settings (called once, by :func:`install`)."""
        # prompt_prune="before_write" (vtoken.plugin.staging): tokens a computed prompt keeps
        # (the adapter's prompt_keep); a request's first allocation is for those only.
        self.vt_staged = staged
        # Logical tokens already given a slot, and free cells held, per request.
        self.vt_allocated: dict[str, int] = {}
        self.vt_room: dict[str, int] = {}
        self.vt_released_total = 0
        # Projected holdings per request (admission="projected"; vtoken.plugin.admission).
        self.vt_projection: dict[str, Projection] = {}
        # Blocks every request is charged for side buffers outside its row (Zipage's query
        # cache), taken from the pool on its first allocation and freed with it.
        self.vt_charge = charge
        self.vt_charged: dict[str, list] = {}
        # Whether blocks past a request's first eviction stay out of the prefix cache (an
        # evicting arm: their K/V is computed under eviction and they are written in place),
        # and per request the tokens computed before it (the worker's report; absent until then).
        self.vt_cache_exact_only = cache_exact_only
        self.vt_exact: dict[str, int] = {}
        # Prompt tokens each request took from the prefix cache when it was (re)admitted.
        self.vt_cached_tokens: dict[str, int] = {}
        # Tokens each request took from a KV connector (external hits) when it was (re)admitted.
        self.vt_external_tokens: dict[str, int] = {}
        # Set for a step whose reclaim round frees blocks for paused running requests: no new
        # request may take them first (:meth:`hold_admission`).
        self.vt_hold_admission = False

    @contextlib.contextmanager
    def hold_admission(self, hold: bool) -> Iterator[None]:
        """While the scheduler plans a step: with ``hold``, no request not yet allocated is
        given blocks (a reclaim round frees them for the paused running ones)."""
        self.vt_hold_admission = hold
        try:
            yield
        finally:
            self.vt_hold_admission = False

    def set_projection(self, request_id: str, projection: Projection | None) -> None:
        """The request's projected holdings (admission="projected"); None forgets them."""
        if projection is None:
            self.vt_projection.pop(request_id, None)
        else:
            self.vt_projection[request_id] = projection

    def need(self, request_id: str, num_tokens: int, num_computed: int = 0) -> int:
        """Blocks for the request's row, plus its side-buffer charge on its first allocation.

        ``num_computed``: tokens a request not yet allocated gets from prefix-cache hits (the
        hit blocks are its first; a partial last one leaves the rest of that block as room)."""
        if request_id in self.vt_allocated:
            new, room = num_tokens - self.vt_allocated[request_id], self.vt_room.get(request_id, 0)
        else:
            new, room = self._kept(num_tokens - num_computed), -num_computed % self.block_size
        need = _cdiv(max(0, new - room), self.block_size)
        return need + (self.vt_charge if request_id not in self.vt_charged else 0)

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence,
        total_computed_tokens: int,
        num_local_computed_tokens: int,
        num_tokens_main_model: int,
        apply_admission_cap: bool = False,
        prefill_end: int = 0,
    ) -> int:
        if self.vt_hold_admission and request_id not in self.vt_allocated:
            return self.block_pool.num_gpu_blocks  # more than can ever be free: not admitted now
        need = self.need(request_id, num_tokens, num_local_computed_tokens)
        if len(new_computed_blocks):
            # Hit blocks waiting in the free queue (ref 0) leave it when the request adopts them.
            need += vllm_compat.num_evictable(self, new_computed_blocks)
            # A hit ending inside a block: vLLM copies that shared block to a private one.
            need += vllm_compat.has_partial_local_hit(self, new_computed_blocks, num_local_computed_tokens)
        projection = self.vt_projection.get(request_id)
        if apply_admission_cap and projection is not None and request_id not in self.vt_allocated \
                and self.vt_allocated:
            # Admission of a waiting request while others run: its projected prefill holding
            # plus the growth the running ones are projected to still need must be free.
            need = max(need, projection.prefill + self.vt_charge + self.projected_growth())
        return need

    def _kept(self, num_new: int) -> int:
        """Tokens of a request's first ``num_new`` that get pool slots: all of them, or with
        prompts pruned before they are written, what the prompt keeps."""
        return num_new if self.vt_staged is None or num_new <= 0 else self.vt_staged(num_new)

    def projected_growth(self) -> int:
        """Blocks the running requests are projected to still take: sum of max(0,
        projected holding in their current phase - held now)."""
        growth = 0
        for r, allocated in self.vt_allocated.items():
            projection = self.vt_projection.get(r)
            if projection is not None:
                growth += max(0, projection.holding(allocated) - self.num_held(r))
        return growth

    def allocate_new_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int) -> list:
        cow = vllm_compat.copy_partial_hit(self, request_id)  # replaces a shared partial hit block in the row
        need = self.need(request_id, num_tokens)
        row = self.req_to_blocks[request_id]
        new = self.block_pool.get_new_blocks(need) if need else []
        if request_id not in self.vt_charged:
            self.vt_charged[request_id], new = new[: self.vt_charge], new[self.vt_charge :]
            need -= self.vt_charge
        row.extend(new)
        vllm_compat.record_new_block_ids(self, new)
        first = request_id not in self.vt_allocated
        written = max(0, num_tokens - self.vt_allocated.get(request_id, 0))
        written = self._kept(written) if first else written
        self.vt_room[request_id] = self.vt_room.get(request_id, 0) + need * self.block_size - written
        self.vt_allocated[request_id] = max(num_tokens, self.vt_allocated.get(request_id, 0))
        return cow + new

    def add_local_computed_blocks(self, request_id: str, new_computed_blocks: Sequence,
                                  num_local_computed_tokens: int, num_external_computed_tokens: int) -> None:
        """A request starts on computed tokens: prefix-cache hits (vLLM adopts the blocks, its
        reference counts; a hit ending inside a block is copied to a private block by
        :meth:`allocate_new_blocks`, as vLLM does) and a KV connector's external tokens
        (vLLM's ``allocate_external_computed_blocks`` appends fresh blocks for them right after
        this, up to ``cdiv(local + external, B)`` row entries, and the connector loads their
        K/V). All of them count as allocated tokens; the room is what the last of those blocks
        has left (none for whole blocks). The worker adopts the whole blocks read-only
        (:meth:`vtoken.plugin.model_runner.TokenTableRunner._vt_start`)."""
        super().add_local_computed_blocks(request_id, new_computed_blocks, num_local_computed_tokens,
                                          num_external_computed_tokens)
        total = num_local_computed_tokens + num_external_computed_tokens
        self.vt_allocated[request_id] = total
        self.vt_room[request_id] = -total % self.block_size
        self.vt_cached_tokens[request_id] = num_local_computed_tokens
        if num_external_computed_tokens:
            self.vt_external_tokens[request_id] = num_external_computed_tokens

    def cache_blocks(self, request, num_tokens: int, *args, **kwargs) -> None:
        """vLLM's hashing of full blocks; for an evicting arm only those of tokens computed
        before the request's first eviction (:mod:`vtoken.plugin.prefix_cache`)."""
        exact = self.vt_exact.get(request.request_id) if self.vt_cache_exact_only else None
        super().cache_blocks(request, num_tokens if exact is None else min(num_tokens, exact), *args, **kwargs)

    def set_exact(self, request_id: str, num_tokens: int) -> None:
        """The worker's report of the request's first eviction: ``num_tokens`` were computed
        before it (their blocks may be hashed, no later one)."""
        if request_id in self.req_to_blocks:
            self.vt_exact[request_id] = num_tokens

    def num_prefix_blocks(self, request_id: str, num_prompt_tokens: int) -> int:
        """Prefix blocks (:mod:`vtoken.plugin.prefix_cache`) the request still holds: the
        non-null entries among the first ``prompt // B`` of its row (0 without prefix caching)."""
        if not self.enable_caching:
            return 0
        row = self.req_to_blocks.get(request_id, ())
        return sum(not b.is_null for b in row[: num_prompt_tokens // self.block_size])

    def num_shared(self, request_id: str) -> int:
        """Blocks the request holds that another request holds too (``ref_cnt > 1``)."""
        return sum(not b.is_null and b.ref_cnt > 1 for b in self.req_to_blocks.get(request_id, ()))

    def set_room(self, request_id: str, room: int) -> None:
        """The worker's count of free cells the request holds after its last step."""
        if request_id in self.req_to_blocks:
            self.vt_room[request_id] = room

    def set_charge(self, request_id: str, num_blocks: int) -> int:
        """Charge a running request ``num_blocks`` pool blocks for side storage (DiffKV's low
        tier): takes blocks from the pool or gives them back. Returns the blocks it could not
        take because the pool was empty (the shortfall is retried on the next report)."""
        charged = self.vt_charged.get(request_id)
        if charged is None or request_id not in self.req_to_blocks:
            return 0
        if num_blocks < len(charged):
            self.block_pool.free_blocks(charged[num_blocks:])
            del charged[num_blocks:]
            return 0
        take = min(num_blocks - len(charged), self.block_pool.get_num_free_blocks())
        if take:
            charged.extend(self.block_pool.get_new_blocks(take))
        return num_blocks - len(charged)

    def release(self, request_id: str, block_ids: Iterable[int]) -> int:
        """Null out the given blocks in the request's row and free them.

        Args:
            request_id: a running request.
            block_ids: ids the worker reported empty; each must be in the row.

        Returns:
            Number of blocks freed (0 when the request is gone already).

        Raises:
            RuntimeError: a block id is not in the request's row (the worker and the
                scheduler disagree about the request's blocks).
        """
        row = self.req_to_blocks.get(request_id)
        ids = set(block_ids)
        if row is None or not ids:
            return 0
        freed, null = [], vllm_compat.null_block(self)
        for i, block in enumerate(row):
            if block.block_id in ids:
                freed.append(block)
                row[i] = null
        if len(freed) != len(ids):
            missing = sorted(ids - {b.block_id for b in freed})
            raise RuntimeError(f"vToken: request {request_id} released blocks {missing} it does not hold")
        self.block_pool.free_blocks(freed)
        self.vt_released_total += len(freed)
        return len(freed)

    def num_held(self, request_id: str) -> int:
        """Blocks the request holds now (null entries excluded)."""
        return sum(not b.is_null for b in self.req_to_blocks.get(request_id, ()))

    def free(self, request_id: str) -> None:
        charged = self.vt_charged.pop(request_id, None)
        if charged:
            self.block_pool.free_blocks(charged)
        super().free(request_id)
        self.vt_allocated.pop(request_id, None)
        self.vt_room.pop(request_id, None)
        self.vt_cached_tokens.pop(request_id, None)
        self.vt_external_tokens.pop(request_id, None)
        self.vt_exact.pop(request_id, None)


def install(manager: FullAttentionManager, charge: int, cache_exact_only: bool, staged=None) -> VTokenBlockManager:
    """Switch a live ``FullAttentionManager`` to :class:`VTokenBlockManager` in place.

    Args:
        manager: vLLM's manager of the engine's one full-attention group.
        charge: blocks every request is charged for side buffers outside its row.
        cache_exact_only: blocks past a request's first eviction stay out of the prefix cache
            (an evicting arm).
        staged: with prompts pruned before they are written, ``staged(n)`` = tokens a computed
            prompt of n tokens keeps; None otherwise.
    """
    vllm_compat.switch_manager_class(manager, VTokenBlockManager)
    manager.vtoken_init(charge, cache_exact_only, staged)
    return manager
