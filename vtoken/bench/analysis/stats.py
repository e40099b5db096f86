"""Paired comparisons with 95 % confidence intervals (docs/design.md §7).

A paired comparison takes one value per trial for a treatment arm and for the baseline
arm, matched on the paired set (same setup, concurrency and repetition ``pair``), and
summarises the per-pair ratio t_i / b_i or difference t_i - b_i. Never pooled samples.

Method (stated in every result's ``method`` column):
- ratio: work on d_i = log(t_i / b_i); the estimate is the geometric mean ratio exp(mean d)
  and the interval is exp() of the interval for mean d;
- difference: d_i = t_i - b_i; the estimate is mean d;
- n < 30: Student t interval, mean(d) +- t_{n-1, 0.975} * sd(d) / sqrt(n) ("t");
- n >= 30: scipy.stats.bootstrap, BCa, 9999 resamples, fixed seed ("bootstrap-bca");
  ``method="t"`` or ``"bootstrap"`` forces one of them.
The switch from t to the bootstrap sits at 30, not lower, because the BCa interval measurably
undercovers at the run counts this artifact uses (2,000 simulated draws of lognormal per-pair
ratios: BCa 90.4 % at n = 10, 93.4 % at n = 20, 93.7 % at n = 30; the t interval 94.3 % at
n = 5 and 95.2 % at n = 20). See docs/metrics.md.
- every d_i equal (to 1e-12 relative): a zero-width interval ("degenerate").
Coverage was measured by simulation (tests/bench/test_stats.py; docs/metrics.md).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

logger = logging.getLogger(__name__)

T_BELOW_N = 30
METHODS = ("auto", "t", "bootstrap")
N_RESAMPLES = 9999
KINDS = ("ratio", "difference")


@dataclass(frozen=True)
class PairedResult:
    """Outcome of one paired comparison.

    Attributes:
        kind: "ratio" or "difference".
        estimate: geometric mean ratio, or mean difference.
        ci_low, ci_high: the interval at ``confidence``.
        n: number of pairs used.
        method: "t", "bootstrap-bca", "t-fallback" (BCa undefined, e.g. heavy ties) or
            "degenerate".
        confidence: e.g. 0.95.
    """

    kind: str
    estimate: float
    ci_low: float
    ci_high: float
    n: int
    method: str
    confidence: float


def mean_interval(values: np.ndarray, confidence: float = 0.95, n_resamples: int = N_RESAMPLES,
                  seed: int = 0, method: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Interval for the mean of each row of ``values`` (shape (..., n)), NaN-free.

    Args:
        values: samples, the last axis holding one sample (rows are independent samples).
        confidence: interval level.
        n_resamples, seed: bootstrap settings.
        method: "auto" (t below n = 30, BCa bootstrap from 30), "t" or "bootstrap".

    Returns:
        (mean, low, high, method) with arrays of shape ``values.shape[:-1]``.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}: allowed {METHODS}")
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    if n < 2:
        raise ValueError(f"n={n}: a confidence interval needs at least 2 pairs")
    if not np.isfinite(values).all():
        raise ValueError("values: must be finite (drop NaN pairs before)")
    mean = values.mean(axis=-1)
    # Equal up to rounding (log(4) - log(2) vs log(2) - log(1)): no spread to estimate.
    if np.all(np.abs(values - values[..., :1]) <= 1e-12 * np.maximum(1.0, np.abs(values[..., :1]))):
        return mean, mean.copy(), mean.copy(), "degenerate"
    if method == "t" or (method == "auto" and n < T_BELOW_N):
        half = sps.t.ppf(0.5 + confidence / 2, n - 1) * values.std(axis=-1, ddof=1) / np.sqrt(n)
        return mean, mean - half, mean + half, "t"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        res = sps.bootstrap((values,), np.mean, axis=-1, vectorized=True, confidence_level=confidence,
                            n_resamples=n_resamples, method="BCa", rng=np.random.default_rng(seed))
    low, high = res.confidence_interval.low, res.confidence_interval.high
    if np.isnan(low).any() or np.isnan(high).any():  # BCa undefined (e.g. heavy ties): say so, use t
        _, low_t, high_t, _ = mean_interval(values, confidence, method="t")
        return mean, np.where(np.isnan(low), low_t, low), np.where(np.isnan(high), high_t, high), "t-fallback"
    return mean, low, high, "bootstrap-bca"


def paired_ci(treatment, baseline, kind: str = "ratio", confidence: float = 0.95,
              n_resamples: int = N_RESAMPLES, seed: int = 0, method: str = "auto") -> PairedResult:
    """Paired comparison of two aligned arrays (element i of each is one pair).

    Args:
        treatment, baseline: per-trial values, aligned by pair, same length n >= 2.
        kind: "ratio" (t/b, values must be > 0) or "difference" (t - b).
        confidence: interval level.
        n_resamples, seed: bootstrap settings.
        method: see ``mean_interval``.

    Returns:
        A PairedResult.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: allowed {KINDS}")
    t, b = np.asarray(treatment, dtype=float), np.asarray(baseline, dtype=float)
    if t.shape != b.shape or t.ndim != 1:
        raise ValueError(f"treatment shape {t.shape} and baseline shape {b.shape}: must be equal 1-d")
    if kind == "ratio":
        if (t <= 0).any() or (b <= 0).any():
            raise ValueError("kind='ratio': every value must be > 0; use kind='difference'")
        d = np.log(t) - np.log(b)
    else:
        d = t - b
    mean, low, high, used = mean_interval(d, confidence, n_resamples, seed, method)
    back = np.exp if kind == "ratio" else float
    return PairedResult(kind, float(back(mean)), float(back(low)), float(back(high)), len(d), used, confidence)


