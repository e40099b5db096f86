"""The serving runner's checks before any server starts: bad rates, the stock arm at a
block size vLLM's CPU attention refuses, and a resumed run whose written trials ran other
settings -- each an error naming the flag or setting; the plan pairs arms on one sample per pair."""

import json

import pytest

from vtoken.bench.__main__ import main

MANIFEST = "data/workloads/contract-128-s0.jsonl"
BASE = [MANIFEST, "--arms=naive,vtoken", "--budget=64", "--pairs=2", "--num-requests=4", "-C", "4",
        "--block-size=16"]


@pytest.mark.parametrize("extra, named", [
    (["--rates=0"], "--rates=[0.0]"),
    (["--rates=1,1"], "must be distinct"),
    (["--rates=1", "--stock"], "--block-size=16"),
    (["--rates=1", "--one-wave"], "--one-wave"),
])
def test_bad_serving_arguments_exit_naming_the_flag(model_dir, tmp_path, capsys, extra, named):
    with pytest.raises(SystemExit) as exc:
        main(["serving", *BASE, f"--raw-root={tmp_path}", *extra, "--dry-run"])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


def test_plan_and_resume_check(model_dir, tmp_path, capsys):
    from vtoken.bench.__main__ import run_config
    from vtoken.bench.harness.serving import ServingRun

    args = ["serving", *BASE, f"--raw-root={tmp_path}", "--rates=1,2", "--dry-run"]
    assert main(args) == 0
    planned = capsys.readouterr().out.splitlines()
    assert len(planned) == 2 * 2 * 2  # pairs x arms x rates
    samples = {line.split()[0].rsplit("/p", 1)[1]: line.split()[1] for line in planned}
    assert len(set(samples.values())) == 2  # each pair its own sample, shared by its arms and rates
    from vtoken.bench.__main__ import build_parser

    run = ServingRun(run_config(build_parser().parse_args(args)), (1.0, 2.0))
    folder = run.folder(0, "naive", 1.0)
    folder.mkdir(parents=True)
    (folder / "trial.json").write_text(json.dumps({"settings": run.settings | {"budget": 32}}))
    with pytest.raises(ValueError, match="budget=32"):
        run.pending()
    (folder / "trial.json").write_text(json.dumps({"settings": run.settings | {"pairs": 9}}))
    assert len(run.pending()) == 7  # another pair count resumes: the written trial is kept
