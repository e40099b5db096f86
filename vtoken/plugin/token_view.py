"""Token views: which physical KV slots each request attends to, and the per-step hook.

A *token view* is a token-granular page table: row ``i`` lists, in logical order, the
physical slots (``block_id * B + offset`` in the token-major KV pool) that batch row ``i``
attends to, and ``seq_lens[i]`` says how many entries of the row are valid. The tokens
scheduled in this step are always the last ``query_len`` entries of their row (their K/V
is written to ``slot_mapping`` before attention runs).

Part A (arm ``full``) uses :func:`positional_token_view`: slot = the block table's
positional slot of every position in ``[0, seq_len)`` -- exactly what stock vLLM reads.

**Hook for part B.** A model-runner subclass that owns per-request token tables publishes
this step's view with :func:`publish` after it has prepared the step's inputs (rows in the
persistent batch's order, the new tokens' slots appended), and withdraws it with
:func:`withdraw` when the forward is done (or uses :func:`published`). The metadata builder
(:mod:`vtoken.plugin.attention`) takes the published view when there is one and falls back
to the positional view otherwise (dummy and profiling runs, stock-equivalent ``full``).
The hook is process-local state: one worker (model runner) per process, steps sequential.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class TokenView:
    """This step's token-granular page table.

    Args:
        req_to_token: int32 ``[num_rows >= num_reqs, max_len]``; row i holds batch row
            i's physical slots in logical order; entries past ``seq_lens[i]`` are unused.
        seq_lens: int64 ``[num_reqs]``: number of valid entries (slots attended) per row,
            including this step's new tokens.
        mass: float32 ``[num_reqs, >= max(seq_lens)]`` or None. When set, scored layers
            add the attention mass each entry received this step (summed over query heads
            and the step's query tokens): the input of score-based eviction policies.
        norms: float32 ``[num_tokens, 2]`` or None. When set, scored layers add each new
            token's key and value L2 norm (mean over KV heads) when writing its K/V, in the
            order of ``slot_mapping`` (PagedEviction's scores).
        side: a side tier outside the pool that attention also reads this step
            (:class:`vtoken.plugin.adapter.SideView`, e.g. DiffKV's low tier), or None.
        stats: counters the attention layers add to (``scored_layer_ms``: time in scored layers).
        max_len: ``max(seq_lens)`` on the host when the publisher knows it (a kernel launch
            needs it without a device sync), else None.
    """

    req_to_token: torch.Tensor
    seq_lens: torch.Tensor
    mass: torch.Tensor | None = None
    norms: torch.Tensor | None = None
    side: object = None
    stats: dict = field(default_factory=dict)
    max_len: int | None = None

    def __post_init__(self) -> None:
        if self.req_to_token.dim() != 2 or self.req_to_token.dtype != torch.int32:
            raise ValueError(
                f"TokenView.req_to_token: shape {tuple(self.req_to_token.shape)} dtype "
                f"{self.req_to_token.dtype}; must be 2-D int32"
            )
        if self.seq_lens.dim() != 1 or self.seq_lens.dtype != torch.int64:
            raise ValueError(
                f"TokenView.seq_lens: shape {tuple(self.seq_lens.shape)} dtype {self.seq_lens.dtype}; "
                "must be 1-D int64"
            )
        if self.seq_lens.shape[0] > self.req_to_token.shape[0]:
            raise ValueError(
                f"TokenView: {self.seq_lens.shape[0]} seq_lens but only "
                f"{self.req_to_token.shape[0]} req_to_token rows"
            )

    @property
    def num_reqs(self) -> int:
        """Number of batch rows described."""
        return self.seq_lens.shape[0]


def positional_token_view(block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                          max_len: int | None = None) -> TokenView:
    """The view stock vLLM attends: every position ``[0, seq_len)`` at its positional slot.

    Args:
        block_table: int32 ``[num_reqs, max_blocks]`` physical block ids (kernel blocks).
        seq_lens: ``[num_reqs]`` tokens per request, this step's included (on ``block_table``'s device).
        block_size: tokens per block of ``block_table``.
        max_len: ``>= max(seq_lens)`` when known on the host (vLLM's ``max_seq_len``; no
            device sync); None computes it.

    Returns:
        ``req_to_token[r, pos] = block_table[r, pos // B] * B + pos % B`` on ``block_table``'s device.
    """
    num_reqs = seq_lens.shape[0]
    seq_lens = seq_lens.to(torch.int64)
    if max_len is None:
        max_len = int(seq_lens.max()) if num_reqs else 0
    pos = torch.arange(max_len, dtype=torch.int64, device=block_table.device)
    blocks = block_table[:num_reqs].index_select(1, pos // block_size)
    req_to_token = blocks * block_size + (pos % block_size).to(torch.int32)
    return TokenView(req_to_token=req_to_token.to(torch.int32), seq_lens=seq_lens, max_len=max_len)


def step_view(common_attn_metadata, block_size: int) -> TokenView:
    """The view a metadata builder attends this step: the published one, else the positional
    view of vLLM's block table (dummy and profiling runs, ``full`` without the vToken runner).

    Raises:
        ValueError: the published view has another number of rows than the step has requests.
    """
    cm = common_attn_metadata
    num_reqs = cm.num_reqs
    view = current()
    if view is None:
        return positional_token_view(cm.block_table_tensor, cm.seq_lens[:num_reqs], block_size, cm.max_seq_len)
    if view.num_reqs != num_reqs:
        raise ValueError(f"published token view has {view.num_reqs} rows; this step has {num_reqs} requests")
    return view


_published: TokenView | None = None


def publish(view: TokenView) -> None:
    """Make ``view`` the token view of the step about to run (part B's runner calls this)."""
    global _published
    _published = view


def withdraw() -> None:
    """Forget the published view; the builder falls back to the positional view."""
    global _published
    _published = None


def current() -> TokenView | None:
    """The published view of this step, or None."""
    return _published


@contextmanager
def published(view: TokenView) -> Iterator[TokenView]:
    """Publish ``view`` for the duration of a ``with`` block, then withdraw it."""
    publish(view)
    try:
        yield view
    finally:
        withdraw()
