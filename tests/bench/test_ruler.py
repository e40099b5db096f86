"""RULER offline (vtoken.bench.lmeval.ruler, ruler_grid, ruler_table): documents built with the network
blocked and the local tokenizer, the pressing pool and budgets on hand-made prompt lengths, the
screen rule, the permutation chance, and the table and figure scripts on hand-written lm-eval
outputs and sinks -- exact scores, blocks, and the exactness check."""

import json
import runpy
import socket
import sys
from pathlib import Path

import pandas as pd
import pytest

from vtoken.bench.lmeval import ruler
from vtoken.bench.grid import ruler as ruler_grid
from vtoken.bench.lmeval.ruler_table import check_exact, informative
from vtoken.plugin.sink import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_network(monkeypatch):
    """Every socket connection fails (as on the offline machine this must run on)."""
    def refuse(*args, **kwargs):
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(OSError, match="network disabled"):
        socket.create_connection(("pypi.org", 443), timeout=1)


def test_every_offline_task_builds_its_documents_with_the_network_blocked(model_dir, nltk_dir, no_network, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    for task, spec in ruler.TASKS.items():
        path = ruler.write_data(tmp_path / f"{task}.jsonl", task, 1024, 3, model_dir, seed=0, nltk_dir=nltk_dir)
        docs = ruler.read_data(path)
        assert len(docs) == 3, task
        for d in docs:
            assert d["task"] == task and d["max_length"] == 1024
            assert d["prompt_tokens"] == len(tok(ruler.prompt(d)).input_ids)
            assert d["prompt_tokens"] + spec.max_gen_toks <= 1024 + ruler_grid.SLACK
            assert d["outputs"] and all(isinstance(o, str) for o in d["outputs"])
        if task.startswith("niah"):  # the needle is in the context
            assert all(d["outputs"][0] in d["input"] for d in docs)
    again = ruler.write_data(tmp_path / "again.jsonl", "niah_single_1", 1024, 3, model_dir, seed=0, nltk_dir=nltk_dir)
    assert again.read_text() == (tmp_path / "niah_single_1.jsonl").read_text()  # seeded: every arm, same documents


def test_missing_punkt_data_is_named_before_lm_eval_would_download_it(model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="punkt_tab is missing.*python -m vtoken.assets punkt"):
        ruler.write_data(tmp_path / "x.jsonl", "vt", 1024, 2, model_dir, nltk_dir=tmp_path / "empty")
    assert not (tmp_path / "x.jsonl").exists()


def test_hub_tasks_are_refused_naming_why():
    with pytest.raises(ValueError, match="'niah_single_2' needs the network"):
        ruler.check_task("niah_single_2")
    with pytest.raises(ValueError, match="'nope' is not a RULER task"):
        ruler.check_task("nope")


def test_pressing_pool_and_budget_on_hand_made_lengths(tmp_path):
    # 4 requests of the longest (990 + 128 = 1118 tokens = 70 blocks of 16) + the null block.
    assert ruler.pool_blocks([100, 200, 990], 128, 16, 4) == 4 * 70 + 1
    assert ruler.pool_blocks([992], 128, 16, 2) == 2 * 70 + 1  # 1120 tokens: exactly 70 blocks
    assert ruler.pool_blocks([993], 128, 16, 2) == 2 * 71 + 1
    assert ruler.budget([800, 820, 835], 0.25) == 205
    assert ruler.budget([800, 820, 835, 900], 0.5) == 414  # median 827.5
    with pytest.raises(ValueError, match="kept fraction 1.0 must lie in"):
        ruler.budget([800], 1.0)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"task": "niah_single_1", "max_length": 1024, "prompt_tokens": p,
                                        "outputs": ["1"], "index": i}) + "\n"
                            for i, p in enumerate([800, 820, 835])))
    s = ruler.run_settings(data, 0.25, 4, 16)
    assert (s["budget"], s["pool_blocks"], s["max_gen_toks"], s["median_prompt_tokens"]) == (205, 4 * 61 + 1, 128, 820)
    assert ruler.run_settings(data, None, 4, 16)["budget"] is None


