"""The paper's claims as data, and one rule per bound kind that turns an estimate and its CI
into a verdict (the vocabulary is ``verdicts``'; docs/metrics.md states each rule).

A :class:`Claim` is one statement of the paper: the metric of ours that tests it, its **unit**
(``ratio`` treatment / reference, null 1; ``difference`` treatment - reference, null 0;
``share`` of run time, null 0), its **bound kind** and the **setting** it was stated for
(policy, model, workload, sharing degree; None = the paper does not say). The claims table
renders claims; it never decides a unit or a reading of its own, so a claim row and a paper
row of the same number cannot read it two ways.

Bound kinds, each read on the interval [ci_low, ci_high] (never on the point estimate alone):

| bound | the paper says | verdicts |
|---|---|---|
| ``direction`` | "fewer", "more" (no magnitude) | same direction only / opposite / not resolved |
| ``range`` (low, high) | "27.2-72.3 % fewer" | within (the CI inside the range) / smaller / larger than claimed (the CI entirely short of / beyond it) / CI crosses an end of the range; opposite / not resolved first |
| ``up_to`` (the far end) | "up to 1.37x" | the range from the null to the far end: within / larger than claimed / CI crosses an end; never "smaller" (any effect in the direction is "up to") |
| ``at_least`` (a threshold) | one number of the paper, "vToken reaches -27.2 %" | reaches (the CI's worse end at or beyond it) / short of it (the CI's better end short of it) / not resolved at it |
| ``at_most`` (a ceiling on the value) | "< 1 % overhead" | holds (the CI's high end under it) / exceeds it (the low end above it) / not resolved at it |

Before any bound: a reason the grid cannot test it (``untestable``), unequal live tokens
(``verdicts.equal_live_tokens``), fewer than two pairs or samples, and a zero-width interval
away from the null (no CI) decide first, in that order (``verdicts.preamble``). "Contains" and
"equal" allow ``verdicts.TOLERANCE`` relative, the one tolerance of every rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from vtoken.bench.analysis import stats
from vtoken.bench.analysis import verdicts as v

UNITS = {"ratio": 1.0, "difference": 0.0, "share": 0.0}  # unit -> its null
BOUNDS = ("direction", "range", "up_to", "at_least", "at_most", "exact")
NOT_STATED = "not stated"


@dataclass(frozen=True)
class Setting:
    """What the paper states a number for; None where it does not say."""

    policy: str | None = None
    model: str | None = None
    workload: str | None = None
    degree: int | None = None

    def text(self) -> str:
        parts = [f"policy {self.policy or NOT_STATED}", f"model {self.model or NOT_STATED}",
                 f"workload {self.workload or NOT_STATED}"]
        return "paper: " + ", ".join(parts) + ("" if self.degree is None else f", sharing degree {self.degree}")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper (module docstring). ``low``/``high``: the ends of a ``range`` in
    the estimate's unit (either None = unbounded); ``value``: the one number of an ``up_to``
    (its far end), ``at_least`` (the threshold) or ``at_most`` (the ceiling) claim."""

    key: str
    statement: str
    metric: str | None
    unit: str
    bound: str
    direction: str | None = None
    low: float | None = None
    high: float | None = None
    value: float | None = None
    setting: Setting = Setting()
    role: str = "main"  # the setups that can test it: "main" or "prefix"
    note: str = ""

    def __post_init__(self):
        if self.unit not in UNITS and self.unit not in ("requests", "lines"):
            raise ValueError(f"claim {self.key!r}: unit={self.unit!r}, allowed {sorted(UNITS)} or requests, lines")
        if self.bound not in BOUNDS:
            raise ValueError(f"claim {self.key!r}: bound={self.bound!r}, allowed {BOUNDS}")
        if self.bound != "exact" and self.direction not in v.DIRECTIONS:
            raise ValueError(f"claim {self.key!r}: direction={self.direction!r}, allowed {v.DIRECTIONS}")
        if (self.bound in ("up_to", "at_least", "at_most")) != (self.value is not None):
            raise ValueError(f"claim {self.key!r}: value={self.value!r}: up_to, at_least and at_most claims need "
                             "one number, the others none")

    @property
    def null(self) -> float:
        return UNITS.get(self.unit, 0.0)


