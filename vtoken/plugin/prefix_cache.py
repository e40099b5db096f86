"""Prefix caching with token-level eviction: the one rule the scheduler and the worker share.

vLLM's prefix cache (``enable_prefix_caching``) hashes every full block of a request and lets a
later request with the same token prefix adopt those blocks instead of recomputing them
(``ref_cnt`` counts the requests holding a block). An evicting arm writes into holes
(HoleFill), moves tokens between blocks (vToken) and computes the K/V of every token after the
first eviction from an evicted context -- so a block's hash describes its bytes only while
nothing of that happened to it. The rule (docs/design.md §4):

- **What is cached**: the full blocks of the tokens a request computed *before its first
  eviction* (up to then its K/V is exactly what stock vLLM computes). The worker reports that
  count once, in the step of the eviction (``Control.exact``), and from then on the scheduler
  hashes no block past it (it caps vLLM's ``cache_blocks``); before any eviction it hashes as
  vLLM does. The policy first fires once the whole prompt is computed, so the prompt's full
  blocks (its *prefix blocks*) are always among them; blocks written after the eviction were
  computed under eviction and are private. An engine (or vLLM's own scheduler tests) in which
  nothing is ever evicted caches exactly as stock vLLM.
- **Those blocks are read-only for every request that holds them** (the worker marks every
  whole block it writes before the first eviction so in its token table,
  ``KVArm.protect_prefix``, and hit blocks as it adopts them, ``adopt_cached_prefix``): never written,
  never a relocation source or destination, whether shared now (``ref_cnt > 1``) or cached for
  a later hit. Liveness stays per request: an evicted prefix token is dead in that request's
  table only, and a prefix block all of whose tokens that request evicted leaves its row
  (vLLM's ``free_blocks`` drops one reference; the last one returns it to the pool with its
  hash, still a valid cache entry because its bytes never changed).
- **Private blocks** (the partial block at the first eviction, every block after it) are never in the
  prefix-cache index, so HoleFill, vToken and the release path change them as without caching.
  Hence no block whose content changes is ever in the index (nothing to unhash). A KV
  connector's loaded blocks are adopted read-only the same way (``adopt_cached_prefix``).

Copy-on-write of shared blocks is not built: a shared block a request no longer needs stays
allocated while another request holds it (the paper also excludes shared-prefix blocks).
Supported for the arms that take the shared policy's evictions (naive, holefill, vtoken) and
``full``; the self-evicting baselines pack or rewrite prompt blocks themselves and refuse
prefix caching at startup (``ArmAdapter.supports_prefix_caching``).
"""

from __future__ import annotations