def test_screen_rule_and_permutation_chance():
    assert informative(1.0, 0.0, 0.0, 0.1)
    assert not informative(0.19, 0.1, 0.0, 0.1)  # 0.19 - 0.196 is not above 0.1
    assert informative(0.5, 0.1, 0.1, 0.1) and not informative(0.5, 0.1, 0.21, 0.1)
    refs = [["123"], ["456"], ["789"]]
    assert ruler.permutation_chance(["123", "456", "789"], refs) == 0.0
    assert ruler.permutation_chance(["x 456 y", "nothing", "NOTHING"], refs) == pytest.approx(1 / 3)
    assert ruler.score(" The answer: 123.", ["123"]) == 1.0 and ruler.score("12", ["123"]) == 0.0


def _config():
    import yaml

    return yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())


def test_grid_runs_and_arguments():
    cfg = _config()
    cfg["ruler"] |= {"arms": ["full", "naive", "paged_eviction", "paged_eviction_policy", "diffkv_budget"],
                     "kept": [0.25, 0.5], "policies": ["h2o", "scissorhands"]}
    ruler_grid.check(cfg)
    assert ruler_grid.runs(cfg) == [
        "full", "naive.h2o-k25", "naive.scissorhands-k25", "naive.h2o-k50", "naive.scissorhands-k50",
        "paged_eviction-k25", "paged_eviction-k50", "paged_eviction_policy.h2o-k25",
        "paged_eviction_policy.scissorhands-k25", "paged_eviction_policy.h2o-k50",
        "paged_eviction_policy.scissorhands-k50", "diffkv_budget-k25", "diffkv_budget-k50"]
    args = ruler_grid.run_args(cfg, "niah_single_1-1024", "diffkv_budget-k50", "d.jsonl")
    vt = json.loads(next(a for a in args if a.startswith("--vtoken="))[len("--vtoken="):])
    engine = json.loads(next(a for a in args if a.startswith("--engine="))[len("--engine="):])
    assert "--arm=diffkv" in args and "--kept=0.5" in args and "--ruler-c-press=4" in args
    assert "budget" not in vt and vt["arm_options"] == {"kv_buffer": 32}  # the kept fraction's budget, not 64
    assert engine["max_model_len"] == 1024 + ruler_grid.SLACK and engine["max_num_seqs"] == 8
    assert engine["enable_chunked_prefill"] is False  # prompts whole: no schedule-dependent chunk boundaries
    pe = ruler_grid.run_args(cfg, "vt-2048", "paged_eviction_policy.scissorhands-k25", "d.jsonl")
    assert "--policy=scissorhands" in pe and '"score": "scissorhands"' in next(a for a in pe if "--vtoken" in a)


@pytest.mark.parametrize("key, value, match", [
    ("tasks", ["qa_squad"], "ruler.tasks.*needs the network"),
    ("arms", ["naive"], "must hold 'full'"),
    ("arms", ["full", "bogus"], "'bogus' is not an implemented arm or a variant"),
    ("kept", [0.5, 1.0], "1.0 must lie in"),
    ("num_concurrent", 4, "must exceed ruler.c_press"),
])
def test_grid_refuses_bad_keys(key, value, match):
    cfg = _config()
    cfg["ruler"][key] = value
    with pytest.raises(ValueError, match=match):
        ruler_grid.check(cfg)


# --- the table and figure scripts on hand-written lm-eval outputs and sinks --------------------

class _NS(dict):
    __getattr__ = dict.__getitem__


CELL = "niah_single_1-1024"
REFS = ["111", "222", "333", "444"]


