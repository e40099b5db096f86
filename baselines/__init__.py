"""Reimplemented reclamation baselines (PagedEviction, Zipage-style, DiffKV-style).

Each module's docstring cites its paper and lists every deviation from the paper and from
the authors' code. Importing this package registers the arms in `vtoken.arms.registry`.
"""

from baselines import diffkv, paged_eviction, zipage  # noqa: F401  (registration of the core arms)
