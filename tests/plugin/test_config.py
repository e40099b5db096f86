"""PluginConfig validation and the engine_args(vtoken=...) helper (no engine started)."""

import re

import pytest

from vtoken.engine_args import engine_args
from vtoken.plugin.adapter import adapter_for, check_config
from vtoken.plugin.config import PluginConfig


def test_defaults_are_the_full_arm():
    config = PluginConfig.from_dict({})
    assert config.arm == "full" and config.policy is None and config.ratio is None


def test_round_trip_through_dict():
    config = PluginConfig.from_dict(
        {"arm": "vtoken", "policy": "h2o", "ratio": 0.5, "score_layers": [0, 3], "metrics_path": "m.jsonl"}
    )
    assert config.score_layers == (0, 3)
    assert PluginConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "raw, field, allowed",
    [
        ({"arm": "nope"}, "vtoken.arm='nope'", "paged_eviction"),
        ({"arm": "naive", "policy": "lru", "ratio": 0.5}, "vtoken.policy='lru'", "scissorhands"),
        ({"arm": "naive", "policy": "h2o", "ratio": 1.0}, "vtoken.ratio=1.0", "[0, 1)"),
        ({"arm": "naive", "policy": "h2o", "budget": 0}, "vtoken.budget=0", ">= 1"),
        ({"arm": "naive", "policy": "h2o", "budget": 2.5}, "vtoken.budget=2.5", "integer"),
        ({"theta_f": 1.5}, "vtoken.theta_f=1.5", "[0, 1)"),
        ({"watermark": -0.1}, "vtoken.watermark=-0.1", "[0, 1]"),
        ({"policy_every": 0}, "vtoken.policy_every=0", ">= 1"),
        ({"score_every": 0}, "vtoken.score_every=0", ">= 1"),
        ({"score_layers": [1, 1]}, "vtoken.score_layers=(1, 1)", "distinct"),
        ({"score_layers": [0], "score_stride": 2}, "vtoken.score_stride=2", "at most one"),
        ({"metrics_path": ""}, "vtoken.metrics_path=''", "non-empty"),
        ({"policy": "h2o"}, "vtoken.policy='h2o'", "evicts nothing"),
        ({"arm": "naive", "policy": "h2o"}, "vtoken.ratio=None", "exactly one"),
        ({"arm": "naive", "ratio": 0.5}, "vtoken.policy=None", "needs a policy"),
    ],
)
def test_bad_values_name_field_value_and_constraint(raw, field, allowed):
    with pytest.raises(ValueError) as err:
        check_config(PluginConfig.from_dict(raw))
    assert field in str(err.value) and allowed in str(err.value)


def test_arm_rules_are_the_adapters_and_checked_when_it_is_built():
    """PluginConfig knows no arm: an arm's own rule (here: ``full`` takes no policy) is its
    adapter's, checked by check_config and whenever the engine builds the adapter."""
    config = PluginConfig.from_dict({"policy": "h2o"})
    with pytest.raises(ValueError, match="evicts nothing"):
        check_config(config)
    with pytest.raises(ValueError, match="evicts nothing"):
        adapter_for(config, 16)
    assert check_config(PluginConfig.from_dict({"arm": "naive", "policy": "h2o", "ratio": 0.5})).arm == "naive"


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError, match=r"unknown keys \['bogus'\]; valid keys: \[.*'arm'"):
        PluginConfig.from_dict({"arm": "full", "bogus": 1})


def test_not_a_dict():
    with pytest.raises(ValueError, match="must be a dict"):
        PluginConfig.from_dict(["full"])


@pytest.mark.parametrize("raw", [
    {"arm": "naive", "policy": "h2o", "ratio": 0.5}, {"arm": "holefill", "policy": "random", "budget": 64},
    {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}, {"arm": "paged_eviction", "budget": 128},
    {"arm": "zipage", "budget": 128}, {"arm": "diffkv"}, {"arm": "diffkv", "arm_options": {"low_tier": False}},
])
def test_every_arm_is_implemented(raw, model_dir):
    assert engine_args(model_dir, vtoken=raw, dtype="float32")["additional_config"]["vtoken"]["arm"] == raw["arm"]