def _sink(path: Path, blocks: list[int], free: int, preemptions: int, moves: int) -> None:
    """Four requests of 800 prompt tokens, one decode step each holding ``blocks[i]`` blocks."""
    header = {"type": "engine", "schema": SCHEMA_VERSION, "pid": 1, "t": 0.0, "config": {}, "block_size": 16,
              "usable_blocks": 200, "max_num_seqs": 8}
    req = lambda i, tokens, sched, held: {"req_id": f"r{i}-0badcafe", "tokens": tokens, "scheduled": sched,  # noqa: E731
                                          "live_tokens": min(tokens, 205), "blocks_held": held, "fill": [0, 0, 0, held],
                                          "released": 0}
    steps = [{"type": "step", "step": 0, "t": 1.0, "requests": [req(i, 800, 800, 50) for i in range(4)], "running": 4,
              "waiting": 4, "free_blocks": free, "blocks_released": 0, "moves": 0, "preemptions": 0},
             {"type": "step", "step": 1, "t": 2.0, "requests": [req(i, 801, 1, b) for i, b in enumerate(blocks)],
              "running": 4, "waiting": 0, "free_blocks": free + 10, "blocks_released": 0, "moves": moves,
              "preemptions": preemptions}]
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *steps]))


def _run(root: Path, run: str, answers: list[str], blocks: list[int], free=0, preemptions=0, moves=0) -> str:
    arm, policy, kept = ruler_grid.parse(run)
    folder = root / CELL / run
    folder.mkdir(parents=True)
    scores = [ruler.score(a, [r]) for a, r in zip(answers, REFS)]
    mean = sum(scores) / 4
    se = (sum((s - mean) ** 2 for s in scores) / 3) ** 0.5 / 2
    body = {"tasks": {"ruler_offline": {"score": mean, "stderr": se, "n": 4, "metric": "score"}},
            "vtoken": {"arm": {"paged_eviction_policy": "paged_eviction"}.get(arm, arm), "policy": policy},
            "seconds": 60.0, "ruler": {"task": "niah_single_1", "length": 1024, "kept": kept,
                                       "budget": None if kept is None else 205, "median_prompt_tokens": 820,
                                       "max_prompt_tokens": 838, "block_size": 16, "pool_blocks": 201, "c_press": 4}}
    (folder / "results.json").write_text(json.dumps(body))
    (folder / "samples_ruler_offline.jsonl").write_text("".join(
        json.dumps({"doc": {"index": i, "outputs": [REFS[i]]}, "filtered_resps": [a], "score": s}) + "\n"
        for i, (a, s) in enumerate(zip(answers, scores))))
    _sink(folder / "sink.jsonl", blocks, free, preemptions, moves)
    return str(folder / "results.json")


def _script(name: str, inputs: dict, outputs: dict, params: dict, tmp: Path) -> None:
    sys.path.insert(0, str(REPO / "workflows/scripts"))
    try:
        runpy.run_path(str(REPO / f"workflows/scripts/{name}.py"), run_name="__main__", init_globals={
            "snakemake": _NS(input=_NS(inputs), output=_NS(outputs), params=_NS(params), log=[str(tmp / "log")])})
    finally:
        sys.path.remove(str(REPO / "workflows/scripts"))


def _grid(tmp: Path, vtoken_answers: list[str]) -> list[str]:
    return [_run(tmp, "full", ["111", "222", "333", "x"], [50, 50, 50, 50], free=2),
            _run(tmp, "naive.h2o-k25", ["111", "222", "x", "y"], [48, 50, 46, 44], free=0, preemptions=3),
            _run(tmp, "vtoken.h2o-k25", vtoken_answers, [13, 14, 13, 14], free=5, moves=2400),
            _run(tmp, "paged_eviction_policy.h2o-k25", ["111", "x", "y", "z"], [14, 14, 14, 14], free=7)]