def _direction(low: float, high: float, null: float, direction: str) -> str | None:
    """NOT_RESOLVED / OPPOSITE, or None when the CI lies on the claimed side of the null."""
    if v.contains(low, high, null):
        return v.NOT_RESOLVED
    return None if ("lower" if high < null else "higher") == direction else v.OPPOSITE


def direction_verdict(low: float, high: float, *, null: float, direction: str) -> str:
    """``direction``: the side of the null only."""
    return _direction(low, high, null, direction) or v.SAME_DIRECTION


def range_verdict(low: float, high: float, *, null: float, direction: str, lo: float | None,
                  hi: float | None) -> str:
    """``range`` [lo, hi] (either end None = unbounded), read on the CI: inside it, entirely
    short of its near end (the null's side: a smaller effect), entirely beyond its far end."""
    side = _direction(low, high, null, direction)
    if side is not None:
        return side
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"range ({lo}, {hi}): needs lo <= hi")
    near, far = (hi, lo) if direction == "lower" else (lo, hi)
    # "beyond" a value x in the claimed direction: below it for "lower", above it for "higher".
    def beyond(a, x):
        return (a < x if direction == "lower" else a > x) and not v.same(a, x)
    worse_end, better_end = (high, low) if direction == "lower" else (low, high)
    if near is not None and beyond(near, better_end):
        return v.SMALLER  # even the CI's better end falls short of the range
    if far is not None and beyond(worse_end, far):
        return v.LARGER  # even the CI's worse end lies beyond the range
    inside = (near is None or not beyond(near, worse_end)) and (far is None or not beyond(better_end, far))
    return v.WITHIN if inside else v.OVERLAPS


def up_to_verdict(low: float, high: float, *, null: float, direction: str, end: float) -> str:
    """``up_to``: the range from the null to ``end`` (one reading of "up to X" everywhere)."""
    lo, hi = (end, null) if direction == "lower" else (null, end)
    return range_verdict(low, high, null=null, direction=direction, lo=lo, hi=hi)


def at_least_verdict(low: float, high: float, *, direction: str, threshold: float, null: float | None = None) -> str:
    """``at_least``: does the effect reach ``threshold`` (in ``direction``)? A CI entirely on the
    other side of ``null`` reads "opposite direction" first (an effect the other way is not one
    short of the paper's number)."""
    if null is not None and not v.contains(low, high, null) and ("lower" if high < null else "higher") != direction:
        return v.OPPOSITE
    worse, better = (high, low) if direction == "lower" else (low, high)
    reached = (lambda a: a <= threshold) if direction == "lower" else (lambda a: a >= threshold)
    if reached(worse) or v.same(worse, threshold):
        return v.REACHES
    if not reached(better) and not v.same(better, threshold):
        return v.SHORT_OF
    return v.NOT_RESOLVED_AT


def at_most_verdict(low: float, high: float, *, ceiling: float) -> str:
    """``at_most``: the value stays under ``ceiling`` (the CI's high end below it)."""
    if high < ceiling and not v.same(high, ceiling):
        return v.BOUND_HOLDS
    if low > ceiling and not v.same(low, ceiling):
        return v.BOUND_EXCEEDED
    return v.BOUND_NOT_RESOLVED


