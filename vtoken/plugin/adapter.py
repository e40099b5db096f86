"""The engine side of a KV arm: what one arm needs from the engine, declared by the arm.

The plugin's scheduler, model runner, tables and attention backend never branch on an arm's
name (``tests/plugin/test_arm_registry.py`` fails if one does). They ask the arm's
:class:`ArmAdapter` instead, as vLLM's KV cache coordinator asks a spec's manager
(``single_type_kv_cache_manager.py``: a spec -> manager map, callers never branch on type):

- **settings**: which of the shared settings the arm takes (a policy, a ratio or a budget),
  checked before an engine starts (:meth:`ArmAdapter.check_settings`), and how they become
  the core arm's config (shared names pass through unchanged: ``budget``, ``theta_f``,
  ``watermark``; ``arm_options`` carry the rest);
- **measurements**: whether attention computes mass (:attr:`needs_mass`) or the K/V
  writer measures key/value norms (:attr:`needs_norms`);
- **scheduler side**: side buffers every request keeps outside its row, in bytes
  (:meth:`side_bytes`): the pool hands out whole blocks for them (:meth:`side_blocks`, the
  ceiling), the metrics count their exact block-equivalents (:meth:`side_block_equivalents`);
- **worker side**: what the arm does with a step's measurements before the policy runs
  (:meth:`observe`), a side tier outside the pool that attention also reads
  (:meth:`attach`, :meth:`side_view`, :meth:`side_tokens`, :meth:`side_charge`).

Registry: the engine side of an arm defined in package ``P`` (``baselines.zipage.arm``) is
the adapter registered by module ``P.engine`` (``baselines.zipage.engine``), imported on
first use. An arm without one gets :class:`PolicyDriven` when it takes the shared policy's
victims (``KVArm.applies_policy_evictions``) and :class:`NoEviction` otherwise.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from vtoken.arms.registry import get_arm, get_arm_class
from vtoken.plugin.config import SHARED_SETTINGS, PluginConfig

if TYPE_CHECKING:
    from vtoken.arms.base import ArmConfig, KVArm, RequestState

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class ModelShape:
    """What an arm's engine side may need to know of the model and its KV pool.

    Args:
        num_layers: attention layers (one KV cache group).
        num_heads: query heads per layer.
        num_kv_heads: KV heads per layer.
        head_size: dims per head.
        itemsize: bytes per KV element in the pool.
        page_size_bytes: bytes of one block of one layer (K and V).
        num_slots: token slots in the pool (blocks x B), 0 on the scheduler side.
    """

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    itemsize: int
    page_size_bytes: int
    num_slots: int = 0

    @property
    def block_bytes(self) -> int:
        """Bytes of one pool block over all layers (B tokens x K and V x KV heads x head size)."""
        return self.page_size_bytes * self.num_layers

    @classmethod
    def of(cls, vllm_config, kv_cache_config, num_slots: int = 0) -> ModelShape:
        """The shape of an engine's model and pool (one KV cache group)."""
        mc, parallel = vllm_config.model_config, vllm_config.parallel_config
        group = kv_cache_config.kv_cache_groups[0]
        spec = group.kv_cache_spec
        return cls(num_layers=len(group.layer_names), num_heads=mc.get_num_attention_heads(parallel),
                   num_kv_heads=mc.get_num_kv_heads(parallel), head_size=mc.get_head_size(),
                   itemsize=spec.dtype.itemsize, page_size_bytes=spec.page_size_bytes, num_slots=num_slots)


@dataclass(frozen=True)
class Observation:
    """What an arm's own observation of a step did to one request.

    Args:
        evicted: tokens it evicted (pruned) from the request.
        demoted: tokens it moved to its side tier.
        freed: pool blocks released by that (to free in the scheduler).
    """

    evicted: int = 0
    demoted: int = 0
    freed: np.ndarray = field(default_factory=lambda: _EMPTY)


