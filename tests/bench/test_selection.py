"""θ_F/watermark selection on held-out pairs (vtoken.bench.analysis.selection) and the grid metrics'
restriction to swept arms (process.swept), on hand-made per-trial rows."""

import pandas as pd
import pytest

from vtoken.bench.analysis import process
from vtoken.bench.analysis.selection import select

VARIANTS = {"v_a": {"theta_f": 0.3, "watermark": 0.2}, "v_b": {"theta_f": 0.5, "watermark": 0.2},
            "v_c": {"theta_f": 0.7, "watermark": 0.5}}


def _trials(values, preemptions=None, moved=None):
    """arm -> per-pair metric values at C = 8 (pairs 5 and 6: the held-out ones)."""
    preemptions, moved = preemptions or {}, moved or {}
    return pd.DataFrame([{"arm": arm, "pair": 5 + i, "concurrency": 8, "output_tok_per_s": v, "retained_blocks": v,
                          "num_preemptions": preemptions.get(arm, [0, 0])[i], "tokens_relocated": moved.get(arm, [0, 0])[i]}
                         for arm, vs in values.items() for i, v in enumerate(vs)])


def test_default_objective_fewest_preemptions_then_least_copying():
    """The measured held-out outcome of the default (C = 8, pairs 5-6): θ_F 0.7 compacts
    nothing and preempts like Naive-Evict; of the variants that avoid preemption, the one
    that moves the fewest tokens wins -- whatever the throughput says."""
    per_trial = _trials({"naive": [60, 61], "v_a": [115, 110], "v_b": [100, 105], "v_c": [90, 88]},
                        preemptions={"naive": [3, 3], "v_c": [3, 3]},
                        moved={"v_a": [160, 173], "v_b": [118, 122]})
    chosen, table = select(per_trial, VARIANTS, "preemptions")
    assert chosen == {"theta_f": 0.5, "watermark": 0.2}
    assert table.set_index("arm").tokens_relocated_mean.to_dict() == {"v_a": 166.5, "v_b": 120.0, "v_c": 0.0}
    assert table.set_index("arm").preemptions_mean.to_dict() == {"v_a": 0.0, "v_b": 0.0, "v_c": 3.0}


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
    with pytest.raises(ValueError, match="metric='waste_f': allowed"):
        select(per_trial, VARIANTS, "waste_f")
    with pytest.raises(ValueError, match="variant 'v_d'"):
        select(per_trial, VARIANTS | {"v_d": {"theta_f": 0.9, "watermark": 0.2}}, "output_tok_per_s")


def test_grid_metrics_only_for_arms_swept_over_the_whole_grid():
    rows = [("s", "naive", c) for c in (2, 4, 8)] + [("s", "vtoken", c) for c in (2, 4, 8)] + [
        ("s", "zipage", 4), ("one", "naive", 8), ("one", "vtoken", 8)]
    trials = pd.DataFrame(rows, columns=["setup", "arm", "concurrency"])
    got = process.swept(trials)
    assert sorted(set(zip(got.setup, got.arm))) == [("s", "naive"), ("s", "vtoken")]
