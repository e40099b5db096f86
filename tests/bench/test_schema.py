"""Raw-table schemas: the checks a runner's output must pass."""

import numpy as np
import pandas as pd
import pytest

from vtoken.bench.raw import schema


def _requests():
    return pd.DataFrame({
        "trial_id": ["t"] * 2, "arm": "naive", "req_index": [0, 1], "req_id": ["0", "1"],
        "arrival_s": [0.0, 0.5], "first_token_s": [0.2, 0.9], "finish_s": [1.0, 2.0],
        "prompt_tokens": [10, 12], "output_tokens": [4, 8], "max_tokens": [8, 8],
        "finish_reason": ["stop", "length"], "num_preemptions": [0, 1],
        "output_sha256": ["a", "b"], "output_text": ["x", "y"],
    })


def test_valid_table_gets_schema_order_and_dtypes():
    df = _requests()[::-1].assign(extra=1)
    got = schema.validate(df[list(df.columns)[::-1]], "requests")
    assert list(got.columns) == [c.name for c in schema.REQUEST_COLUMNS] + ["extra"]
    assert str(got.trial_id.dtype) == "string" and str(got.output_tokens.dtype) == "int64"


def test_every_table_has_an_empty_frame_that_validates():
    for name, cols in schema.TABLES.items():
        assert list(schema.validate(schema.empty_frame(cols), name).columns) == [c.name for c in cols]


@pytest.mark.parametrize("change, message", [
    (lambda d: d.drop(columns="finish_s"), r"missing columns \['finish_s'\]"),
    (lambda d: d.assign(first_token_s=[0.2, 0.1]), "arrival_s <= first_token_s"),
    (lambda d: d.assign(output_tokens=[4, 9]), "output_tokens <= max_tokens"),
    (lambda d: d.assign(finish_reason=["stop", "done"]), "finish_reason in"),
    (lambda d: d.assign(num_preemptions=[0, np.nan]), "num_preemptions: holds missing values"),
])
def test_request_violations_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        schema.validate(change(_requests()), "requests")


def test_step_invariants():
    steps = pd.DataFrame({"trial_id": "t", "arm": "naive", "step": [0], "t_s": [0.1], "req_id": ["0"],
                          "phase": ["decode"], "num_tokens": [40], "live_tokens": [33], "blocks_held": [2],
                          "block_size": [16], "blocks_util_le_25": [1], "blocks_util_25_50": [0],
                          "charged_blocks": [0], "side_blocks": [0.0], "low_tokens": [0]})
    with pytest.raises(ValueError, match="live_tokens - low_tokens <= blocks_held \\* block_size"):
        schema.validate(steps, "steps")
    assert len(schema.validate(steps.assign(blocks_held=3), "steps")) == 1
    # DiffKV: one live token sits in the low tier (outside the pool), charged as a block.
    assert len(schema.validate(steps.assign(low_tokens=1, charged_blocks=1), "steps")) == 1
    # Zipage at B = 16: a query cache of 1.5 block-equivalents takes 2 whole pool blocks.
    assert len(schema.validate(steps.assign(blocks_held=3, charged_blocks=2, side_blocks=1.5), "steps")) == 1
    with pytest.raises(ValueError, match="0 <= side_blocks <= charged_blocks"):
        schema.validate(steps.assign(blocks_held=3, charged_blocks=1, side_blocks=1.5), "steps")
    with pytest.raises(ValueError, match="low_tokens <= live_tokens"):
        schema.validate(steps.assign(blocks_held=3, low_tokens=34), "steps")
    with pytest.raises(ValueError, match="missing columns \\['charged_blocks', 'low_tokens'\\]"):
        schema.validate(steps.drop(columns=["charged_blocks", "low_tokens"]), "steps")


def test_unknown_table():
    with pytest.raises(ValueError, match="allowed"):
        schema.validate(_requests(), "request")


def test_output_hash_is_of_token_ids():
    assert schema.output_sha256([1, 23]) == "dec1a325b2aab707b526fa2b8a16aba9a9edba3ccb8de9df7b34f28fb85c1d0f"
    assert schema.output_sha256([1, 23]) != schema.output_sha256([12, 3])
