"""Bad vToken settings stop the engine at startup with a message naming the field.

The engines are built directly with ``vllm.LLM`` (not through ``engine_args``, which
validates earlier) so the plugin's own check inside the engine is what is tested; it runs
while vLLM constructs the model, before weights are loaded.
"""

import pytest

from tests.plugin.conftest import in_process_llm
from vtoken.engine_args import engine_args

pytestmark = pytest.mark.engine


def _start(model_dir, additional_config, attention_backend="CUSTOM"):
    # vLLM caches backend selection per process (functools.cache keyed by backend name and
    # dtype, not additional_config), and the check under test runs on a miss of that cache
    # (see vtoken/plugin/backend_switch.py). Other tests of the session build float32 engines
    # too, so the cache is cleared first: this engine's resolution, and its check, run anew.
    from vllm.v1.attention.selector import _cached_get_attn_backend

    _cached_get_attn_backend.cache_clear()
    args = engine_args(model_dir, additional_config=additional_config, dtype="float32")
    if attention_backend is not None:
        args["attention_backend"] = attention_backend
    return in_process_llm(**args)


def _chain(err: BaseException) -> str:
    messages = []
    while err is not None:
        messages.append(str(err))
        err = err.__cause__ or err.__context__
    return " | ".join(messages)


@pytest.mark.parametrize(
    "additional_config, backend, exc, expected",
    [
        ({"vtoken": {"arm": "nope"}}, "CUSTOM", ValueError,
         "vtoken.arm='nope': must be one of ['diffkv', 'full', 'holefill', 'naive'"),
        ({"vtoken": {"arm": "full", "ratoi": 0.5}}, "CUSTOM", ValueError, "unknown keys ['ratoi']; valid keys"),
        ({"vtoken": {"arm": "full"}}, None, ValueError, "must select attention backend 'CUSTOM'"),
        ({"vtoken": {"arm": "zipage", "budget": 64, "arm_options": {"widnow": 4}}}, "CUSTOM", ValueError,
         "unknown ZipageConfig keys ['widnow']; valid keys"),
        ({"vtoken": {"arm": "naive", "policy": "h2o", "ratio": 0.5}}, "CUSTOM", ValueError,
         "vtoken.arm='naive' (metrics_path=None) needs the vToken scheduler and worker, but scheduler_cls="),
    ],
    ids=["bad-arm", "unknown-key", "no-backend", "bad-arm-option", "no-scheduler"],
)
def test_bad_config_fails_at_startup(model_dir, additional_config, backend, exc, expected):
    with pytest.raises(Exception) as info:
        _start(model_dir, additional_config, backend)
    assert expected in _chain(info.value)
    assert any(isinstance(e, exc) for e in _iter_chain(info.value))


def _iter_chain(err):
    while err is not None:
        yield err
        err = err.__cause__ or err.__context__


def test_projected_admission_with_priority_scheduling_is_refused_at_engine_build(model_dir):
    # The projected gate admits in arrival order and never preempts for priority:
    # engine_args refuses the pair, and so does the scheduler when the engine is built.
    with pytest.raises(ValueError, match="vtoken.admission='projected' with scheduling_policy='priority'"):
        engine_args(model_dir, vtoken={"arm": "full", "admission": "projected"}, scheduling_policy="priority",
                    dtype="float32")
    args = engine_args(model_dir, vtoken={"arm": "full", "admission": "projected"}, dtype="float32",
                       max_model_len=512, kv_cache_memory_bytes=64 << 20)
    with pytest.raises(ValueError, match="use vtoken.admission='vllm' \\(vLLM's gate honours priorities\\)"):
        in_process_llm(**args, scheduling_policy="priority")
    # vLLM's gate, the default, starts with priorities.
    assert engine_args(model_dir, vtoken={"arm": "full"}, scheduling_policy="priority", dtype="float32")["additional_config"][
        "vtoken"]["admission"] == "vllm"
