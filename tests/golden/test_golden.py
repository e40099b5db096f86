"""Golden behaviour: the fixed small trial of every arm (``tests/golden/trial.py``) gives
token-identical outputs and identical block tables to the recorded ``trial.jsonl``, run as the
pipeline runs its trials: in a worker process at one torch thread (the record was taken at two
threads in one process; the two give the same tables).

Re-record only when a change alters behaviour on purpose (``python -m tests.golden.trial``)
and say why in the commit message; a refactor must pass unchanged.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.golden import trial

# The trial in a child process as the pipeline's trial workers run theirs
# (vtoken.bench.harness.workers): one torch thread, pinned to one core.
CHILD = """
import json, sys, torch
from pathlib import Path
from tests.golden import trial
records = trial.run(*map(Path, sys.argv[1:5]))
Path(sys.argv[5]).write_text(json.dumps({"threads": torch.get_num_threads(), "records": records}))
"""


@pytest.mark.engine
def test_every_arm_matches_the_recorded_trial_in_a_one_thread_worker(tmp_path, model_dir, sharegpt_dir):
    out, core = tmp_path / "records.json", min(os.sched_getaffinity(0))
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "raw"), str(model_dir), str(sharegpt_dir),
                           str(REPO), str(out)], env=env, cwd=REPO, capture_output=True, text=True, timeout=1200,
                          preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["threads"] == 1
    got = result["records"]
    expected = trial.read()
    assert {r["arm"] for r in expected} == set(trial.ARMS)
    difference = trial.first_difference(expected, got)
    assert difference is None, difference


def test_first_difference_names_the_arm_table_row_and_column():
    expected = trial.read()
    assert trial.first_difference(expected, expected) is None
    changed = [dict(r, columns={k: list(v) for k, v in r["columns"].items()}) for r in expected]
    vtoken_engine = next(r for r in changed if r["arm"] == "vtoken" and r["table"] == "engine_steps")
    row = vtoken_engine["columns"]["blocks_freed"].index(max(vtoken_engine["columns"]["blocks_freed"]))
    vtoken_engine["columns"]["blocks_freed"][row] -= 1
    message = trial.first_difference(expected, changed)
    assert message.startswith(f"arm=vtoken table=engine_steps column=blocks_freed row={row}: ")
