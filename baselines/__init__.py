"""Reimplemented reclamation baselines (PagedEviction, Zipage-style, DiffKV-style).

Each module's docstring cites its paper and lists every deviation from the paper and from
the authors' code.
"""
