"""Reimplemented reclamation baselines (PagedEviction, Zipage-style, DiffKV-style).

One package per baseline (``arm.py`` its core arm, ``engine.py`` its engine side); each
module's docstring cites its paper and lists every deviation from the paper and from the
authors' code. `vtoken.arms.registry` imports every package here, which registers its core arm:
a new baseline is a new package, listed nowhere else (docs/extending.md).
"""