SAMPLE_COLUMN = "sample_sha256"


def pair_up(per_trial: pd.DataFrame, value: str, arm: str, baseline: str,
            keys: tuple[str, ...]) -> pd.DataFrame:
    """Match each treatment trial with its baseline trial of the same paired set.

    Returns:
        Columns ``keys`` + treatment + baseline (+ ``sample_sha256`` when the trials carry
        it), one row per pair present in both arms.

    Raises:
        ValueError: an arm has two trials for one paired set, or the two trials of a pair
            ran different request samples (the pairing is broken).
    """
    sample = [SAMPLE_COLUMN] if SAMPLE_COLUMN in per_trial else []
    sides = []
    for name, side in ((arm, "treatment"), (baseline, "baseline")):
        part = per_trial[per_trial.arm == name]
        dup = part.duplicated(list(keys))
        if dup.any():
            raise ValueError(f"arm={name!r}: several trials for {part[dup][list(keys)].iloc[0].to_dict()}")
        sides.append(part[list(keys) + [value] + sample].rename(
            columns={value: side, **{c: f"{c}_{side}" for c in sample}}))
    out = sides[0].merge(sides[1], on=list(keys), how="inner")
    if sample:
        t, b = out[f"{SAMPLE_COLUMN}_treatment"], out[f"{SAMPLE_COLUMN}_baseline"]
        bad = out[(t != b) & t.notna() & b.notna()]
        if len(bad):
            raise ValueError(f"{arm} vs {baseline}: the trials of {bad[list(keys)].iloc[0].to_dict()} ran different "
                             "request samples (sample_sha256); a paired set must run one sample")
        out[SAMPLE_COLUMN] = b.where(b.notna(), t)
        out = out.drop(columns=[f"{SAMPLE_COLUMN}_treatment", f"{SAMPLE_COLUMN}_baseline"])
    return out


def compare_arms(per_trial: pd.DataFrame, value: str, baseline: str = "naive", kind: str = "ratio",
                 group_by: tuple[str, ...] = ("setup", "concurrency"), pair_on: str = "pair",
                 confidence: float = 0.95, seed: int = 0, method: str = "auto") -> pd.DataFrame:
    """Paired comparison of every arm against ``baseline`` for one metric, per group.

    Pairs where either value is NaN, or (for ratios) not > 0, are left out, counted in
    ``n_excluded`` and logged; groups with fewer than 2 usable pairs get NaN estimates
    (``method`` = "too-few-pairs").

    Returns:
        Tidy rows: group_by..., metric, arm, baseline, kind, n, n_samples (distinct request
        samples among the n pairs; NaN when the trials do not say), n_excluded, estimate,
        ci_low, ci_high, confidence, method. With one sample (n_samples = 1) the interval
        measures the machine's jitter on that sample, not the variation between workloads.
    """
    rows = []
    keys = tuple(group_by) + (pair_on,)
    for arm in sorted(set(per_trial.arm) - {baseline}):
        pairs = pair_up(per_trial, value, arm, baseline, keys)
        for key, g in pairs.groupby(list(group_by), sort=True):
            ok = g.dropna(subset=["treatment", "baseline"])
            if kind == "ratio":
                ok = ok[(ok.treatment > 0) & (ok.baseline > 0)]
            if len(ok) < len(g):
                logger.warning("%s %s vs %s %s: %d of %d pairs left out (NaN%s)", value, arm, baseline,
                               key, len(g) - len(ok), len(g), " or <= 0" if kind == "ratio" else "")
            head = {**dict(zip(group_by, key if isinstance(key, tuple) else (key,))), "metric": value,
                    "arm": arm, "baseline": baseline, "kind": kind, "n": len(ok),
                    "n_samples": ok[SAMPLE_COLUMN].nunique() if SAMPLE_COLUMN in ok else np.nan,
                    "n_excluded": len(g) - len(ok)}
            if len(ok) < 2:
                rows.append({**head, "estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan,
                             "confidence": confidence, "method": "too-few-pairs"})
                continue
            res = paired_ci(ok.treatment, ok.baseline, kind, confidence, seed=seed, method=method)
            rows.append({**head, "estimate": res.estimate, "ci_low": res.ci_low, "ci_high": res.ci_high,
                         "confidence": confidence, "method": res.method})
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame, keys: list[str], columns) -> pd.DataFrame:
    """n, n_samples (distinct request samples), mean and the 95 % t interval (over pairs) of
    each column of ``columns`` present in ``df``, per ``keys`` group; below 2 values the mean
    alone ("too-few"). The processed ``summary`` table and the factorial's frontiers."""
    rows = []
    for key, g in df.groupby(keys, sort=True, dropna=False):
        for col in columns:
            if col not in g:
                continue
            v = g[col].dropna().to_numpy(dtype=float)
            samples = g.loc[g[col].notna(), "sample_sha256"].nunique() if "sample_sha256" in g else np.nan
            head = dict(zip(keys, key)) | {"metric": col, "n": len(v), "n_samples": samples}
            if len(v) < 2:
                mean = float(v.mean()) if len(v) else np.nan
                rows.append(head | {"mean": mean, "ci_low": np.nan, "ci_high": np.nan, "method": "too-few"})
                continue
            mean, low, high, method = mean_interval(v, method="t")
            rows.append(head | {"mean": float(mean), "ci_low": float(low), "ci_high": float(high),
                                "method": method})
    return pd.DataFrame(rows)
