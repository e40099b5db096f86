"""The experimental grid of one pipeline config: every setup and the trial-runner arguments
of each, built in one place for ``workflows/rules/common.smk`` and ``benchmarks/trial_time.py``.

A config (``workflows/config/*.yaml``, validated by ``workflows/schemas/config.schema.yaml``
first) names the arms, the trial settings and the sweeps; ``check(config)`` applies the
cross-key rules a JSON schema cannot state (each error names the key) and ``setups(config)``
returns the setups in run order:

- **select**: θ_F and watermark chosen on held-out request samples (``theta_f``): Naive-Evict
  and one vToken variant per (θ_F, watermark) at ``theta_f.concurrency``, on the pairs after
  the main setups' (``trial.pairs`` .. ``trial.pairs + theta_f.pairs - 1``: rows of the
  manifest no other setup runs); every other setup reads the selection (``SELECTED``);
- **main**: every policy of ``trial.policies`` x model x workload at the first pool. The first
  policy: every arm, then every other arm variant (``arm_variants``, e.g. PagedEviction's
  mechanism with the policy's scores), then the A/A control (``aa_control``), over
  ``trial.concurrency``; every further policy: ``policy_grid.arms`` over
  ``policy_grid.concurrency`` (each null: the first policy's; ``policy_grid.overrides.<policy>``
  replaces the three for one policy). ``swept_arms`` (a further policy: ``policy_grid.swept_arms``) over the grid, the others at ``sla.c_ref`` (a variant at its own ``concurrency`` when it names one). Named
  ``<model>.<workload>.<policy>.main``;
- **pool**: the same at each further pool of ``pool.c_press`` (the paper's second budget);
- **ratio**: the paper's eviction-ratio sweep (``ratio_sweep``), one setup per policy x ratio r
  (the policy keeps ceil((1 - r) L) of the L tokens so far), policy-driven arms only;
- **kvpress**: third-party policies (``kvpress``), one setup per press of NVIDIA kvpress
  (``kvpress:<Press>``) at the first pool and the trial's budget, the policy-driven arms over
  ``kvpress.concurrency``;
- **point**: one memory-quality operating point each (``operating_points``), on the first model
  (this and the roles below run the first policy);
- **block_size**: the block-size sensitivity (``sensitivity``), the same usable tokens;
- **prefix**: Table 1's prefix-sharing rows (``prefix_sharing``), one setup per sharing degree:
  ``prefix_sharing.arms`` with the engine's prefix cache on, each request behind a shared
  system-prompt document of ``prefix_tokens`` tokens, ``degree`` requests per document
  (``vtoken.bench.workloads.shared_prefix``), one wave at ``prefix_sharing.concurrency``.
- **factorial**: the review's experiment (``factorial``): one setup per scorer, Native and
  each mechanism x budget at one pressing C (``vtoken.bench.grid.factorial``);
- **frontier**: the compaction frontier (``compaction_frontier``): Naive-Evict and one
  vToken engine per θ_F x trigger (``frontier_variants``), plus the config's
  ``vtoken_pressure`` and ``vtoken_eager`` (``FRONTIER_NAMED``), at ``compaction_frontier.concurrency``
  on the main pairs: retained blocks against moves and step time from eager to lazy.
A sweep value equal to the main setup's reuses the main setup.

The pool (``pool_blocks``): a fixed ``pool.num_gpu_blocks``, or the pressing rule -- the pool
holds ``c_press`` requests of the manifest's longest request (prompt + output contract) with
no eviction at all, ``c_press x ceil(max(prompt + contract) / B) + 1`` blocks (the null block;
a prefix setup adds the shared documents those requests need, each stored once:
``ceil(c_press / degree) x ceil(prefix_tokens / B)``, so every degree presses alike),
so Native needs more than the pool above ``c_press`` while a budget of T tokens needs about
``ceil(T / B) + 1`` blocks per request (``press_demand`` replays both on a sample).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from vtoken.arms.registry import arm_names
from vtoken.bench.grid import factorial
from vtoken.bench.harness.run_flags import to_args
from vtoken.policies.kvpress_catalog import slug
from vtoken.policies.registry import check_policy

# The registered arms (every config value the schema calls an arm is one); a variant name must not shadow one.
ARMS = tuple(arm_names())
MANIFEST_DIR = "data/workloads"
SCHEMA = "workflows/schemas/config.schema.yaml"
# The schema's definitions whose values a registry holds (the schema states their shape only, so a
# new arm or policy is listed nowhere): every key that references one is checked by ``check``.
REGISTERED = {"#/$defs/arm": "arm", "#/$defs/policy": "policy"}
# The held-out selection of θ_F and watermark, written by the pipeline's select rule and read
# by every setup but the selection itself (``--vtoken-file``): <processed dir>/SELECTED.
SELECTED = "theta_f_selected.json"


@dataclass(frozen=True)
class Setup:
    """One setup: a model and workload run by ``arms`` over ``concurrency``.

    ``arm_settings`` are the per-arm vtoken settings (``--arm-settings``), ``variants`` the
    arm variants among ``arms`` (``--arm-variants``)."""

    name: str
    model: str
    workload: str
    role: str
    policy: str
    arms: tuple[str, ...]
    concurrency: tuple[int, ...]
    block_size: int
    ratio: float
    theta_f: float
    arm_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)
    budget: int | None = None
    arm_concurrency: dict[str, tuple[int, ...]] = field(default_factory=dict)
    c_press: int | None = None
    first_pair: int = 0
    pairs: int | None = None
    selected: bool = False
    prefix_degree: int | None = None
    prefix_tokens: int = 0
    own_c_arms: tuple[str, ...] = ()  # variants at Cs of their own (arm_variants.<name>.concurrency)
    factors: dict[str, dict[str, Any]] = field(default_factory=dict)  # a factorial cell's factors (grid.factorial)
    forcing: str | None = None  # teacher forcing of its trials (RunConfig.forcing); None: free-running
    num_requests: int | None = None  # requests per pair, where not trial.num_requests
    one_wave: bool | None = None  # where not trial.one_wave
    engine: dict[str, Any] = field(default_factory=dict)  # engine settings over trial.engine

    def row(self) -> dict[str, Any]:
        """The setup as one row of the processed ``setups`` table (θ_F: the fixed one, or
        "selected" when the setup reads the held-out selection)."""
        return {"setup": self.name, "model": self.model, "workload": self.workload, "role": self.role,
                "policy": self.policy,
                "arms": ",".join(self.arms), "concurrency": ",".join(map(str, self.concurrency)),
                "arm_settings": json.dumps(self.arm_settings, sort_keys=True), "block_size": self.block_size,
                "ratio": self.ratio, "budget": self.budget, "theta_f": "selected" if self.selected else self.theta_f,
                "swept_arms": ",".join(a for a in self.arms if a not in self.arm_concurrency),
                "c_press": self.c_press, "first_pair": self.first_pair, "shared_c": self.shared_c,
                "prefix_degree": self.prefix_degree, "prefix_tokens": self.prefix_tokens,
                "factors": factorial.factors_json(self.factors), "forcing": self.forcing or ""}

    @property
    def shared_c(self) -> int:
        """The largest C every arm of the setup runs (C_ref when some run only there); a
        variant at Cs of its own does not count (it is compared where it runs)."""
        common = set(self.concurrency)
        for arm, cs in self.arm_concurrency.items():
            if arm not in self.own_c_arms:
                common &= set(cs)
        return max(common) if common else max(self.concurrency)


def _error(key: str, message: str) -> None:
    raise ValueError(f"config key {key!r}: {message}")


def budget_partners(config: dict[str, Any]) -> dict[str, str]:
    """{variant: the arm or variant it is another budget of} (``arm_variants.<name>.budget_of``):
    the families the analysis compares at interpolated equal live tokens
    (``vtoken.bench.analysis.equal_live``)."""
    return {name: v["budget_of"] for name, v in config["arm_variants"].items() if v.get("budget_of")}


def registered_keys(schema: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """Where the config schema says arm or policy (``REGISTERED``): (key path, "arm" or
    "policy"); a path part "[]" is every item of a list, "*" every value of a mapping."""
    out: list[tuple[tuple[str, ...], str]] = []

    def walk(node: Any, path: tuple[str, ...], seen: frozenset) -> None:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if ref in REGISTERED:
            out.append((path, REGISTERED[ref]))
            return
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref not in seen:
            walk(schema["$defs"][ref.rsplit("/", 1)[1]], path, seen | {ref})
        for key, sub in (node.get("properties") or {}).items():
            walk(sub, (*path, key), seen)
        for part, sub in (("[]", node.get("items")), ("*", node.get("additionalProperties"))):
            walk(sub, (*path, part), seen)
        for alt in (*node.get("anyOf", ()), *node.get("oneOf", ())):
            walk(alt, path, seen)

    walk(schema, (), frozenset())
    return out


def _values_at(value: Any, path: tuple[str, ...], key: str = ""):
    """(key as the errors name it, value) of every config value at ``path`` (``registered_keys``)."""
    if not path:
        yield key, value
        return
    head, rest = path[0], path[1:]
    if head == "[]" and isinstance(value, list):  # an item is named by its list's key, as the other checks do
        for item in value:
            yield from _values_at(item, rest, key)
    elif head == "*" and isinstance(value, dict):
        for name, item in value.items():
            yield from _values_at(item, rest, f"{key}.{name}" if key else name)
    elif head not in ("[]", "*") and isinstance(value, dict) and value.get(head) is not None:
        yield from _values_at(value[head], rest, f"{key}.{head}" if key else head)


def _check_registered(config: dict[str, Any], root: str = ".") -> None:
    """Every value the schema calls an arm is a registered arm, every policy a registered policy
    or a kvpress press that runs (``check_policy``); the prefix-sharing arms keep prefix-cached
    blocks read-only (Native and the policy-driven arms: a self-evicting baseline refuses them)."""
    from vtoken.plugin.adapter import adapter_class

    schema = yaml.safe_load((Path(root) / SCHEMA).read_text(encoding="utf-8"))
    for path, kind in registered_keys(schema):
        for key, value in _values_at(config, path):
            if kind == "arm" and value not in ARMS:
                _error(key, f"{value!r} is not a registered arm {list(ARMS)} (vtoken.arms.registry)")
            if kind == "policy":
                try:
                    check_policy(value)
                except ValueError as err:
                    _error(key, str(err))
    for arm in config["prefix_sharing"]["arms"]:
        if adapter_class(arm).evicts and not adapter_class(arm).takes_policy:
            _error("prefix_sharing.arms", f"{arm!r} evicts by its own rule and refuses prefix caching: give Native "
                                          "or policy-driven arms")


def check(config: dict[str, Any], root: str = ".") -> None:
    """The cross-key rules of a schema-valid config; raises ValueError naming the key. First:
    every arm and policy the config names is registered (``_check_registered``)."""
    _check_registered(config, root)
    trial, variants, aa = config["trial"], config["arm_variants"], config["aa_control"]
    points = config["operating_points"]
    for name in config["workloads"]:
        if not os.path.exists(os.path.join(root, MANIFEST_DIR, f"{name}.jsonl")):
            _error("workloads", f"no manifest {MANIFEST_DIR}/{name}.jsonl")
    if config["baseline"] not in config["arms"]:
        _error("baseline", f"{config['baseline']!r} is not one of arms {config['arms']}")
    if config["sla"]["c_ref"] not in trial["concurrency"]:
        _error("sla.c_ref", f"{config['sla']['c_ref']} is not on trial.concurrency {trial['concurrency']}")
    if (trial["ratio"] is None) == (trial["budget"] is None):
        _error("trial.budget", f"give exactly one of trial.ratio ({trial['ratio']}) and trial.budget "
                               f"({trial['budget']})")
    swept = config["swept_arms"]
    for arm in swept:
        if arm not in config["arms"] and arm not in variants:
            _error("swept_arms", f"{arm!r} is not one of arms {config['arms']} nor of arm_variants {list(variants)}")
    if config["baseline"] not in swept or ("vtoken" in config["arms"] and "vtoken" not in swept):
        _error("swept_arms", f"{swept} must hold the baseline and vtoken (the claims compare them over the grid)")
    if trial.get("capacity_search") and not trial["one_wave"]:
        _error("trial.capacity_search", f"{trial['capacity_search']!r} needs trial.one_wave: true (a probe at C is "
                                        "one wave of C requests, where the pool's sure failure bounds the search); "
                                        "false for closed-loop trials")
    if trial["one_wave"] and (trial["num_requests"] or 0) < max(trial["concurrency"]):
        _error("trial.num_requests", f"{trial['num_requests']} < the largest C {max(trial['concurrency'])}: with "
                                     "trial.one_wave the trial at C runs C rows of the pair's sample")
    pool = config["pool"]
    if (pool["num_gpu_blocks"] is None) == (not pool["c_press"]):
        _error("pool", "give either pool.num_gpu_blocks (a fixed pool) or pool.c_press (the pressing rule)")
    for name in variants:
        if name in ARMS:
            _error(f"arm_variants.{name}", "a variant name must not be an arm name")
    if aa is not None:
        if aa not in variants:
            _error("aa_control", f"{aa!r} is not one of arm_variants {list(variants)}")
        if variants[aa]["arm"] != config["baseline"]:
            _error("aa_control", f"{aa!r} runs {variants[aa]['arm']!r}, not the baseline {config['baseline']!r}")
        if variants[aa].get("settings"):
            _error("aa_control", "an A/A variant takes no settings of its own")
    known = set(ARMS) | set(variants)  # a profile may name arms the default does not run
    named = [("arm_settings", config["arm_settings"])] + [
        (f"operating_points.points[{i}].arm_settings", p["arm_settings"]) for i, p in enumerate(points["points"])]
    for key, settings in named:
        for arm in settings:
            if arm not in known:
                _error(f"{key}.{arm}", f"not an arm or variant of this config {sorted(known)}")
    if points["workload"] not in config["workloads"]:
        _error("operating_points.workload", f"{points['workload']!r} is not one of workloads (its main setup "
                                            "is a point)")
    for i, point in enumerate(points["points"]):
        if ("ratio" in point) == ("budget" in point):
            _error(f"operating_points.points[{i}]", "give exactly one of ratio and budget")
        if ("budget" in point) != (trial["budget"] is not None):
            _error(f"operating_points.points[{i}]", "a point moves the main setup's knob: budget when "
                                                    "trial.budget is set, ratio otherwise")
    sens = config["sensitivity"]
    if config["baseline"] not in sens["arms"] or "vtoken" not in sens["arms"]:
        _error("sensitivity.arms", f"{sens['arms']} must hold the baseline and vtoken")
    if sens["workload"] not in config["workloads"]:
        _error("sensitivity.workload", f"{sens['workload']!r} is not one of workloads")
    for name, of in budget_partners(config).items():  # a second budget of the same mechanism
        base = variants[of]["arm"] if of in variants else of
        if of not in known:
            _error(f"arm_variants.{name}.budget_of", f"{of!r} is not an arm or variant of this config {sorted(known)}")
        if base != variants[name]["arm"]:
            _error(f"arm_variants.{name}.budget_of", f"{of!r} runs {base!r}, not {variants[name]['arm']!r}: a budget "
                                                     "partner is the same mechanism at another budget")
    for name, variant in config["arm_variants"].items():  # the variants of arms this config runs
        for c in variant.get("concurrency", ()) if variant["arm"] in config["arms"] else ():
            if c not in trial["concurrency"]:
                _error(f"arm_variants.{name}.concurrency", f"{c} is not on trial.concurrency {trial['concurrency']}")
    _check_policies(config)
    factorial.check(config, set(ARMS) | set(config["arm_variants"]),
                    lambda arm: (config["arm_variants"].get(arm, {}).get("arm") == POLICY_SCORED_ARM
                                 and _policy_scored(config["arm_variants"][arm])), _error)
    for phase in factorial.PHASES:
        name = config["factorial"][phase]["workload"]
        if factorial.enabled(config, phase) and not (Path(root) / MANIFEST_DIR / f"{name}.jsonl").is_file():
            _error(f"factorial.{phase}.workload", f"{name!r}: no manifest {MANIFEST_DIR}/{name}.jsonl")
    blocks = [m for m, g in factorial.mechanisms(config, "prefill").items() if g == factorial.BLOCK]
    if factorial.enabled(config, "prefill") and blocks:  # PagedEviction's own assert: budget >= 3 B
        prefill, floor = config["factorial"]["prefill"], 3 * config["trial"]["block_size"]
        median = float(np.median([r["prompt_tokens"] for r in manifest_rows(prefill["workload"], root)]))
        for k in prefill["kept"]:
            if factorial.kept_budget(k, median) < floor:
                _error("factorial.prefill.kept", f"{k}: keeps {factorial.kept_budget(k, median)} tokens of the median "
                                                 f"prompt ({median:g}); the block mechanism needs >= 3 x block_size = "
                                                 f"{floor}")
    front = config.get("compaction_frontier") or {}
    if front.get("theta_f") and front.get("triggers"):
        if front["workload"] not in config["workloads"]:
            _error("compaction_frontier.workload", f"{front['workload']!r} is not one of workloads")
        if "vtoken" not in config["arms"]:
            _error("compaction_frontier", f"runs vToken's packing rules: 'vtoken' must be one of arms {config['arms']}")
    prefix = config["prefix_sharing"]
    if prefix["degrees"]:
        if prefix["workload"] not in config["workloads"]:
            _error("prefix_sharing.workload", f"{prefix['workload']!r} is not one of workloads")
        if config["baseline"] not in prefix["arms"] or "vtoken" not in prefix["arms"]:
            _error("prefix_sharing.arms", f"{prefix['arms']} must hold the baseline and vtoken")
        if (trial["num_requests"] or 0) < prefix["concurrency"]:
            _error("prefix_sharing.concurrency", f"{prefix['concurrency']} > trial.num_requests "
                                                 f"{trial['num_requests']} (one wave of the pair's sample)")
    sel = config["theta_f"]
    if sel["values"] and sel["workload"] not in config["workloads"]:
        _error("theta_f.workload", f"{sel['workload']!r} is not one of workloads")
    for arm, settings in config["arm_settings"].items():
        if {"arm", "metrics_path"} & set(settings):
            _error(f"arm_settings.{arm}", "arm and metrics_path are set by the runner")


# A variant's ``arm_options.score`` that takes the setup's policy (PagedEviction's mechanism
# ranked by the policy's own per-token state: baselines/paged_eviction/engine.py).
SETUP_POLICY = "policy"
# The arm whose mechanism can rank by a policy's scores.
POLICY_SCORED_ARM = "paged_eviction"


def _policy_scored(variant: dict[str, Any]) -> bool:
    return ((variant.get("settings") or {}).get("arm_options") or {}).get("score") == SETUP_POLICY


def _check_policies(config: dict[str, Any]) -> None:
    """The policy dimension: every policy a setup runs is usable by every mechanism asked to
    rank by it; the policy grid and the ratio sweep name known arms; a ratio goes to
    policy-driven arms only (a self-evicting baseline takes a token budget)."""
    from baselines.paged_eviction.arm import POLICY_SCORES
    from vtoken.plugin.adapter import adapter_class

    trial, variants, c_ref = config["trial"], config["arm_variants"], config["sla"]["c_ref"]
    sweep, presses = config["ratio_sweep"], config["kvpress"]
    named = [("trial.policies", trial["policies"]), ("ratio_sweep.policies", sweep["policies"]),
             ("kvpress.presses", presses["presses"])]
    for key, policies in named + [("ruler.policies", config["ruler"]["policies"] or [])]:
        for policy in policies:
            try:
                check_policy(policy)
            except ValueError as err:
                _error(key, str(err))
    scored = [name for name, v in variants.items() if _policy_scored(v)]
    for name in scored:
        if variants[name]["arm"] != POLICY_SCORED_ARM:
            _error(f"arm_variants.{name}.settings.arm_options.score",
                   f"{SETUP_POLICY!r} ranks {POLICY_SCORED_ARM}'s mechanism by the setup's policy; "
                   f"{variants[name]['arm']!r} scores by its own rule")
    for key, policies in (("trial.policies", trial["policies"]),
                          ("ratio_sweep.policies", sweep["policies"] if sweep["ratios"] else [])):
        for policy in policies:
            if scored and policy not in POLICY_SCORES:
                _error(key, f"{policy!r}: {POLICY_SCORED_ARM}'s mechanism (variants {scored}) cannot rank by it "
                            f"(per-token keep scores exist for {list(POLICY_SCORES)})")
    known = set(config["arms"]) | set(variants)
    if len(trial["policies"]) > 1:
        overrides = config["policy_grid"].get("overrides") or {}
        for policy in overrides:  # one not run is kept (a profile merges the default's overrides)
            if policy == trial["policies"][0]:
                _error(f"policy_grid.overrides.{policy}", f"{policy!r} is the first of trial.policies "
                                                          f"{trial['policies']}: it runs the main grid, not an override")
            try:
                check_policy(policy)
            except ValueError as err:
                _error(f"policy_grid.overrides.{policy}", str(err))
        grids = [("policy_grid", config["policy_grid"])] + [(f"policy_grid.overrides.{p}", g)
                                                             for p, g in overrides.items() if p in trial["policies"]]
        for key, grid_ in grids:
            _check_policy_grid(config, key, grid_, known, c_ref)
    if presses["presses"]:
        if presses["workload"] not in config["workloads"]:
            _error("kvpress.workload", f"{presses['workload']!r} is not one of workloads")
        for arm in presses["arms"]:
            base = variants[arm]["arm"] if arm in variants else arm
            if arm not in known or (adapter_class(base).evicts and not adapter_class(base).takes_policy):
                _error("kvpress.arms", f"{arm!r}: a kvpress press drives the policy-driven arms of this config "
                                       f"(full, naive, holefill, vtoken and their variants), not {base!r}")
            if _policy_scored(variants.get(arm, {})):
                _error("kvpress.arms", f"{arm!r} ranks {POLICY_SCORED_ARM}'s mechanism by the setup's policy, which "
                                       "has no per-token keep score for a kvpress press")
    if sweep["ratios"]:
        if sweep["workload"] not in config["workloads"]:
            _error("ratio_sweep.workload", f"{sweep['workload']!r} is not one of workloads")
        for arm in sweep["arms"]:
            if arm not in known:
                _error("ratio_sweep.arms", f"{arm!r} is not an arm or variant of this config {sorted(known)}")
            base = variants[arm]["arm"] if arm in variants else arm
            if adapter_class(base).evicts and not adapter_class(base).takes_policy:
                _error("ratio_sweep.arms", f"{arm!r} ({base}) takes a token budget, not a ratio: the ratio sweep runs "
                                           "the policy-driven arms (full, naive, holefill, vtoken and their variants)")


def _check_policy_grid(config, key: str, grid_: dict[str, Any], known: set[str], c_ref: int) -> None:
    """One further policy's grid (``policy_grid`` or one of its ``overrides``): known arms, the
    baseline among them and among the swept, C_ref on the grid."""
    if grid_["arms"] is not None:
        for arm in grid_["arms"]:
            if arm not in known:
                _error(f"{key}.arms", f"{arm!r} is not an arm or variant of this config {sorted(known)}")
        if config["baseline"] not in grid_["arms"]:
            _error(f"{key}.arms", f"{grid_['arms']} must hold the baseline {config['baseline']!r}")
    if grid_["swept_arms"] is not None:
        arms = grid_["arms"] if grid_["arms"] is not None else known
        for arm in grid_["swept_arms"]:
            if arm not in arms:
                _error(f"{key}.swept_arms", f"{arm!r} is not one of {key}.arms {grid_['arms']}")
        if config["baseline"] not in grid_["swept_arms"]:
            _error(f"{key}.swept_arms", f"{grid_['swept_arms']} must hold the baseline {config['baseline']!r}")
    if grid_["concurrency"] is not None and c_ref not in grid_["concurrency"]:
        _error(f"{key}.concurrency", f"{grid_['concurrency']} must contain sla.c_ref = {c_ref}")


def policy_grid(config: dict[str, Any], policy: str) -> dict[str, Any]:
    """The grid of a further policy's main setups: ``policy_grid``, or its override for ``policy``."""
    grid_ = config["policy_grid"]
    return (grid_.get("overrides") or {}).get(policy, grid_)


