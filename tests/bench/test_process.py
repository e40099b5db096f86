"""Raw trial folders -> processed tables, on synthetic trials written in the runner's layout."""

import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from vtoken.bench.analysis import process
from vtoken.bench.raw import rawio, schema

SPEED = {"full": 1.0, "naive": 1.0, "vtoken": 1.5}  # vtoken finishes every request 1.5x sooner


def _write_trial(root, setup, workload, arm, conc, pair, sample=None, text=None, probe=False, preempted=None):
    """One trial; feasible unless ``preempted`` (default: naive at C = 8 is preempted); ``probe``:
    a capacity-search probe."""
    tid = f"{setup}/{arm}/c{conc}/p{pair}"
    trial = {"trial_id": tid, "setup": setup, "workload": workload, "arm": arm, "base_arm": arm, "policy": "h2o",
             "pair": pair, "seed": pair, "concurrency": conc, "arm_position": 0, "num_gpu_blocks": 64,
             "block_size": 16, "wall_s": 1.0, "sample_sha256": sample or f"sample{pair}",
             "sample_indices": ",".join(str(4 * pair + i) for i in range(4)), "capacity_probe": probe}
    scale = (1 + pair / 10 + conc / 16) / SPEED.get(arm, 1.0)  # pair-to-pair variation shared by both arms
    n = 4
    req = pd.DataFrame({
        "trial_id": tid, "arm": arm, "req_index": range(n), "req_id": [str(i) for i in range(n)],
        "arrival_s": 0.0, "first_token_s": 0.1 * scale, "finish_s": [scale * (1 + i) for i in range(n)],
        "prompt_tokens": 10, "output_tokens": 8, "max_tokens": 8, "finish_reason": "length",
        "num_preemptions": int((arm == "naive" and conc == 8) if preempted is None else preempted),
        "output_sha256": "h", "output_text": text or ["same words", "same words", "other", "x"]})
    if text:
        req["output_sha256"] = [schema.output_sha256([len(t)]) for t in text]
    held = 2 if arm == "vtoken" else 4
    steps = pd.DataFrame({"trial_id": tid, "arm": arm, "step": [0, 1], "t_s": [0.1, 0.2], "req_id": "0",
                          "phase": ["prefill", "decode"], "num_tokens": 40, "live_tokens": 20,
                          "blocks_held": held, "block_size": 16, "blocks_util_le_25": 0, "blocks_util_25_50": 0,
                          "charged_blocks": 0, "side_blocks": 0.0, "low_tokens": 0})
    rawio.write_trial(root, trial, {"requests": req, "steps": steps}, {"git_sha": "x"})


@pytest.fixture(scope="module")
def raw_master(tmp_path_factory):
    root = tmp_path_factory.mktemp("raw_master")
    for pair in range(5):
        for arm in SPEED:
            for conc in (4, 8):
                _write_trial(root, "sg", "sharegpt-s0", arm, conc, pair)
                _write_trial(root, "ct", "contract-256-s0", arm, conc, pair)
    return root


@pytest.fixture()
def raw(raw_master, tmp_path):
    """A private copy: some tests damage it."""
    return Path(shutil.copytree(raw_master, tmp_path / "raw"))