def decide(claim: Claim, comp, untestable: str | None = None, live_tokens=None) -> str:
    """The verdict of ``claim`` on one comparison.

    Args:
        claim: the claim.
        comp: None (not measured) or a comparison with estimate, ci_low, ci_high, n, n_samples
            (a mapping, a pandas row or an object).
        untestable: why the grid cannot test it; wins over everything.
        live_tokens: None or (treatment's, reference's live tokens per request): outside
            ``verdicts.equal_live_tokens`` the comparison is refused.

    Returns:
        A text of ``verdicts.VERDICTS`` (or "not testable ...: reason" / "not comparable: ...").
    """
    if claim.bound == "exact":
        raise ValueError(f"claim {claim.key!r}: an exact check has no interval; use verdicts.exact_verdict")
    if untestable is None and (comp is None or v.is_missing(v.field(comp, "estimate"))):
        untestable = "not measured on this run (no paired trials)"
    first = v.preamble(comp, claim.null, untestable=untestable, live_tokens=live_tokens)
    if isinstance(first, str):
        return first
    low, high = first
    if claim.bound == "direction":
        return direction_verdict(low, high, null=claim.null, direction=claim.direction)
    if claim.bound == "range":
        return range_verdict(low, high, null=claim.null, direction=claim.direction, lo=claim.low, hi=claim.high)
    if claim.bound == "up_to":
        return up_to_verdict(low, high, null=claim.null, direction=claim.direction, end=claim.value)
    if claim.bound == "at_least":
        return at_least_verdict(low, high, direction=claim.direction, threshold=claim.value, null=claim.null)
    return at_most_verdict(low, high, ceiling=claim.value)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def model_matches(claim: Claim, model: str) -> bool:
    """Whether a setup's ``model`` (its name in the config, e.g. ``llama-3.1-8b-instruct``) is
    the model the claim was stated for (any model where the paper does not say)."""
    return claim.setting.model is None or _norm(claim.setting.model) in _norm(str(model))


def setting_verdict(claim: Claim, setup: dict) -> str | None:
    """The verdict of a setup (a row of the setups table) that cannot test ``claim``'s setting,
    or None when it can: another policy or sharing degree is "not testable on this grid: ...",
    another model "not testable at this model: ..." (a number the paper gives for Llama-3.1-8B
    says nothing about SmolLM2-135M)."""
    s = claim.setting
    if s.policy is not None and setup.get("policy") != s.policy:
        return f"{v.NOT_TESTABLE}: the paper states it for policy {s.policy}, this setup runs {setup.get('policy')}"
    if not model_matches(claim, setup.get("model", "")):
        return f"{v.NOT_AT_MODEL}: the paper states it for {s.model}, this run's model is {setup.get('model')}"
    degree = setup.get("prefix_degree")
    if s.degree is not None and (v.is_missing(degree) or int(degree) != s.degree):
        return f"{v.NOT_TESTABLE}: the paper states it at sharing degree {s.degree}, this setup shares {degree}"
    return None