def _arm_settings(config: dict[str, Any], arms, point_settings=None, policy=None) -> dict[str, dict[str, Any]]:
    """--arm-settings of a setup: arm_settings of the arm, a variant's own settings and
    arm_settings entry, then the operating point's; arms without settings are left out. A
    variant ranked by the setup's policy (``arm_options.score: policy``) gets ``policy``."""
    variants, base_settings = config["arm_variants"], config["arm_settings"]
    out = {}
    for arm in arms:
        base = variants[arm]["arm"] if arm in variants else arm
        merged = dict(base_settings.get(base, {}))
        if arm in variants:
            merged |= variants[arm].get("settings", {}) | base_settings.get(arm, {})
        merged |= (point_settings or {}).get(arm, {})
        if (merged.get("arm_options") or {}).get("score") == SETUP_POLICY:
            merged["arm_options"] = merged["arm_options"] | {"score": policy}
        if merged:
            out[arm] = merged
    return out


def _presses(config: dict[str, Any]) -> list[int | None]:
    """The c_press of each pool (one None entry: a fixed pool)."""
    return config["pool"]["c_press"] or [None]


def _setup(config, model, workload, role, arms, concurrency, tag=None, point_settings=None,
           arm_concurrency=None, c_press=None, policy=None, **overrides) -> Setup:
    trial = config["trial"]
    policy = policy or trial["policies"][0]
    values = {k: trial[k] for k in ("block_size", "ratio", "theta_f", "budget")} | overrides
    tag = tag or {"main": "main", "block_size": "bs"}[role] + ("" if role == "main" else str(overrides[role]))
    variants = {a: config["arm_variants"][a]["arm"] for a in arms if a in config["arm_variants"]}
    return Setup(f"{model}.{workload}.{tag}", model, workload, role, policy, tuple(arms), tuple(concurrency),
                 arm_settings=_arm_settings(config, arms, point_settings, policy), variants=variants,
                 arm_concurrency=arm_concurrency or {},
                 own_c_arms=tuple(a for a in (arm_concurrency or {}) if "concurrency" in config["arm_variants"].get(a, {})),
                 c_press=c_press if c_press is not None else _presses(config)[0],
                 selected=bool(config["theta_f"]["values"]), **values)


