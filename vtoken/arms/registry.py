"""Arm registry: `register_arm` (a class decorator) and `get_arm(name, **config)`.

The baselines live in the top-level `baselines` package and register themselves on import;
`get_arm` imports it lazily so the registry always knows every arm.
"""

from __future__ import annotations

import importlib

from vtoken.arms.base import ArmConfig, KVArm

_ARMS: dict[str, type[KVArm]] = {}
_MODULES = ("vtoken.arms.full", "vtoken.arms.naive", "vtoken.arms.holefill",
            "vtoken.arms.vtoken", "baselines")


def register_arm(cls: type[KVArm]) -> type[KVArm]:
    """Class decorator adding an arm under `cls.name`."""
    if cls.name in _ARMS and _ARMS[cls.name] is not cls:
        raise ValueError(f"arm name {cls.name!r} already registered by {_ARMS[cls.name]}")
    _ARMS[cls.name] = cls
    return cls


def _load_all() -> None:
    for mod in _MODULES:
        importlib.import_module(mod)


def arm_names() -> list[str]:
    """Every registered arm name, sorted."""
    _load_all()
    return sorted(_ARMS)


def get_arm_class(name: str) -> type[KVArm]:
    """The arm class registered as `name`; ValueError lists the valid names."""
    _load_all()
    if name not in _ARMS:
        raise ValueError(f"arm={name!r}: unknown; valid arms: {sorted(_ARMS)}")
    return _ARMS[name]


def get_arm(name: str, config: ArmConfig | None = None, **kwargs) -> KVArm:
    """Build an arm by name.

    Args:
        name: registered arm name (see `arm_names()`).
        config: a ready config of the arm's `config_cls`; or pass its fields as kwargs.

    Returns:
        The arm instance.
    """
    cls = get_arm_class(name)
    if config is not None and kwargs:
        raise ValueError("pass either config or keyword fields, not both")
    return cls(config if config is not None else cls.config_cls.from_kwargs(**kwargs))
