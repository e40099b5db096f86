"""Property tests: invariants the metric and CI definitions must keep on any valid input."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vtoken.bench.analysis import metrics, stats

B = 16


@st.composite
def step_rows(draw):
    """Decode rows of one trial: live tokens fit in the held blocks."""
    rows = []
    for req in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 5))):
            held = draw(st.integers(1, 12))
            live = draw(st.integers(1, held * B))
            rows.append({"trial_id": "t", "req_id": str(req), "phase": "decode", "blocks_held": held,
                         "live_tokens": live, "block_size": B, "blocks_util_le_25": 0, "blocks_util_25_50": 0})
    return pd.DataFrame(rows)


@settings(max_examples=60, deadline=None)
@given(step_rows())
def test_block_metric_bounds(steps):
    row = metrics.block_metrics(steps).iloc[0]
    assert 0.0 <= row.waste_f < 1.0
    assert 0.0 < row.packing_efficiency <= 1.0
    # ideal = ceil(live / B) >= live / B, so packing can never fall below 1 - F.
    assert row.packing_efficiency >= 1.0 - row.waste_f - 1e-12
    assert row.retained_blocks <= row.retained_blocks_peak + 1e-12


positive = st.floats(0.01, 100.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(positive, positive), min_size=2, max_size=12))
def test_ratio_comparison_is_symmetric(pairs):
    t, b = np.array(pairs).T
    forward, backward = stats.paired_ci(t, b), stats.paired_ci(b, t)
    assert forward.estimate == pytest.approx(1 / backward.estimate, rel=1e-9)
    assert forward.ci_low == pytest.approx(1 / backward.ci_high, rel=1e-9)
    assert forward.ci_low <= forward.estimate <= forward.ci_high
