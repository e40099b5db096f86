"""θ_F/watermark selection on held-out pairs (vtoken.bench.selection) and the grid metrics'
restriction to swept arms (process.swept), on hand-made per-trial rows."""

import pandas as pd
import pytest

from vtoken.bench import process
from vtoken.bench.selection import select

VARIANTS = {"v_a": {"theta_f": 0.3, "watermark": 0.2}, "v_b": {"theta_f": 0.5, "watermark": 0.2},
            "v_c": {"theta_f": 0.7, "watermark": 0.5}}


def _trials(values):
    """arm -> per-pair metric values at C = 8 (pairs 5 and 6: the held-out ones)."""
    return pd.DataFrame([{"arm": arm, "pair": 5 + i, "concurrency": 8, "output_tok_per_s": v, "retained_blocks": v}
                         for arm, vs in values.items() for i, v in enumerate(vs)])


def test_selects_the_best_mean_ratio_over_pairs():
    per_trial = _trials({"naive": [100, 50], "v_a": [150, 60], "v_b": [120, 100], "v_c": [300, 40]})
    # ratios: a 1.5, 1.2 (1.35); b 1.2, 2.0 (1.6); c 3.0, 0.8 (1.9)
    chosen, table = select(per_trial, VARIANTS, "output_tok_per_s")
    assert chosen == {"theta_f": 0.7, "watermark": 0.5}
    assert table.set_index("arm").ratio_mean.round(6).to_dict() == {"v_a": 1.35, "v_b": 1.6, "v_c": 1.9}
    assert table.selected.tolist() == [False, False, True]
    # lower is better for retained blocks: a wins
    assert select(per_trial, VARIANTS, "retained_blocks")[0] == {"theta_f": 0.3, "watermark": 0.2}


def test_ties_go_to_the_larger_theta_f_and_bad_input_names_the_problem():
    per_trial = _trials({"naive": [10, 10], "v_a": [20, 20], "v_b": [20, 20], "v_c": [10, 10]})
    assert select(per_trial, VARIANTS, "output_tok_per_s")[0] == {"theta_f": 0.5, "watermark": 0.2}
    with pytest.raises(ValueError, match="metric='waste_f'"):
        select(per_trial, VARIANTS, "waste_f")
    with pytest.raises(ValueError, match="variant 'v_d'"):
        select(per_trial, VARIANTS | {"v_d": {"theta_f": 0.9, "watermark": 0.2}}, "output_tok_per_s")


def test_grid_metrics_only_for_arms_swept_over_the_whole_grid():
    rows = [("s", "naive", c) for c in (2, 4, 8)] + [("s", "vtoken", c) for c in (2, 4, 8)] + [
        ("s", "zipage", 4), ("one", "naive", 8), ("one", "vtoken", 8)]
    trials = pd.DataFrame(rows, columns=["setup", "arm", "concurrency"])
    got = process.swept(trials)
    assert sorted(set(zip(got.setup, got.arm))) == [("s", "naive"), ("s", "vtoken")]
