"""Strict construction of frozen config dataclasses from keyword arguments."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def from_kwargs(cls: type[T], kwargs: dict[str, Any]) -> T:
    """Build ``cls(**kwargs)``, failing on unknown keys with the list of valid ones."""
    valid = sorted(f.name for f in fields(cls))
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {unknown}; valid keys: {valid}")
    return cls(**kwargs)
