"""The review's experiment as factors: granularity x scorer x budget x phase.

The config's ``factorial`` block names the design; this module expands it into setups and
checks it before any job runs. Each *mechanism* is an arm or variant of the config, grouped by
granularity (``token``: the token table's arms, Naive-Evict, vToken, vToken eager; ``block``:
PagedEviction's mechanism ranked by the scorer, ``arm_options.score: policy``); each *scorer*
is a token policy every mechanism ranks by (H2O, Scissorhands, PagedEviction's ||V||/||K|| as
``vk_norm``); each *budget* is the token budget every mechanism keeps (one nominal budget for
all: the frontiers, not a calibration, put them at equal memory); the *phase* is the
workload's shape:

Each mechanism also has a *tail* factor (``tail``): ``packed`` where a request holds ceil(live/B)
blocks after every step (vToken at its packing limit, ``arm_options.packing: limit``; PagedEviction's
page-aligned mechanism, which evicts whole blocks) and ``open`` where the block being appended to is
never packed (vToken eager and lazy, Naive-Evict), so granularity x tail is the 2 x 2 the review's
question needs: token vs block at the same tail rule, and the tail's own effect at the same
granularity. A phase's ``only`` runs a mechanism at some of its budgets (kept fractions) only (vToken
eager at one: exact eviction gives it the limit's quality there, so one budget measures its tail).

- ``decode`` (decode-heavy, contract-128): one setup per scorer (``setups.factorial_setups``), ``<model>.<workload>.<scorer>.factorial``,
  at one pressing C (``factorial.concurrency``) on the main pairs: Native (``full``, the
  quality reference at the same C, so quality covers every request the memory axis covers) and
  one engine per mechanism x budget, the variant ``<mechanism>.b<budget>``
  (``cell_name``); the setups table's ``factors`` column maps each to its mechanism,
  granularity and budget;
- ``prefill`` (prefill-heavy: RULER niah_single_1 at 1k, ``factorial.prefill.workload``): one setup
  per scorer of ``factorial.prefill.scorers`` (``setups.factorial_setups``),
  ``<model>.<workload>.<scorer>.factorial_prefill``: Native and one engine per mechanism of the
  phase x kept fraction, the variant ``<mechanism>.k<percent>`` (``prefill_cell_name``) at the
  token budget that keeps that fraction of the workload's median prompt (``kept_budget``), every
  prompt computed whole, ``factorial.prefill.num_requests`` documents per pair in a closed loop at
  ``factorial.prefill.concurrency``, at the pressing rule's pool for its documents.

Quality in both phases is teacher-forced (``RunConfig.forcing``; ``vtoken.bench.analysis.forced``):
decode cells decode Native's own greedy continuation, prefill cells the workload's reference
continuation (a RULER document's answer), so every mechanism's decisions follow the same text and
each of its tokens pairs with Native's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

TOKEN, BLOCK = "token", "block"
GRANULARITIES = (TOKEN, BLOCK)
PACKED, OPEN = "packed", "open"
ROLE = "factorial"
PREFILL_ROLE = "factorial_prefill"
PHASES = ("decode", "prefill")
# Each phase's setups, and what their mechanisms decode (``RunConfig.forcing``).
PHASE_ROLES = {"decode": ROLE, "prefill": PREFILL_ROLE}
FORCING = {"decode": "native", "prefill": "reference"}


def cell_name(mechanism: str, budget: int) -> str:
    """The variant of ``mechanism`` at ``budget`` in a factorial setup."""
    return f"{mechanism}.b{budget}"


def prefill_cell_name(mechanism: str, kept: float) -> str:
    """The variant of ``mechanism`` at kept fraction ``kept`` in a prefill setup."""
    return f"{mechanism}.k{round(kept * 100)}"


def mechanisms(config: dict[str, Any], phase: str = "decode") -> dict[str, str]:
    """{mechanism: granularity} of ``phase`` in the config's order (token first): the decode phase
    runs ``factorial.granularity``; the prefill phase its own token mechanisms
    (``factorial.prefill.token``, null: the same) and the same block mechanisms."""
    gran = dict(config["factorial"]["granularity"])
    if phase == "prefill" and config["factorial"]["prefill"].get("token") is not None:
        gran[TOKEN] = config["factorial"]["prefill"]["token"]
    return {m: g for g in GRANULARITIES for m in gran.get(g) or []}


def tail(config: dict[str, Any], mechanism: str, granularity: str) -> str:
    """``packed`` (ceil(live/B) blocks after every step: the block mechanism, vToken at its packing
    limit) or ``open`` (the tail block never packed) -- the module docstring's tail factor."""
    if granularity == BLOCK:
        return PACKED
    variant = config["arm_variants"].get(mechanism) or {}
    packing = ((variant.get("settings") or {}).get("arm_options") or {}).get("packing")
    return PACKED if packing == "limit" else OPEN


def only(config: dict[str, Any], phase: str) -> dict[str, list]:
    """{mechanism: the budgets (decode) or kept fractions (prefill) it runs at} of ``phase``'s
    ``only`` (a mechanism not named runs at every one)."""
    return dict(config["factorial"][phase].get("only") or {})


def scorers(config: dict[str, Any], phase: str = "decode") -> list[str]:
    """The scorers of ``phase``: ``factorial.scorers``, or the prefill phase's own
    (``factorial.prefill.scorers``, null: the same)."""
    f = config.get("factorial") or {}
    own = (f.get("prefill") or {}).get("scorers") if phase == "prefill" else None
    return list(own if own is not None else f.get("scorers") or [])


