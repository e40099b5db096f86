"""The sink's one typed record (vtoken.plugin.sink.StepLine): what a reader gets from a line."""

import json

import pytest

from vtoken.plugin.sink import SCHEMA_VERSION, RequestLine, StepLine, read, step_line

REQUEST = {"req_id": "a-0123abcd", "scheduled": 1, "blocks_held": 2}
STEP = {"type": "step", "step": 3, "t": 1.5, "free_blocks": 10, "running": 1, "waiting": 0, "preemptions": 0,
        "blocks_released": 1, "requests": [REQUEST]}


def test_a_line_without_the_workers_report_reads_with_every_field_at_its_default():
    line = step_line(STEP)
    assert set(line) == set(StepLine.__annotations__) and set(line["requests"][0]) == set(RequestLine.__annotations__)
    assert line["worker_pid"] is None and line["moves"] == 0 and line["policy_ms"] == 0.0 and line["paused"] == []
    r = line["requests"][0]
    assert (r["tokens"], r["live_tokens"], r["fill"], r["charged_blocks"], r["low_tokens"]) == (None, None, None, 0, 0)


def test_null_counts_read_as_zero_and_side_blocks_default_to_the_charge():
    line = step_line({**STEP, "moves": None, "requests": [{**REQUEST, "charged_blocks": 2, "low_tokens": None}]})
    assert line["moves"] == 0
    assert line["requests"][0]["side_blocks"] == 2 and line["requests"][0]["low_tokens"] == 0
    assert step_line({**STEP, "requests": [{**REQUEST, "charged_blocks": 2, "side_blocks": 1.25}]}
                     )["requests"][0]["side_blocks"] == 1.25


@pytest.mark.parametrize(("change", "message"), [
    ({"movez": 3}, r"unknown fields \['movez'\]"),
    ({"requests": [{**REQUEST, "tokenz": 1}]}, r"request: unknown fields \['tokenz'\]"),
])
def test_a_field_no_version_writes_is_an_error(change, message):
    with pytest.raises(ValueError, match=message):
        step_line({**STEP, **change})


def test_a_missing_field_every_version_writes_is_an_error():
    line = dict(STEP)
    del line["free_blocks"]
    with pytest.raises(ValueError, match=r"missing fields \['free_blocks'\]"):
        step_line(line)


def test_read_types_every_step_line(tmp_path):
    path = tmp_path / "sink.jsonl"
    header = {"type": "engine", "schema": SCHEMA_VERSION, "pid": 1, "t": 0.0}
    path.write_text("".join(json.dumps(x) + "\n" for x in (header, STEP, {**STEP, "step": 4, "evicted": 5})))
    got_header, steps = read(path)
    assert got_header == header and [s["step"] for s in steps] == [3, 4] and [s["evicted"] for s in steps] == [0, 5]
