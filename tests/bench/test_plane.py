"""vToken vs each baseline on the memory–quality plane, on hand-made trials: the C of the
comparison, both paired axes, the live-tokens rule and the dominance verdict."""

import pandas as pd
import pytest

from vtoken.bench.analysis import plane, verdicts
from vtoken.bench.analysis.process import RECLAMATION_BASELINES

SCALE = (1.0, 1.1, 0.9, 1.2)  # pair p's request sample scales every arm alike ...
JITTER = (0.0, 0.02, -0.01, 0.01, -0.02)  # ... and each arm a little differently (no zero-width interval)


def trials(arms, quality_at=(4,), concurrency=(4, 8)):
    """arm -> (base arm, blocks, live tokens, ROUGE-L); quality measured at ``quality_at`` only
    (where Native ran)."""
    return pd.DataFrame([
        {"setup": "s", "arm": arm, "base_arm": base, "concurrency": c, "pair": p, "block_size": 16,
         "retained_blocks": blocks * k * (1 + JITTER[(i + p) % 5]), "live_tokens": live, "sample_sha256": f"x{p}",
         "rouge_l_mean": (rouge + 0.01 * p + JITTER[(i + p) % 5]) if c in quality_at else float("nan")}
        for i, (arm, (base, blocks, live, rouge)) in enumerate(arms.items()) for c in concurrency
        for p, k in enumerate(SCALE)])


NATIVE = {"full": ("full", 12.0, 180.0, 1.0)}  # Native runs at C_ref = 4 only: quality's reference


def with_native(arms, **kw):
    return pd.concat([trials(arms, **kw), trials(NATIVE, concurrency=(4,))], ignore_index=True)


def test_each_setting_against_each_baseline_where_quality_exists():
    t = with_native({"naive": ("naive", 8.0, 63.0, 0.6), "vtoken": ("vtoken", 6.0, 63.0, 0.6),
                     "vtoken_pressure": ("vtoken", 5.0, 63.0, 0.6),
                     "paged_eviction": ("paged_eviction", 4.0, 60.0, 0.4),
                     "paged_eviction_policy": ("paged_eviction", 6.0, 61.0, 0.5)})
    out = plane.plane(t, RECLAMATION_BASELINES).set_index(["arm", "baseline"])
    assert list(out.index) == [("vtoken", "paged_eviction"), ("vtoken", "paged_eviction_policy"),
                               ("vtoken_pressure", "paged_eviction"), ("vtoken_pressure", "paged_eviction_policy")]
    assert (out.concurrency == 4).all()  # the largest C with quality, not 8
    row = out.loc[("vtoken", "paged_eviction")]
    assert row.memory_estimate == pytest.approx(1.5, rel=0.03) and row.quality_estimate == pytest.approx(0.2, abs=0.02)
    assert (row.memory, row.quality, row.verdict) == (verdicts.AXIS_WORSE, verdicts.AXIS_BETTER, verdicts.TRADE_OFF)
    assert bool(row.equal_live_tokens) and row.n == 4 and row.n_samples == 4
    # the same blocks, better quality: vToken dominates
    assert out.loc[("vtoken", "paged_eviction_policy")].verdict == verdicts.DOMINATES
    # fewer blocks and better quality than the variant
    assert out.loc[("vtoken_pressure", "paged_eviction_policy")].memory == verdicts.AXIS_BETTER


def test_without_quality_the_largest_shared_c_and_quality_not_measured():
    t = trials({"vtoken": ("vtoken", 6.0, 63.0, 0.6), "zipage": ("zipage", 3.0, 40.0, 0.5)}, quality_at=())
    (row,) = plane.plane(t, RECLAMATION_BASELINES).itertuples()
    assert row.concurrency == 8 and row.quality == verdicts.AXIS_NOT_MEASURED
    assert row.equal_live_tokens is False  # 40 live tokens vs 63: outside 5 % ...
    assert row.verdict == "not comparable: live tokens 63.0 vs 40.0"  # ... so no verdict on the plane
    t = trials({"vtoken": ("vtoken", 6.0, 63.0, 0.6), "zipage": ("zipage", 3.0, 61.0, 0.5)}, quality_at=())
    (row,) = plane.plane(t, RECLAMATION_BASELINES).itertuples()
    assert row.verdict == f"{verdicts.QUALITY_AXIS} {verdicts.NOT_MEASURED_SUFFIX}"


def test_both_axes_cover_the_same_requests():
    """At C = 8 the memory axis covers 8 requests, ROUGE-L vs Native only the 4
    Native ran (here: quality scored at both Cs, Native at C = 4 only). The plane compares at C = 4."""
    t = with_native({"vtoken": ("vtoken", 6.0, 63.0, 0.6), "paged_eviction": ("paged_eviction", 4.0, 60.0, 0.4)},
                    quality_at=(4, 8))
    (row,) = plane.plane(t, RECLAMATION_BASELINES).itertuples()
    assert row.concurrency == 4 and row.quality == verdicts.AXIS_BETTER
    no_native = trials({"vtoken": ("vtoken", 6.0, 63.0, 0.6), "paged_eviction": ("paged_eviction", 4.0, 60.0, 0.4)},
                       quality_at=(4, 8))
    (row,) = plane.plane(no_native, RECLAMATION_BASELINES).itertuples()
    assert row.concurrency == 8 and row.quality == verdicts.AXIS_NOT_MEASURED  # no quality off Native's requests


def test_the_plane_refuses_a_baseline_outside_the_live_tokens_rule():
    """DiffKV-style at ~120 live tokens against ~63: better on both axes, no verdict."""
    t = with_native({"vtoken": ("vtoken", 6.0, 63.0, 0.6), "diffkv": ("diffkv", 9.0, 118.7, 0.4)})
    (row,) = plane.plane(t, RECLAMATION_BASELINES).itertuples()
    assert (row.memory, row.quality) == (verdicts.AXIS_BETTER, verdicts.AXIS_BETTER)
    assert row.verdict == "not comparable: live tokens 63.0 vs 118.7"


def test_no_baseline_no_rows():
    out = plane.plane(trials({"vtoken": ("vtoken", 6.0, 63.0, 0.6)}), RECLAMATION_BASELINES)
    assert out.empty and list(out.columns) == plane.COLUMNS
