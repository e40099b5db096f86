"""`paged_eviction`: PagedEviction, structured block-wise KV pruning (Chitty-Venkata et al.,
EACL 2026 Findings, arXiv 2509.04377; code krishnateja95/vllm-Paged-Compression @ 6868f1b7
and krishnateja95/PagedEviction @ 2cecd09).

Reimplemented:
  * Token score (`score=`): "v_over_k" ||V||/||K|| (paper), "v" ||V|| (authors' vLLM fork,
    value_l2), "k_plus_v" ||K||+||V|| (authors' HF code). The engine feeds norms through
    `observe_norms`; a replay feeds one score per token through `observe_scores`.
    A policy's name (POLICY_SCORES: "h2o", "scissorhands", "streamingllm", "random") is
    the mechanism-only variant for comparisons on the same decisions: the engine ranks
    tokens by that eviction policy's own per-token state (`KEEP_SCORES`) and feeds it through
    `observe_scores` (no norms; `baselines.paged_eviction.engine.PolicyScorer`).
  * Prefill (first plan after the prompt): if the prompt exceeds the budget C
    (`budget`, in tokens), keep the first block (B tokens), the last slice (B + L mod B tokens)
    and the best-scoring middle tokens up to C - 2B; the survivors are packed in logical
    order into the request's oldest blocks, the rest of the blocks released.
  * Decode: each time the tail block fills while more than C tokens are live, evict the
    whole block with the lowest block score (1/B)·sum of its token scores; the first held
    block and the tail are protected. `selection="global"` looks at every other block,
    `"local"` only at the `topk_blocks` (3) oldest after the first (authors' code).
    The block is released immediately; nothing is moved in decode.

Deviations from the paper and its code:
  * One token subset per request in prefill (the fork prunes per KV head; the HF code and
    vLLM's shared block table are per token).
  * One decision for all layers (the fork lets each layer pick and frees layer 0's pick).
  * No random victim selection (the fork hard-codes `enable_random_evict = True`).
  * "global" picks the minimum score for every variant (the HF code picks the maximum,
    which is inverted for the value-norm variants).
  * Policy evictions are not accepted: PagedEviction is its own policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from baselines._compact import CompactingState, compact_plan, tail_after_compaction
from vtoken.arms.base import ArmConfig, ArmDisplay, KVArm
from vtoken.arms.plan import Plan
from vtoken.arms.registry import register_arm
from vtoken.block_row import NO_TOKEN

NORM_SCORES = ("v_over_k", "v", "k_plus_v")
# Token policies that score by a norm score (vtoken/policies/vk_norm.py): under that policy the
# mechanism ranks by the norms themselves, measured as K/V is written.
NORM_POLICIES = {"vk_norm": "v_over_k"}


def _random_keep(state, live_pos) -> np.ndarray:
    draws = state.extra.get("draws", np.empty(0))
    if draws.size < state.acc.size:  # new positions get their draw once
        draws = state.extra["draws"] = np.concatenate([draws, state.rng.random(state.acc.size - draws.size)])
    return draws[live_pos]


# policy -> keep score per live token (higher = kept) from the policy's state after accumulating
# (the engine's ``PolicyScorer``); a new policy that this mechanism should rank by adds its line here.
KEEP_SCORES = {
    "h2o": lambda state, live_pos: state.acc[live_pos],
    "scissorhands": lambda state, live_pos: -state.acc[live_pos],
    "streamingllm": lambda state, live_pos: live_pos.astype(np.float64),
    "random": _random_keep,
}
# Eviction policies whose per-token state (or norm score) ranks tokens for this mechanism
# (KEEP_SCORES, or NORM_POLICIES).
POLICY_SCORES = (*KEEP_SCORES, *NORM_POLICIES)
SCORES = NORM_SCORES + POLICY_SCORES
SELECTIONS = ("global", "local")
# What the mechanism never evicts: PagedEviction's first block (and, in prefill, the last
# slice), or a policy's own sinks and recent window, in whole blocks (the same protections at
# both granularities; the engine fills num_sink / num_recent from the policy).
PROTECTIONS = ("first_block", "policy")


@dataclass(frozen=True)
class PagedEvictionConfig(ArmConfig):
    """PagedEviction settings.

    Args:
        budget: cache budget C in tokens; >= 3 * block_size (authors' assert).
        score: token score variant, one of SCORES.
        selection: decode victim range, one of SELECTIONS.
        topk_blocks: blocks examined by "local" selection (>= 1).
        protect: one of PROTECTIONS. "first_block" (PagedEviction's): prefill keeps the first
            block and the last slice, decode never evicts the first held block. "policy": prefill
            keeps the first ``num_sink`` and the last ``num_recent`` live tokens, decode never
            evicts a block holding one of them.
        num_sink, num_recent: the "policy" protection's sinks and recent window, in tokens.
    """

    budget: int = 1024
    score: str = "v_over_k"
    selection: str = "global"
    topk_blocks: int = 3
    protect: str = "first_block"
    num_sink: int = 0
    num_recent: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.budget < 3 * self.block_size:
            raise ValueError(f"budget={self.budget}: must be >= 3*block_size"
                             f" = {3 * self.block_size}")
        if self.score not in SCORES:
            raise ValueError(f"score={self.score!r}: must be one of {SCORES}")
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection={self.selection!r}: must be one of {SELECTIONS}")
        if self.topk_blocks < 1:
            raise ValueError(f"topk_blocks={self.topk_blocks}: must be >= 1")
        if self.protect not in PROTECTIONS:
            raise ValueError(f"protect={self.protect!r}: must be one of {PROTECTIONS}")
        if min(self.num_sink, self.num_recent) < 0 or (self.protect == "first_block"
                                                        and (self.num_sink or self.num_recent)):
            raise ValueError(f"num_sink={self.num_sink}, num_recent={self.num_recent}: tokens >= 0, and only "
                             "with protect='policy' (PagedEviction's own protection is its first block)")


def token_score(variant: str, k_norm, v_norm) -> np.ndarray:
    """Token importance from per-token key/value L2 norms (higher = keep)."""
    variant = NORM_POLICIES.get(variant, variant)
    if variant in POLICY_SCORES:
        raise ValueError(f"score={variant!r} ranks by the policy's state through observe_scores, not norms")
    k, v = np.asarray(k_norm, dtype=np.float64), np.asarray(v_norm, dtype=np.float64)
    if variant == "v_over_k":
        return v / np.maximum(k, 1e-12)
    if variant == "v":
        return v
    return k + v


@register_arm
class PagedEvictionArm(KVArm):
    """Prefill token pruning + decode whole-block eviction."""

    name = "paged_eviction"
    display = ArmDisplay("PagedEviction", "#CC79A7", "^", ":")
    config_cls = PagedEvictionConfig
    applies_policy_evictions = False
    state_cls = CompactingState

    def observe_norms(self, state, pos, k_norm, v_norm) -> None:
        """Score tokens `pos` from their key/value norms with the configured variant."""
        self.observe_scores(state, pos, token_score(self.config.score, k_norm, v_norm))

    def _plan(self, states, pool):
        plans = []
        for st in states:
            if st.table.num_tokens == 0:
                continue
            if not st.prefilled:
                st.prefilled = True
                plan = self._prune_prompt(st)
                if plan is not None:
                    plans.append(plan)
                continue
            plan = self._evict_block(st)
            if plan is not None:
                plans.append(plan)
        return plans

    def _protected(self, live) -> tuple[int, int]:
        """(tokens protected at the start, at the end) of the live positions ``live``."""
        c, b = self.config, self.block_size
        if c.protect == "policy":
            return int(np.searchsorted(live, c.num_sink)), min(c.num_recent, live.size)
        return b, b + live.size % b

    def _prompt_split(self, live) -> tuple[int, int, int]:
        """(protected at the start, protected at the end, middle tokens kept) of a prompt's live
        positions: the prefill prune's rule."""
        first, last = self._protected(live)
        c = self.config.budget
        return first, last, c - first - last if self.config.protect == "policy" else c - 2 * self.block_size

    def prompt_kept(self, prompt_len: int) -> int:
        """Tokens ``_prune_prompt`` keeps of a whole prompt of ``prompt_len`` (the same rule)."""
        live = np.arange(prompt_len)
        first, last, keep_mid = self._prompt_split(live)
        middle = live[first: live.size - last].size
        return prompt_len if middle <= keep_mid else first + keep_mid + last

    def _prune_prompt(self, st) -> Plan | None:
        live = st.table.tokens.live_positions()
        first, last, keep_mid = self._prompt_split(live)
        middle = live[first: live.size - last]
        if middle.size <= keep_mid:  # within budget (up to the partial last block)
            return None
        order = np.argsort(-st.scores[middle], kind="stable")
        kept_mid = np.sort(middle[order[:keep_mid]])
        kept = np.concatenate([live[:first], kept_mid, live[live.size - last:]])
        return compact_plan(self, st, kept, np.sort(middle[order[keep_mid:]]))

    def _evict_block(self, st) -> Plan | None:
        b, t = self.block_size, st.table
        if not (st.tail_block and st.tail_fill == b and t.num_live > self.config.budget
                and t.num_tokens != st.last_fill_len):
            return None
        st.last_fill_len = t.num_tokens
        ids = t.blocks.held_block_ids()
        if self.config.protect == "policy":  # no block holding a sink or a recent token
            live = t.tokens.live_positions()
            first, last = self._protected(live)
            guarded = np.concatenate([live[:first], live[live.size - last:]])
            cand = ids[(ids != st.tail_block) & ~np.isin(ids, t.tokens.slots_of(guarded) // b)]
        else:
            cand = ids[1:][ids[1:] != st.tail_block]
        if self.config.selection == "local":
            cand = cand[: self.config.topk_blocks]
        if cand.size == 0:
            return None
        grid = t.blocks.position_grid(cand)
        empty = grid == NO_TOKEN
        block_scores = np.where(empty, 0.0, st.scores[np.where(empty, 0, grid)]).sum(1) / b
        victim = int(cand[int(np.argmin(block_scores))])
        return Plan(req_id=st.req_id, snapshot_version=t.layout_version,
                    evict_pos=t.blocks.positions_in([victim]), freed_block_ids=[victim],
                    bytes_per_token=self.config.bytes_per_token)

    def _after_apply(self, state, plan):
        if state.packed_tail is not None:  # prompt pruning packs; decode eviction does not
            tail_after_compaction(state)
