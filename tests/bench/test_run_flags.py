"""RunConfig's command line, declared once on its fields: the parser and the grid's rendered
command line agree field by field (no assets needed: the namespace is compared, not a run)."""

from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from vtoken.bench.__main__ import build_parser
from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.run_flags import to_args

VALUES = {
    "manifest": Path("data/workloads/contract-128-s0.jsonl"), "arms": ("naive", "vtoken", "naive_aa"), "pairs": 3,
    "first_pair": 2, "seed": 7, "concurrency": (4, 8, 12), "policy": "kvpress:KnormPress", "ratio": None,
    "budget": 64, "vtoken": {"watermark": 0.2, "theta_f": 0.3}, "num_gpu_blocks": 65, "block_size": 16,
    "max_num_batched_tokens": 512, "enable_chunked_prefill": True, "rate": 1.5, "num_requests": 16,
    "max_tokens": 32, "temperature": 0.5, "warmup": 1, "setup": "m.w.h2o.main", "model_dir": Path("m"),
    "sharegpt_dir": Path("s"), "raw_root": Path("r"), "engine": {"dtype": "float32"},
    "arm_settings": {"naive_aa": {"budget": 60}}, "arm_variants": {"naive_aa": "naive"},
    "arm_concurrency": {"full": [4]}, "one_wave": True, "capacity_search": True, "timing_alone": True, "interleave": True, "device": "cpu",
    "prefix_degree": 4, "prefix_tokens": 128,
    "forcing": "native", "forcing_topk": 16,
}


def test_every_field_is_a_flag_and_renders_back_to_itself():
    assert set(VALUES) == {f.name for f in fields(RunConfig)}  # the test covers every field
    args = to_args(VALUES)
    assert args[0] == "data/workloads/contract-128-s0.jsonl" and "-C" not in args
    assert "--chunked-prefill" in args and "--one-wave" in args and "--ratio" not in " ".join(args)
    ns = build_parser().parse_args(["trial", *args])
    assert {name: getattr(ns, name) for name in VALUES} == VALUES


def test_defaults_on_the_command_line_are_the_fields_but_ratio():
    ns = build_parser().parse_args(["trial", "m.jsonl", "--arms=naive"])
    for f in fields(RunConfig):
        default = f.default if f.default is not MISSING else f.default_factory() if f.default_factory is not MISSING \
            else None
        if f.name in ("manifest", "arms"):
            continue
        assert getattr(ns, f.name) == (None if f.name == "ratio" else default), f.name


def test_left_out_and_unknown():
    assert to_args({"manifest": "m.jsonl", "arms": ("full",), "budget": None, "one_wave": False}) == \
        ["m.jsonl", "--arms=full"]
    with pytest.raises(ValueError, match=r"run flags \['budgett'\]: not RunConfig fields"):
        to_args({"manifest": "m.jsonl", "budgett": 64})
