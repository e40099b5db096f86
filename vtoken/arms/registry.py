"""Arm registry: `register_arm` (a class decorator) and `get_arm(name, **config)`.

Where arms live: the modules of this package, and one package per reclamation baseline in the
top-level `baselines` package (its `__init__` imports its core arm). Each registers itself on
import; the registry imports every module of this package and every package of `baselines`
lazily, so it always knows every arm and a new arm is a new module or package, listed nowhere
(docs/extending.md). What the registry derives for the rest of the project: `arm_names`,
`baseline_names` (the self-evicting reclamation baselines), `policy_driven_names`, `arm_display`.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from vtoken.arms.base import ArmConfig, ArmDisplay, KVArm

_ARMS: dict[str, type[KVArm]] = {}
BASELINES_PACKAGE = "baselines"
_loaded = False


def register_arm(cls: type[KVArm]) -> type[KVArm]:
    """Class decorator adding an arm under `cls.name`."""
    if cls.name in _ARMS and _ARMS[cls.name] is not cls:
        raise ValueError(f"arm name {cls.name!r} already registered by {_ARMS[cls.name]}")
    _ARMS[cls.name] = cls
    return cls


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"vtoken.arms.{mod.name}")
    baselines = importlib.import_module(BASELINES_PACKAGE)
    for mod in pkgutil.iter_modules(baselines.__path__):
        if mod.ispkg:
            importlib.import_module(f"{BASELINES_PACKAGE}.{mod.name}")
    _loaded = True


def arm_names() -> list[str]:
    """Every registered arm name, sorted."""
    _load_all()
    return sorted(_ARMS)


def baseline_names() -> list[str]:
    """The reclamation baselines, sorted: the arms registered from the ``baselines`` package
    (each its own eviction rule: its engine side is self-evicting)."""
    _load_all()
    return sorted(n for n, cls in _ARMS.items() if cls.__module__.split(".")[0] == BASELINES_PACKAGE)


def policy_driven_names() -> list[str]:
    """The arms the shared eviction policy drives, sorted: every arm that applies the policy's
    victims, but the baselines (whose engine side decides itself)."""
    _load_all()
    return sorted(n for n, cls in _ARMS.items() if cls.applies_policy_evictions and n not in baseline_names())


def arm_display(name: str) -> ArmDisplay:
    """How figures and tables show the arm registered as ``name`` (its class's own ``display``).

    Raises:
        ValueError: an unknown arm, or an arm class that sets no ``display`` of its own.
    """
    cls = get_arm_class(name)
    display = vars(cls).get("display")
    if display is None:
        raise ValueError(f"arm {name!r} ({cls.__module__}.{cls.__name__}) sets no display of its own: give it "
                         "`display = ArmDisplay(label, colour, marker, linestyle)` (vtoken.arms.base.ArmDisplay)")
    return display


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