def _params():
    return {"variants": {"paged_eviction_policy": "paged_eviction"},
            "variant_labels": {"paged_eviction_policy": "PagedEviction (policy scores)"},
            "ruler_arms": ["full", "naive", "vtoken", "paged_eviction_policy"], "min_margin": 0.1, "c_press": 4,
            "num_concurrent": 8}


def test_table_and_figure_on_hand_written_runs(tmp_path):
    results = _grid(tmp_path / "runs", ["111", "222", "x", "y"])
    out = {ext: str(tmp_path / f"table_ruler.{ext}") for ext in ("tex", "md", "csv")}
    _script("table_ruler", {"results": results}, out, _params(), tmp_path)
    t = pd.read_csv(out["csv"]).set_index("run")
    assert list(t.index) == ["full", "naive.h2o-k25", "vtoken.h2o-k25", "paged_eviction_policy.h2o-k25"]
    assert t.score.to_dict() == {"full": 0.75, "naive.h2o-k25": 0.5, "vtoken.h2o-k25": 0.5,
                                 "paged_eviction_policy.h2o-k25": 0.25}
    assert t.retained_blocks.to_dict() == {"full": 50.0, "naive.h2o-k25": 47.0, "vtoken.h2o-k25": 13.5,
                                           "paged_eviction_policy.h2o-k25": 14.0}
    assert (t.loc["naive.h2o-k25", "preemptions"], t.loc["naive.h2o-k25", "min_free_blocks"]) == (3, 0)
    assert t.loc["vtoken.h2o-k25", "moved_tokens"] == 2400 and t.chance.max() == 0.0
    assert set(t.prompt_blocks) == {53}  # ceil(838 / 16): the blocks the longest prompt needs
    assert t.native_informative.all()  # Native 0.75 - 1.96 x 0.25 = 0.26 > chance 0 + 0.1
    fig = {"pdf": str(tmp_path / "fig_ruler.pdf"), "png": str(tmp_path / "fig_ruler.png")}
    _script("fig_ruler", {"table": out["csv"]}, fig, _params(), tmp_path)
    assert Path(fig["png"]).stat().st_size > 20_000


def test_table_fails_when_naive_and_vtoken_answer_differently(tmp_path):
    results = _grid(tmp_path / "runs", ["111", "222", "x", "DIFFERENT"])
    out = {ext: str(tmp_path / f"table_ruler.{ext}") for ext in ("tex", "md", "csv")}
    with pytest.raises(ValueError, match="exactness broken: naive.h2o-k25 and vtoken.h2o-k25 differ on document 3"):
        _script("table_ruler", {"results": results}, out, _params(), tmp_path)
    assert not Path(out["csv"]).exists()


def test_exactness_check_pairs_by_policy_and_fraction(tmp_path):
    _grid(tmp_path, ["111", "222", "x", "y"])
    runs = {p.name: p for p in (tmp_path / CELL).iterdir()}
    assert check_exact(runs) == ["naive.h2o-k25 = vtoken.h2o-k25"]


def test_ruler_trial_workload_rebuilds_its_prompts_offline(model_dir, nltk_dir, no_network, monkeypatch):
    from dataclasses import replace

    from vtoken.bench.workloads import materialize, ruler as ruler_workload
    from vtoken.bench.workloads.prompt import PromptRenderer

    monkeypatch.chdir(REPO)  # the NLTK data at its default place (data/nltk_data), as in the pipeline
    renderer = PromptRenderer(model_dir)
    cfg = ruler_workload.RulerWorkloadConfig(num_requests=3)
    requests, stats = ruler_workload.build(cfg, renderer)
    spec = ruler_workload.spec("ruler-niah-1k", cfg, renderer, stats)
    texts = materialize(requests, None, renderer, spec)
    assert [renderer.count(t) for t in texts] == [r.prompt_tokens for r in requests]
    assert all(r.max_tokens == 32 and r.ignore_eos and r.prompt_tokens > 700 for r in requests)
    assert all(t.endswith("mentioned in the provided text is") for t in texts)
    tampered = [replace(requests[0], prompt_sha256="0" * 64), *requests[1:]]
    with pytest.raises(ValueError, match="req 0: the rebuilt RULER prompt's hash differs"):
        materialize(tampered, None, renderer, spec)


