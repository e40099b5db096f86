"""A pytest plugin (``-p benchmarks.vllm_contract.swap``) that runs vLLM's tests against the
plugin's classes.

``VTOKEN_CONTRACT_ARM`` (JSON): the vToken settings of this run, or ``null`` for stock vLLM.
With settings, before vLLM's test modules are imported:

- ``vllm.v1.core.sched.scheduler.Scheduler`` becomes a :class:`~vtoken.plugin.scheduler.VTokenScheduler`
  that carries those settings (``additional_config["vtoken"]``, as an engine built by
  :func:`vtoken.engine_args.engine_args` does), so every test that builds vLLM's synchronous
  scheduler builds the plugin's;
- ``FullAttentionManager`` (the module global vLLM's spec registry and the tests read) becomes
  a :class:`~vtoken.plugin.manager.VTokenBlockManager` with the arm's settings, so the tests
  that build a KV-cache manager or a full-attention manager directly get the plugin's too.

``AsyncScheduler`` subclasses vLLM's ``Scheduler`` at import and is left stock: the plugin
runs synchronously (a CUDA vToken engine refuses ``async_scheduling``). Either way the run
is offline: the safetensors-metadata lookup a ``ModelConfig`` makes (a hub call, retried with
sleeps) returns what it returns offline, None, at once.

``VTOKEN_CONTRACT_TOUCHED``: where the ids of the tests that built one of the plugin's classes
are written (JSON), so a run proves the swap took effect.
"""

from __future__ import annotations

import json
import os

ARM = json.loads(os.environ.get("VTOKEN_CONTRACT_ARM", "null"))
_built = {"now": False, "tests": []}


def pytest_configure(config) -> None:
    import vllm.transformers_utils.config as hf_config

    hf_config.try_get_safetensors_metadata = lambda *args, **kwargs: None
    if ARM is not None:
        _swap(ARM)


def _swap(settings: dict) -> None:
    import vllm.v1.core.sched.scheduler as scheduler_module
    import vllm.v1.core.single_type_kv_cache_manager as managers

    from vtoken.plugin.adapter import adapter_for
    from vtoken.plugin.config import PluginConfig
    from vtoken.plugin.manager import VTokenBlockManager
    from vtoken.plugin.scheduler import VTokenScheduler

    config = PluginConfig.from_dict(settings)

    class ContractScheduler(VTokenScheduler):
        def __init__(self, *args, **kwargs) -> None:
            vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
            vllm_config.additional_config = {**(vllm_config.additional_config or {}), "vtoken": settings}
            _built["now"] = True
            super().__init__(*args, **kwargs)

    class ContractManager(VTokenBlockManager):
        def __init__(self, kv_cache_spec, *args, **kwargs) -> None:
            super().__init__(kv_cache_spec, *args, **kwargs)
            _built["now"] = True
            self.vtoken_init(charge=0, cache_exact_only=adapter_for(config, kv_cache_spec.block_size).evicts)

    scheduler_module.Scheduler = ContractScheduler
    managers.FullAttentionManager = ContractManager


def pytest_runtest_setup(item) -> None:
    _built["now"] = False


def pytest_runtest_teardown(item) -> None:
    if _built["now"]:
        _built["tests"].append(item.nodeid)
    _built["now"] = False


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get("VTOKEN_CONTRACT_TOUCHED")
    if path:
        with open(path, "w") as f:
            json.dump(_built["tests"], f)
