"""``RunConfig``: what one ``python -m vtoken.bench trial`` run does, validated up front.

Every field is checked at construction and every error names the command-line flag
(``--arms=...: ...``), so a bad argument fails before any engine starts; each arm's vtoken
settings (``RunConfig.vtoken_dict``) are checked against ``PluginConfig`` here too. What else
the fields become lives beside this module, one concept each, as functions of a ``RunConfig``:
``arm_settings`` (each arm's policy and ``vllm.LLM`` arguments), ``setup_name`` (the setup's
name), ``trial_requests`` (which requests a trial runs).
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from vtoken.arms.registry import arm_names
from vtoken.assets import MODEL_DIR, SHAREGPT_DIR
from vtoken.bench.raw.trials import pair_sample
from vtoken.engine_args import CPU_DEFAULTS
from vtoken.plugin.adapter import adapter_class, check_config
from vtoken.plugin.config import PluginConfig

ARMS = tuple(arm_names())


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def flag(help: str = "", *, default: Any = MISSING, factory: Any = MISSING, **cli: Any) -> Any:
    """A ``RunConfig`` field, declared with its command-line flag ``--<field-name>``
    (``vtoken.bench.harness.run_flags`` builds the parser and renders a command line from it).

    Args:
        help: the flag's help.
        default, factory: the field's default (or default factory); none: required.
        cli: where the command line differs: ``short`` (e.g. ``-C``), ``name`` (another
            flag name), ``choices``, ``cli_default`` (its default on the command line).
    """
    return field(default=default, default_factory=factory, metadata={"help": help, **cli})


# PluginConfig fields the runner sets itself (per arm, or per engine).
OWN_VTOKEN_KEYS = ("arm", "policy", "ratio", "budget", "metrics_path")
# ... of which a per-arm setting (``arm_settings``) may still set the eviction ones.
NOT_PER_ARM_KEYS = ("arm", "metrics_path")


@dataclass(frozen=True)
class RunConfig:
    """A run: one workload manifest, arms, pairs and the concurrency grid.

    Args:
        manifest: workload manifest (``data/workloads/<name>-s<seed>.jsonl``).
        arms: arms to run, names unique: each an implemented arm
            (``vtoken.arms.registry.arm_names()``) or a variant named in ``arm_variants``.
        pairs: repetitions; pair indices are ``first_pair .. first_pair + pairs - 1``.
        seed: base seed; pair p uses ``trials.pair_seed(seed, p)``; also the engine seed.
        concurrency: grid of C (closed loop at C, or the in-flight cap of Poisson arrivals).
        policy, ratio, budget: eviction settings shared by every policy-driven arm (``full``
            gets none); exactly one of ratio / budget. Self-evicting baselines
            (their engine side is ``SelfEvicting``) get no policy and no ratio, only ``budget`` if given.
        vtoken: further ``PluginConfig`` settings shared by every arm (theta_f, watermark,
            admission, score_*, policy_every).
        arm_settings: per-arm ``PluginConfig`` settings applied over the shared ones, keyed by
            arm, e.g. ``{"zipage": {"budget": 128}}``; a null value unsets a setting.
        num_gpu_blocks: pool in blocks (``num_gpu_blocks_override``, null block included);
            None: vLLM sizes it from ``kv_cache_memory_bytes``.
        block_size: tokens per block (default: ``vtoken.engine_args.CPU_DEFAULTS``).
        max_num_batched_tokens, enable_chunked_prefill: scheduler limits (None: vLLM's).
        rate: Poisson arrivals at this many requests/s (None: closed loop).
        num_requests: requests per pair: pair p runs its own sample of this many manifest
            rows (``trials.pair_sample``: disjoint across pairs, equal across the arms and
            concurrencies of a pair). None: every pair runs the whole manifest -- one sample
            shared by all pairs, so intervals measure only machine jitter (logged).
        max_tokens: cap every request's output contract (smoke runs).
        temperature: sampling temperature (0: greedy).
        warmup: warm-up requests per engine (cut short, excluded from every trial).
        setup: setup name in trial ids (None: derived from the workload and settings).
        model_dir, sharegpt_dir, raw_root: where the model, ShareGPT and raw output live.
        engine: further ``vllm.EngineArgs`` overrides, the same for every arm.
        arm_variants: variant name -> the implemented arm it runs, e.g. ``{"naive_aa":
            "naive"}`` (the A/A control: a second engine of the same arm and settings) or
            ``{"paged_eviction_b192": "paged_eviction"}`` with its own ``arm_settings`` entry.
            A variant gets its own engine; it must not shadow an arm name.
        arm_concurrency: arm -> the C of ``concurrency`` it runs (arms not named run every C),
            e.g. the non-swept arms of a setup only at C_ref.
        one_wave: the trial at C runs the first C rows of the pair's sample, all submitted at
            once (every request in flight from the start: the capacity experiment's "C
            co-resident requests"); needs ``num_requests`` >= the largest C. False: every
            trial runs the whole sample in a closed loop at C.
        capacity_search: after each pair's trials of the fixed grid, search each swept arm's
            capacity in that pair (``search_arms``; ``vtoken.bench.harness.capacity_search``), one
            trial per probe at the C the search picks, below the arm's sure failure on the pair's
            sample and at most ``num_requests``. Needs ``one_wave``, ``num_gpu_blocks`` and a grid of
            >= 2 C that some arm runs whole; not with ``forcing`` or ``prefix_degree``. Trials run
            the same with or without it (a resumed run may switch it: ``RESUMABLE``).
        timing_alone: each fixed-grid trial runs with no other trial of the setup running beside
            it (the workers of the setup wait for each other: ``harness.timing_gate``); capacity
            probes run beside each other. What a trial runs is the same either way (``RESUMABLE``).
        interleave: the fixed-grid trials of each paired set (one pair and C) run side by side in
            one process, one engine step of each arm in turn, each trial's times read on its own
            clock -- the time of its own steps (``harness.trial_clock.OwnClock``) -- so that every
            arm of the set is timed on the same stretch of the machine. What a trial decodes is
            the same either way; its times are not (not ``RESUMABLE``). Not with ``forcing``
            (every arm reads Native's finished trial).
        prefix_degree, prefix_tokens: shared prefixes (``workloads.shared_prefix``): request i of
            a trial gets its pair's shared document ``i // prefix_degree`` (a system message of
            at most ``prefix_tokens`` tokens) in front of its prompt; None: no shared prefix.
            Prefix caching is the engine's own setting (``--engine '{"enable_prefix_caching": true}'``).
        forcing: teacher forcing (``vtoken.plugin.forcing``). ``native``: in every paired set
            Native (``full``) runs first, greedy, recording its top ``forcing_topk`` tokens at each
            step; every other arm then decodes Native's continuation of each request, recording
            its log-probabilities of Native's top-k ids. ``reference``: every arm, Native included
            (still first), decodes the workload's reference continuation of each request (a RULER
            answer, the ShareGPT data's reply; ``workloads.references``). None: free-running.
        forcing_topk: the reference's most probable tokens recorded per step (the KL vs Native is
            taken over them, the rest of the vocabulary lumped into one outcome).
        device: ``cpu`` or ``cuda``, the device every engine runs on (its defaults:
            ``vtoken.engine_args``); None: vLLM's platform. A device the installed vLLM does not
            run on fails before any engine starts.
    """

    manifest: Path = flag("workload manifest, e.g. data/workloads/sharegpt-s0.jsonl")
    arms: tuple[str, ...] = flag("comma-separated, e.g. naive,vtoken")
    pairs: int = flag("repetitions (paired sets); default 5", default=5)
    first_pair: int = flag(default=0)
    seed: int = flag("base seed (pair seeds, arm order, engine seed)", default=0)
    concurrency: tuple[int, ...] = flag("grid of C, e.g. 2,4,8; default 8", default=(8,), short="-C")
    policy: str | None = flag(default="h2o")
    ratio: float | None = flag("eviction ratio (default 0.5 unless --budget)", default=0.5, cli_default=None)
    budget: int | None = flag("token budget instead of --ratio", default=None)
    vtoken: dict[str, Any] = flag("further PluginConfig settings, JSON", factory=dict)
    num_gpu_blocks: int | None = flag("KV pool in blocks (default: vLLM's)", default=None)
    block_size: int = flag(default=CPU_DEFAULTS["block_size"])
    max_num_batched_tokens: int | None = flag(default=None)
    enable_chunked_prefill: bool | None = flag("default: vLLM's", default=None, name="--chunked-prefill")
    rate: float | None = flag("Poisson arrivals (req/s), capped at C in flight", default=None)
    num_requests: int | None = flag("requests per pair: pair p runs its own sample of N manifest rows, disjoint "
                                    "across pairs (default: every pair runs the whole manifest)", default=None)
    max_tokens: int | None = flag("cap every output contract", default=None)
    temperature: float = flag(default=0.0)
    warmup: int = flag("warm-up requests per engine", default=2)
    setup: str | None = flag("setup name in trial ids (default: derived)", default=None)
    model_dir: Path = flag(default=MODEL_DIR)
    sharegpt_dir: Path = flag(default=SHAREGPT_DIR)
    raw_root: Path = flag(default=Path("data/raw"))
    engine: dict[str, Any] = flag("further vllm.EngineArgs overrides, JSON", factory=dict)
    arm_settings: dict[str, dict[str, Any]] = flag(
        'per-arm PluginConfig settings over the shared ones, JSON keyed by arm, e.g. \'{"zipage": {"budget": 128}}\'',
        factory=dict)
    arm_variants: dict[str, str] = flag(
        'arms of their own that run an implemented arm, JSON variant -> arm, e.g. the A/A control '
        '\'{"naive_aa": "naive"}\' (own engine; settings via --arm-settings)', factory=dict)
    arm_concurrency: dict[str, tuple[int, ...]] = flag(
        'arm -> the C it runs, JSON, e.g. \'{"zipage": [4]}\' (default: every arm runs every C)', factory=dict)
    one_wave: bool = flag("the trial at C runs C requests of the pair's sample, all submitted at once", default=False)
    capacity_search: bool = flag("after each pair's fixed-C trials, search each swept arm's capacity (the arms that "
                                 "run every C), one trial per probe", default=False)
    timing_alone: bool = flag("run each fixed-grid trial with no other trial of the setup beside it (the "
                              "setup's workers wait for each other); capacity probes still run beside", default=False)
    interleave: bool = flag("run the arms of each paired set of the fixed grid interleaved, one engine step of "
                            "each in turn, each trial timed on its own clock (its own steps)", default=False)
    device: str | None = flag("the device every engine runs on (default: vLLM's platform; another one is an error)",
                              default=None, choices=("cpu", "cuda"))
    prefix_degree: int | None = flag("requests per shared system-prompt document (Table 1's sharing degree; "
                                     "default: none)", default=None)
    prefix_tokens: int = flag("tokens of each shared document (256)", default=256)
    forcing: str | None = flag("teacher forcing: 'native' (every arm decodes Native's greedy continuation) or "
                               "'reference' (every arm decodes the workload's reference continuation); default: "
                               "free-running", default=None, choices=("native", "reference"))
    forcing_topk: int = flag("the reference's top-k ids recorded per forced step (32)", default=32)

    def __post_init__(self) -> None:
        if not self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError(f"--arms={','.join(self.arms)!r}: give one or more distinct arms")
        self._check_arm_variants()
        for arm in self.arms:
            if arm not in ARMS and arm not in self.arm_variants:
                raise ValueError(f"--arms: {arm!r} is not one of {list(ARMS)} "
                                 f"nor a variant of --arm-variants {sorted(self.arm_variants)}")
        for name, low in (("pairs", 1), ("first_pair", 0), ("seed", 0), ("block_size", 1), ("warmup", 0)):
            _check_int(name, getattr(self, name), low)
        for name in ("num_gpu_blocks", "max_num_batched_tokens", "num_requests", "max_tokens"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        if not self.concurrency:
            raise ValueError("--concurrency: give at least one C")
        for c in self.concurrency:
            _check_int("concurrency", c, 1)
        self._check_arm_concurrency()
        if self.prefix_degree is not None:
            self.shared_prefix  # noqa: B018 -- validates both flags
        if self.device is not None:
            from vtoken.engine_args import resolve_device

            try:
                resolve_device(self.device)
            except ValueError as err:
                raise ValueError(f"--{err}") from None
        if self.one_wave and (self.num_requests is None or self.num_requests < max(self.concurrency)):
            raise ValueError(f"--one-wave: --num-requests={self.num_requests} must be >= the largest C "
                             f"{max(self.concurrency)} (the trial at C runs C rows of the pair's sample)")
        self._check_forcing()
        if self.interleave and self.forcing is not None:
            raise ValueError(f"--interleave: not with --forcing={self.forcing} (every arm decodes what Native's "
                             "finished trial of its paired set recorded)")
        self._check_capacity_search()
        if self.one_wave and self.rate is not None:
            raise ValueError("--one-wave: not with --rate (a wave is submitted at once)")
        if self.rate is not None and not (isinstance(self.rate, (int, float)) and math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"--rate={self.rate!r}: must be a finite number > 0 (requests/s)")
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise ValueError(f"--temperature={self.temperature!r}: must be >= 0")
        if self.setup is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.setup):
            raise ValueError(f"--setup={self.setup!r}: must match [A-Za-z0-9_.+-]+")
        own = sorted(set(self.vtoken) & set(OWN_VTOKEN_KEYS))
        if own:
            raise ValueError(f"--vtoken: keys {own} are set by the runner (--arms, --policy, --ratio, --budget, "
                             "--arm-settings)")
        self._check_arm_settings()
        for arm in self.arms:
            try:
                self.arm_configs[arm]
            except ValueError as err:
                raise ValueError(f"--policy/--ratio/--budget/--vtoken/--arm-settings for arm {arm!r}: {err}") from None
        if not Path(self.manifest).with_suffix(".jsonl").exists():
            raise ValueError(f"MANIFEST {str(self.manifest)!r}: no such workload manifest (see data/workloads/)")
        if not (Path(self.model_dir) / "config.json").exists():
            raise ValueError(f"--model-dir={str(self.model_dir)!r}: no model there; build it with `make assets`")
        self._check_pool()
        self._check_samples()

    def _check_forcing(self) -> None:
        from vtoken.plugin.forcing import MAX_TOPK

        if self.forcing is None:
            return
        if self.forcing not in ("native", "reference"):
            raise ValueError(f"--forcing={self.forcing!r}: allowed 'native', 'reference'")
        if "full" not in self.arms:
            raise ValueError(f"--forcing={self.forcing}: needs Native ('full') in --arms {list(self.arms)} (the "
                             "reference every arm is measured against)")
        if set(self.concurrency_of("full")) != set(self.concurrency):
            raise ValueError(f"--forcing={self.forcing}: Native must run every C of --concurrency (every arm's "
                             "trial reads Native's of the same paired set)")
        if self.temperature != 0:
            raise ValueError(f"--temperature={self.temperature}: teacher forcing compares with Native's greedy "
                             "distribution; use 0")
        _check_int("forcing_topk", self.forcing_topk, 1)
        if self.forcing_topk > MAX_TOPK:
            raise ValueError(f"--forcing-topk={self.forcing_topk}: at most {MAX_TOPK}")

    def _check_capacity_search(self) -> None:
        if not self.capacity_search:
            return
        why = ("--one-wave: a probe at C is one wave of C requests, the trial its sure-failure bound holds for"
               if not self.one_wave else
               "--num-gpu-blocks: the fixed pool the capacity is measured in" if self.num_gpu_blocks is None else None)
        if why:
            raise ValueError(f"--capacity-search: needs {why}")
        if self.forcing is not None:
            raise ValueError(f"--capacity-search: not with --forcing={self.forcing} (a forced trial reads Native's "
                             "trial of its paired set; a probe runs its arm alone)")
        if self.prefix_degree is not None:
            raise ValueError(f"--capacity-search: not with --prefix-degree={self.prefix_degree} (a shared document "
                             "is held once, so the per-request block floor bounds nothing)")
        if not self.search_arms:
            grid = ",".join(map(str, self.concurrency))
            raise ValueError(f"--capacity-search: searches the arms that run every C of a grid of >= 2 C (the swept "
                             f"arms, as processing's grid metrics); --concurrency={grid} with --arm-concurrency "
                             f"naming {sorted(self.arm_concurrency)} leaves none")

    @property
    def search_arms(self) -> tuple[str, ...]:
        """The arms whose capacity ``capacity_search`` searches: those that run every C of a grid
        of >= 2 C (``process.swept``'s swept arms), in ``arms`` order; () without the search."""
        if not self.capacity_search or len(self.concurrency) < 2:
            return ()
        return tuple(a for a in self.arms if set(self.concurrency_of(a)) == set(self.concurrency))

    @property
    def max_concurrency(self) -> int:
        """The most requests a trial of the run holds at once (the engines' ``max_num_seqs``): the
        grid's largest C, or with ``capacity_search`` ``num_requests`` (a probe's largest C)."""
        return max(max(self.concurrency), self.num_requests if self.capacity_search else 0)

    def _check_arm_variants(self) -> None:
        if not isinstance(self.arm_variants, dict):
            raise ValueError(f"--arm-variants={self.arm_variants!r}: must be a JSON object, variant -> arm")
        for name, base in self.arm_variants.items():
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name) or name in ARMS:
                raise ValueError(f"--arm-variants: variant name {name!r} must match [A-Za-z0-9_.+-]+ and not be "
                                 f"an arm name {list(ARMS)}")
            if base not in ARMS:
                raise ValueError(f"--arm-variants: {name!r} -> {base!r}: the arm must be one of "
                                 f"{list(ARMS)}")

    def _check_arm_concurrency(self) -> None:
        if not isinstance(self.arm_concurrency, dict):
            raise ValueError(f"--arm-concurrency={self.arm_concurrency!r}: must be a JSON object, arm -> [C, ...]")
        for arm, cs in self.arm_concurrency.items():
            if arm not in self.arms:
                raise ValueError(f"--arm-concurrency: arm {arm!r} is not in --arms {list(self.arms)}")
            if not isinstance(cs, (list, tuple)) or not cs or not set(cs) <= set(self.concurrency):
                raise ValueError(f"--arm-concurrency: {arm!r} -> {cs!r}: must be a non-empty list of C from "
                                 f"--concurrency {list(self.concurrency)}")
        object.__setattr__(self, "arm_concurrency", {a: tuple(sorted(cs)) for a, cs in self.arm_concurrency.items()})

    @cached_property
    def shared_prefix(self):
        """The trial's prefix sharing (``workloads.shared_prefix.SharedPrefix``), or None."""
        from vtoken.bench.workloads.shared_prefix import SharedPrefix

        return None if self.prefix_degree is None else SharedPrefix(self.prefix_degree, self.prefix_tokens)

    def concurrency_of(self, arm: str) -> tuple[int, ...]:
        """The C this arm runs (``arm_concurrency``, else every C of the grid)."""
        return self.arm_concurrency.get(arm, tuple(self.concurrency))

    def _check_samples(self) -> None:
        if self.num_requests is not None:
            pair_sample(self.num_manifest_rows, self.num_requests, self.seed, self.first_pair + self.pairs - 1)

    def _check_arm_settings(self) -> None:
        if not isinstance(self.arm_settings, dict):
            raise ValueError(f"--arm-settings={self.arm_settings!r}: must be a JSON object keyed by arm")
        for arm, settings in self.arm_settings.items():
            if arm not in self.arms:
                raise ValueError(f"--arm-settings: arm {arm!r} is not in --arms {list(self.arms)}")
            if not isinstance(settings, dict):
                raise ValueError(f"--arm-settings: {arm!r} -> {settings!r}: must be a JSON object of settings")
            bad = sorted(set(settings) & set(NOT_PER_ARM_KEYS))
            if bad:
                raise ValueError(f"--arm-settings: {arm!r} sets {bad}, which the runner sets itself")

    def _check_pool(self) -> None:
        max_len = self.max_model_len
        need = -(-max_len // self.block_size) + 1
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < need:
            raise ValueError(f"--num-gpu-blocks={self.num_gpu_blocks}: vLLM needs >= {need} blocks "
                             f"(max_model_len {max_len} / block size {self.block_size} + the null block)")

    @property
    def workload_name(self) -> str:
        """The manifest's name, e.g. ``sharegpt-s0``."""
        return Path(self.manifest).name.removesuffix(".jsonl")

    @property
    def pair_indices(self) -> range:
        """The pairs the run plans: ``first_pair .. first_pair + pairs - 1``."""
        return range(self.first_pair, self.first_pair + self.pairs)

    @cached_property
    def num_manifest_rows(self) -> int:
        """Requests in the manifest (its non-blank lines); not a field, so not in ``to_dict``."""
        with open(Path(self.manifest).with_suffix(".jsonl"), encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())

    @property
    def max_model_len(self) -> int:
        """The engine's ``max_model_len`` (``engine`` override, else ``CPU_DEFAULTS``)."""
        return self.engine.get("max_model_len", CPU_DEFAULTS["max_model_len"])

    def base_arm(self, arm: str) -> str:
        """The implemented arm an arm name runs (itself, or its variant's arm)."""
        return self.arm_variants.get(arm, arm)

    @cached_property
    def arm_configs(self) -> dict[str, PluginConfig]:
        """Each arm's engine settings, built once and checked against the arm's rule: what its
        engine is given (with its metrics sink, ``vtoken.bench.harness.arm_settings``).

        Raises:
            ValueError: naming the setting, its value and what the arm allows.
        """
        return {arm: check_config(PluginConfig.from_dict(self.vtoken_dict(arm))) for arm in self.arms}

    def vtoken_dict(self, arm: str, metrics_path: str | None = None) -> dict[str, Any]:
        """The vtoken settings of ``arm``: shared settings + the arm's name (+ eviction),
        then the arm's own ``arm_settings`` settings (null values unset a setting).

        Args:
            arm: an arm of ``arms`` (a variant runs its implemented arm).
            metrics_path: the engine's metrics sink (None: not set).
        """
        base = self.base_arm(arm)
        out: dict[str, Any] = {"arm": base, **self.vtoken, **eviction(base, self.policy, self.ratio, self.budget)}
        out.update(self.arm_settings.get(arm, {}))
        if metrics_path is not None:
            out["metrics_path"] = metrics_path
        return {k: v for k, v in out.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (paths as strings)."""
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in asdict(self).items()}


def eviction(arm: str, policy: str | None, ratio: float | None, budget: int | None) -> dict[str, Any]:
    """The eviction settings an implemented arm takes: a policy-driven arm the policy and the
    ratio (else the budget), a self-evicting baseline only the budget, ``full`` none."""
    side = adapter_class(arm)
    if side.evicts and not side.takes_policy:  # a baseline that is its own policy
        return {"budget": budget} if budget is not None else {}
    if side.takes_policy:
        return {"policy": policy} | ({"ratio": ratio} if ratio is not None else {"budget": budget})
    return {}


def _check_int(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{_flag(name)}={value!r}: must be an integer >= {low}")
