"""Policy registry: `register_policy` (class decorator) and `get_policy(name, **config)`.

Every module of this package registers its policy on import, except the interface, this
registry and the kvpress adapter (``NOT_POLICIES``): a new policy is one new module here, found
by ``policy_modules`` (docs/extending.md). Besides the registered policies, ``kvpress:<Press>`` names one of NVIDIA kvpress's scorers
(:mod:`vtoken.policies.kvpress`); the name is checked without importing kvpress.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from vtoken.policies.base import EvictionPolicy
from vtoken.policies.kvpress_catalog import PREFIX, RUNS, check_mode, check_press

_POLICIES: dict[str, type[EvictionPolicy]] = {}
# The package's modules that register no policy: the interface, this registry, kvpress's adapter
# (its presses are named ``kvpress:<Press>``) and its catalog.
NOT_POLICIES = ("base", "registry", "kvpress", "kvpress_catalog")


def policy_modules() -> list[str]:
    """The package's policy modules, sorted: every module of ``vtoken/policies`` but
    ``NOT_POLICIES`` (each registers its policy when imported)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                  if not m.ispkg and m.name not in NOT_POLICIES)


def register_policy(cls: type[EvictionPolicy]) -> type[EvictionPolicy]:
    """Class decorator adding a policy under `cls.name`."""
    _POLICIES[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    """Every registered policy name, sorted, then the kvpress presses that run."""
    for mod in policy_modules():
        importlib.import_module(f"vtoken.policies.{mod}")
    return sorted(_POLICIES) + [PREFIX + press for press in RUNS]


def check_policy(name) -> None:
    """ValueError naming the policy and what is allowed (for a kvpress press: why it cannot run)."""
    if isinstance(name, str) and name.startswith(PREFIX):
        check_press(name)
    elif name not in policy_names():
        raise ValueError(f"policy={name!r}: unknown; valid policies: {policy_names()}")


def get_policy_class(name: str) -> type[EvictionPolicy]:
    """The policy class registered as `name`; ValueError lists the valid names."""
    check_policy(name)
    if name.startswith(PREFIX):
        from vtoken.policies.kvpress import press_policy

        return press_policy(name.removeprefix(PREFIX))
    return _POLICIES[name]


def get_policy(name: str, **kwargs) -> EvictionPolicy:
    """Build a policy by name with config fields as kwargs; ValueError lists valid names."""
    cls = get_policy_class(name)
    return cls(cls.config_cls.from_kwargs(**kwargs))


def check_policy_options(name: str, options: dict, **budget) -> None:
    """ValueError naming the option and what is allowed: ``options`` with ``budget`` (ratio or
    budget) must build the policy's config; a kvpress press must run in the mode asked for.
    Checked without importing kvpress."""
    cls = get_policy_class(name)
    cls.config_cls.from_kwargs(**budget, **options)
    if name.startswith(PREFIX) and "mode" in options:
        check_mode(name, options["mode"])