class SideView(Protocol):
    """A side tier attention reads besides the pool (DiffKV's low tier): per step, per request.

    ``attend`` computes the step's attention over the pool rows of the token view *and* the
    side tier's tokens (merged exactly, by log-sum-exp), adding the mass each entry received
    to ``mass`` (pool entries) and to :attr:`mass` (side entries, ``[R, >= max side tokens]``).
    """

    mass: Any

    def has_tokens(self) -> bool: ...

    def attend(self, layer_index: int, query, kv_rows, view, query_start_loc: list[int], decode: bool,
               scale: float, output, mass) -> None: ...


class ArmAdapter:
    """The engine side of one arm. Subclasses set :attr:`arm` (the core arm's name).

    Args:
        config: the engine's settings (``config.arm`` is :attr:`arm`).
        block_size: tokens per block (B).
    """

    arm: ClassVar[str | None] = None
    # Whether the tables call :meth:`observe` (it costs a little per request and step).
    observes: ClassVar[bool] = False

    def __init__(self, config: PluginConfig, block_size: int) -> None:
        self.check_settings(config)
        self.config = config
        self.block_size = block_size

    # ------------------------------------------------------------- settings
    @classmethod
    def check_settings(cls, config: PluginConfig) -> None:
        """Fail on settings this arm would ignore or cannot run without (field, value, rule).

        Raises:
            ValueError: naming the field, its value and what the arm allows.
        """

    def arm_settings(self) -> dict[str, Any]:
        """Keyword fields of the core arm's config: the engine's, the shared settings its config
        has (same names), then ``arm_options``."""
        names = set(get_arm_class(self.config.arm).config_cls.__dataclass_fields__)
        # A policy-driven arm's budget is its policy's, not the arm's.
        shared = [s for s in SHARED_SETTINGS if s in names and not (s == "budget" and self.takes_policy)]
        settings = {s: getattr(self.config, s) for s in shared if getattr(self.config, s) is not None}
        return {"block_size": self.block_size, **settings, **(self.config.arm_options or {})}

    def build_arm(self, bytes_per_token: int) -> KVArm:
        """The core arm these settings describe."""
        return get_arm(self.config.arm, **self.arm_settings(), bytes_per_token=bytes_per_token)

    @functools.cached_property
    def arm_config(self) -> ArmConfig:
        """The core arm's config these settings describe, validated (no arm is built for it;
        ``bytes_per_token`` 1: the engine sets the real one when the worker builds the arm)."""
        return get_arm_class(self.config.arm).config_cls.from_kwargs(**self.arm_settings(), bytes_per_token=1)

    def check_arm(self) -> None:
        """Validate ``arm_options`` and budgets through the core arm's config before an engine starts.

        Raises:
            ValueError: naming the arm and the core config's complaint (field, value, allowed).
        """
        c = self.config
        try:
            self.arm_config
        except ValueError as err:
            raise ValueError(f"vtoken.arm={c.arm!r} (budget={c.budget!r}, arm_options={c.arm_options!r}, "
                             f"block_size={self.block_size}): {err}") from err

    # -------------------------------------------------------- measurements
    # Whether the shared eviction policy drives the arm, and whether the arm evicts at all.
    takes_policy: ClassVar[bool] = False
    evicts: ClassVar[bool] = True
    # Whether the arm keeps prefix-cached blocks read-only (vtoken.plugin.prefix_cache).
    supports_prefix_caching: ClassVar[bool] = True

    @classmethod
    def check_prefix_caching(cls, config: PluginConfig, enabled: bool) -> None:
        """Fail when prefix caching is on for an arm that would write prefix-cached blocks.

        Raises:
            ValueError: naming the setting, the arm and the arms that support it.
        """
        if enabled and not cls.supports_prefix_caching:
            ok = [a for a in _arm_names() if adapter_class(a).supports_prefix_caching]
            raise ValueError(f"enable_prefix_caching=True: arm={config.arm!r} packs or rewrites prompt blocks itself, "
                             f"so it cannot keep prefix-cached blocks read-only; prefix caching works with {ok}")

    @classmethod
    def check_kv_transfer(cls, config: PluginConfig, kv_transfer_config) -> None:
        """Fail when a KV connector is configured for an arm that cannot start a request on
        blocks it did not compute (a connector's loaded blocks are kept read-only, as prefix-cache
        hits are).

        Raises:
            ValueError: naming the connector, the arm and the arms that take external blocks.
        """
        kv = kv_transfer_config
        connector = kv.get("kv_connector") if isinstance(kv, dict) else getattr(kv, "kv_connector", None)
        if connector is not None and not cls.supports_prefix_caching:
            ok = [a for a in _arm_names() if adapter_class(a).supports_prefix_caching]
            raise ValueError(f"kv_transfer_config.kv_connector={connector!r}: arm={config.arm!r} packs or rewrites "
                             f"prompt blocks itself, so it cannot keep a connector's loaded blocks read-only; KV "
                             f"connectors work with {ok}")

    @functools.cached_property
    def compacts_before_preemption(self) -> bool:
        """Whether the scheduler asks the arm for a reclaim round before it preempts
        (``KVArm.compacts_before_preemption``, e.g. ``vtoken`` with ``before_preemption``)."""
        return get_arm_class(self.config.arm).compacts(self.arm_config)

    @functools.cached_property
    def needs_mass(self) -> bool:
        """Whether attention computes the mass each entry receives (for a policy that reads it)."""
        from vtoken.policies.registry import get_policy_class

        return self.takes_policy and get_policy_class(self.config.policy).reads_scores

    @property
    def needs_norms(self) -> bool:
        """Whether the K/V writer measures each new token's key and value norms."""
        return False

    # ------------------------------------------------ prompts pruned before written
    def prompt_keep(self, prompt_len: int) -> int | None:
        """Tokens a prompt of ``prompt_len`` keeps once pruned in the step that computes it
        (``prompt_prune="before_write"``: the scheduler allocates blocks for these only): the
        policy's budget for a policy-driven arm whose policy fires every step and keeps its budget
        (not a kvpress press in mode ``prefill_once``, which keeps its own count of the context),
        the arm's own prefill rule for a self-evicting one (``KVArm.prompt_kept``); None where
        neither fixes it."""
        c = self.config
        if self.takes_policy:
            if c.policy is None or c.policy_every != 1 or getattr(self._policy_config, "mode", None) == "prefill_once":
                return None
            return min(prompt_len, self._policy_config.keep(prompt_len))
        return self._sizing_arm.prompt_kept(prompt_len) if self.evicts else None

    @functools.cached_property
    def _sizing_arm(self) -> KVArm:
        return self.build_arm(bytes_per_token=1)

    @functools.cached_property
    def _policy_config(self):
        """The shared policy's config at these settings (its ``keep`` is the budget rule)."""
        from vtoken.policies.registry import get_policy_class

        c = self.config
        return get_policy_class(c.policy).config_cls(**c.policy_budget(), **(c.policy_options or {}))

    def check_prompt_prune(self, chunked_prefill: bool, prefix_caching: bool) -> None:
        """Fail when ``prompt_prune="before_write"`` cannot hold (at engine build).

        Raises:
            ValueError: naming the setting, its value and what works instead.
        """
        c = self.config
        if c.prompt_prune != "before_write":
            return
        if self.prompt_keep(1) is None:
            raise ValueError(f"vtoken.prompt_prune='before_write' with arm={c.arm!r} (policy={c.policy!r}, "
                             f"policy_every={c.policy_every}, policy_options={c.policy_options}): the scheduler must "
                             "know how many tokens a prompt keeps; it does for a policy-driven arm whose policy fires "
                             "every step (policy_every=1) and keeps its budget (not a kvpress press in mode "
                             "'prefill_once') and for PagedEviction's prefill rule")
        if chunked_prefill:
            raise ValueError("enable_chunked_prefill=True with vtoken.prompt_prune='before_write': each prompt is "
                             "scored and pruned in the one step that computes it (a chunk would be written before its "
                             "prompt is scored); pass enable_chunked_prefill=False")
        if prefix_caching:
            raise ValueError("enable_prefix_caching=True with vtoken.prompt_prune='before_write': a staged prompt "
                             "is never written whole, so it has no blocks to share; turn one of them off")

    # ------------------------------------------------------- scheduler side
    def side_bytes(self, shape: ModelShape) -> int:
        """Bytes of the side buffers every request keeps outside its row (0: none)."""
        return 0

    def side_blocks(self, shape: ModelShape) -> int:
        """Whole pool blocks every request is charged for its side buffers: the pool can
        only hand out blocks, so ``ceil(side_bytes / block_bytes)``."""
        return -(-self.side_bytes(shape) // shape.block_bytes)

    def side_block_equivalents(self, shape: ModelShape) -> float:
        """The side buffers' exact size in pool blocks, ``side_bytes / block_bytes`` (fractional;
        what the memory metrics count)."""
        return self.side_bytes(shape) / shape.block_bytes

    # ---------------------------------------------------------- worker side
    def attach(self, arm: KVArm, kv, shape: ModelShape) -> None:
        """Called once the worker's KV pool exists (``kv``: :class:`~vtoken.plugin.relocation.AllLayerKV`)."""

    def new_request(self, req_id: str) -> None:
        """A request starts (or restarts after a recompute preemption)."""

    def drop(self, req_id: str) -> None:
        """A request finished or was preempted."""

    def observe(self, arm: KVArm, state: RequestState, live: np.ndarray, mass: np.ndarray | None,
                new_pos: np.ndarray, norms: np.ndarray | None, side_mass: np.ndarray | None) -> Observation | None:
        """The arm's own use of one request's step, before the policy runs (None: nothing).

        Args:
            live: the request's live positions (ascending), the rows of ``mass``.
            mass: this step's attention mass per live token, or None (not scored).
            new_pos: logical positions of the tokens written this step.
            norms: ``[len(new_pos), 2]`` key / value norms of those tokens, or None.
            side_mass: mass of the request's side-tier tokens, or None.
        """
        return None

    def side_tokens(self, req_id: str) -> int | None:
        """Live tokens of the request in a side tier (None: the arm has none)."""
        return None

    def side_charge(self, req_id: str) -> int | None:
        """Blocks the request's side tier is charged now (None: no dynamic charge)."""
        return None

    def side_charge_equivalents(self, req_id: str) -> float | None:
        """The request's side tier's exact size in pool blocks (fractional; what the metrics
        count), beside the whole blocks of :meth:`side_charge` (None: no dynamic charge)."""
        return None

    def side_view(self, req_ids: list[str], scored: bool) -> SideView | None:
        """This step's side tier for attention (rows in batch order; ``scored``: the step
        measures mass, so the view carries a mass buffer), or None."""
        return None


class NoEviction(ArmAdapter):
    """An arm that keeps every token (``full``): no policy, ratio or budget."""

    evicts = False

    @classmethod
    def check_settings(cls, config: PluginConfig) -> None:
        for name in ("policy", "ratio", "budget"):
            if getattr(config, name) is not None:
                raise ValueError(
                    f"vtoken.{name}={getattr(config, name)!r}: arm={config.arm!r} evicts nothing, so {name} must be "
                    f"unset (evicting arms: {[a for a in _arm_names() if adapter_class(a).evicts]})"
                )


class PolicyDriven(ArmAdapter):
    """An arm the shared eviction policy drives (victims through ``KVArm.evict``)."""

    takes_policy = True

    @classmethod
    def check_settings(cls, config: PluginConfig) -> None:
        from vtoken.policies.registry import policy_names

        if config.policy is None:
            raise ValueError(f"vtoken.policy=None: arm={config.arm!r} needs a policy, one of {policy_names()}")
        if (config.ratio is None) == (config.budget is None):
            raise ValueError(f"vtoken.ratio={config.ratio!r}, vtoken.budget={config.budget!r}: "
                             f"arm={config.arm!r} needs exactly one of ratio / budget")


class SelfEvicting(ArmAdapter):
    """A baseline that is its own eviction policy: no ``policy``, no ``ratio``.

    Subclasses set :attr:`needs_budget` (a token budget required: True, forbidden: False,
    optional: None) and :attr:`policy_hint` (what to set instead of a policy).
    """

    needs_budget: ClassVar[bool | None] = True
    policy_hint: ClassVar[str] = ""
    supports_prefix_caching = False

    @classmethod
    def check_settings(cls, config: PluginConfig) -> None:
        if config.policy is not None:
            raise ValueError(f"vtoken.policy={config.policy!r}: arm={config.arm!r} is its own eviction policy, so "
                             f"policy must be unset{cls.policy_hint}")
        if config.ratio is not None:
            raise ValueError(f"vtoken.ratio={config.ratio!r}: arm={config.arm!r} takes a token budget, not a ratio")
        if cls.needs_budget and config.budget is None:
            raise ValueError(f"vtoken.budget=None: arm={config.arm!r} needs a token budget (vtoken.budget)")
        if cls.needs_budget is False and config.budget is not None:
            raise ValueError(f"vtoken.budget={config.budget!r}: arm={config.arm!r} prunes by its attention thresholds; "
                             "leave budget unset")


class SelfScoring(SelfEvicting):
    """A self-evicting baseline whose engine side is a scorer: every step, ``self.scorer``
    (set by the subclass) turns the step's measurements into the arm's scores
    (``scorer.new_request`` / ``drop`` / ``observe(arm, state, live, mass, new_pos, norms)``)."""

    observes = True
    scorer: Any

    def new_request(self, req_id: str) -> None:
        self.scorer.new_request(req_id)

    def drop(self, req_id: str) -> None:
        self.scorer.drop(req_id)

    def observe(self, arm, state, live, mass, new_pos, norms, side_mass):
        self.scorer.observe(arm, state, live, mass, new_pos, norms)
        return None


# ----------------------------------------------------------------------- registry
_ADAPTERS: dict[str, type[ArmAdapter]] = {}


def register_adapter(cls: type[ArmAdapter]) -> type[ArmAdapter]:
    """Class decorator: ``cls`` is the engine side of the arm named ``cls.arm``."""
    if cls.arm is None:
        raise ValueError(f"{cls.__name__}: set `arm` to the core arm's name")
    if cls.arm in _ADAPTERS and _ADAPTERS[cls.arm] is not cls:
        raise ValueError(f"arm {cls.arm!r} already has an engine side: {_ADAPTERS[cls.arm]}")
    _ADAPTERS[cls.arm] = cls
    return cls


def adapter_class(arm: str) -> type[ArmAdapter]:
    """The engine side of ``arm`` (see the module docstring); ValueError for an unknown arm."""
    if arm in _ADAPTERS:
        return _ADAPTERS[arm]
    core = get_arm_class(arm)
    module = core.__module__.rpartition(".")[0] + ".engine"
    if importlib.util.find_spec(module) is not None:
        importlib.import_module(module)
    if arm not in _ADAPTERS:
        _ADAPTERS[arm] = PolicyDriven if core.applies_policy_evictions else NoEviction
    return _ADAPTERS[arm]


def check_config(config: PluginConfig) -> PluginConfig:
    """``config``, checked against its arm's rule (:meth:`ArmAdapter.check_settings`).

    Raises:
        ValueError: naming the field, its value and what the arm allows.
    """
    adapter_class(config.arm).check_settings(config)
    return config


def adapter_for(config: PluginConfig, block_size: int) -> ArmAdapter:
    """The engine side of the arm ``config`` names."""
    return adapter_class(config.arm)(config, block_size)


def _arm_names() -> list[str]:
    from vtoken.arms.registry import arm_names

    return arm_names()
