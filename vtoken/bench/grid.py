"""The experimental grid of one pipeline config: every setup and the trial-runner arguments
of each, built in one place for ``workflows/rules/common.smk`` and ``benchmarks/trial_time.py``.

A config (``workflows/config/*.yaml``, validated by ``workflows/schemas/config.schema.yaml``
first) names the arms, the trial settings and the sweeps; ``check(config)`` applies the
cross-key rules a JSON schema cannot state (each error names the key) and ``setups(config)``
returns the setups in run order:

- **main**: every model x workload, every arm plus the A/A control (``aa_control``), over
  ``trial.concurrency``;
- **point**: one memory-quality operating point each (``operating_points``), on the first model;
- **block_size**: the block-size sensitivity (``sensitivity``), the pool kept in tokens;
- **theta_f**: the θ_F sweep on every workload (``theta_f``).
A sweep value equal to the main setup's reuses the main setup.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

# The implemented arms (the schema's enum); a variant name must not shadow one.
ARMS = ("full", "naive", "holefill", "vtoken", "paged_eviction", "zipage", "diffkv")
MANIFEST_DIR = "data/workloads"


@dataclass(frozen=True)
class Setup:
    """One setup: a model and workload run by ``arms`` over ``concurrency``.

    ``arm_settings`` are the per-arm vtoken settings (``--arm-vtoken``), ``variants`` the
    arm variants among ``arms`` (``--arm-variants``)."""

    name: str
    model: str
    workload: str
    role: str
    arms: tuple[str, ...]
    concurrency: tuple[int, ...]
    block_size: int
    ratio: float
    theta_f: float
    arm_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The setup as one row of the processed ``setups`` table."""
        return {"setup": self.name, "model": self.model, "workload": self.workload, "role": self.role,
                "arms": ",".join(self.arms), "concurrency": ",".join(map(str, self.concurrency)),
                "arm_settings": json.dumps(self.arm_settings, sort_keys=True), "block_size": self.block_size,
                "ratio": self.ratio, "theta_f": self.theta_f}


def _error(key: str, message: str) -> None:
    raise ValueError(f"config key {key!r}: {message}")


def check(config: dict[str, Any], root: str = ".") -> None:
    """The cross-key rules of a schema-valid config; raises ValueError naming the key."""
    trial, variants, aa = config["trial"], config["arm_variants"], config["aa_control"]
    points = config["operating_points"]
    for name in config["workloads"]:
        if not os.path.exists(os.path.join(root, MANIFEST_DIR, f"{name}.jsonl")):
            _error("workloads", f"no manifest {MANIFEST_DIR}/{name}.jsonl")
    if config["baseline"] not in config["arms"]:
        _error("baseline", f"{config['baseline']!r} is not one of arms {config['arms']}")
    if config["sla"]["c_ref"] not in trial["concurrency"]:
        _error("sla.c_ref", f"{config['sla']['c_ref']} is not on trial.concurrency {trial['concurrency']}")
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
    known = set(config["arms"]) | set(variants) | set(points["arms"])
    named = [("arm_settings", config["arm_settings"])] + [
        (f"operating_points.points[{i}].arm_settings", p["arm_settings"]) for i, p in enumerate(points["points"])]
    for key, settings in named:
        for arm in settings:
            if arm not in known:
                _error(f"{key}.{arm}", f"not an arm or variant of this config {sorted(known)}")
    if points["workload"] not in config["workloads"]:
        _error("operating_points.workload", f"{points['workload']!r} is not one of workloads (its main setup "
                                            "is a point)")
    for key in ("sensitivity.arms", "theta_f.arms"):
        arms = config[key.split(".")[0]]["arms"]
        if config["baseline"] not in arms or "vtoken" not in arms:
            _error(key, f"{arms} must hold the baseline and vtoken")
    if config["sensitivity"]["workload"] not in config["workloads"]:
        _error("sensitivity.workload", f"{config['sensitivity']['workload']!r} is not one of workloads")
    for arm, settings in config["arm_settings"].items():
        if {"arm", "metrics_path"} & set(settings):
            _error(f"arm_settings.{arm}", "arm and metrics_path are set by the runner")


def _arm_settings(config: dict[str, Any], arms, point_settings=None) -> dict[str, dict[str, Any]]:
    """--arm-vtoken of a setup: arm_settings of the arm, a variant's own settings and
    arm_settings entry, then the operating point's; arms without settings are left out."""
    variants, base_settings = config["arm_variants"], config["arm_settings"]
    out = {}
    for arm in arms:
        base = variants[arm]["arm"] if arm in variants else arm
        merged = dict(base_settings.get(base, {}))
        if arm in variants:
            merged |= variants[arm].get("settings", {}) | base_settings.get(arm, {})
        merged |= (point_settings or {}).get(arm, {})
        if merged:
            out[arm] = merged
    return out


