"""The plugin is found through its entry point and registering it again changes nothing."""

import importlib.metadata

from vtoken.plugin import BACKEND_NAME, BACKEND_PATH, CPU_SLOT_PATH, register


def test_entry_point_is_discoverable():
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="vllm.general_plugins")}
    assert found.get("vtoken") == "vtoken.plugin:register"


def test_register_twice_is_harmless():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    register()
    members = list(AttentionBackendEnum.__members__)
    register()
    assert list(AttentionBackendEnum.__members__) == members
    assert AttentionBackendEnum[BACKEND_NAME].get_path() == BACKEND_PATH
    assert AttentionBackendEnum.CPU_ATTN.get_path() == CPU_SLOT_PATH


def test_cpu_slot_resolves_to_stock_outside_a_vtoken_engine():
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from vtoken.plugin.cpu.backend_switch import select_cpu_backend

    assert select_cpu_backend(VllmConfig()) is CPUAttentionBackend
