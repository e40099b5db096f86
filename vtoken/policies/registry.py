"""Policy registry: `register_policy` (class decorator) and `get_policy(name, **config)`."""

from __future__ import annotations

import importlib

from vtoken.policies.base import EvictionPolicy

_POLICIES: dict[str, type[EvictionPolicy]] = {}
_MODULES = ("h2o", "scissorhands", "streamingllm", "random")


def register_policy(cls: type[EvictionPolicy]) -> type[EvictionPolicy]:
    """Class decorator adding a policy under `cls.name`."""
    _POLICIES[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    """Every registered policy name, sorted."""
    for mod in _MODULES:
        importlib.import_module(f"vtoken.policies.{mod}")
    return sorted(_POLICIES)


def get_policy_class(name: str) -> type[EvictionPolicy]:
    """The policy class registered as `name`; ValueError lists the valid names."""
    names = policy_names()
    if name not in _POLICIES:
        raise ValueError(f"policy={name!r}: unknown; valid policies: {names}")
    return _POLICIES[name]


def get_policy(name: str, **kwargs) -> EvictionPolicy:
    """Build a policy by name with config fields as kwargs; ValueError lists valid names."""
    cls = get_policy_class(name)
    return cls(cls.config_cls.from_kwargs(**kwargs))