def test_scoring_only_for_policies_that_read_mass():
    from vtoken.plugin.adapter import adapter_for
    from vtoken.plugin.kv_layout import layer_index

    assert adapter_for(PluginConfig(arm="naive", policy="h2o", ratio=0.5), 16).needs_mass
    assert not adapter_for(PluginConfig(arm="naive", policy="random", ratio=0.5), 16).needs_mass
    assert not adapter_for(PluginConfig(), 16).needs_mass
    assert layer_index("model.layers.17.self_attn.attn") == 17
    every = PluginConfig(arm="naive", policy="h2o", ratio=0.5)
    assert [i for i in range(6) if every.scores_layer(i)] == [0, 1, 2, 3, 4, 5]
    stride = PluginConfig(arm="naive", policy="h2o", ratio=0.5, score_stride=4)
    assert [i for i in range(9) if stride.scores_layer(i)] == [0, 4, 8]
    chosen = PluginConfig(arm="naive", policy="h2o", ratio=0.5, score_layers=(2, 5))
    assert [i for i in range(9) if chosen.scores_layer(i)] == [2, 5]


def test_admission_choice_is_validated():
    with pytest.raises(ValueError, match="vtoken.admission='lazy': must be one of \\['vllm', 'projected'\\]"):
        PluginConfig.from_dict({"admission": "lazy"})


def test_from_additional_config_without_vtoken_is_none():
    assert PluginConfig.from_additional_config({}) is None
    assert PluginConfig.from_additional_config({"other": 1}) is None


def test_engine_args_stock_has_no_vtoken(model_dir):
    args = engine_args(model_dir, dtype="float32")
    assert "additional_config" not in args and "attention_backend" not in args


def test_engine_args_vtoken_selects_backend_and_fills_defaults(model_dir):
    args = engine_args(model_dir, vtoken={"arm": "full"}, additional_config={"other": 1}, dtype="float32")
    assert args["attention_backend"] == "CUSTOM"
    assert args["additional_config"]["other"] == 1
    assert args["additional_config"]["vtoken"] == PluginConfig().to_dict()


def test_engine_args_rejects_bad_vtoken_before_any_engine(model_dir):
    with pytest.raises(ValueError, match="vtoken.arm='nope'"):
        engine_args(model_dir, vtoken={"arm": "nope"}, dtype="float32")
    with pytest.raises(ValueError, match="k_bits=2, v_bits=1: allowed K8V4 and K4V2"):
        engine_args(model_dir, vtoken={"arm": "diffkv", "arm_options": {"k_bits": 2, "v_bits": 1}}, dtype="float32")
    with pytest.raises(ValueError, match="budget=64: must be >= 3\\*block_size = 96"):
        engine_args(model_dir, vtoken={"arm": "paged_eviction", "budget": 64}, dtype="float32")
    with pytest.raises(ValueError, match="enable_prefix_caching=True: arm='zipage' packs or rewrites prompt blocks"):
        engine_args(model_dir, vtoken={"arm": "zipage", "budget": 64}, enable_prefix_caching=True, dtype="float32")
    with pytest.raises(ValueError, match="attention_backend='CPU_ATTN'"):
        engine_args(model_dir, vtoken={}, attention_backend="CPU_ATTN", dtype="float32")


def test_prefix_caching_is_off_unless_asked_for_and_on_for_the_policy_arms(model_dir):
    assert engine_args(model_dir, vtoken={"arm": "vtoken", "policy": "h2o", "budget": 64}, dtype="float32")["enable_prefix_caching"] is False
    for arm in ("full", "naive", "holefill", "vtoken"):
        cfg = {"arm": arm} if arm == "full" else {"arm": arm, "policy": "h2o", "budget": 64}
        assert engine_args(model_dir, vtoken=cfg, enable_prefix_caching=True, dtype="float32")["enable_prefix_caching"] is True
    for arm in ("paged_eviction", "zipage", "diffkv"):
        with pytest.raises(ValueError, match=f"arm='{arm}'.*prefix caching works with \\['full', 'holefill', 'naive', 'vtoken'\\]"):
            engine_args(model_dir, vtoken={"arm": arm, "budget": 96}, enable_prefix_caching=True, dtype="float32")