def _setup(config, model, workload, role, arms, concurrency, tag=None, point_settings=None, **overrides) -> Setup:
    trial = config["trial"]
    values = {k: trial[k] for k in ("block_size", "ratio", "theta_f")} | overrides
    tag = tag or {"main": "main", "block_size": "bs", "theta_f": "tf"}[role] + (
        "" if role == "main" else str(overrides[role]))
    variants = {a: config["arm_variants"][a]["arm"] for a in arms if a in config["arm_variants"]}
    return Setup(f"{model}.{workload}.{tag}", model, workload, role, tuple(arms), tuple(concurrency),
                 arm_settings=_arm_settings(config, arms, point_settings), variants=variants, **values)


def setups(config: dict[str, Any]) -> list[Setup]:
    """Every setup the config asks for, main setups first (module docstring)."""
    trial, models = config["trial"], list(config["models"])
    aa = config["aa_control"]
    main_arms = list(config["arms"]) + ([aa] if aa else [])
    out = [_setup(config, m, w, "main", main_arms, trial["concurrency"]) for m in models for w in config["workloads"]]
    points = config["operating_points"]
    for i, point in enumerate(points["points"], start=1):
        out.append(_setup(config, models[0], points["workload"], "point", points["arms"], points["concurrency"],
                          tag=f"op{i}", point_settings=point["arm_settings"], ratio=point["ratio"]))
    sens = config["sensitivity"]
    out += [_setup(config, models[0], sens["workload"], "block_size", sens["arms"], sens["concurrency"],
                   block_size=value) for value in sens["block_size"] if value != trial["block_size"]]
    sweep = config["theta_f"]
    out += [_setup(config, models[0], w, "theta_f", sweep["arms"], sweep["concurrency"], theta_f=value)
            for w in config["workloads"] for value in sweep["values"] if value != trial["theta_f"]]
    return out


def pool_blocks(config: dict[str, Any], setup: Setup) -> int | None:
    """The fixed pool in blocks of the setup's block size (the same pool in tokens)."""
    trial = config["trial"]
    if trial["num_gpu_blocks"] is None:
        return None
    return -(-trial["num_gpu_blocks"] * trial["block_size"] // setup.block_size)


def trial_args(config: dict[str, Any], setup: Setup, raw_dir: str) -> list[str]:
    """Arguments of ``python -m vtoken.bench trial`` for one setup."""
    trial = config["trial"]
    args = [
        f"{MANIFEST_DIR}/{setup.workload}.jsonl",
        f"--arms={','.join(setup.arms)}",
        f"--pairs={trial['pairs']}",
        f"--seed={trial['seed']}",
        f"--concurrency={','.join(map(str, setup.concurrency))}",
        f"--policy={trial['policy']}",
        f"--ratio={setup.ratio}",
        f"--block-size={setup.block_size}",
        f"--vtoken={json.dumps({'theta_f': setup.theta_f, 'admission': trial['admission']})}",
        f"--arm-vtoken={json.dumps(setup.arm_settings, sort_keys=True)}",
        f"--arm-variants={json.dumps(setup.variants, sort_keys=True)}",
        f"--engine={json.dumps(trial['engine'], sort_keys=True)}",
        f"--warmup={trial['warmup']}",
        f"--setup={setup.name}",
        f"--model-dir={config['models'][setup.model]}",
        f"--sharegpt-dir={config['sharegpt_dir']}",
        f"--raw-root={raw_dir}",
    ]
    for key, flag in (("num_requests", "--num-requests"), ("max_tokens", "--max-tokens")):
        if trial[key] is not None:
            args.append(f"{flag}={trial[key]}")
    blocks = pool_blocks(config, setup)
    if blocks is not None:
        args.append(f"--num-gpu-blocks={blocks}")
    return args


def decode_cost_args(config: dict[str, Any]) -> list[str]:
    """Arguments of ``python -m benchmarks.decode_step`` for the end-to-end indirection cost."""
    d, trial = config["decode_cost"], config["trial"]
    return ["--arms=stock,full", "--distinct-prompts", f"--model={config['models'][list(config['models'])[0]]}",
            f"--sharegpt={config['sharegpt_dir']}", f"--num-requests={d['num_requests']}",
            f"--prompt-tokens={d['prompt_tokens']}", f"--output-tokens={d['output_tokens']}",
            f"--repeats={d['repeats']}", f"--dtype={trial['engine'].get('dtype', 'auto')}"]
