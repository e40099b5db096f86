"""Prefix caching with token-level eviction: the one rule the scheduler and the worker share.

vLLM's prefix cache (``enable_prefix_caching``) hashes every full block of a request and lets a
later request with the same token prefix adopt those blocks instead of recomputing them
(``ref_cnt`` counts the requests holding a block). An evicting arm writes into holes
(HoleFill), moves tokens between blocks (vToken) and computes the K/V of every token after the
first eviction from an evicted context -- so a block's hash describes its bytes only while
nothing of that happened to it. The rule (DESIGN §3b, issue 17):

- **What is cached**: a request's *prefix blocks*, the full blocks of its prompt
  (:func:`cached_prefix_tokens`: ``floor(prompt / B) * B`` tokens). The policy first fires
  once the whole prompt is computed, so their K/V is exactly what stock vLLM computes. Blocks
  past the prompt are never hashed for an evicting arm (the scheduler caps vLLM's
  ``cache_blocks``): their K/V was computed under eviction, and they are private.
- **Prefix blocks are read-only for every request that holds them** (the worker marks them so
  in each token table, ``KVArm.protect_prefix`` / ``adopt_cached_prefix``): never written,
  never a relocation source or destination, whether shared now (``ref_cnt > 1``) or cached for
  a later hit. Liveness stays per request: an evicted prefix token is dead in that request's
  table only, and a prefix block all of whose tokens that request evicted leaves its row
  (vLLM's ``free_blocks`` drops one reference; the last one returns it to the pool with its
  hash, still a valid cache entry because its bytes never changed).
- **Private blocks** (the prompt's partial last block, every decode block) are never in the
  prefix-cache index, so HoleFill, vToken and the release path change them as without caching.
  Hence no block whose content changes is ever in the index (nothing to unhash).

Copy-on-write of shared blocks is not built: a shared block a request no longer needs stays
allocated while another request holds it (the paper also excludes shared-prefix blocks).
Supported for the arms that take the shared policy's evictions (naive, holefill, vtoken) and
``full``; the self-evicting baselines pack or rewrite prompt blocks themselves and refuse
prefix caching at startup (``ArmAdapter.supports_prefix_caching``).
"""

from __future__ import annotations


def cached_prefix_tokens(num_prompt_tokens: int, block_size: int) -> int:
    """Tokens of a request's prefix blocks: the full blocks of its prompt."""
    return num_prompt_tokens // block_size * block_size