def test_process_writes_paired_comparisons(raw, tmp_path):
    paths = process.process(raw, tmp_path / "out")
    assert sorted(paths) == ["best_baseline", "capacity", "capacity_probes", "comparisons", "exactness", "feasibility",
                             "plane", "quality_requests", "sla", "sla_tpot", "trials"]
    assert pd.read_csv(paths["capacity_probes"]).empty  # no search ran
    trials = pd.read_csv(paths["trials"])
    assert len(trials) == 60 and trials.rouge_l_mean.eq(1.0).all()
    all_comp = pd.read_csv(paths["comparisons"])
    assert (all_comp.n_samples == 5).all()  # each of the 5 pairs its own sample
    assert set(all_comp[all_comp.deterministic].metric) <= set(process.DETERMINISTIC)
    assert all_comp[all_comp.metric == "retained_blocks"].deterministic.all()
    assert not all_comp[all_comp.metric == "req_per_s"].deterministic.any()
    comp = all_comp[all_comp.arm == "vtoken"].set_index(["setup", "metric", "concurrency"])
    row = comp.loc[("sg", "req_per_s", 8)]
    assert (row.arm, row.n, row.method) == ("vtoken", 5, "degenerate")
    assert row.estimate == pytest.approx(1.5)
    assert comp.loc[("sg", "retained_blocks", 4)].estimate == pytest.approx(0.5)
    sla = comp.reset_index().query("metric == 'sla_throughput' and setup == 'sg'").iloc[0]
    assert (sla.n, sla.method) == (5, "degenerate") and sla.estimate == pytest.approx(1.5)
    feas = pd.read_csv(paths["feasibility"]).set_index(["setup", "arm", "pair"])
    assert feas.loc[("ct", "naive", 0), "feasible_c"] == 4 and feas.loc[("ct", "vtoken", 0), "feasible_c"] == 8


# The capacity search's probes of the "ct" setup (grid 4, 8): Naive-Evict passes 4, fails 8 -> bisection
# probes 6 (fails), 5 (passes); vToken passes 8 -> galloping probes 9 (passes), 10 (fails). Every pair.
PROBES = {("naive", 6): False, ("naive", 5): True, ("vtoken", 9): True, ("vtoken", 10): False}
FIXED_TABLES = ("trials", "sla", "sla_tpot", "quality_requests", "exactness", "plane")


def test_search_probes_make_capacity_exact_and_leave_the_fixed_grid_tables_unchanged(raw, tmp_path):
    from vtoken.bench.analysis import capacity

    before = process.process(raw, tmp_path / "before")
    for pair in range(5):
        for (arm, c), feasible in PROBES.items():
            _write_trial(raw, "ct", "contract-256-s0", arm, c, pair, probe=True, preempted=not feasible)
    after = process.process(raw, tmp_path / "after")
    feas = pd.read_csv(after["feasibility"]).set_index(["arm", "pair"])
    for pair in range(5):
        assert capacity.interval(feas.loc[("naive", pair)]) == (5, 5)
        assert capacity.interval(feas.loc[("vtoken", pair)]) == (9, 9)
    old = pd.read_csv(before["feasibility"]).set_index(["arm", "pair"])
    assert capacity.interval(old.loc[("naive", 0)]) == (4, 7) and capacity.interval(old.loc[("vtoken", 0)]) == (8, math.inf)
    assert feas.monotone.all() and set(feas.grid_max) == {8, 10}  # the fixed grid top 8, a probe at 10
    cap = pd.read_csv(after["capacity"]).set_index("arm")
    assert cap.loc["vtoken", "intervals"].startswith("p0: 9 vs 5; p1: 9 vs 5")
    # every table of the fixed grid: byte for byte what it was without the probes
    for name in FIXED_TABLES:
        assert after[name].read_bytes() == before[name].read_bytes(), name
    comp_before, comp_after = (pd.read_csv(p[k]) for p, k in ((before, "comparisons"), (after, "comparisons")))
    per_c = [frame[frame.metric != "feasible_c"].reset_index(drop=True) for frame in (comp_before, comp_after)]
    pd.testing.assert_frame_equal(*per_c)
    probes = pd.read_csv(after["capacity_probes"])
    assert len(probes) == 20 and set(zip(probes.arm, probes.concurrency, probes.passes)) == {
        (a, c, ok) for (a, c), ok in PROBES.items()}


def test_process_is_byte_stable(raw, tmp_path):
    a, b = process.process(raw, tmp_path / "a"), process.process(raw, tmp_path / "b")
    assert all(a[k].read_bytes() == b[k].read_bytes() for k in a)


