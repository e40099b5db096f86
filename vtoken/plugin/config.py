"""``VTokenConfig``: the engine-level vToken settings, parsed from ``additional_config``.

A vLLM engine carries them as ``additional_config={"vtoken": {...}}`` (CLI:
``--additional-config '{"vtoken": {...}}'``); :func:`VTokenConfig.from_additional_config`
reads that dict. Every field is validated at construction, unknown keys fail with the
valid names, and every error names the field, the value and what is allowed.

The dataclass holds the full planned schema so later parts can rely on it. Which of it
the plugin can already run is a separate question answered by
:func:`vtoken.plugin.config.check_implemented` (part A: the ``full`` arm only).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

ADDITIONAL_CONFIG_KEY = "vtoken"
ARMS = ("full", "naive", "holefill", "vtoken", "paged_eviction", "zipage", "diffkv")
POLICIES = ("h2o", "scissorhands", "streamingllm", "random")
# Arms that keep every token: an eviction policy or budget on them would be ignored.
NON_EVICTING_ARMS = ("full",)
# Baselines that are their own eviction policy (no `policy`; their scorer is built in).
SELF_EVICTING_ARMS = ("paged_eviction", "zipage", "diffkv")
# Policies that read attention mass (the others ignore scores, so nothing is scored).
SCORED_POLICIES = ("h2o", "scissorhands")
ADMISSIONS = ("projected", "vllm")
RESERVED_ARM_OPTIONS = ("block_size", "bytes_per_token", "budget_tokens", "budget_blocks", "theta_f", "low_watermark")
# What the plugin runs today; the self-evicting baselines' engine side is issue 5.
IMPLEMENTED_ARMS = ARMS


@dataclass(frozen=True)
class VTokenConfig:
    """vToken settings of one engine.

    Args:
        arm: KV strategy, one of ``ARMS``. ``full`` evicts nothing.
        policy: eviction policy, one of ``POLICIES``; required by evicting arms and
            forbidden for ``full`` (it would be ignored).
        ratio: eviction ratio r in [0, 1): keep ceil((1 - r) * L) of L tokens.
        budget: fixed token budget (>= 1). Evicting arms need exactly one of
            ``ratio`` / ``budget``; ``full`` takes neither.
        theta_f: waste threshold of lazy compaction (``vtoken`` arm), in [0, 1);
            0.25 as in the paper (and in ``vtoken.arms.vtoken``).
        watermark: compaction runs only while free blocks < watermark x usable blocks,
            in [0, 1]; the paper names no value, 0.2 is the core library's guess.
        score_layers: layer indices whose attention mass feeds the policy, or None.
        score_stride: score every k-th layer (0, k, 2k, ...), or None. At most one of
            ``score_layers`` / ``score_stride``; with neither, every layer is scored. Only
            policies in ``SCORED_POLICIES`` are given attention mass at all.
        score_every: attention mass is computed on every k-th engine step only (other
            steps give the policy zeros), >= 1; with ``score_layers`` / ``score_stride``
            this is the "subset of layers and steps" that is scored.
        policy_every: the policy fires every k-th observed step, >= 1.
        metrics_path: where the scheduler writes per-step metrics (JSON lines,
            ``docs/metrics-sink.md``), or None.
        arm_options: extra settings of the core arm's config (e.g. PagedEviction's
            ``{"score": "v"}``, Zipage's ``{"async_compress": true}``); unknown names fail at
            startup with the arm's valid names. ``block_size``/``bytes_per_token`` and what
            ``budget``/``theta_f``/``watermark`` set are not allowed here.
        score_window: Zipage: its tokens are scored by the attention of the last
            ``score_window`` queries (16, as in Zipage), >= 1.
        admission: ``"projected"`` admits a waiting request only while the free blocks
            cover its projected peak plus the projected growth of the running requests
            (:mod:`vtoken.plugin.admission`); ``"vllm"`` keeps vLLM's own gate (the prompt
            must fit; running requests are preempted when the pool runs out).
    """

    arm: str = "full"
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
    score_window: int = 16
    admission: str = "projected"

    def __post_init__(self) -> None:
        _check_choice("arm", self.arm, ARMS)
        if self.policy is not None:
            _check_choice("policy", self.policy, POLICIES)
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
        _check_number("score_every", self.score_every, int)
        if self.score_every < 1:
            raise ValueError(f"vtoken.score_every={self.score_every!r}: must be an integer >= 1")
        _check_number("policy_every", self.policy_every, int)
        if self.policy_every < 1:
            raise ValueError(f"vtoken.policy_every={self.policy_every!r}: must be an integer >= 1")
        if self.metrics_path is not None and (not isinstance(self.metrics_path, str) or not self.metrics_path):
            raise ValueError(f"vtoken.metrics_path={self.metrics_path!r}: must be a non-empty path string")
        _check_choice("admission", self.admission, ADMISSIONS)
        _check_number("score_window", self.score_window, int)
        if self.score_window < 1:
            raise ValueError(f"vtoken.score_window={self.score_window!r}: must be an integer >= 1")
        if self.arm_options is not None:
            if not isinstance(self.arm_options, dict):
                raise ValueError(f"vtoken.arm_options={self.arm_options!r}: must be a dict of the arm's settings")
            reserved = sorted(set(self.arm_options) & set(RESERVED_ARM_OPTIONS))
            if reserved:
                raise ValueError(
                    f"vtoken.arm_options: {reserved} are set by the engine (block size) or by "
                    f"vtoken.budget / theta_f / watermark; remove them from arm_options"
                )
        self._check_arm_fields()

    def _check_scoring(self) -> None:
        if self.score_layers is not None and self.score_stride is not None:
            raise ValueError(
                f"vtoken.score_layers={self.score_layers!r} and vtoken.score_stride={self.score_stride!r}: "
                "set at most one of them"
            )
        if self.score_layers is not None:
            layers = self.score_layers
            if not isinstance(layers, tuple) or not layers or not all(_is_int(i) and i >= 0 for i in layers):
                raise ValueError(
                    f"vtoken.score_layers={layers!r}: must be a non-empty list of layer indices >= 0"
                )
            if len(set(layers)) != len(layers):
                raise ValueError(f"vtoken.score_layers={layers!r}: indices must be distinct")
        if self.score_stride is not None:
            _check_number("score_stride", self.score_stride, int)
            if self.score_stride < 1:
                raise ValueError(f"vtoken.score_stride={self.score_stride!r}: must be an integer >= 1")

    def _check_arm_fields(self) -> None:
        if self.arm in NON_EVICTING_ARMS:
            for name in ("policy", "ratio", "budget"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"vtoken.{name}={getattr(self, name)!r}: arm={self.arm!r} evicts nothing, "
                        f"so {name} must be unset (evicting arms: "
                        f"{[a for a in ARMS if a not in NON_EVICTING_ARMS]})"
                    )
            return
        if self.arm in SELF_EVICTING_ARMS:
            self._check_baseline_fields()
            return
        if self.policy is None:
            raise ValueError(f"vtoken.policy=None: arm={self.arm!r} needs a policy, one of {list(POLICIES)}")
        if (self.ratio is None) == (self.budget is None):
            raise ValueError(
                f"vtoken.ratio={self.ratio!r}, vtoken.budget={self.budget!r}: "
                f"arm={self.arm!r} needs exactly one of ratio / budget"
            )

    def _check_baseline_fields(self) -> None:
        if self.policy is not None:
            raise ValueError(
                f"vtoken.policy={self.policy!r}: arm={self.arm!r} is its own eviction policy, so policy must be "
                "unset (PagedEviction's H2O-mass variant: arm_options={'score': 'h2o'})"
            )
        if self.ratio is not None:
            raise ValueError(f"vtoken.ratio={self.ratio!r}: arm={self.arm!r} takes a token budget, not a ratio")
        if self.arm == "diffkv":
            if self.budget is not None:
                raise ValueError(f"vtoken.budget={self.budget!r}: arm='diffkv' prunes by its attention thresholds; "
                                 "leave budget unset")
        elif self.budget is None:
            raise ValueError(f"vtoken.budget=None: arm={self.arm!r} needs a token budget (vtoken.budget)")

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VTokenConfig:
        """Build a config from the user's dict (JSON types: lists become tuples).

        Args:
            raw: the value of ``additional_config["vtoken"]``.

        Returns:
            The validated config.

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
    def from_additional_config(cls, additional_config: Any) -> VTokenConfig | None:
        """The config an engine's ``additional_config`` carries, or None without one.

        Args:
            additional_config: ``VllmConfig.additional_config`` (a dict, possibly empty).

        Returns:
            The validated config, or None when there is no ``"vtoken"`` key.
        """
        if not isinstance(additional_config, dict) or ADDITIONAL_CONFIG_KEY not in additional_config:
            return None
        return cls.from_dict(additional_config[ADDITIONAL_CONFIG_KEY])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict that :meth:`from_dict` turns back into an equal config."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if out["score_layers"] is not None:
            out["score_layers"] = list(out["score_layers"])
        return out


