"""lm-eval end to end through the plugin: held-out ShareGPT prompts, the vToken arm
(H2O at a 16-token budget, so it evicts) behind vLLM's server, lm-eval's local-completions model
and the repository's task YAML, ROUGE-L with lm-eval's standard error; then the fidelity data
built from the logged samples. Real server, real model, real data (~60-90 s)."""

import json
import math

import pytest

pytestmark = pytest.mark.engine

NUM_DOCS = 3


@pytest.mark.slow  # lm-eval is off in the default profile: in `make test-slow`
def test_lmeval_scores_an_arm_through_the_plugin(model_dir, sharegpt_dir, tmp_path):
    from vtoken.bench.lmeval.data import build_continuation, build_fidelity, used_rows
    from vtoken.bench.lmeval.run import run

    data = tmp_path / "data"
    cont = build_continuation(data / "sharegpt_continuation.jsonl", NUM_DOCS, model_dir=model_dir,
                              sharegpt_dir=sharegpt_dir)
    docs = [json.loads(line) for line in cont.read_text().splitlines()]
    assert len(docs) == NUM_DOCS and not {d["row"] for d in docs} & used_rows()  # held out of every manifest
    out = run(tmp_path / "vtoken-b16", {"arm": "vtoken", "policy": "h2o", "budget": 16}, ["sharegpt_continuation"],
              data, model_dir, max_gen_toks=32, dtype="float32", block_size=16, max_model_len=512)
    body = json.loads((out / "results.json").read_text())
    result = body["tasks"]["sharegpt_continuation"]
    assert result["n"] == NUM_DOCS and 0 < result["score"] <= 1 and math.isfinite(result["stderr"])
    assert body["evicted_tokens"] > 0  # the answers were generated under eviction
    samples = out / "samples_sharegpt_continuation.jsonl"
    fid = build_fidelity(data / "sharegpt_fidelity.jsonl", cont, samples)
    generated = {json.loads(s)["doc"]["prompt"]: json.loads(s)["filtered_resps"][0]
                 for s in samples.read_text().splitlines()}
    assert all(generated[d["prompt"]] == d["reference"] for d in map(json.loads, fid.read_text().splitlines()))


def test_lmeval_run_refuses_an_unknown_task_before_any_server(tmp_path):
    from vtoken.bench.lmeval.run import run

    with pytest.raises(ValueError, match="'nope' is not one of"):
        run(tmp_path / "x", None, ["nope"], tmp_path)
    with pytest.raises(ValueError, match="no sharegpt_fidelity.jsonl"):
        run(tmp_path / "x", None, ["sharegpt_fidelity"], tmp_path)
