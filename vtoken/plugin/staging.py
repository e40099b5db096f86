"""Prompts pruned before they are written (``PluginConfig.prompt_prune = "before_write"``).

By default a prompt's K/V is written to pool blocks whole, the request admitted at
``cdiv(L, B)`` blocks, and the arm or its policy prunes it after the step (PagedEviction then
packs the survivors by moves). PagedEviction's authors' fork instead prunes a prompt before it
is written and admits the request at its post-prune size. Any system can do that for prompt
tokens, so the comparison of *when* tokens die needs it for every arm. With
``before_write``:

- the scheduler's block manager allocates a request's first step (its whole prompt: chunked
  prefill is off) for the tokens the prompt keeps only (``ArmAdapter.prompt_keep``):
  admission at the post-prune block count;
- the worker gives the prompt's tokens slots in a **staging area**: blocks appended to every
  layer's KV tensor past the scheduler's pool (:func:`grow`), never handed out by vLLM. The
  forward writes the prompt there and attends through the token view as usual (the same
  kernel, the same rows, so outputs equal the unstaged run's wherever the kept sets agree);
- after the forward the policy's victims (or the arm's own prefill plan's evictions) are
  applied in the staging area, and the survivors are written, in logical order, into the pool
  blocks the scheduler allocated (:meth:`vtoken.plugin.request_records.RequestRecords.commit_staged`):
  one write per kept token, no pool-to-pool move, the staging blocks returned here.

The staging area is activation-like memory outside the KV pool (it holds one step's prompts,
all layers, as the fork's prefill holds its dense K/V): ``cdiv(max_num_batched_tokens, B) +
max_num_seqs`` blocks (one partial block per request).
"""

from __future__ import annotations

import copy

import numpy as np


def num_blocks(max_num_batched_tokens: int, block_size: int, max_num_seqs: int) -> int:
    """Staging blocks that hold any one step's prompts: the step's tokens, plus one partly
    filled block per request."""
    return -(-max_num_batched_tokens // block_size) + max_num_seqs


def grow(kv_cache_config, extra: int):
    """A copy of vLLM's ``KVCacheConfig`` with ``extra`` blocks appended to every layer's cache
    (the scheduler keeps its own config: its pool does not change). Returns (the copy, the
    first staging block id).

    Raises:
        NotImplementedError: a tensor placement this function does not know (neither
            layer-outermost nor block-outermost, or an offset).
    """
    grown = copy.deepcopy(kv_cache_config)
    n = grown.num_blocks
    for t in grown.kv_cache_tensors:
        layers = len(t.layers)
        if t.offset != 0:
            raise NotImplementedError(f"vToken staging: KV cache tensor offset {t.offset}; only 0 is supported")
        if layers == 1 or t.layer_stride == t.block_stride * n:  # layer-outermost: each layer's blocks in a row
            t.layer_stride = t.block_stride * (n + extra)
            t.size += extra * t.block_stride * layers
        elif t.block_stride == t.layer_stride * layers:  # block-outermost: a block holds every layer's page
            t.size += extra * t.block_stride
        else:
            raise NotImplementedError(f"vToken staging: KV cache tensor strides (layer {t.layer_stride}, block "
                                      f"{t.block_stride}) for {n} blocks of {layers} layers are not a known layout")
    grown.num_blocks = n + extra
    return grown, n


class StagingArea:
    """The staging blocks of one worker: ids ``[first, first + count)``, handed out per request.

    Args:
        first: the first staging block id (the scheduler's pool size).
        count: staging blocks.
    """

    def __init__(self, first: int, count: int) -> None:
        self.first, self.count = first, count
        self.free = list(range(first + count - 1, first - 1, -1))  # pop() hands out ascending ids

    def take(self, num: int) -> np.ndarray:
        """``num`` staging blocks.

        Raises:
            RuntimeError: fewer are free (more prompt tokens in one step than the area was sized for).
        """
        if num > len(self.free):
            raise RuntimeError(f"vToken staging: {num} blocks asked, {len(self.free)} of {self.count} free "
                               "(the area holds one step's prompts: max_num_batched_tokens)")
        return np.array([self.free.pop() for _ in range(num)], dtype=np.int64)

    def give_back(self, block_ids) -> None:
        """Return a request's staging blocks."""
        self.free.extend(int(b) for b in block_ids)

    def owns(self, block_ids) -> np.ndarray:
        """Which of ``block_ids`` are staging blocks."""
        ids = np.asarray(block_ids, dtype=np.int64)
        return (ids >= self.first) & (ids < self.first + self.count)