def _base(config: dict[str, Any], arm: str) -> str:
    variants = config["arm_variants"]
    return variants[arm]["arm"] if arm in variants else arm


def enabled(config: dict[str, Any], phase: str = "decode") -> bool:
    """Whether the config runs ``phase`` of the factorial."""
    f = config.get("factorial") or {}
    if not scorers(config, phase) or not mechanisms(config, phase):
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
            scorer (``vtoken.bench.grid.validate._policy_scored``).
        error: raises ValueError naming the key (``vtoken.bench.grid.validate._error``).
    """
    from baselines.paged_eviction.arm import POLICY_SCORES
    from vtoken.plugin.adapter import adapter_class
    from vtoken.policies.registry import check_policy

    f = config.get("factorial") or {}
    if not scorers(config, "decode") and not scorers(config, "prefill"):
        return
    own_token = f["prefill"].get("token")
    for granularity, arms, key in [(g, a, f"factorial.granularity.{g}") for g, a in f["granularity"].items()] + (
            [(TOKEN, own_token, "factorial.prefill.token")] if own_token is not None else []):
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
    for key, names in (("factorial.scorers", f["scorers"] or []), ("factorial.prefill.scorers", f["prefill"].get("scorers") or [])):
        for scorer in names:
            try:
                check_policy(scorer)
            except ValueError as err:
                error(key, str(err))
            if blocks and scorer not in POLICY_SCORES:
                error(key, f"{scorer!r}: the block mechanism {blocks} cannot rank by it (per-token keep scores "
                           f"exist for {list(POLICY_SCORES)})")
    decode, block_size = f["decode"], config["trial"]["block_size"]
    if enabled(config, "decode"):
        floor = 3 * block_size  # PagedEviction's mechanism: the authors' assert (budget >= 3 B)
        for b in decode["budgets"]:
            if b < floor and blocks:
                error("factorial.decode.budgets", f"{b}: the block mechanism needs a budget >= 3 x block_size = "
                                                  f"{floor} (PagedEviction's own assert)")
        requests = decode.get("num_requests") or config["trial"]["num_requests"] or 0
        if requests < f["concurrency"]:
            error("factorial.concurrency", f"{f['concurrency']} > the requests per pair {requests} "
                                           "(factorial.decode.num_requests, else trial.num_requests): one wave")
    prefill = f["prefill"]
    for k in prefill["kept"]:
        if not 0 < k < 1:
            error("factorial.prefill.kept", f"{k} must lie in (0, 1) (the fraction of the prompt kept)")
    if enabled(config, "prefill"):
        if prefill["num_requests"] < prefill["concurrency"]:
            error("factorial.prefill.num_requests", f"{prefill['num_requests']} < factorial.prefill.concurrency "
                                                    f"{prefill['concurrency']}")
    for phase, levels in (("decode", f["decode"]["budgets"]), ("prefill", f["prefill"]["kept"])):
        for m, at in only(config, phase).items() if enabled(config, phase) else ():
            if m not in mechanisms(config, phase):
                error(f"factorial.{phase}.only", f"{m!r} is not a mechanism of the {phase} phase "
                                                f"{list(mechanisms(config, phase))}")
            extra = [x for x in at if x not in levels]
            if extra or not at:
                error(f"factorial.{phase}.only", f"{m}: {list(at)} must be a non-empty subset of the phase's "
                                                f"{'budgets' if phase == 'decode' else 'kept'} {list(levels)}")


def kept_budget(kept: float, median_prompt: float) -> int:
    """The token budget that keeps fraction ``kept`` of a median prompt (every mechanism takes it)."""
    return max(1, round(kept * median_prompt))


def cells(config: dict[str, Any], phase: str = "decode", median_prompt: float | None = None,
          ) -> dict[str, tuple[str, int]]:
    """The cells of one scorer of ``phase``: {variant: (mechanism, budget)} (``cell_name``; in the
    prefill phase ``prefill_cell_name`` at ``kept_budget`` of ``median_prompt``)."""
    if not enabled(config, phase):
        return {}
    f, at = config["factorial"], only(config, phase)
    if phase == "decode":
        return {cell_name(m, b): (m, b) for m in mechanisms(config) for b in f["decode"]["budgets"]
                if b in at.get(m, [b])}
    return {prefill_cell_name(m, k): (m, kept_budget(k, median_prompt)) for m in mechanisms(config, phase)
            for k in f["prefill"]["kept"] if k in at.get(m, [k])}


def factors(config: dict[str, Any], phase: str = "decode", median_prompt: float | None = None,
            ) -> dict[str, dict[str, Any]]:
    """The setups table's factors of each cell: mechanism, granularity, tail, budget (and the kept
    fraction of a prefill cell)."""
    mech = mechanisms(config, phase)
    out = {name: {"mechanism": m, "granularity": mech[m], "tail": tail(config, m, mech[m]), "budget": b}
           for name, (m, b) in cells(config, phase, median_prompt).items()}
    if phase == "prefill":
        for k in config["factorial"]["prefill"]["kept"]:
            for m in mech:
                if prefill_cell_name(m, k) in out:
                    out[prefill_cell_name(m, k)]["kept"] = k
    return out


def factors_json(factors: dict[str, dict[str, Any]]) -> str:
    """The setups table's ``factors`` column."""
    return json.dumps(factors, sort_keys=True) if factors else ""