def test_an_engines_settings_are_parsed_once_per_process():
    raw = {"arm": "vtoken", "policy": "h2o", "budget": 64, "watermark": 0.5}
    first = PluginConfig.from_additional_config({"vtoken": raw})
    assert PluginConfig.from_additional_config({"vtoken": dict(raw)}) is first
    assert PluginConfig.from_additional_config({"vtoken": {**raw, "watermark": 0.2}}) is not first


def test_the_schema_states_the_settings_the_dataclass_checks():
    """workflows/schemas/config.schema.yaml and PluginConfig agree: same choices, same bounds,
    and the schema defines no defaults of its own (PluginConfig's are the only ones; the
    committed default config uses them where it names no selection)."""
    import yaml

    from tests.conftest import REPO
    from vtoken.plugin.config import ADMISSIONS, defaults
    from vtoken.policies.kvpress_catalog import RUNS
    from vtoken.policies.registry import policy_names

    schema = yaml.safe_load((REPO / "workflows/schemas/config.schema.yaml").read_text())
    trial = schema["properties"]["trial"]["properties"]
    fraction = schema["$defs"]["fraction"]
    ours, kvpress = schema["$defs"]["policy"]["anyOf"]
    # the schema lists no policy (the registry does: vtoken.bench.grid.validate.check refuses any other name)
    assert "enum" not in ours and all(re.fullmatch(ours["pattern"], p) for p in policy_names() if ":" not in p)
    assert [p for p in policy_names() if ":" in p] == [f"kvpress:{p}" for p in RUNS]
    assert kvpress["pattern"] == "^kvpress:[A-Za-z]+$"
    assert trial["policies"]["items"] == {"$ref": "#/$defs/policy"}
    assert sorted(trial["admission"]["enum"]) == sorted(ADMISSIONS)
    assert not any("default" in trial[name] for name in ("policies", "ratio", "budget", "theta_f", "watermark",
                                                         "admission"))

    def accepts(name, value):
        raw = {"arm": "naive", "policy": "h2o", "budget": 8}
        if name == "ratio":
            del raw["budget"]
        try:
            check_config(PluginConfig.from_dict({**raw, name: value}))
        except ValueError:
            return False
        return True

    bounds = {"ratio": trial["ratio"], "theta_f": fraction, "watermark": trial["watermark"], "budget": trial["budget"]}
    for name, rule in bounds.items():
        low = rule["minimum"]
        assert accepts(name, low) and not accepts(name, low - (1 if name == "budget" else 0.01)), name
        if "exclusiveMaximum" in rule:
            assert not accepts(name, rule["exclusiveMaximum"]) and accepts(name, rule["exclusiveMaximum"] - 0.01), name
        if "maximum" in rule:
            assert accepts(name, rule["maximum"]) and not accepts(name, rule["maximum"] + 0.01), name
    config = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())
    assert (config["trial"]["theta_f"], config["trial"]["watermark"]) == (defaults()["theta_f"], defaults()["watermark"])


def test_capability_questions_build_no_arm(monkeypatch):
    """The engine's checks and the scheduler's questions read the core arm's config; the only
    arm an engine builds is its worker's (RequestRecords)."""
    import vtoken.plugin.adapter as adapter_module

    monkeypatch.setattr(adapter_module, "get_arm", lambda *a, **k: pytest.fail("an arm was built"))
    pressure = PluginConfig(arm="vtoken", policy="h2o", ratio=0.5, arm_options={"before_preemption": True})
    adapter = adapter_for(pressure, 16)
    adapter.check_arm()
    assert adapter.compacts_before_preemption is True
    assert adapter_for(PluginConfig(arm="vtoken", policy="h2o", ratio=0.5), 16).compacts_before_preemption is False
    with pytest.raises(ValueError, match=r"vtoken.arm='vtoken'.*bogus"):
        adapter_for(PluginConfig(arm="vtoken", policy="h2o", ratio=0.5, arm_options={"bogus": 1}), 16).check_arm()


def test_admission_defaults_to_vllms_gate_and_projected_refuses_priorities():
    from vtoken.plugin.admission import check_priority

    assert PluginConfig().admission == "vllm"
    check_priority(PluginConfig(), "priority")
    check_priority(PluginConfig(admission="projected"), "fcfs")
    with pytest.raises(ValueError, match="vtoken.admission='projected' with scheduling_policy='priority'"):
        check_priority(PluginConfig(admission="projected"), "priority")
