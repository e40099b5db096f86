"""``PluginConfig``: the engine-level vToken settings, parsed once from ``additional_config``.

A vLLM engine carries them as ``additional_config={"vtoken": {...}}`` (CLI:
``--additional-config '{"vtoken": {...}}'``). Every field is validated at construction,
unknown keys fail with the valid names, and every error names the field, the value and what
is allowed. The defaults below are the only defaults of these settings: the workflow YAML
and the trial runner use the same names (``tests/plugin/test_config.py`` compares them with
``workflows/schemas/config.schema.yaml``), and the core arm and policy configs take the
shared ones under the same names (``budget``, ``ratio``, ``theta_f``, ``watermark``).

Which settings an arm takes (a policy, a ratio or budget, none) is the arm's engine side's
rule, checked when its adapter is built or by :func:`vtoken.plugin.adapter.check_config`
(:meth:`vtoken.plugin.adapter.ArmAdapter.check_settings`); this module knows no arm's rule
(the only arm it names is the default, ``full``, through :class:`vtoken.arms.full.FullArm`) and
imports no adapter.
:meth:`PluginConfig.of` parses an engine's settings once per process.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields
from typing import Any

from vtoken.arms.full import FullArm

ADDITIONAL_CONFIG_KEY = "vtoken"
ADMISSIONS = ("vllm", "projected")
# Where a prompt longer than the budget is pruned: after its K/V is written to the pool
# (then packed by moves, as the arms do by default), or before (:mod:`vtoken.plugin.staging`).
PROMPT_PRUNES = ("after_write", "before_write")
# Settings a core arm's config takes under the same name, when it has the field.
SHARED_SETTINGS = ("budget", "theta_f", "watermark")
# Core arm config fields the engine sets itself.
ENGINE_SETTINGS = ("block_size", "bytes_per_token")


@dataclass(frozen=True)
class PluginConfig:
    """vToken settings of one engine.

    Args:
        arm: KV strategy, a registered arm (``vtoken.arms.registry.arm_names()``).
        policy: eviction policy (``vtoken.policies.registry.policy_names()``), for the arms
            the shared policy drives; unset for the others.
        ratio: eviction ratio r in [0, 1): keep ceil((1 - r) * L) of L tokens.
        budget: token budget (>= 1): the policy's, or a self-evicting baseline's own.
        theta_f: waste threshold of lazy compaction (``vtoken`` arm), in [0, 1); 0.25 as in
            the paper.
        watermark: compaction runs only while free blocks < watermark x usable blocks, in
            [0, 1]; the paper names no value, 0.2 is our guess.
        score_layers: layer indices whose attention mass is measured, or None.
        score_stride: score every k-th layer (0, k, 2k, ...), or None. At most one of
            ``score_layers`` / ``score_stride``; with neither, every layer is scored.
        score_every: attention mass is computed on every k-th engine step only (other
            steps give zeros), >= 1.
        policy_every: the policy fires every k-th observed step, >= 1.
        metrics_path: where the scheduler writes per-step metrics (JSON lines,
            ``docs/metrics-sink.md``), or None.
        policy_options: further settings of the policy's config (a kvpress press's ``mode``:
            ``"continuous"`` or ``"prefill_once"``, ``docs/kvpress.md``), checked by the policy's
            config class.
        arm_options: further settings of the core arm's config (e.g. PagedEviction's
            ``{"score": "v"}``); unknown names fail at startup with the arm's valid names. The
            engine's own (``block_size``, ``bytes_per_token``) and the shared settings above
            are not allowed here.
        score_window: Zipage: tokens are scored by the attention of the last
            ``score_window`` queries (16, as in Zipage), >= 1.
        admission: ``"vllm"`` (the default) keeps vLLM's own gate, so an engine with no
            vToken settings admits, preempts and honours priorities exactly as stock vLLM;
            ``"projected"`` admits a waiting request only while the free blocks cover its
            projected peak plus the projected growth of the running requests
            (:mod:`vtoken.plugin.admission`). The projected gate does not order by request
            priority, so it is refused at startup with ``scheduling_policy="priority"``.
        prompt_prune: ``"after_write"`` (the default): a prompt's K/V is written to the pool
            whole and the arm or its policy prunes it after the step (PagedEviction then packs
            the survivors by moves); ``"before_write"``: the prompt is computed in a staging
            area outside the pool, pruned there, and only the kept tokens are written to pool
            blocks, the request admitted at its post-prune block count (as PagedEviction's
            authors' fork does; :mod:`vtoken.plugin.staging`). Needs an arm that can say how
            many tokens a prompt keeps, chunked prefill off and prefix caching off.
        batch_invariant: True (the default): on the CPU each linear whose kernel varies with the
            batch computes a lone row as a pair, so a token's hidden states, and the scores
            eviction ranks, do not depend on how many rows share its step
            (:mod:`vtoken.plugin.cpu.batch_invariance`); False: vLLM's GEMM as it is.
    """

    arm: str = FullArm.name
    policy: str | None = None
    ratio: float | None = None
    budget: int | None = None
    theta_f: float = 0.25
    watermark: float = 0.2
    score_layers: tuple[int, ...] | None = None
    score_stride: int | None = None
    score_every: int = 1
    policy_every: int = 1
    metrics_path: str | None = None
    arm_options: dict | None = None
    policy_options: dict | None = None
    score_window: int = 16
    admission: str = "vllm"
    prompt_prune: str = "after_write"
    batch_invariant: bool = True

    def __post_init__(self) -> None:
        from vtoken.arms.registry import arm_names
        from vtoken.policies.registry import check_policy

        _check_choice("arm", self.arm, tuple(arm_names()))
        if self.policy is not None:
            try:
                check_policy(self.policy)
            except ValueError as err:
                raise ValueError(f"vtoken.{err}") from None
        if self.ratio is not None:
            _check_number("ratio", self.ratio, float)
            if not 0.0 <= self.ratio < 1.0:
                raise ValueError(f"vtoken.ratio={self.ratio!r}: must be in [0, 1)")
        if self.budget is not None:
            _check_number("budget", self.budget, int)
            if self.budget < 1:
                raise ValueError(f"vtoken.budget={self.budget!r}: must be an integer >= 1")
        _check_number("theta_f", self.theta_f, float)
        if not 0.0 <= self.theta_f < 1.0:
            raise ValueError(f"vtoken.theta_f={self.theta_f!r}: must be in [0, 1)")
        _check_number("watermark", self.watermark, float)
        if not 0.0 <= self.watermark <= 1.0:
            raise ValueError(f"vtoken.watermark={self.watermark!r}: must be in [0, 1]")
        self._check_scoring()
        for name in ("score_every", "policy_every", "score_window"):
            _check_number(name, getattr(self, name), int)
            if getattr(self, name) < 1:
                raise ValueError(f"vtoken.{name}={getattr(self, name)!r}: must be an integer >= 1")
        if self.metrics_path is not None and (not isinstance(self.metrics_path, str) or not self.metrics_path):
            raise ValueError(f"vtoken.metrics_path={self.metrics_path!r}: must be a non-empty path string")
        _check_choice("admission", self.admission, ADMISSIONS)
        _check_choice("prompt_prune", self.prompt_prune, PROMPT_PRUNES)
        if not isinstance(self.batch_invariant, bool):
            raise ValueError(f"vtoken.batch_invariant={self.batch_invariant!r}: must be true or false")
        if self.policy_options is not None:
            if not isinstance(self.policy_options, dict) or self.policy is None:
                raise ValueError(f"vtoken.policy_options={self.policy_options!r}: must be a dict of the settings of "
                                 f"vtoken.policy (policy={self.policy!r})")
            from vtoken.policies.registry import check_policy_options

            try:
                check_policy_options(self.policy, self.policy_options, **self.policy_budget())
            except ValueError as err:
                raise ValueError(f"vtoken.policy_options: {err}") from None
        if self.arm_options is not None:
            if not isinstance(self.arm_options, dict):
                raise ValueError(f"vtoken.arm_options={self.arm_options!r}: must be a dict of the arm's settings")
            reserved = sorted(set(self.arm_options) & (set(ENGINE_SETTINGS) | set(SHARED_SETTINGS)))
            if reserved:
                raise ValueError(
                    f"vtoken.arm_options: {reserved} are set by the engine (block size) or by vtoken.budget / "
                    "theta_f / watermark; remove them from arm_options"
                )

    def _check_scoring(self) -> None:
        if self.score_layers is not None and self.score_stride is not None:
            raise ValueError(
                f"vtoken.score_layers={self.score_layers!r} and vtoken.score_stride={self.score_stride!r}: "
                "set at most one of them"
            )
        if self.score_layers is not None:
            layers = self.score_layers
            if not isinstance(layers, tuple) or not layers or not all(_is_int(i) and i >= 0 for i in layers):
                raise ValueError(f"vtoken.score_layers={layers!r}: must be a non-empty list of layer indices >= 0")
            if len(set(layers)) != len(layers):
                raise ValueError(f"vtoken.score_layers={layers!r}: indices must be distinct")
        if self.score_stride is not None:
            _check_number("score_stride", self.score_stride, int)
            if self.score_stride < 1:
                raise ValueError(f"vtoken.score_stride={self.score_stride!r}: must be an integer >= 1")

    def policy_budget(self) -> dict[str, Any]:
        """The policy's budget by its config name: ``{"ratio": r}``, else ``{"budget": n}``."""
        return {"ratio": self.ratio} if self.ratio is not None else {"budget": self.budget}

    def scores_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` adds attention mass (``score_layers`` / ``score_stride``)."""
        if self.score_layers is not None:
            return index in self.score_layers
        return index % (self.score_stride or 1) == 0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PluginConfig:
        """Build a config from the user's dict (JSON types: lists become tuples).

        Raises:
            ValueError: ``raw`` is not a dict, has unknown keys, or a value is invalid.
        """
        if not isinstance(raw, dict):
            raise ValueError(f"additional_config[{ADDITIONAL_CONFIG_KEY!r}]={raw!r}: must be a dict")
        valid = sorted(f.name for f in fields(cls))
        unknown = sorted(set(raw) - set(valid))
        if unknown:
            raise ValueError(f"vtoken: unknown keys {unknown}; valid keys: {valid}")
        values = dict(raw)
        if isinstance(values.get("score_layers"), list):
            values["score_layers"] = tuple(values["score_layers"])
        return cls(**values)

    @classmethod
    def from_additional_config(cls, additional_config: Any) -> PluginConfig | None:
        """The config an engine's ``additional_config`` carries, or None without one.

        Parsed once per process: the same settings give the same (frozen) object.
        """
        if not isinstance(additional_config, dict) or ADDITIONAL_CONFIG_KEY not in additional_config:
            return None
        raw = additional_config[ADDITIONAL_CONFIG_KEY]
        key = json.dumps(raw, sort_keys=True, default=str)
        config = _parsed.get(key)
        if config is None:
            config = _parsed[key] = cls.from_dict(raw)
        return config

    @classmethod
    def of(cls, vllm_config: Any) -> PluginConfig:
        """The engine's settings (the ``full`` arm's defaults when it carries none)."""
        return cls.from_additional_config(vllm_config.additional_config) or _default()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict that :meth:`from_dict` turns back into an equal config."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if out["score_layers"] is not None:
            out["score_layers"] = list(out["score_layers"])
        return out


_parsed: dict[str, PluginConfig] = {}


@functools.cache
def _default() -> PluginConfig:
    return PluginConfig()


def defaults() -> dict[str, Any]:
    """Every setting's default (the one place they are defined)."""
    return {f.name: f.default for f in fields(PluginConfig)}


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"vtoken.{name}={value!r}: must be one of {list(allowed)}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_number(name: str, value: Any, kind: type) -> None:
    ok = _is_int(value) if kind is int else (isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        raise ValueError(f"vtoken.{name}={value!r}: must be {'an integer' if kind is int else 'a number'}")
