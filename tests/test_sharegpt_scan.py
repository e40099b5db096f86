"""The tolerant scanner on small hand-made inputs (pure logic, no asset)."""

import pytest

from vtoken.assets.sharegpt import RepairResult, scan_records


def test_complete_array():
    assert scan_records('[ {"a": 1} ,\n {"b": 2}]') == RepairResult(2, 22, False, 0)


def test_empty_array():
    assert scan_records("[ ]") == RepairResult(0, 2, False, 0)


def test_truncated_last_record_is_dropped():
    text = '[{"a": 1}, {"b": "cut mid-str'
    assert scan_records(text) == RepairResult(1, 9, True, len(text) - 9)


def test_damage_far_from_the_end_is_an_error():
    text = '[{"a": 1}, {"b": oops}, ' + '{"c": "' + "x" * (2 << 20) + '"}]'
    with pytest.raises(ValueError, match="does not parse"):
        scan_records(text)


def test_non_object_record_is_an_error():
    with pytest.raises(ValueError, match="record 0 .* is int"):
        scan_records("[1, 2]")


def test_missing_separator_is_an_error():
    with pytest.raises(ValueError, match="expected ',' or ']'"):
        scan_records('[{"a": 1} {"b": 2}]')