BLOCKS_FEWER = (1 - 0.723, 1 - 0.272)  # 27.2-72.3 % fewer retained blocks, as a ratio vToken / Naive-Evict
CLAIMS = {c.key: c for c in (
    Claim("retained", "vToken retains 27.2–72.3 % fewer KV blocks per request than Naive-Evict", "retained_blocks",
          "ratio", "range", "lower", *BLOCKS_FEWER),
    Claim("sla", "up to 1.37× SLA-constrained throughput", "sla_throughput", "ratio", "up_to", "higher", value=1.37),
    Claim("sla_interp", "up to 1.37× SLA-constrained throughput (read between the grid's C)",
          "sla_throughput_interp", "ratio", "up_to", "higher", value=1.37),
    Claim("sla_tpot", "up to 1.37× SLA-constrained throughput (per-token variant: p95 TPOT bound)",
          "sla_throughput_tpot", "ratio", "up_to", "higher", value=1.37),
    Claim("capacity", "up to 2× feasible concurrency under a fixed pool", "feasible_c", "ratio", "up_to", "higher",
          value=2.0),
    Claim("exactness", "relocation changes no output: vToken token-identical to Naive-Evict and HoleFill", None,
          "requests", "exact"),
    Claim("indirection", "token-view indirection costs < 1 % of the run time", "indirection_share", "share",
          "at_most", "higher", value=0.01),
    Claim("indirection_e2e", "token-view indirection costs < 1 % (end to end: decode step of Native through the "
          "plugin vs stock vLLM)", None, "ratio", "at_most", "higher", value=1.01),
    Claim("policy_loc", "each eviction policy is < 50 lines of code", None, "lines", "exact"),
    # The review's sentence: the same policy and budget without a token table, and the
    # capability it questions, read at equal memory off the factorial's frontiers (analysis.factorial).
    Claim("without_table", "the same policy and budget without a token table (PagedEviction's page-aligned "
          "mechanism) retains more blocks per request", "retained_blocks", "ratio", "direction", "higher"),
    Claim("capability", "token-level virtualization reclaims KV memory block-level reclamation cannot: fewer "
          "retained blocks for the same quality, under the same policy", None, "ratio", "direction", "lower"),
    # Not the paper's: what the factorial's 2 x 2 separates from granularity (vtoken.bench.analysis.factorial).
    Claim("tail", "the token table's unpacked tail block (vToken eager) costs blocks the token table at its packing "
          "limit does not hold, at the same policy and budget", "retained_blocks", "ratio", "direction", "higher"),
    Claim("policy_dropin", "eviction policies are drop-in modules: a third party's scorer (NVIDIA kvpress) runs "
          "unchanged as a vToken policy, vToken token-identical to Naive-Evict under it", None, "requests", "exact"),
)}

# vToken against the strongest reclamation baseline (``process.best_baseline``): the paper claims no
# magnitude there, a direction only, on each metric the comparison reports.
BEST_CLAIMS = {
    metric: Claim(f"vs_best_{metric}", what, metric, unit, "direction", direction)
    for metric, (direction, unit, what) in {
        "retained_blocks": ("lower", "ratio", "retained blocks"), "sla_throughput": ("higher", "ratio", "SLA throughput"),
        "feasible_c": ("higher", "difference", "feasible C"),
        "rouge_l_mean": ("higher", "difference", "ROUGE-L vs Native")}.items()}
# The paper: "each policy is a drop-in module under 50 lines" (its files, the shared interface aside).
POLICY_LINES = 50

