"""The vLLM compatibility seam: one module holds every private vLLM name, behind a version check
that refuses to start a vToken engine on another vLLM (stock engines are unaffected)."""

from pathlib import Path

import pytest

from tests.conftest import REPO
from vtoken.plugin import vllm_compat


@pytest.fixture
def other_vllm(monkeypatch):
    """Pretend the installed vLLM is 0.33.1 (and that no check has passed yet)."""
    monkeypatch.setattr(vllm_compat, "installed_version", lambda: "0.33.1")
    monkeypatch.setattr(vllm_compat, "_checked", False)
    monkeypatch.setattr(vllm_compat, "_overrides_checked", False)


def test_the_installed_vllm_is_the_expected_one():
    assert vllm_compat.installed_version() == vllm_compat.EXPECTED_VLLM == "0.32.0"
    vllm_compat.check()
    vllm_compat.check_overrides()


def test_another_version_fails_naming_both_versions():
    with pytest.raises(RuntimeError, match=r"needs vLLM 0\.32\.0, found vLLM 0\.31\.2\. .*vtoken/plugin/vllm_compat\.py"):
        vllm_compat.check("0.31.2")


def test_a_vtoken_engine_refuses_to_start_on_another_vllm_but_a_stock_one_does_not(other_vllm, model_dir):
    from vtoken.engine_args import engine_args

    assert "attention_backend" not in engine_args(model_dir, dtype="float32")  # stock: no check
    with pytest.raises(RuntimeError, match=r"needs vLLM 0\.32\.0, found vLLM 0\.33\.1"):
        engine_args(model_dir, vtoken={"arm": "full"}, dtype="float32")


def test_the_scheduler_and_worker_check_the_overridden_names_exist(other_vllm, monkeypatch):
    with pytest.raises(RuntimeError, match="found vLLM 0.33.1"):
        vllm_compat.check_overrides()
    monkeypatch.setattr(vllm_compat, "installed_version", lambda: vllm_compat.EXPECTED_VLLM)
    renamed = (*vllm_compat.OVERRIDDEN, ("vllm.v1.core.sched.scheduler", "Scheduler", "_schedule_renamed"))
    monkeypatch.setattr(vllm_compat, "OVERRIDDEN", renamed)
    with pytest.raises(RuntimeError, match=r"lacks the private names \['vllm.v1.core.sched.scheduler.Scheduler._schedule_renamed'\]"):
        vllm_compat.check_overrides()


def _plugin_classes():
    from vtoken.plugin.cpu.model_runner import VTokenCPUModelRunner
    from vtoken.plugin.cpu.worker import VTokenCPUWorker
    from vtoken.plugin.manager import VTokenBlockManager
    from vtoken.plugin.model_runner import TokenTableRunner
    from vtoken.plugin.scheduler import VTokenScheduler

    return [(VTokenScheduler, VTokenScheduler), (VTokenBlockManager, VTokenBlockManager),
            (TokenTableRunner, VTokenCPUModelRunner), (VTokenCPUModelRunner, VTokenCPUModelRunner),
            (VTokenCPUWorker, VTokenCPUWorker)]


def test_every_private_vllm_method_the_plugin_overrides_is_listed():
    listed = {attr for _, _, attr in vllm_compat.OVERRIDDEN}
    unlisted = []
    for defining, concrete in _plugin_classes():
        vllm_bases = [b for b in concrete.__mro__ if b.__module__.startswith("vllm.")]
        for name in vars(defining):
            private = name.startswith("_") and not name.startswith(("__", "_vt", "_abc"))
            private = private and callable(vars(defining)[name])
            if private and any(name in vars(b) for b in vllm_bases) and name not in listed:
                unlisted.append(f"{defining.__name__}.{name}")
    assert unlisted == []


# Private vLLM names reached into (not overridden): only vllm_compat.py may spell them.
PRIVATE_SPELLINGS = ("__class__ =", "cpu_worker.CPUModelRunner", "_null_block", "_record_new_block_ids",
                     "slot_mapping.cpu", "single_type_managers")


def test_private_vllm_names_are_spelled_only_in_the_compat_module():
    found = []
    for path in sorted((REPO / "vtoken" / "plugin").rglob("*.py")):
        if path.name == "vllm_compat.py":
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{Path(path).relative_to(REPO)}: {s}" for s in PRIVATE_SPELLINGS if s in text]
    assert found == []