def test_raw_trials_are_never_overwritten_and_ids_must_match(raw):
    folder = next(raw.rglob("trial.json")).parent
    trial = json.loads((folder / "trial.json").read_text())
    tables = {"requests": pd.read_parquet(folder / "requests.parquet")}
    with pytest.raises(FileExistsError, match="never overwritten"):
        rawio.write_trial(raw, {k: trial[k] for k in trial if k != "provenance"}, tables, {})
    with pytest.raises(ValueError, match="expected"):
        rawio.write_trial(raw, {**trial, "trial_id": "x"}, tables, {})
    assert trial["provenance"] == {"git_sha": "x"}


def test_unfinished_temporary_folders_are_ignored(raw):
    folder = next(raw.rglob("trial.json")).parent
    before = len(process.load_raw(raw)["trials"])
    hidden = folder.with_name("." + folder.name + ".tmp-1")
    hidden.mkdir()
    (hidden / "trial.json").write_text((folder / "trial.json").read_text())
    assert len(process.load_raw(raw)["trials"]) == before


def test_provenance_names_code_config_and_inputs(tmp_path):
    prov = rawio.collect_provenance({"b": 1, "a": [2]}, repo=tmp_path, manifest_spec={"manifest_sha256": "m"})
    # sha256 of '{"a": [2], "b": 1}' (keys sorted)
    assert prov["config_sha256"] == "41ff4104bc489a1b119b42f479459c997ebbabb27d88a685fab2a7a52089feb5"
    assert prov["manifest_sha256"] == "m" and prov["git_sha"] == "" and "pandas" in prov["packages"]


def test_load_raw_rejects_a_broken_table(raw):
    folder = next(raw.rglob("trial.json")).parent
    df = pd.read_parquet(folder / "requests.parquet").assign(output_tokens=9)
    df.to_parquet(folder / "requests.parquet")
    with pytest.raises(ValueError, match="output_tokens <= max_tokens"):
        process.load_raw(raw)


def test_load_raw_of_nothing_keeps_schemas(tmp_path):
    got = process.load_raw(tmp_path)
    assert list(got["requests"].columns) == [c.name for c in schema.REQUEST_COLUMNS]


def test_without_the_baseline_arm_there_is_nothing_to_compare(raw, tmp_path):
    paths = process.process(raw, tmp_path / "out", baseline="none-such")
    assert pd.read_csv(paths["trials"]).shape[0] == 60
    assert (tmp_path / "out" / "comparisons.csv").read_text() == "\n"
    assert "quality_requests" in paths  # quality is scored against Native, not the baseline


def test_several_roots_load_only_what_they_name(raw, tmp_path):
    """The pipeline passes the setup folders its config names: a stale setup beside them is
    not read."""
    both = process.load_raw([raw / "sg", raw / "ct"])
    only_sg = process.load_raw([raw / "sg"])
    assert len(both["trials"]) == 60 and set(only_sg["trials"].setup) == {"sg"} and len(only_sg["trials"]) == 30
    paths = process.process([raw / "sg"], tmp_path / "out")
    assert "feasibility" not in paths and set(pd.read_csv(paths["trials"]).setup) == {"sg"}


def test_a_pair_whose_trials_ran_different_samples_is_refused(tmp_path):
    for arm in ("naive", "vtoken"):
        _write_trial(tmp_path / "raw", "sg", "sharegpt-s0", arm, 4, 0, sample="A" if arm == "naive" else "B")
        _write_trial(tmp_path / "raw", "sg", "sharegpt-s0", arm, 4, 1)
    with pytest.raises(ValueError, match=r"setup 'sg' pair 0 C = 4: trials ran 2 different request samples"):
        process.process(tmp_path / "raw", tmp_path / "out")


def test_one_wave_pairs_run_a_prefix_per_c_and_the_grid_tables_take_the_largest():
    """In a one-wave run each C of a pair runs its own prefix of the pair's sample: accepted
    per (pair, C); the grid tables carry the sample of the pair's largest C."""
    trials = pd.DataFrame({"setup": "s", "pair": [0, 0, 0, 0], "concurrency": [2, 2, 4, 4], "arm": ["a", "b"] * 2,
                           "trial_id": list("wxyz"), "sample_sha256": ["p2", "p2", "p4", "p4"]})
    assert process.check_pairing(trials).to_dict("records") == [{"setup": "s", "pair": 0, "sample_sha256": "p4"}]
    with pytest.raises(ValueError, match="pair 0 C = 4"):
        process.check_pairing(trials.assign(sample_sha256=["p2", "p2", "p4", "q4"]))