# Every number of the paper, each its own claim "vToken reaches this number" (a reviewer asked
# for every reported number, not a selection); source: the paper's published summaries of its
# results (docs/design.md §8; where they do not say which policy, model or workload produced a
# number, the setting says "not stated").
LLAMA, MISTRAL, QWEN = "Llama-3.1-8B", "Mistral-7B", "Qwen2.5-14B"
PAPER_NUMBERS = (
    Claim("retained_low", "retained blocks −27.2 % (low end of −27.2…−72.3 %)", "retained_blocks", "ratio",
          "at_least", "lower", value=1 - 0.272,
          note="the summaries place the smallest effect where retention is structured (H2O)"),
    Claim("retained_high", "retained blocks −72.3 % (high end of −27.2…−72.3 %)", "retained_blocks", "ratio",
          "at_least", "lower", value=1 - 0.723,
          note="the summaries place the largest effect where liveness is scattered"),
    Claim("kv_util_llama", "effective KV usage +21.88 %", "packing_efficiency", "ratio", "at_least", "higher",
          value=1.2188, setting=Setting(model=LLAMA)),
    Claim("kv_util_mistral", "effective KV usage +21.67 %", "packing_efficiency", "ratio", "at_least", "higher",
          value=1.2167, setting=Setting(model=MISTRAL)),
    Claim("sla_max", "SLA-constrained throughput up to 1.37×", "sla_throughput", "ratio", "up_to", "higher",
          value=1.37),
    Claim("sla_mistral_low", "SLA throughput +9.9 % (low end of +9.9…+37.3 %)", "sla_throughput", "ratio",
          "at_least", "higher", value=1.099, setting=Setting(model=MISTRAL)),
    Claim("sla_mistral_high", "SLA throughput +37.3 % (high end of +9.9…+37.3 %)", "sla_throughput", "ratio",
          "at_least", "higher", value=1.373, setting=Setting(model=MISTRAL)),
    Claim("sla_llama", "SLA throughput +18.9 % (average)", "sla_throughput", "ratio", "at_least", "higher",
          value=1.189, setting=Setting(model=LLAMA)),
    Claim("sla_scissorhands_low", "SLA throughput +33.3 % (low end of +33.3…+103.7 %)", "sla_throughput", "ratio",
          "at_least", "higher", value=1.333, setting=Setting(policy="scissorhands")),
    Claim("sla_scissorhands_high", "SLA throughput +103.7 % (high end of +33.3…+103.7 %)", "sla_throughput",
          "ratio", "at_least", "higher", value=2.037, setting=Setting(policy="scissorhands")),
    Claim("capacity_llama_035", "feasible C 5 → 8 (+60 %) at KV utilisation 0.35", "feasible_c", "ratio",
          "at_least", "higher", value=1.6, setting=Setting(model=LLAMA)),
    Claim("capacity_llama_050", "feasible C 11 → 22 (2×) at KV utilisation 0.50", "feasible_c", "ratio",
          "at_least", "higher", value=2.0, setting=Setting(model=LLAMA)),
    Claim("capacity_qwen", "feasible C 3 → 6 (2×)", "feasible_c", "ratio", "at_least", "higher", value=2.0,
          setting=Setting(model=QWEN)),
    Claim("prefix_private_low", "private-suffix retained blocks −28.6 % (Table 1, low end)",
          "retained_private_blocks", "ratio", "at_least", "lower", value=1 - 0.286, role="prefix"),
    Claim("prefix_degree8_blocks", "retained blocks −42.2 % at sharing degree 8 (Table 1)", "retained_private_blocks",
          "ratio", "at_least", "lower", value=1 - 0.422, setting=Setting(degree=8), role="prefix"),
    Claim("prefix_degree8_throughput", "throughput +146.5 % at sharing degree 8 (Table 1)", "output_tok_per_s",
          "ratio", "at_least", "higher", value=2.465, setting=Setting(degree=8), role="prefix"),
)


# ---- what the claims table reads a comparison as, before any bound ----

# Capacity where a ratio is undefined (an arm feasible at no C of the grid in some pair): the
# feasible-C difference over every pair, direction only -- never judged against the ratio claim.
CAPACITY_DIFFERENCE = Claim(
    "capacity_difference", CLAIMS["capacity"].statement + " (read as a feasible-C difference: the ratio is "
    "undefined where an arm is feasible at no C of the grid)", "feasible_c", "difference", "direction", "higher")


def left_out(comp) -> int | None:
    """Pairs a comparison left out (``n_excluded``: NaN on one side, e.g. an arm that never met an
    SLA bound), or None when it left none out or does not say."""
    k = None if comp is None else v.field(comp, "n_excluded")
    return None if k is None or v.is_missing(k) or not int(k) else int(k)


def left_out_reason(comp, claim: Claim) -> str | None:
    """Why a comparison that left pairs out cannot be judged: the pairs without a value (an arm
    that never met the bound anywhere on the grid) are the ones that say most, so a ratio over
    the others would be biased toward the arm that fails. None when it left none out."""
    k = left_out(comp)
    if not k:
        return None
    return (f"in {k} of {int(v.field(comp, 'n')) + k} pairs an arm has no {claim.metric or 'value'} (it never met "
            "the bound at any C of the grid); the ratio over the other pairs would leave out the pairs that say most")


