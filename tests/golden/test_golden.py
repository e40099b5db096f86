"""Golden behaviour: the fixed small trial of every arm (``tests/golden/trial.py``) gives
token-identical outputs and identical block tables to the recorded ``trial.jsonl``.

Re-record only when a change alters behaviour on purpose (``python -m tests.golden.trial``)
and say why in the issue's note; a refactor must pass unchanged.
"""

import pytest

from tests.conftest import REPO
from tests.golden import trial


@pytest.mark.engine
def test_every_arm_matches_the_recorded_trial(tmp_path, model_dir, sharegpt_dir):
    got = trial.run(tmp_path / "raw", model_dir, sharegpt_dir, REPO)
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
