"""The review's experiment as factors (issue 44): granularity x scorer x budget x phase.

The config's ``factorial`` block names the design; this module expands it into setups and
checks it before any job runs. Each *mechanism* is an arm or variant of the config, grouped by
granularity (``token``: the token table's arms, Naive-Evict, vToken, vToken eager; ``block``:
PagedEviction's mechanism ranked by the scorer, ``arm_options.score: policy``); each *scorer*
is a token policy every mechanism ranks by (H2O, Scissorhands, PagedEviction's ||V||/||K|| as
``vk_norm``); each *budget* is the token budget every mechanism keeps (one nominal budget for
all: the frontiers, not a calibration, put them at equal memory); the *phase* is the
workload's shape:

- ``decode`` (decode-heavy, contract-128): one setup per scorer (``setups.factorial_setups``), ``<model>.<workload>.<scorer>.factorial``,
  at one pressing C (``factorial.concurrency``) on the main pairs: Native (``full``, the
  quality reference at the same C, so quality covers every request the memory axis covers) and
  one engine per mechanism x budget, the variant ``<mechanism>.b<budget>``
  (``cell_name``); the setups table's ``factors`` column maps each to its mechanism,
  granularity and budget;
- ``prefill`` (prefill-heavy, RULER niah_single_1 through lm-eval at the pressing pool): the
  RULER grid's runs (``vtoken.bench.grid.ruler``) gain each mechanism x scorer x kept
  fraction of ``factorial.prefill.kept`` (read by the same analysis, ``vtoken.bench.analysis.factorial``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

TOKEN, BLOCK = "token", "block"
GRANULARITIES = (TOKEN, BLOCK)
ROLE = "factorial"
PHASES = ("decode", "prefill")


def cell_name(mechanism: str, budget: int) -> str:
    """The variant of ``mechanism`` at ``budget`` in a factorial setup."""
    return f"{mechanism}.b{budget}"


def mechanisms(config: dict[str, Any]) -> dict[str, str]:
    """{mechanism: granularity} in the config's order (token first)."""
    gran = config["factorial"]["granularity"]
    return {m: g for g in GRANULARITIES for m in gran.get(g) or []}


def _base(config: dict[str, Any], arm: str) -> str:
    variants = config["arm_variants"]
    return variants[arm]["arm"] if arm in variants else arm


def enabled(config: dict[str, Any], phase: str = "decode") -> bool:
    """Whether the config runs ``phase`` of the factorial."""
    f = config.get("factorial") or {}
    if not f.get("scorers") or not mechanisms(config):
        return False
    return bool(f["decode"]["budgets"]) if phase == "decode" else bool(f["prefill"]["kept"])


def check(config: dict[str, Any], known: set[str], block_mechanism: Callable[[str], bool],
          error: Callable[[str, str], None]) -> None:
    """The factorial's cross-key rules, before any job: known mechanisms of the right
    granularity, every scorer a policy each mechanism can rank by, budgets each mechanism accepts,
    the workload and C of this config.

    Args:
        known: the arms and variants of the config.
        block_mechanism: whether an arm or variant is PagedEviction's mechanism ranked by the
            scorer (``setups._policy_scored``).
        error: raises ValueError naming the key (``setups._error``).
    """
    from baselines.paged_eviction.arm import POLICY_SCORES
    from vtoken.plugin.adapter import adapter_class
    from vtoken.policies.registry import check_policy

    f = config.get("factorial") or {}
    if not f.get("scorers"):
        return
    for granularity, arms in f["granularity"].items():
        key = f"factorial.granularity.{granularity}"
        for arm in arms or []:
            if arm not in known:
                error(key, f"{arm!r} is not an arm or variant of this config {sorted(known)}")
            base = _base(config, arm)
            if granularity == TOKEN and not adapter_class(base).takes_policy:
                error(key, f"{arm!r} ({base}) does not rank by a token policy: the token granularity runs the "
                           "policy-driven arms (naive, holefill, vtoken and their variants)")
            if granularity == BLOCK and not block_mechanism(arm):
                error(key, f"{arm!r} is not PagedEviction's mechanism ranked by the scorer (a variant of "
                           "'paged_eviction' with arm_options.score: policy): the block granularity must rank by "
                           "the same scorer as the token arms")
    blocks = [m for m, g in mechanisms(config).items() if g == BLOCK]
    for scorer in f["scorers"]:
        try:
            check_policy(scorer)
        except ValueError as err:
            error("factorial.scorers", str(err))
        if blocks and scorer not in POLICY_SCORES:
            error("factorial.scorers", f"{scorer!r}: the block mechanism {blocks} cannot rank by it (per-token keep "
                                       f"scores exist for {list(POLICY_SCORES)})")
    decode, block_size = f["decode"], config["trial"]["block_size"]
    if decode["budgets"]:
        if decode["workload"] not in config["workloads"]:
            error("factorial.decode.workload", f"{decode['workload']!r} is not one of workloads")
        floor = 3 * block_size  # PagedEviction's mechanism: the authors' assert (budget >= 3 B)
        for b in decode["budgets"]:
            if b < floor and blocks:
                error("factorial.decode.budgets", f"{b}: the block mechanism needs a budget >= 3 x block_size = "
                                                  f"{floor} (PagedEviction's own assert)")
        if (config["trial"]["num_requests"] or 0) < f["concurrency"]:
            error("factorial.concurrency", f"{f['concurrency']} > trial.num_requests "
                                           f"{config['trial']['num_requests']} (one wave of the pair's sample)")
    for k in f["prefill"]["kept"]:
        if not 0 < k < 1:
            error("factorial.prefill.kept", f"{k} must lie in (0, 1) (the fraction of the prompt kept)")


def cells(config: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """The decode phase's cells of one scorer: {variant: (mechanism, budget)} (``cell_name``)."""
    if not enabled(config, "decode"):
        return {}
    return {cell_name(m, b): (m, b) for m in mechanisms(config) for b in config["factorial"]["decode"]["budgets"]}


def factors(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The setups table's factors of each cell: mechanism, granularity, budget."""
    mech = mechanisms(config)
    return {name: {"mechanism": m, "granularity": mech[m], "budget": b} for name, (m, b) in cells(config).items()}


def factors_json(factors: dict[str, dict[str, Any]]) -> str:
    """The setups table's ``factors`` column."""
    return json.dumps(factors, sort_keys=True) if factors else ""