def selection_variants(config: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The vToken variants of the held-out selection: name -> {theta_f, watermark}."""
    sel = config["theta_f"]
    return {f"vtoken_tf{tf:g}_wm{wm:g}": {"theta_f": tf, "watermark": wm}
            for tf in sel["values"] for wm in sel["watermark"]}


# The compaction frontier's named points besides the (θ_F, trigger) grid: the variants of the config
# that run vToken's other packing rules, each in the frontier setup when the config has it.
FRONTIER_NAMED = ("vtoken_pressure", "vtoken_eager")


def frontier_variants(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The vToken variants of the compaction frontier: name -> {theta_f, arm_options.trigger}
    (watermark: the selected one, or trial.watermark)."""
    front = config.get("compaction_frontier") or {}
    return {f"vtoken_tf{tf:g}_{trigger}": {"theta_f": tf, "arm_options": {"trigger": trigger}}
            for trigger in front.get("triggers", []) for tf in front.get("theta_f", [])}


def setups(config: dict[str, Any], root: str = ".") -> list[Setup]:
    """Every setup the config asks for, the selection first, then the main setups (module
    docstring)."""
    trial, models = config["trial"], list(config["models"])
    aa, c_ref = config["aa_control"], config["sla"]["c_ref"]
    out: list[Setup] = []
    sel = config["theta_f"]
    if sel["values"]:
        variants = selection_variants(config)
        out.append(Setup(f"{models[0]}.{sel['workload']}.select", models[0], sel["workload"], "select",
                         trial["policies"][0], (config["baseline"], *variants), tuple(sel["concurrency"]), trial["block_size"],
                         trial["ratio"], trial["theta_f"], budget=trial["budget"],
                         arm_settings=_arm_settings(config, [config["baseline"]], policy=trial["policies"][0]) | variants,
                         variants={name: "vtoken" for name in variants},
                         c_press=_presses(config)[0],
                         first_pair=trial["pairs"], pairs=sel["pairs"]))
    # Every variant of an arm the config runs (a profile of one arm runs none of the others');
    # a variant without settings of its own is a second engine of its arm: the A/A control only.
    variants = config["arm_variants"]
    main_arms = list(config["arms"]) + [v for v in variants if v != aa and variants[v]["arm"] in config["arms"]
                                        and variants[v].get("settings")] + ([aa] if aa else [])
    for p, policy in enumerate(trial["policies"]):
        pgrid = policy_grid(config, policy)
        arms = main_arms if p == 0 or pgrid["arms"] is None else list(pgrid["arms"])
        grid_c = trial["concurrency"] if p == 0 or pgrid["concurrency"] is None else pgrid["concurrency"]
        swept = config["swept_arms"] if p == 0 or pgrid["swept_arms"] is None else pgrid["swept_arms"]
        # A variant may name its own Cs (e.g. where the pool presses), else C_ref like the others.
        at_ref = {a: tuple(c for c in variants.get(a, {}).get("concurrency", (c_ref,)) if c in grid_c)
                  for a in arms if a not in swept}
        for i, press in enumerate(_presses(config)):
            name = slug(policy)
            role, tag = ("main", f"{name}.main") if i == 0 else ("pool", f"{name}.pool{press}")
            out += [_setup(config, m, w, role, arms, grid_c, tag=tag, arm_concurrency=at_ref, c_press=press,
                           policy=policy) for m in models for w in config["workloads"]]
    sweep = config["ratio_sweep"]
    out += [_setup(config, models[0], sweep["workload"], "ratio", sweep["arms"], sweep["concurrency"],
                   tag=f"{slug(policy)}.r{ratio:g}", policy=policy, ratio=ratio, budget=None)
            for policy in sweep["policies"] for ratio in sweep["ratios"]]
    presses = config["kvpress"]
    out += [_setup(config, models[0], presses["workload"], "kvpress", presses["arms"], presses["concurrency"],
                   tag=slug(press), policy=press) for press in presses["presses"]]
    points = config["operating_points"]
    for i, point in enumerate(points["points"], start=1):
        knob = {"budget": point["budget"]} if "budget" in point else {"ratio": point["ratio"]}
        out.append(_setup(config, models[0], points["workload"], "point", points["arms"], points["concurrency"],
                          tag=f"op{i}", point_settings=point["arm_settings"], **knob))
    sens = config["sensitivity"]
    out += [_setup(config, models[0], sens["workload"], "block_size", sens["arms"], sens["concurrency"],
                   block_size=value) for value in sens["block_size"] if value != trial["block_size"]]
    prefix = config["prefix_sharing"]
    out += [_setup(config, models[0], prefix["workload"], "prefix", prefix["arms"], (prefix["concurrency"],),
                   tag=f"prefix{d}", prefix_degree=d, prefix_tokens=prefix["prefix_tokens"])
            for d in prefix["degrees"]]
    front = frontier_variants(config)
    if front:  # the compaction frontier: the first policy, the main pairs, one vToken engine per point
        named = [v for v in FRONTIER_NAMED if v in variants]
        fs = _setup(config, models[0], config["compaction_frontier"]["workload"], "frontier",
                    [config["baseline"], *front, *named], config["compaction_frontier"]["concurrency"],
                    tag="frontier")
        out.append(replace(fs, arm_settings=fs.arm_settings | front,
                           variants=fs.variants | {name: "vtoken" for name in front}))
    return out + factorial_setups(config, root)


def factorial_setups(config: dict[str, Any], root: str = ".") -> list[Setup]:
    """The factorial (``vtoken.bench.grid.factorial``), teacher-forced: per scorer of each phase,
    Native and every mechanism x budget (decode: at ``factorial.concurrency`` on the main pairs'
    one-wave samples) or x kept fraction (prefill: the RULER documents, prompts whole, a closed
    loop at ``factorial.prefill.concurrency`` over ``factorial.prefill.num_requests`` per pair, the
    pressing rule's pool for them), each cell its mechanism's settings at its own budget (the block
    mechanism ranked by the scorer)."""
    f, models, variants = config["factorial"], list(config["models"]), config["arm_variants"]
    out = []
    for phase in factorial.PHASES:
        if not factorial.enabled(config, phase):
            continue
        role = factorial.PHASE_ROLES[phase]
        if phase == "decode":
            d = f["decode"]
            workload, cs, median = d["workload"], [f["concurrency"]], None
            extra = {"c_press": d["c_press"] or _presses(config)[0], "num_requests": d["num_requests"],
                     "pairs": d["pairs"]}
        else:
            p = f["prefill"]
            workload, cs = p["workload"], [p["concurrency"]]
            rows = manifest_rows(workload, root)
            median = float(np.median([r["prompt_tokens"] for r in rows]))
            longest = max(request_tokens(config, rows))
            extra = {"num_requests": p["num_requests"], "one_wave": False, "c_press": p["c_press"], "pairs": p["pairs"],
                     "engine": {"max_model_len": longest, "max_num_batched_tokens": longest,
                                "enable_chunked_prefill": False}}
        cells = factorial.cells(config, phase, median)
        for scorer in factorial.scorers(config, phase):
            base = _setup(config, models[0], workload, role, ["full"], cs, tag=f"{slug(scorer)}.{role}",
                          policy=scorer, ratio=None, budget=next(iter(cells.values()))[1])
            settings = _arm_settings(config, factorial.mechanisms(config, phase), policy=scorer)
            out.append(replace(base, arms=("full", *cells),
                               arm_settings={name: settings.get(m, {}) | {"budget": b} for name, (m, b) in cells.items()},
                               variants={name: variants[m]["arm"] if m in variants else m
                                         for name, (m, _) in cells.items()},
                               factors=factorial.factors(config, phase, median), forcing=factorial.FORCING[phase],
                               **extra))
    return out


def trial_workers(config: dict[str, Any], cores: int) -> int:
    """Trial processes per trials job (``vtoken.bench.harness.workers``): ``trial.workers``
    capped at the job's cores, each running its own range of pairs at one thread per core; one
    on a GPU (each worker's engine would take the device's memory)."""
    return 1 if config["device"] == "cuda" else min(config["trial"].get("workers", 1), cores)


def engine_overrides(config: dict[str, Any], setup: Setup) -> dict[str, Any]:
    """The setup's vLLM engine arguments: the trial's, plus for a prefix setup the prefix cache
    on and room for the shared document in ``max_model_len``."""
    engine = dict(config["trial"]["engine"]) | setup.engine
    if setup.prefix_degree is not None:
        from vtoken.engine_args import CPU_DEFAULTS

        engine["max_model_len"] = engine.get("max_model_len", CPU_DEFAULTS["max_model_len"]) + setup.prefix_tokens
        engine["enable_prefix_caching"] = True
    return engine


def press_pool(request_tokens, block_size: int, c_press: int) -> int:
    """The pressing rule: blocks that hold ``c_press`` requests of the manifest's longest
    request (prompt + output contract) with no eviction, plus vLLM's null block."""
    return c_press * -(-max(request_tokens) // block_size) + 1


def press_demand(prompt_tokens, output_tokens: int, block_size: int, budget: int) -> dict[str, int]:
    """Replay of one wave of requests (the rule's arithmetic, no engine): blocks with no
    eviction (``no_eviction``: sum of ceil((p + k) / B)) and with every request packed to a
    budget of T tokens plus one partly filled tail block (``packed``: sum of
    ceil(min(p + k, T) / B) + 1)."""
    full = sum(-(-(p + output_tokens) // block_size) for p in prompt_tokens)
    packed = sum(-(-min(p + output_tokens, budget) // block_size) + 1 for p in prompt_tokens)
    return {"no_eviction": full, "packed": packed}


def manifest_rows(workload: str, root: str = ".") -> list[dict[str, Any]]:
    """The rows of a workload's manifest (``data/workloads/<workload>.jsonl``)."""
    path = Path(root) / MANIFEST_DIR / f"{workload}.jsonl"
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def request_tokens(config: dict[str, Any], rows: list[dict[str, Any]]) -> list[int]:
    """Each manifest row's prompt plus its output contract, capped at ``trial.max_tokens``."""
    cap = config["trial"]["max_tokens"]
    return [r["prompt_tokens"] + (min(r["max_tokens"], cap) if cap else r["max_tokens"]) for r in rows]


def pool_blocks(config: dict[str, Any], setup: Setup, root: str = ".") -> int | None:
    """The setup's pool in blocks of its block size: ``pool.num_gpu_blocks``, or the pressing
    rule at the setup's ``c_press`` on its manifest (``press_pool``); another block size
    keeps the same usable tokens (the null block is one block of each size)."""
    trial, pool = config["trial"], config["pool"]
    own = setup.role in factorial.PHASE_ROLES.values() and setup.c_press is not None  # factorial.*.c_press
    if pool["num_gpu_blocks"] is not None and not own:
        blocks = pool["num_gpu_blocks"]
    elif setup.c_press is None:
        return None
    else:
        totals = request_tokens(config, manifest_rows(setup.workload, root))
        blocks = press_pool(totals, trial["block_size"], setup.c_press)
        if setup.prefix_degree is not None:  # + the shared documents of c_press requests, each stored once
            groups = -(-setup.c_press // setup.prefix_degree)
            blocks += groups * -(-setup.prefix_tokens // trial["block_size"])
    usable = (blocks - 1) * trial["block_size"]
    return -(-usable // setup.block_size) + 1


# Setups whose swept arms are compared on capacity (Fig. 9, the claims table): the grid check
# (``censoring``) and the capacity search (``trial.capacity_search``) cover them.
CAPACITY_ROLES = ("main", "pool")


def searches_capacity(config: dict[str, Any], setup: Setup) -> bool:
    """Whether the setup's trials run the capacity search (``RunConfig.capacity_search``): with
    ``trial.capacity_search``, in a main or pool setup whose grid of >= 2 C some arm runs whole."""
    return (bool(config["trial"].get("capacity_search")) and setup.role in CAPACITY_ROLES
            and len(setup.concurrency) >= 2 and any(a not in setup.arm_concurrency for a in setup.arms))


def trial_args(config: dict[str, Any], setup: Setup, raw_dir: str, processed_dir: str | None = None) -> list[str]:
    """Arguments of ``python -m vtoken.bench trial`` for one setup (``processed_dir``: where
    the held-out selection is, for setups that read it)."""
    trial = config["trial"]
    args = to_args({
        "manifest": f"{MANIFEST_DIR}/{setup.workload}.jsonl", "arms": setup.arms,
        "pairs": setup.pairs or trial["pairs"], "first_pair": setup.first_pair, "seed": trial["seed"],
        "concurrency": setup.concurrency, "policy": setup.policy,
        "ratio": setup.ratio if setup.budget is None else None, "budget": setup.budget,
        "block_size": setup.block_size,
        "vtoken": {"theta_f": setup.theta_f, "watermark": trial["watermark"], "admission": trial["admission"]},
        "arm_settings": setup.arm_settings, "arm_variants": setup.variants,
        "arm_concurrency": setup.arm_concurrency, "engine": engine_overrides(config, setup),
        "device": config["device"], "warmup": trial["warmup"], "setup": setup.name,
        "model_dir": config["models"][setup.model], "sharegpt_dir": config["sharegpt_dir"], "raw_root": raw_dir,
        "one_wave": trial["one_wave"] if setup.one_wave is None else setup.one_wave,
        "capacity_search": searches_capacity(config, setup),
        "num_requests": setup.num_requests or trial["num_requests"], "max_tokens": trial["max_tokens"],
        "num_gpu_blocks": pool_blocks(config, setup),
        "prefix_degree": setup.prefix_degree,
        "prefix_tokens": setup.prefix_tokens if setup.prefix_degree is not None else None,
        "forcing": setup.forcing,
    })
    if setup.selected and setup.role != "select":
        args.append(f"--vtoken-file={processed_dir or '.'}/{SELECTED}")
    return args


def decode_cost_args(config: dict[str, Any]) -> list[str]:
    """Arguments of ``python -m benchmarks.decode_step`` for the end-to-end indirection cost."""
    d, trial = config["decode_cost"], config["trial"]
    return ["--arms=stock,full", "--distinct-prompts", f"--model={config['models'][list(config['models'])[0]]}",
            f"--sharegpt={config['sharegpt_dir']}", f"--num-requests={d['num_requests']}",
            f"--prompt-tokens={d['prompt_tokens']}", f"--output-tokens={d['output_tokens']}",
            f"--repeats={d['repeats']}", f"--dtype={trial['engine']['dtype']}"]