def test_lmeval_run_refuses_a_ruler_run_without_its_data_before_any_server(tmp_path, capsys):
    from vtoken.bench.lmeval.run import main

    with pytest.raises(SystemExit):
        main(["--arm=full", "--tasks=ruler_offline", f"--out={tmp_path / 'out'}"])
    assert "--ruler-data=None: task ruler_offline needs its data file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--arm=naive", "--kept=0.25", f"--out={tmp_path / 'out'}"])
    assert "--kept needs --ruler-c-press and --ruler-data" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_kvpress_policy_is_named_without_a_colon_and_parsed_back():
    cfg = _config()
    cfg["ruler"] |= {"arms": ["full", "vtoken"], "kept": [0.25], "policies": ["kvpress:KnormPress"]}
    ruler_grid.check(cfg)
    assert ruler_grid.runs(cfg) == ["full", "vtoken.kvpress-KnormPress-k25"]
    assert "--policy=kvpress:KnormPress" in ruler_grid.run_args(cfg, "niah_single_1-1024",
                                                               "vtoken.kvpress-KnormPress-k25", "d.jsonl")
    assert ruler_grid.parse("vtoken.kvpress-KnormPress-k25") == ("vtoken", "kvpress:KnormPress", 0.25)


@pytest.mark.engine
@pytest.mark.slow  # RULER is off in the default profile: in `make test-slow`
def test_the_server_check_holds_for_naive_and_vtoken_in_flight_together_and_fails_on_a_planted_token(
        model_dir, nltk_dir, tmp_path):
    """Six RULER documents, all six in flight behind vLLM's server at a pool that holds three,
    chunked prefill off as the grid serves them (``ruler_grid.run_args``): Naive-Evict and vToken answer
    token for token alike; one token changed in one answer fails the check."""
    from transformers import AutoTokenizer

    from vtoken.bench.lmeval.run import main

    data = ruler.write_data(tmp_path / "d.jsonl", "niah_single_1", 1024, 6, model_dir, seed=0, nltk_dir=nltk_dir)
    engine = {"block_size": 16, "max_model_len": 1024 + ruler_grid.SLACK, "max_num_seqs": 6, "dtype": "float32",
              "enable_chunked_prefill": False}
    runs = {}
    for arm in ("naive", "vtoken"):
        out = tmp_path / CELL / f"{arm}.h2o-k25"
        main([f"--arm={arm}", "--policy=h2o", "--kept=0.25", f"--engine={json.dumps(engine)}", "--tasks=ruler_offline",
              f"--ruler-data={data}", "--ruler-c-press=3", f"--model-dir={model_dir}", "--num-concurrent=6",
              f"--out={out}"])
        runs[out.name] = out
        body = json.loads((out / "results.json").read_text())
        assert body["evicted_tokens"] > 6 * 500 and body["tasks"]["ruler_offline"]["n"] == 6  # ~75 % of each prompt
    assert check_exact(runs) == ["naive.h2o-k25 = vtoken.h2o-k25"]
    samples = out / "samples_ruler_offline.jsonl"
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok(lines[4]["filtered_resps"][0], add_special_tokens=False).input_ids
    ids[-1] = (ids[-1] + 1) % tok.vocab_size  # one token of one answer
    lines[4]["filtered_resps"] = [tok.decode(ids)]
    samples.write_text("".join(json.dumps(s) + "\n" for s in lines))
    with pytest.raises(ValueError, match=f"exactness broken: naive.h2o-k25 and vtoken.h2o-k25 differ on document "
                                         f"{lines[4]['doc']['index']}"):
        check_exact(runs)