def check_implemented(config: VTokenConfig) -> None:
    """Fail clearly on settings the plugin cannot run yet.

    Args:
        config: a validated config.

    Raises:
        NotImplementedError: naming the field, its value and what is implemented.
    """
    if config.arm not in IMPLEMENTED_ARMS:
        raise NotImplementedError(
            f"vtoken.arm={config.arm!r}: valid, but its engine side is not implemented in the plugin yet "
            f"(the self-evicting baselines come with issue 5); implemented arms: {list(IMPLEMENTED_ARMS)}"
        )


def uses_scores(config: VTokenConfig) -> bool:
    """Whether the engine computes attention mass (for the policy or the arm's scorer)."""
    if config.arm in SELF_EVICTING_ARMS:
        options = config.arm_options or {}
        return config.arm != "paged_eviction" or options.get("score") == "h2o"
    return config.policy in SCORED_POLICIES


def uses_norms(config: VTokenConfig) -> bool:
    """Whether the engine measures key/value norms of new tokens (PagedEviction's scores)."""
    return config.arm == "paged_eviction" and (config.arm_options or {}).get("score", "v_over_k") != "h2o"


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"vtoken.{name}={value!r}: must be one of {list(allowed)}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_number(name: str, value: Any, kind: type) -> None:
    ok = _is_int(value) if kind is int else (isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        raise ValueError(f"vtoken.{name}={value!r}: must be {'an integer' if kind is int else 'a number'}")
