"""The power of a paired comparison over pairs, and the pairs (or requests) it needs.

A comparison's estimate is the mean over n pairs of per-pair differences d_p with a Student t
interval (``stats.paired_ci``). With per-pair standard deviation ``sd``, the two-sided t test at
level ``alpha`` resolves a true difference ``effect`` with probability (``power``)

    P(|T| > t_{1-alpha/2, n-1}),  T ~ noncentral t(n - 1, effect / (sd / sqrt(n))),

the exact power of the one-sample t test. A pair is a random sample of r requests of the
manifest (disjoint across pairs), and a teacher-forced metric is a deterministic function of the
sample, so the per-pair SD of a mean over r requests is the per-request SD over sqrt(r)
(``pair_sd``): requests per pair and pairs trade against each other, pairs also buying degrees of
freedom.

Equivalence (two one-sided tests at margin ``margin``, each at ``alpha``): when the true
difference is 0, both reject -- the interval of level 1 - 2 alpha lies inside [-margin, margin] --
with probability ``equivalence_power`` (the usual approximation, one minus twice the chance that
one test fails, floored at 0).
"""

from __future__ import annotations

import math

from scipy import stats as sps

MAX_PAIRS = 10_000


def power(sd: float, n: int, effect: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t test over ``n`` pairs to resolve a true difference
    ``effect`` given the per-pair SD ``sd`` (module docstring); NaN below 2 pairs."""
    if n < 2 or not sd > 0:
        return float("nan") if n < 2 else (1.0 if effect else alpha)
    df, ncp = n - 1, abs(effect) / (sd / math.sqrt(n))
    crit = sps.t.ppf(1 - alpha / 2, df)
    lower = sps.nct.cdf(-crit, df, ncp)  # the wrong-side rejections: NaN where scipy underflows them to 0
    return float(min(1.0, sps.nct.sf(crit, df, ncp) + (0.0 if math.isnan(lower) else lower)))


def pairs_needed(sd: float, effect: float, target: float = 0.8, alpha: float = 0.05) -> int:
    """The fewest pairs (>= 2) whose two-sided t test resolves ``effect`` with power >= ``target``.

    Raises:
        ValueError: ``effect`` is 0, or no count up to ``MAX_PAIRS`` reaches the target.
    """
    if not effect:
        raise ValueError("effect=0: a difference of 0 cannot be resolved; state the smallest effect that matters")
    for n in range(2, MAX_PAIRS + 1):
        if power(sd, n, effect, alpha) >= target:
            return n
    raise ValueError(f"effect={effect} with sd={sd}: more than {MAX_PAIRS} pairs for power {target}")


def equivalence_power(sd: float, n: int, margin: float, alpha: float = 0.05) -> float:
    """Chance that two one-sided tests at ``margin`` conclude equivalence over ``n`` pairs when the
    true difference is 0 (module docstring)."""
    if n < 2 or not sd > 0:
        return float("nan") if n < 2 else 1.0
    df, se = n - 1, sd / math.sqrt(n)
    one = sps.t.cdf(margin / se - sps.t.ppf(1 - alpha, df), df)
    return float(max(0.0, 2 * one - 1))


def pair_sd(request_sd: float, requests_per_pair: int) -> float:
    """The per-pair SD of a mean over ``requests_per_pair`` requests drawn at random (module
    docstring)."""
    return request_sd / math.sqrt(requests_per_pair)
