"""The experimental grid of one pipeline config: the ``Setup`` record and every setup in run
order, built in one place for ``workflows/rules/common.smk`` and ``benchmarks/trial_time.py``.

A config (``workflows/config/*.yaml``, validated by ``workflows/schemas/config.schema.yaml``
first) names the arms, the trial settings and the sweeps; ``vtoken.bench.grid.validate.check``
applies the cross-key rules a JSON schema cannot state (each error names the key) and
``setups(config)`` returns the setups in run order:

- **select**: θ_F and watermark chosen on held-out request samples (``theta_f``): Naive-Evict
  and one vToken variant per (θ_F, watermark) at ``theta_f.concurrency``, on the pairs after
  the main setups' (``trial.pairs`` .. ``trial.pairs + theta_f.pairs - 1``: rows of the
  manifest no other setup runs); every other setup reads the selection
  (``vtoken.bench.grid.job_args.SELECTED``);
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
A sweep value equal to the main setup's reuses the main setup. The ratio, kvpress, point, prefix
and frontier roles run only where their section has ``enabled: true`` (``SWITCHED``).

Each setup's pool is ``vtoken.bench.grid.pool``'s (``pool_blocks``), its job's command line and
engine settings ``vtoken.bench.grid.job_args``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from vtoken.bench.grid import factorial
from vtoken.bench.grid.pool import manifest_rows, request_tokens
from vtoken.policies.kvpress_catalog import slug


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


def budget_partners(config: dict[str, Any]) -> dict[str, str]:
    """{variant: the arm or variant it is another budget of} (``arm_variants.<name>.budget_of``):
    the families the analysis compares at interpolated equal live tokens
    (``vtoken.bench.analysis.equal_live``)."""
    return {name: v["budget_of"] for name, v in config["arm_variants"].items() if v.get("budget_of")}


# A variant's ``arm_options.score`` that takes the setup's policy (PagedEviction's mechanism
# ranked by the policy's own per-token state: baselines/paged_eviction/engine.py).
SETUP_POLICY = "policy"


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


# The switchable sections: each plans its setups only with ``enabled: true`` and then needs every
# list named here non-empty (``vtoken.bench.grid.validate.check`` names the empty key).
SWITCHED = {"ratio_sweep": ("policies", "ratios"), "kvpress": ("presses",), "prefix_sharing": ("degrees",),
            "operating_points": ("points",), "compaction_frontier": ("theta_f", "triggers")}


def switched_on(config: dict[str, Any], section: str) -> bool:
    """Whether the config runs ``section`` of ``SWITCHED`` (its ``enabled``; no key: off)."""
    return bool((config.get(section) or {}).get("enabled", False))


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
    if not switched_on(config, "compaction_frontier"):
        return {}
    front = config["compaction_frontier"]
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
    if switched_on(config, "ratio_sweep"):
        sweep = config["ratio_sweep"]
        out += [_setup(config, models[0], sweep["workload"], "ratio", sweep["arms"], sweep["concurrency"],
                       tag=f"{slug(policy)}.r{ratio:g}", policy=policy, ratio=ratio, budget=None)
                for policy in sweep["policies"] for ratio in sweep["ratios"]]
    if switched_on(config, "kvpress"):
        presses = config["kvpress"]
        out += [_setup(config, models[0], presses["workload"], "kvpress", presses["arms"], presses["concurrency"],
                       tag=slug(press), policy=press) for press in presses["presses"]]
    if switched_on(config, "operating_points"):
        points = config["operating_points"]
        for i, point in enumerate(points["points"], start=1):
            knob = {"budget": point["budget"]} if "budget" in point else {"ratio": point["ratio"]}
            out.append(_setup(config, models[0], points["workload"], "point", points["arms"], points["concurrency"],
                              tag=f"op{i}", point_settings=point["arm_settings"], **knob))
    sens = config["sensitivity"]
    out += [_setup(config, models[0], sens["workload"], "block_size", sens["arms"], sens["concurrency"],
                   block_size=value) for value in sens["block_size"] if value != trial["block_size"]]
    if switched_on(config, "prefix_sharing"):
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