def censored(feasibility: pd.DataFrame) -> pd.Series:
    """Per ``feasibility`` row, whether the pair's capacity is censored: feasible at the largest C
    measured for it (the grid's, or a capacity-search probe's), no failure measured above
    (``failed_above_c`` missing; tables without that column: ``feasible_c == grid_max``)."""
    if "failed_above_c" in feasibility:
        return feasibility.failed_above_c.isna()
    return feasibility.feasible_c == feasibility.grid_max


def capacity_untestable(feasibility: pd.DataFrame, baseline: str, label: str, arm: str | None = None,
                        arm_label: str | None = None) -> str | None:
    """Why feasible concurrency cannot be compared on one setup's ``feasibility`` rows (None: it
    can): the reference never pressed inside what was measured, or a compared arm (``baseline``,
    ``arm``) feasible at the largest C measured in some pair (``censored``: its capacity censored
    there, a ratio or a difference would be a bound, not a value); ``label`` / ``arm_label`` name
    them. The largest C is each pair's own: with the capacity search an arm's probes reach past
    the grid."""
    if feasibility is None or not len(feasibility):
        return "feasibility is measured on contract workloads only"
    reference = feasibility[feasibility.arm == baseline]
    if len(reference) and censored(reference).all():
        top = int(reference.grid_max.max())
        return (f"{label} is feasible at the largest C measured (up to {top}) in every pair: the pool never presses "
                "it there, so no arm can show more capacity")
    for name, shown in ((arm, arm_label or arm), (baseline, label)):
        rows = feasibility[feasibility.arm == name] if name is not None else feasibility.iloc[0:0]
        cut = censored(rows)
        if cut.any():
            top = int(rows[cut].feasible_c.max())
            return (f"{shown} is feasible at the largest C measured (up to {top}) in {int(cut.sum())} of {len(rows)} "
                    "pairs: its capacity is censored there (at least that C), so the comparison is a bound, not a "
                    "value")
    return None


def sla_untestable(grid: list[int], c_ref: int) -> str | None:
    """Why SLA-constrained throughput cannot be compared on a C ``grid`` with C_ref (None: it can)."""
    if c_ref not in grid:
        return f"C_ref = {c_ref} is not on the grid {grid}"
    if c_ref == max(grid):
        return (f"C_ref = {c_ref} is the grid's largest C: no arm can meet the bound at a higher C, so the ratio is "
                "only a makespan ratio at C ≤ C_ref")
    return None


def capacity_reading(feasibility: pd.DataFrame, difference, arm: str, baseline: str):
    """(comparison, claim, kind) of ``arm``'s feasible C against ``baseline`` on one setup's
    ``feasibility`` rows, in the unit the paper states it: a paired ratio over every pair when
    both arms are feasible at some C in each; otherwise ``difference`` (the paired feasible-C
    difference over every pair: a feasible C of 0 is a value, not a missing pair) under
    ``CAPACITY_DIFFERENCE``, which claims a direction only."""
    wide = feasibility.pivot(index="pair", columns="arm", values="feasible_c")
    if difference is None or not {arm, baseline} <= set(wide) or len(wide.dropna(subset=[arm, baseline])) < 2:
        return difference, CLAIMS["capacity"], "ratio"
    both = wide.dropna(subset=[arm, baseline])
    if ((both[arm] > 0) & (both[baseline] > 0)).all():
        res = stats.paired_ci(both[arm], both[baseline], "ratio")
        samples = feasibility[feasibility.arm == baseline].set_index("pair").reindex(both.index)
        ns = samples[stats.SAMPLE_COLUMN].nunique() if stats.SAMPLE_COLUMN in samples else v.field(difference,
                                                                                                     "n_samples")
        ratio = pd.Series({"estimate": res.estimate, "ci_low": res.ci_low, "ci_high": res.ci_high, "n": res.n,
                           "n_samples": ns, "kind": "ratio", "concurrency": None, "n_excluded": 0})
        return ratio, CLAIMS["capacity"], "ratio"
    return difference, CAPACITY_DIFFERENCE, "difference"
