"""DiffKV's low tier: quantised K/V of demoted tokens, for every layer, in its own store.

A :class:`LowTierStore` holds ``capacity`` low-tier tokens. Its storage is one preallocated
layer-major uint8 buffer ``[num_layers, capacity, num_kv_heads * token_bytes]`` (like the
pool, where a slot's rows of all layers sit at a constant layer stride): low slot ``s`` of
layer ``l`` is ``buffer[l, s]``, the records of :mod:`baselines.diffkv.quant` of every KV head.
A low slot is therefore one token in all layers and heads; DiffKV tiers per (layer, head),
this store per token (the deviation the core ``diffkv`` arm already documents).

Slots are handed out from a free list (a LIFO stack, lowest slots first at the start).
:meth:`demote` quantises the K/V rows of given high-tier (pool) slots of every layer into
given low slots; the caller then frees the pool slots. :meth:`rows` dequantises one layer's
rows for attention, :meth:`rows_batch` those of a batch of requests padded to one width
(:class:`LowBatch`) for :mod:`baselines.diffkv.tiered_attention`.

Memory: ``bytes_per_token = num_layers * num_kv_heads * token_bytes(head_size, k_bits,
v_bits)`` exactly (no padding), so ``num_used * bytes_per_token`` is what the low tier holds;
:meth:`block_equivalents` charges it to the pool in blocks of ``block_size`` bf16 tokens.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Union

import numpy as np
import torch

from baselines.diffkv import quant
from vtoken.plugin.relocation import AllLayerKV

# A reader of high-tier rows: slots (int64 numpy) -> [num_layers, n, num_kv_heads * 2 * head_size].
RowsReader = Callable[[np.ndarray], torch.Tensor]


class LowBatch(NamedTuple):
    """The low slots of a batch of requests, padded to one width (built once per step).

    Args:
        index: int64 ``[R * M]`` low slots, request-major, padded with slot 0.
        lens: int64 ``[R]`` real entries per request.
        width: M = max(1, the largest entry count).
        table: int32 ``[R, M]`` the same slots as a token-view row table (for the kernel).
    """

    index: np.ndarray
    lens: torch.Tensor
    width: int
    table: torch.Tensor

    @classmethod
    def of(cls, slots_per_request: list) -> "LowBatch":
        sizes = [len(s) for s in slots_per_request]
        width = max([1, *sizes])
        index = np.zeros((len(sizes), width), dtype=np.int64)
        for i, s in enumerate(slots_per_request):
            index[i, : sizes[i]] = s
        return cls(index.ravel(), torch.tensor(sizes, dtype=torch.int64), width,
                   torch.from_numpy(index.astype(np.int32)))


class LowTierStore:
    """Quantised storage for ``capacity`` tokens of ``num_layers`` layers.

    Args:
        num_layers, num_kv_heads, head_size: the model's KV shape.
        capacity: low-tier tokens the buffer holds.
        k_bits, v_bits: bits of K and of V (default 4 / 2: DiffKV's low tier; 8 / 4 its high tier).
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_size: int, capacity: int,
                 k_bits: int = 4, v_bits: int = 2) -> None:
        if capacity < 0 or num_layers < 1 or num_kv_heads < 1:
            raise ValueError(f"LowTierStore: layers={num_layers}, kv_heads={num_kv_heads}, capacity={capacity}")
        self.num_layers, self.num_kv_heads, self.head_size = num_layers, num_kv_heads, head_size
        self.capacity, self.k_bits, self.v_bits = capacity, k_bits, v_bits
        self.head_bytes = quant.token_bytes(head_size, k_bits, v_bits)
        self.layer_bytes = num_kv_heads * self.head_bytes
        self.bytes_per_token = num_layers * self.layer_bytes
        self.buffer = torch.zeros(num_layers, capacity, self.layer_bytes, dtype=torch.uint8)
        # The dequantised rows of every stored token (float32), written once at demotion: what
        # DiffKV's GPU kernel computes in registers from the records at every step, kept here
        # so that the CPU emulation attends them with the token-view kernel instead of
        # dequantising with a dozen PyTorch ops per layer and step. Not counted in the
        # accounting (the tier's memory is the records'); values identical to rows().
        self.cache = torch.zeros(num_layers, capacity, num_kv_heads, 2 * head_size, dtype=torch.float32)
        self._free = np.arange(capacity - 1, -1, -1, dtype=np.int64)  # stack: pop from the end
        self._num_free = capacity
        self._used = np.zeros(capacity, dtype=bool)

    # ---- slots -------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def num_used(self) -> int:
        return self.capacity - self._num_free

    @property
    def used_bytes(self) -> int:
        """Bytes the low-tier tokens occupy: ``num_used * bytes_per_token``."""
        return self.num_used * self.bytes_per_token

    def allocate(self, n: int) -> np.ndarray:
        """``n`` free low slots (int64); raises if fewer are free."""
        if n < 0 or n > self._num_free:
            raise RuntimeError(f"LowTierStore.allocate({n}): {self._num_free} of {self.capacity} slots free")
        slots = self._free[self._num_free - n : self._num_free][::-1].copy()
        self._num_free -= n
        self._used[slots] = True
        return slots

    def free(self, slots: np.ndarray) -> None:
        """Return low slots to the free list; raises on a slot that is not allocated."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if slots.size == 0:
            return
        if np.unique(slots).size != slots.size or not self._used[slots].all():
            raise RuntimeError(f"LowTierStore.free: slots not allocated or repeated: {slots.tolist()}")
        self._used[slots] = False
        self._free[self._num_free : self._num_free + slots.size] = slots[::-1]
        self._num_free += slots.size

    # ---- data --------------------------------------------------------------------------------
    def demote(self, source: Union[AllLayerKV, RowsReader], src_slots: np.ndarray, low_slots: np.ndarray) -> None:
        """Quantise the K/V rows of pool slots ``src_slots`` of every layer into ``low_slots``.

        Args:
            source: an :class:`AllLayerKV` of the pool, or a callable mapping slots to rows
                ``[num_layers, n, num_kv_heads * 2 * head_size]``.
            src_slots: high-tier (pool) slots, int64.
            low_slots: allocated low slots, same length.
        """
        src = np.asarray(src_slots, dtype=np.int64).reshape(-1)
        dst = np.asarray(low_slots, dtype=np.int64).reshape(-1)
        if src.size != dst.size:
            raise ValueError(f"demote: {src.size} sources, {dst.size} low slots")
        if src.size == 0:
            return
        if not self._used[dst].all():
            raise RuntimeError("demote: low slots must be allocated first")
        if isinstance(source, AllLayerKV):
            if source.num_layers != self.num_layers:
                raise ValueError(f"demote: pool has {source.num_layers} layers, store {self.num_layers}")
            idx = torch.from_numpy(src)
            rows = source.view.index_select(1, idx) if source.view is not None else source.read(src)
        else:
            rows = source(src)
        n = src.size
        rows = rows.reshape(self.num_layers * n, self.num_kv_heads, 2 * self.head_size)
        records = quant.quantize(rows, self.k_bits, self.v_bits).view(self.num_layers, n, self.layer_bytes)
        index = torch.from_numpy(dst)
        self.buffer.index_copy_(1, index, records)
        deq = quant.dequantize(records.view(self.num_layers * n, self.num_kv_heads, self.head_bytes), self.head_size,
                               self.k_bits, self.v_bits)
        self.cache.index_copy_(1, index, deq.view(self.num_layers, n, self.num_kv_heads, 2 * self.head_size))

    def records(self, layer: int, low_slots) -> torch.Tensor:
        """Raw uint8 records ``[n, num_kv_heads, token_bytes]`` of one layer."""
        idx = torch.as_tensor(np.asarray(low_slots, dtype=np.int64).reshape(-1))
        return self.buffer[layer].index_select(0, idx).view(-1, self.num_kv_heads, self.head_bytes)

    def rows(self, layer: int, low_slots) -> torch.Tensor:
        """Dequantised float32 rows ``[n, num_kv_heads, 2 * head_size]`` of one layer."""
        return quant.dequantize(self.records(layer, low_slots), self.head_size, self.k_bits, self.v_bits)

    def rows_batch(self, layer: int, batch: "LowBatch") -> torch.Tensor:
        """:meth:`rows` of a batch of requests (one gather of the dequantised cache): float32
        ``[R, M, num_kv_heads, 2 * head_size]`` (padding rows are slot 0's; mask them with
        ``batch.lens``)."""
        rows = self.cache[layer].index_select(0, torch.from_numpy(batch.index))
        return rows.view(batch.lens.numel(), batch.width, *rows.shape[1:])

    # ---- accounting --------------------------------------------------------------------------
    def block_equivalents(self, num_tokens: int, block_size: int, high_bytes_per_token: int) -> int:
        """Pool blocks the bytes of ``num_tokens`` low-tier tokens amount to:
        ``ceil(num_tokens * bytes_per_token / (block_size * high_bytes_per_token))``."""
        return -(-num_tokens * self.bytes_per_token // (block_size * high_bytes_per_token))

    def bytes_ratio(self, high_bytes_per_token: int) -> float:
        """Low-tier bytes per token / high-tier bytes per token (bf16 pool, D 64: 0.21875 for K4V2, 0.40625 for K8V4)."""
        return self.bytes_per_token / high_bytes_per_token