def test_quality_is_scored_against_native_and_a_planted_divergence_is_reported(tmp_path):
    base = ["the cat sat", "on the mat", "a b c", "x y"]
    for pair in range(2):
        for arm in ("full", "naive", "holefill", "vtoken"):
            text = list(base)
            if arm != "full":
                text[3] = "x z"  # every evicting arm differs from Native on request 3 (legitimately)
            if arm == "vtoken" and pair == 1:
                text[1] = "on a rug"  # planted: relocation changed an output
            _write_trial(tmp_path / "raw", "sg", "sharegpt-s0", arm, 4, pair, text=text)
    paths = process.process(tmp_path / "raw", tmp_path / "out")
    q = pd.read_csv(paths["quality_requests"])
    assert set(q.arm) == {"full", "naive", "holefill", "vtoken"} and (q[q.arm == "full"].rouge_l == 1.0).all()
    naive3 = q[(q.arm == "naive") & (q.req_index == 3)].rouge_l
    assert list(naive3) == [0.5, 0.5]  # "x z" vs Native's "x y": LCS 1 of 2 words
    ex = pd.read_csv(paths["exactness"], keep_default_na=False)
    bad = ex[ex.identical.astype(str) == "False"]
    assert len(ex) == 8 and ex.checked.astype(str).eq("True").all()
    assert list(zip(bad.pair, bad.req_index, bad.differing_arms)) == [(1, 1, "vtoken")]


