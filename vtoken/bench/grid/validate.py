"""The cross-key rules of a pipeline config (``check``): what the JSON schema
(``workflows/schemas/config.schema.yaml``) cannot state, applied after it and before any job
runs (``workflows/rules/common.smk``, ``vtoken.bench.grid.profile``): every arm and policy the
config names is registered, the keys that refer to one another agree, the manifests exist;
each error is a ValueError naming the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from vtoken.arms.registry import arm_names
from vtoken.bench.grid import factorial
from vtoken.bench.grid.pool import MANIFEST_DIR, manifest_rows
from vtoken.bench.grid.setups import SETUP_POLICY, SWITCHED, budget_partners, switched_on
from vtoken.policies.registry import check_policy

# The registered arms (every config value the schema calls an arm is one); a variant name must not shadow one.
ARMS = tuple(arm_names())
SCHEMA = "workflows/schemas/config.schema.yaml"
# The schema's definitions whose values a registry holds (the schema states their shape only, so a
# new arm or policy is listed nowhere): every key that references one is checked by ``check``.
REGISTERED = {"#/$defs/arm": "arm", "#/$defs/policy": "policy"}
# The arm whose mechanism can rank by a policy's scores.
POLICY_SCORED_ARM = "paged_eviction"


def _error(key: str, message: str) -> None:
    raise ValueError(f"config key {key!r}: {message}")


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
    for section, keys in SWITCHED.items():
        for key in keys if switched_on(config, section) else ():
            if not config[section][key]:
                _error(f"{section}.{key}", f"is empty while {section}.enabled is true: give it entries, or set "
                                           f"{section}.enabled: false")
    trial, variants, aa = config["trial"], config["arm_variants"], config["aa_control"]
    points = config["operating_points"]
    point_list = points["points"] if switched_on(config, "operating_points") else []
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
        (f"operating_points.points[{i}].arm_settings", p["arm_settings"]) for i, p in enumerate(point_list)]
    for key, settings in named:
        for arm in settings:
            if arm not in known:
                _error(f"{key}.{arm}", f"not an arm or variant of this config {sorted(known)}")
    if points["workload"] not in config["workloads"]:
        _error("operating_points.workload", f"{points['workload']!r} is not one of workloads (its main setup "
                                            "is a point)")
    for i, point in enumerate(point_list):
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
    for name, variant in config["arm_variants"].items():  # a budget calibrated to another arm's live tokens
        if variant.get("live_of") is not None and variant["live_of"] not in known:
            _error(f"arm_variants.{name}.live_of", f"{variant['live_of']!r} is not an arm or variant of this config "
                                                   f"{sorted(known)}")
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
    if switched_on(config, "compaction_frontier"):
        if front["workload"] not in config["workloads"]:
            _error("compaction_frontier.workload", f"{front['workload']!r} is not one of workloads")
        if "vtoken" not in config["arms"]:
            _error("compaction_frontier", f"runs vToken's packing rules: 'vtoken' must be one of arms {config['arms']}")
    prefix = config["prefix_sharing"]
    if switched_on(config, "prefix_sharing"):
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
    sweep_on, presses_on = switched_on(config, "ratio_sweep"), switched_on(config, "kvpress")
    named = [("trial.policies", trial["policies"]), ("ratio_sweep.policies", sweep["policies"] if sweep_on else []),
             ("kvpress.presses", presses["presses"] if presses_on else [])]
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
                          ("ratio_sweep.policies", sweep["policies"] if sweep_on else [])):
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
    if presses_on:
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
    if sweep_on:
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
