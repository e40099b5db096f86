"""The fixed verdict vocabulary of the claims table (docs/design.md §7).

A claim compares a treatment arm with a reference arm by a paired interval (``stats``):
an estimate with its 95 % CI [ci_low, ci_high] over ``n`` pairs drawn from ``n_samples``
distinct request samples, a ``null`` (1.0 for a ratio, 0.0 for a difference or a share) and
the ``direction`` the paper claims ("lower": treatment below the reference, e.g. fewer
retained blocks; "higher": above it). What the paper says of the magnitude is a **bound**,
and each bound kind has one rule, read on the interval (``vtoken.bench.analysis.claims``,
where every claim is a record with its unit and bound). This module holds the vocabulary and
what decides before any bound (:func:`preamble`), first match wins:

| verdict | rule |
|---|---|
| ``not testable on this grid: <reason>`` | the caller passes ``untestable="<reason>"`` |
| ``not comparable: live tokens X vs Y`` | the caller passes ``live_tokens=(X, Y)`` and X lies outside ``equal_live_tokens``' tolerance of Y |
| ``one sample, no CI`` | n < 2, or n_samples < 2 |
| ``no spread over the samples, no CI`` | ci_low == ci_high over >= 2 distinct samples, with an estimate other than the null |

then the bound's rule (``claims``): ``not resolved (CI includes no effect)``, ``opposite
direction``, ``same direction only``, ``within the paper's range``, ``smaller than
claimed``, ``larger than claimed``, ``CI crosses an end of the paper's range``, ``reaches
the paper's number``, ``short of the paper's number``, ``not resolved at the paper's number
(CI contains it)``, ``holds (CI under the bound)``, ``exceeds the bound``, ``not resolved
at the bound (CI contains it)``.

**A zero-width interval is never printed as a CI.** ``stats`` returns ci_low == ci_high
("degenerate") when every per-pair value is the same, which is what one sample repeated, or a
deterministic metric (retained blocks, feasibility, outputs) measured on the same requests,
gives. Such an interval carries no information about the spread between request samples; a
claim read from it cannot be given an interval. So it reads "no spread over the samples, no
CI" (the measured value is printed beside it: every pair gave it, on its own request sample),
or "one sample, no CI" when the pairs share one sample, unless the estimate is exactly the
null (then every pair agrees with "no effect" and the verdict is "not resolved"). "Equal" and "exactly" allow 1e-12 relative
(``TOLERANCE``), the tolerance ``stats`` uses to call an interval degenerate.

**Comparisons are at equal live tokens** (docs/design.md §7): an arm that keeps more (or fewer) live
tokens per request than the reference holds more (or fewer) blocks for that reason alone, so
a win or a loss read from it would be decided by the budget, not by the mechanism.
``equal_live_tokens`` is the one rule, symmetric in the two arms: the larger live-token count at
most x1.05 the smaller (so the same two arms are at equal live tokens whichever is the reference).
A block-granular budget moves in whole blocks and may land nowhere inside it; such a mechanism
is compared at **interpolated** equal live tokens, between two of its budgets that bracket the
reference (``vtoken.bench.analysis.equal_live``). The claims table, the plane and the
baselines figure all read this rule.

Claims that are exact checks, not estimates (every policy file < 50 lines; Naive-Evict,
HoleFill and vToken token-identical on every request no arm preempted), read
``holds (exact check, no interval)`` or ``fails (exact check)`` (``exact_verdict``).

The A/A control runs one arm against a second, separately started engine of the same arm on
the same samples. ``aa_status`` returns one of:

| A/A status | rule |
|---|---|
| ``deterministic (A/A = 1 exactly)`` | a deterministic metric, estimate (and finite CI bounds) equal to the null |
| ``deterministic metric differs under A/A`` | a deterministic metric that is not: a bug in the engine or the pairing |
| ``too few pairs for an A/A interval`` | n < 2 or a NaN interval; deterministic: n = 0 or a NaN estimate |
| ``resolvable (A/A CI includes no effect)`` | non-deterministic, ci_low <= null <= ci_high, and for a ratio both ends within null × (1 ± ``AA_BOUND``) |
| ``not resolvable on this machine (A/A CI excludes no effect)`` | non-deterministic, the CI excludes the null |
| ``not resolvable on this machine (A/A CI wider than ±3%)`` | a ratio whose CI includes the null but reaches beyond null × (1 ± ``AA_BOUND``): the machine's noise alone could hide or fake an effect of that size |

"Not resolvable" means the machine's run-to-run noise alone, between two engines of one arm,
already looks like an effect: claims on that metric cannot be judged on this machine.

**The memory-quality plane.** ``dominance(memory, quality)`` places a treatment against a
reference on two axes at once: ``memory``, the paired ratio of retained blocks per request
(lower is better, null 1.0), and ``quality``, the paired difference of quality such as ROUGE-L
vs Native (higher is better, null 0.0). Each axis is first classified by ``axis_status``:

| axis status | rule |
|---|---|
| ``not measured`` | no comparison (None) or a NaN estimate (``compare_arms``' too-few-pairs rows) |
| ``no CI`` | n < 2 or n_samples < 2 (NaN n_samples, samples not known, counts as 0), or a zero-width interval away from the null (as ``one sample, no CI`` / ``no spread over the samples, no CI``) |
| ``same`` | ci_low <= null <= ci_high, including a zero-width interval exactly at the null (token-identical outputs: a quality difference of exactly 0 in every pair) |
| ``better`` | the CI excludes the null on the good side |
| ``worse`` | the CI excludes the null on the bad side |

``dominance`` returns exactly one of these texts, first match wins (an axis not measured
before an axis without an interval, memory's axis before quality's):

| dominance | rule |
|---|---|
| ``not comparable: live tokens X vs Y`` | the caller passes ``live_tokens`` outside ``equal_live_tokens`` |
| ``retained blocks not measured`` / ``quality not measured`` | that axis is ``not measured`` |
| ``no interval on retained blocks`` / ``no interval on quality`` | that axis is ``no CI`` |
| ``trade-off`` | one axis better, the other worse |
| ``dominates`` / ``dominated`` | both axes better / worse; or one better (worse) and the other ``same`` within its margin: its worse (better) CI end no further from the null than ``MEMORY_MARGIN`` (retained blocks x 1.05) or ``QUALITY_MARGIN`` (ROUGE-L 0.02) |
| ``better on X, Y not resolved`` / ``worse on X, Y not resolved`` | one axis resolved, the other ``same`` with its CI past the margin: the data cannot tell whether Y is worse |
| ``not resolved (CIs include no effect on both axes)`` | both axes ``same`` |
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

WITHIN = "within the paper's range"
SMALLER = "smaller than claimed"
LARGER = "larger than claimed"
SAME_DIRECTION = "same direction only"
OPPOSITE = "opposite direction"
NOT_RESOLVED = "not resolved (CI includes no effect)"
ONE_SAMPLE = "one sample, no CI"
NO_SPREAD = "no spread over the samples, no CI"
OVERLAPS = "CI crosses an end of the paper's range"
REACHES = "reaches the paper's number"
SHORT_OF = "short of the paper's number"
NOT_RESOLVED_AT = "not resolved at the paper's number (CI contains it)"
BOUND_HOLDS = "holds (CI under the bound)"
BOUND_EXCEEDED = "exceeds the bound"
BOUND_NOT_RESOLVED = "not resolved at the bound (CI contains it)"
NOT_AT_MODEL = "not testable at this model"
NOT_TESTABLE = "not testable on this grid"
NOT_COMPARABLE = "not comparable"
VERDICTS = (WITHIN, SMALLER, LARGER, OVERLAPS, SAME_DIRECTION, OPPOSITE, NOT_RESOLVED, REACHES, SHORT_OF,
            NOT_RESOLVED_AT, BOUND_HOLDS, BOUND_EXCEEDED, BOUND_NOT_RESOLVED, ONE_SAMPLE, NO_SPREAD, NOT_AT_MODEL,
            NOT_COMPARABLE, NOT_TESTABLE)
# The paper's capability claim read at equal memory (analysis.factorial.capability).
SUPPORTED = "supported"
REFUTED = "refuted"
LIVE_SHARE = 0.05  # equal live tokens: within 5 % of the reference's
EXACT_HOLDS = "holds (exact check, no interval)"
EXACT_FAILS = "fails (exact check)"
EXACT_VERDICTS = (EXACT_HOLDS, EXACT_FAILS)

AA_DETERMINISTIC = "deterministic (A/A = 1 exactly)"
AA_BROKEN = "deterministic metric differs under A/A"
AA_OK = "resolvable (A/A CI includes no effect)"
AA_UNRESOLVABLE = "not resolvable on this machine (A/A CI excludes no effect)"
AA_BOUND = 0.03  # an A/A ratio interval must lie within 1 ± this for timing claims to be read
AA_WIDE = f"not resolvable on this machine (A/A CI wider than ±{AA_BOUND:.0%})"
AA_TOO_FEW = "too few pairs for an A/A interval"
AA_STATUSES = (AA_DETERMINISTIC, AA_BROKEN, AA_OK, AA_UNRESOLVABLE, AA_WIDE, AA_TOO_FEW)

AXIS_BETTER = "better"
AXIS_WORSE = "worse"
AXIS_SAME = "same"
AXIS_NO_CI = "no CI"
AXIS_NOT_MEASURED = "not measured"
AXIS_STATUSES = (AXIS_BETTER, AXIS_WORSE, AXIS_SAME, AXIS_NO_CI, AXIS_NOT_MEASURED)
MEMORY_AXIS = "retained blocks"
QUALITY_AXIS = "quality"
DOMINATES = "dominates"
DOMINATED = "dominated"
TRADE_OFF = "trade-off"
EQUIVALENT_CAPABILITY = "equivalent: no capability gap"
CAPABILITY = (SUPPORTED, REFUTED, TRADE_OFF, NOT_RESOLVED, NOT_COMPARABLE, ONE_SAMPLE, EQUIVALENT_CAPABILITY)
DOMINANCE_NOT_RESOLVED = "not resolved (CIs include no effect on both axes)"
NO_INTERVAL_ON = "no interval on"
NOT_MEASURED_SUFFIX = "not measured"
UNRESOLVED_SUFFIX = "not resolved"
# Non-inferiority margins of the plane: an axis whose CI contains the null counts as "no worse"
# only when its worse CI end stays within these (retained blocks at most 5 % more, as the
# equal-live-tokens rule's 5 %; ROUGE-L at most 0.02 lower).
MEMORY_MARGIN = 1.05
QUALITY_MARGIN = 0.02
DOMINANCE = (DOMINATES, DOMINATED, TRADE_OFF, DOMINANCE_NOT_RESOLVED,
             f"{AXIS_BETTER} on {MEMORY_AXIS}, {QUALITY_AXIS} {UNRESOLVED_SUFFIX}",
             f"{AXIS_BETTER} on {QUALITY_AXIS}, {MEMORY_AXIS} {UNRESOLVED_SUFFIX}",
             f"{AXIS_WORSE} on {MEMORY_AXIS}, {QUALITY_AXIS} {UNRESOLVED_SUFFIX}",
             f"{AXIS_WORSE} on {QUALITY_AXIS}, {MEMORY_AXIS} {UNRESOLVED_SUFFIX}",
             f"{NO_INTERVAL_ON} {MEMORY_AXIS}", f"{NO_INTERVAL_ON} {QUALITY_AXIS}",
             f"{MEMORY_AXIS} {NOT_MEASURED_SUFFIX}", f"{QUALITY_AXIS} {NOT_MEASURED_SUFFIX}")

DIRECTIONS = ("lower", "higher")
TOLERANCE = 1e-12


def is_missing(x) -> bool:
    return x is None or (isinstance(x, numbers.Real) and math.isnan(x))


def _finite(name: str, x) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
        raise ValueError(f"{name}={x!r}: must be a finite number")
    return float(x)


def _count(name: str, x) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0:
        raise ValueError(f"{name}={x!r}: must be an int >= 0")
    return int(x)


def same(a: float, b: float) -> bool:
    """a == b up to ``TOLERANCE`` relative (absolute below magnitude 1)."""
    return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))


def contains(low: float, high: float, x: float) -> bool:
    """Whether the interval [low, high] holds ``x``, an end within ``TOLERANCE`` of it included:
    the one reading of "the CI includes x" for the claims' bounds and the plane's axes."""
    return low <= x <= high or same(low, x) or same(high, x)


def live_tolerance(reference: float) -> float:
    """The equal-live-tokens tolerance in tokens around ``reference``: 5 % of it (the ratio rule of
    ``equal_live_tokens`` allows up to x1.05 above and down to /1.05 below)."""
    reference = _finite("reference", reference)
    if reference <= 0:
        raise ValueError(f"reference={reference!r}: need reference > 0 live tokens per request")
    return LIVE_SHARE * reference


def equal_live_tokens(live: float, reference: float) -> bool:
    """Whether two arms keep equal live tokens per request: the larger at most 1 + ``LIVE_SHARE``
    (x1.05) times the smaller, ends included up to ``TOLERANCE``. Symmetric: which arm is the
    reference does not change the answer."""
    live, reference = _finite("live", live), _finite("reference", reference)
    if live <= 0 or reference <= 0:
        raise ValueError(f"live={live!r}, reference={reference!r}: need > 0 live tokens per request")
    return max(live, reference) <= (1 + LIVE_SHARE) * min(live, reference) * (1 + TOLERANCE)


def not_comparable(live: float, reference: float) -> str:
    """The verdict of a comparison at unequal live tokens (the numbers it was refused on)."""
    return f"{NOT_COMPARABLE}: live tokens {_finite('live', live):.1f} vs {_finite('reference', reference):.1f}"


def preamble(comp, null: float, *, untestable: str | None = None, live_tokens=None):
    """What decides a claim before its bound (``claims`` module docstring), first match wins: a
    reason the grid cannot test it, unequal live tokens, fewer than two pairs or samples, a
    zero-width interval away from the null. Returns that verdict, or the interval (low, high)
    the bound is read on.

    Args:
        comp: a comparison with estimate, ci_low, ci_high, n, n_samples (mapping or object);
            ignored when ``untestable`` is given.
        null: the no-effect value (1.0 for a ratio, 0.0 for a difference or a share).
        untestable: a non-empty reason, or None.
        live_tokens: None, or (treatment's, reference's live tokens per request).

    Raises:
        ValueError: a non-finite estimate, bad counts, a NaN or reversed interval where n >= 2.
    """
    null = _finite("null", null)
    if untestable is not None:
        if not isinstance(untestable, str) or not untestable.strip():
            raise ValueError(f"untestable={untestable!r}: must be None or a non-empty reason")
        return f"{NOT_TESTABLE}: {untestable}"
    if live_tokens is not None:
        live, reference = live_tokens
        if not equal_live_tokens(live, reference):
            return not_comparable(live, reference)
    estimate = field(comp, "estimate")
    if is_missing(estimate):
        raise ValueError(f"estimate={estimate!r}: must be a finite number (pass untestable= if there is none)")
    estimate = _finite("estimate", estimate)
    n, n_samples = (_count(name, _as_count(field(comp, name))) for name in ("n", "n_samples"))
    if n < 2 or n_samples < 2:
        return ONE_SAMPLE
    low, high = _finite("ci_low", field(comp, "ci_low")), _finite("ci_high", field(comp, "ci_high"))
    if low > high:
        raise ValueError(f"ci_low={low!r}, ci_high={high!r}: needs ci_low <= ci_high")
    if same(low, high) and not same(estimate, null):
        return NO_SPREAD
    return low, high


def aa_status(estimate, ci_low, ci_high, *, n, deterministic, null=1.0) -> str:
    """Status of an A/A control (one arm against a second engine of the same arm).

    Args:
        estimate, ci_low, ci_high: the paired A/A comparison (NaN/None allowed when n < 2).
        n: pairs used (int >= 0).
        deterministic: True for a metric that two engines of the same arm on the same samples
            must reproduce exactly (retained blocks, feasibility, outputs).
        null: the no-effect value (1.0 for a ratio, 0.0 for a difference).

    Returns:
        One of ``AA_STATUSES`` (rules in the module docstring). A deterministic metric is
        compared with ``null`` to 1e-12 relative: its estimate and every finite CI bound.

    Raises:
        ValueError: a bad ``n``, ``deterministic`` or ``null``; a reversed interval.
    """
    n = _count("n", n)
    if not isinstance(deterministic, bool):
        raise ValueError(f"deterministic={deterministic!r}: must be True or False")
    null = _finite("null", null)
    bounds = [None if is_missing(b) else _finite(name, b) for name, b in (("ci_low", ci_low), ("ci_high", ci_high))]
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise ValueError(f"ci_low={ci_low!r}, ci_high={ci_high!r}: needs ci_low <= ci_high")
    estimate = None if is_missing(estimate) else _finite("estimate", estimate)
    if deterministic:
        if n == 0 or estimate is None:
            return AA_TOO_FEW
        values = [estimate] + [b for b in bounds if b is not None]
        return AA_DETERMINISTIC if all(same(v, null) for v in values) else AA_BROKEN
    if n < 2 or estimate is None or None in bounds:
        return AA_TOO_FEW
    if not contains(bounds[0], bounds[1], null):  # an end at the null, to TOLERANCE
        return AA_UNRESOLVABLE
    if null != 0 and (bounds[0] < null * (1 - AA_BOUND) or bounds[1] > null * (1 + AA_BOUND)):
        return AA_WIDE
    return AA_OK


MEASURED_IN = "measured in profile"


def measured_in(profile: str) -> str:
    """The verdict of a claim this run does not measure: the profile that does (never a
    number from a run that did not happen)."""
    return f"{MEASURED_IN} {profile} (not in this run)"


def exact_verdict(holds: bool) -> str:
    """The verdict of an exact check (a count or an identity, no interval)."""
    if not isinstance(holds, bool):
        raise ValueError(f"holds={holds!r}: must be True or False")
    return EXACT_HOLDS if holds else EXACT_FAILS


def field(comp, name: str):
    if isinstance(comp, Mapping):
        return comp.get(name)
    return getattr(comp, name, None)


def axis_status(comp, null: float, good: str) -> str:
    """The status of one axis of the memory-quality plane (rules in the module docstring).

    Args:
        comp: None (not measured), or a paired comparison with estimate, ci_low, ci_high, n
            and n_samples, as a mapping or an object with those attributes (a pandas Series
            row of ``compare_arms`` is either).
        null: the no-effect value (1.0 for a ratio, 0.0 for a difference).
        good: "lower" or "higher", the side of ``null`` that is better.

    Returns:
        One of ``AXIS_STATUSES``.

    Raises:
        ValueError: a bad ``good`` or ``null``, a missing n/n_samples, a non-finite estimate
            other than NaN, a NaN or reversed interval where n >= 2 and n_samples >= 2.
    """
    if good not in DIRECTIONS:
        raise ValueError(f"good={good!r}: allowed {DIRECTIONS}")
    null = _finite("null", null)
    if comp is None or is_missing(field(comp, "estimate")):
        return AXIS_NOT_MEASURED
    estimate = _finite("estimate", field(comp, "estimate"))
    n, n_samples = (_count(name, _as_count(field(comp, name))) for name in ("n", "n_samples"))
    if n < 2 or n_samples < 2:
        return AXIS_NO_CI
    low, high = _finite("ci_low", field(comp, "ci_low")), _finite("ci_high", field(comp, "ci_high"))
    if low > high:
        raise ValueError(f"ci_low={low!r}, ci_high={high!r}: needs ci_low <= ci_high")
    if same(low, high) and not same(estimate, null):
        return AXIS_NO_CI
    if contains(low, high, null):  # an end at the null, to TOLERANCE, includes it
        return AXIS_SAME
    observed = "lower" if high < null else "higher"
    return AXIS_BETTER if observed == good else AXIS_WORSE


def _as_count(x):
    """n / n_samples as ``compare_arms`` writes them: an int, or a float holding one (a
    column with NaN elsewhere is float); NaN counts as 0 (no samples known)."""
    if isinstance(x, numbers.Real) and not isinstance(x, (bool, numbers.Integral)):
        if math.isnan(x):
            return 0
        if float(x).is_integer():
            return int(x)
    return x


def _within_margin(comp, axis: str, side: str) -> bool:
    """Whether an axis whose CI contains the null is still within its margin on ``side``:
    "worse" -- its worse CI end no worse than the margin (non-inferior); "better" -- its better
    end no better than the margin (non-superior)."""
    low, high = float(field(comp, "ci_low")), float(field(comp, "ci_high"))
    if axis == MEMORY_AXIS:  # a ratio of retained blocks, lower is better
        return high <= MEMORY_MARGIN if side == "worse" else low >= 1 / MEMORY_MARGIN
    return low >= -QUALITY_MARGIN if side == "worse" else high <= QUALITY_MARGIN  # a difference, higher is better


def dominance(memory, quality, live_tokens=None) -> str:
    """Where a treatment lies against a reference on the memory-quality plane.

    Args:
        memory: the paired ratio of retained blocks per request, treatment vs reference
            (lower is better, null 1.0); None when not measured.
        quality: the paired difference of quality, e.g. ROUGE-L vs Native (higher is
            better, null 0.0); None when not measured.
        Each a mapping or an object with estimate, ci_low, ci_high, n, n_samples.
        live_tokens: None, or (treatment's, reference's live tokens per request): outside
            ``equal_live_tokens`` the comparison is refused (a budget would decide it).

    Returns:
        One of ``DOMINANCE`` or "better on X, Y not resolved" / "worse on X, Y not resolved"
        or "not comparable: live tokens X vs Y" (rules in the module docstring); the per-axis
        statuses it was decided on are ``axis_status(memory, 1.0, "lower")`` and
        ``axis_status(quality, 0.0, "higher")``.
    """
    if live_tokens is not None and not equal_live_tokens(*live_tokens):
        return not_comparable(live_tokens[0], live_tokens[1])
    comps = {MEMORY_AXIS: memory, QUALITY_AXIS: quality}
    axes = ((MEMORY_AXIS, axis_status(memory, 1.0, "lower")), (QUALITY_AXIS, axis_status(quality, 0.0, "higher")))
    for name, status in axes:
        if status == AXIS_NOT_MEASURED:
            return f"{name} {NOT_MEASURED_SUFFIX}"
    for name, status in axes:
        if status == AXIS_NO_CI:
            return f"{NO_INTERVAL_ON} {name}"
    values = {status for _, status in axes}
    whole = {frozenset({AXIS_BETTER, AXIS_WORSE}): TRADE_OFF, frozenset({AXIS_SAME}): DOMINANCE_NOT_RESOLVED,
             frozenset({AXIS_BETTER}): DOMINATES, frozenset({AXIS_WORSE}): DOMINATED}
    if frozenset(values) in whole:
        return whole[frozenset(values)]
    # One axis resolved, the other's CI contains the null: decided by the margin.
    decided, side = next((name, status) for name, status in axes if status != AXIS_SAME)
    other = next(name for name, status in axes if status == AXIS_SAME)
    if _within_margin(comps[other], other, "worse" if side == AXIS_BETTER else "better"):
        return DOMINATES if side == AXIS_BETTER else DOMINATED
    return f"{side} on {decided}, {other} {UNRESOLVED_SUFFIX}"