def test_an_interrupted_write_leaves_only_its_temporary_folder(tmp_path, monkeypatch):
    def killed(src, dst):
        raise KeyboardInterrupt  # as if the process died between writing and the rename

    monkeypatch.setattr(rawio.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        _write_trial(tmp_path, "sg", "sharegpt-s0", "naive", 4, 0)
    assert not list((tmp_path / "sg/naive/c4").iterdir())  # no half-written trial, not even hidden
    monkeypatch.undo()
    _write_trial(tmp_path, "sg", "sharegpt-s0", "naive", 4, 0)  # the trial can be written again
    assert len(process.load_raw(tmp_path)["trials"]) == 1


def test_the_completion_marker_lists_exactly_the_finished_trials(raw, tmp_path):
    ids = [f"sg/{arm}/c{c}/p{p}" for arm in SPEED for c in (4, 8) for p in range(5)]
    marker = raw / "sg.done.json"
    with pytest.raises(FileNotFoundError, match="1 of 31 trials not written"):
        rawio.write_done(marker, raw, "sg", ids + ["sg/naive/c4/p9"])
    assert not marker.exists() and not list(raw.glob(".sg.done.json*"))
    rawio.write_done(marker, raw, "sg", ids)
    body = json.loads(marker.read_text())
    assert (body["setup"], body["raw_root"], body["count"]) == ("sg", ".", 30) and body["trial_ids"] == ids
    folders = rawio.read_done(marker)
    assert folders == [raw / t for t in ids]
    got = process.load_raw(folders)["trials"]  # the marker's trials, not the ct setup beside them
    assert len(got) == 30 and set(got.setup) == {"sg"}
    # a marker elsewhere finds the raw root through its relative path
    moved = rawio.write_done(tmp_path / "markers" / "sg.done.json", raw, "sg", ids)
    assert rawio.read_done(moved) == [(tmp_path / "markers" / os.path.relpath(raw, tmp_path / "markers") / t)
                                      for t in ids]
    shutil.rmtree(raw / ids[3])
    with pytest.raises(ValueError, match="1 listed trials have no trial.json"):
        rawio.read_done(marker)


# best_baseline on hand-made trials: arm -> (base_arm, mean retained blocks, mean live tokens)
BEST_ARMS = {"naive": ("naive", 10.0, 63.0), "vtoken": ("vtoken", 4.0, 63.0),
             "vtoken_pressure": ("vtoken", 3.5, 63.0), "paged_eviction": ("paged_eviction", 5.0, 60.0),
             "paged_eviction_policy": ("paged_eviction", 4.5, 61.0), "zipage": ("zipage", 6.0, 64.0)}
PAIR_SCALE = (0.9, 1.0, 1.1, 1.0)  # per-pair variation shared by every arm (means stay the arm's)


def _best_trials(arms, concurrency=(4, 8), setup="sg"):
    rows = [{"setup": setup, "arm": arm, "base_arm": base, "concurrency": c, "pair": p, "block_size": 16,
             "retained_blocks": blocks * s * (1 + (c == 4)), "live_tokens": live * s,
             "rouge_l_mean": 1.0 - 0.01 * p * (arm != "naive"), "sample_sha256": f"s{p}"}
            for arm, (base, blocks, live) in arms.items() for c in concurrency for p, s in enumerate(PAIR_SCALE)]
    return pd.DataFrame(rows)


def test_best_baseline_a_variant_can_win():
    got = process.best_baseline(_best_trials(BEST_ARMS), {}, held_out=0)
    assert set(got.baseline) == {"paged_eviction_policy"}  # 4.5 blocks < paged_eviction's 5.0, equal live tokens
    assert got.selected_by.iloc[0] == (
        "fewest retained blocks at naive's live tokens (63.0) at C = 8 among the baselines within 5 % = 3.15 tokens "
        "(blocks x 63.0 / live) or interpolated to them: paged_eviction 5.000 (live 60.0) -> 5.250, "
        "paged_eviction_policy 4.500 (live 61.0) -> 4.648, zipage 6.000 (live 64.0) -> 5.906")
    blocks = got[(got.metric == "retained_blocks") & (got.arm == "vtoken")].set_index("concurrency")
    assert blocks.estimate.to_dict() == pytest.approx({4: 4.0 / 4.5, 8: 4.0 / 4.5})


def test_best_baseline_is_chosen_at_the_largest_c_every_candidate_and_the_reference_ran():
    trials = pd.concat([_best_trials(BEST_ARMS),  # at C = 16 only naive and paged_eviction ran: not the choice's C
                        _best_trials({a: BEST_ARMS[a] for a in ("naive", "paged_eviction")}, concurrency=(16,))])
    trials.loc[(trials.concurrency == 16) & (trials.arm == "paged_eviction"), "retained_blocks"] = 1.0
    got = process.best_baseline(trials, {})
    assert set(got.baseline) == {"paged_eviction_policy"} and "at C = 8 " in got.selected_by.iloc[0]
    assert set(got.chosen_at) == {8}  # where the claims table reports it too


def test_best_baseline_never_picks_an_arm_outside_the_live_tokens_rule():
    arms = {**BEST_ARMS, "diffkv": ("diffkv", 2.0, 120.0), "diffkv_budget": ("diffkv", 4.6, 66.0)}  # 3.0 from 63: in
    got = process.best_baseline(_best_trials(arms), {}, held_out=0)
    # not diffkv, though it keeps the fewest blocks; diffkv_budget: 4.6 blocks for 66.0 tokens = 4.391 at 63
    assert set(got.baseline) == {"diffkv_budget"}
    assert got.selected_by.iloc[0].endswith(
        "zipage 6.000 (live 64.0) -> 5.906; outside the rule: diffkv 2.000 (live 120.0)")
    assert "diffkv_budget 4.600 (live 66.0) -> 4.391," in got.selected_by.iloc[0]
    # 70.9 is 12.5 % above 63 -- inside a looser max(5 %, B/2) = 8 tokens, outside 5 %
    loose = process.best_baseline(_best_trials({**arms, "diffkv_budget": ("diffkv", 4.6, 70.9)}), {}, held_out=0)
    assert set(loose.baseline) == {"paged_eviction_policy"}
    assert "outside the rule: diffkv 2.000 (live 120.0), diffkv_budget 4.600 (live 70.9)" in loose.selected_by.iloc[0]
    # the live tokens rule alone decides: diffkv at naive's live tokens wins
    assert set(process.best_baseline(_best_trials({**arms, "diffkv": ("diffkv", 2.0, 63.0)}), {}).baseline) \
        == {"diffkv"}
    # nothing eligible: one row for the setup, no baseline, the reason
    far = {a: (b, blocks, 200.0) if b in process.RECLAMATION_BASELINES else (b, blocks, live)
           for a, (b, blocks, live) in arms.items()}
    (row,) = process.best_baseline(_best_trials(far), {}, held_out=0).itertuples()
    assert pd.isna(row.baseline) and row.selected_by.startswith(
        "no reclamation baseline arm or variant within the equal-live-tokens rule in this setup (C = 8, naive's "
        "live tokens 63.0, 5 % = 3.15 tokens; no budgets of one mechanism bracket it: diffkv 2.000 (live 200.0)")


def test_best_baseline_gives_the_right_reason_when_nothing_is_chosen():
    """One candidate on Cs of its own is not "outside the equal-live-tokens rule"."""
    trials = pd.concat([_best_trials({a: BEST_ARMS[a] for a in ("naive", "vtoken", "paged_eviction")}),
                        _best_trials({"zipage": BEST_ARMS["zipage"]}, concurrency=(12,))])
    (row,) = process.best_baseline(trials, {}, held_out=0).itertuples()
    assert pd.isna(row.baseline) and row.selected_by == (
        "no C that every reclamation baseline and naive ran (naive: C = [4, 8], paged_eviction: C = [4, 8], "
        "zipage: C = [12])")
    (row,) = process.best_baseline(_best_trials({a: BEST_ARMS[a] for a in ("naive", "vtoken")}), {}).itertuples()
    assert row.selected_by == "no reclamation baseline arm or variant ran in this setup"


def test_best_baseline_does_not_reward_the_smaller_budget():
    """Inside the window, raw blocks favour whoever keeps fewer tokens (Zipage-style
    at 60.0 live tokens, 4.0 blocks, against PagedEviction at 62.0, 4.1 blocks). At Naive-Evict's
    62.8 live tokens PagedEviction holds fewer (4.153 against 4.187)."""
    arms = {"naive": ("naive", 10.0, 62.8), "vtoken": ("vtoken", 4.0, 62.8),
            "paged_eviction": ("paged_eviction", 4.1, 62.0), "zipage": ("zipage", 4.0, 60.0)}
    got = process.best_baseline(_best_trials(arms), {})
    assert set(got.baseline) == {"paged_eviction"}, got.selected_by.iloc[0]


def test_best_baseline_ties_go_to_the_first_arm_name_whatever_the_row_order():
    arms = {a: BEST_ARMS[a] for a in ("naive", "vtoken")} | {"zipage": ("zipage", 0.3, 63.0),
                                                              "diffkv": ("diffkv", 0.1 + 0.2, 63.0)}  # 0.3 to rounding
    trials = _best_trials(arms)
    for order in (trials, trials.iloc[::-1], trials.sample(frac=1.0, random_state=1),
                  trials.sample(frac=1.0, random_state=2)):
        got = process.best_baseline(order.reset_index(drop=True), {})
        assert set(got.baseline) == {"diffkv"}  # diffkv < zipage by name (zipage comes first in the tuple)


def test_best_baseline_compares_every_treatment_arm_with_the_chosen_baseline():
    trials = _best_trials(BEST_ARMS)
    sla = pd.DataFrame({"setup": "sg", "arm": ["vtoken", "vtoken_pressure", "paged_eviction_policy", "naive"] * 4,
                        "pair": [p for p in range(4) for _ in range(4)], "sample_sha256": "x",
                        "sla_throughput": [2.0, 1.5, 1.0, 0.5] * 4})
    got = process.best_baseline(trials, {"sla": sla})
    assert set(got.baseline) == {"paged_eviction_policy"}
    per_arm = got.groupby("arm").metric.agg(lambda m: sorted(set(m))).to_dict()
    assert per_arm == {a: ["live_tokens", "retained_blocks", "rouge_l_mean", "sla_throughput"]
                       for a in ("vtoken", "vtoken_pressure")}
    blocks = got[(got.metric == "retained_blocks") & (got.concurrency == 8)].set_index("arm").estimate
    assert blocks.to_dict() == pytest.approx({"vtoken": 4.0 / 4.5, "vtoken_pressure": 3.5 / 4.5})
    assert got[got.metric == "sla_throughput"].set_index("arm").estimate.to_dict() == pytest.approx(
        {"vtoken": 2.0, "vtoken_pressure": 1.5})
    # an absent treatment arm is skipped, one given as a string still works
    only = process.best_baseline(trials[trials.arm != "vtoken_pressure"], {})
    assert set(only.arm) == {"vtoken"} and set(process.best_baseline(trials, {}, 0, "vtoken_pressure").arm) \
        == {"vtoken_pressure"}


def test_best_baseline_is_chosen_on_held_out_pairs_and_judged_on_the_others():
    """Chosen and judged on the same pairs, a candidate wins by its own noise.
    PagedEviction holds the fewest blocks in pair 0 only (the choice pair); the comparisons use
    pairs 1-3 alone."""
    arms = {"naive": ("naive", 10.0, 63.0), "vtoken": ("vtoken", 4.0, 63.0),
            "paged_eviction": ("paged_eviction", 5.0, 63.0), "zipage": ("zipage", 4.8, 63.0)}
    trials = _best_trials(arms)
    trials.loc[(trials.arm == "paged_eviction") & (trials.pair == 0), "retained_blocks"] /= 2
    got = process.best_baseline(trials, {})
    assert set(got.baseline) == {"paged_eviction"}
    assert got.selected_by.iloc[0].endswith("(chosen on pair 0, judged on pairs 1, 2, 3)")
    blocks = got[(got.metric == "retained_blocks") & (got.arm == "vtoken")]
    assert set(blocks.n) == {3} and blocks.estimate.iloc[0] == pytest.approx(4.0 / 5.0)  # pair 0 not in it
    on_all = process.best_baseline(trials, {}, held_out=0)
    assert set(on_all.baseline) == {"paged_eviction"} and set(on_all[on_all.metric == "retained_blocks"].n) == {4}
    two = trials[trials.pair < 2]  # two pairs: nothing to hold out
    assert process.best_baseline(two, {}).selected_by.iloc[0].endswith(
        "(chosen and judged on the same 2 pairs: too few to hold 1 out)")


def test_the_completion_marker_lists_and_counts_the_search_probes_apart(raw, tmp_path):
    for c, feasible in ((6, False), (5, True)):
        _write_trial(raw, "ct", "contract-256-s0", "naive", c, 0, probe=True, preempted=not feasible)
    ids = [f"ct/{arm}/c{c}/p{p}" for arm in SPEED for c in (4, 8) for p in range(5)]
    probes = ["ct/naive/c6/p0", "ct/naive/c5/p0"]
    marker = rawio.write_done(tmp_path / "ct.done.json", raw, "ct", ids, probes)
    body = json.loads(marker.read_text())
    assert (body["count"], body["trial_ids"], body["capacity_probes"], body["capacity_probe_ids"]) == (
        30, ids, 2, probes)
    folders = rawio.read_done(marker)
    assert [str(f.relative_to(marker.parent / body["raw_root"])) for f in folders] == ids + probes
    assert process.trial_feasible(folders[-1]) and not process.trial_feasible(folders[-2])
    body["capacity_probes"] = 3
    marker.write_text(json.dumps(body))
    with pytest.raises(ValueError, match="capacity_probes 3 but 30 trial ids and 2 probe ids"):
        rawio.read_done(marker)
    with pytest.raises(FileNotFoundError, match="1 of 31 trials not written"):
        rawio.write_done(tmp_path / "x.done.json", raw, "ct", ids, ["ct/naive/c7/p0"])
