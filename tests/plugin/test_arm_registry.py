"""The arm is the unit: the plugin never names an arm, every list of arms is the registry's.

- No module of the plugin (scheduler, model runners, tables, backend, config, ...) holds an
  arm name as a string literal: what an arm needs from the engine is its engine side's
  (:mod:`vtoken.plugin.adapter`). Docstrings may name arms; code may not.
- Every list of arms (the figure style, the bench's lists, the golden trial) equals the
  registry's, or the subset its engine sides define; the workflow schema lists none (the grid
  check refuses an unregistered arm wherever the schema says arm).
- Every baseline's engine side is registered by the ``engine`` module beside its core arm.
"""

import ast
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from vtoken.arms.registry import arm_names, get_arm_class
from vtoken.plugin.adapter import NoEviction, PolicyDriven, SelfEvicting, adapter_class

PLUGIN = REPO / "vtoken" / "plugin"


def _string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every string constant in ``path`` that is not a docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


# The project's name is also an arm's: "vtoken" names the engine's settings key and the
# extension cache folder. These are the only arm-name literals the plugin may hold.
NOT_ARMS = {("config.py", "ADDITIONAL_CONFIG_KEY = \"vtoken\""), ("extension.py", '/ "vtoken" /')}


def arm_literals(root: Path) -> list[str]:
    """``file:line: 'name'`` of every arm-name string literal in the modules under ``root``
    (except the lines of ``NOT_ARMS``)."""
    names = set(arm_names())
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for line, value in _string_literals(path):
            exempt = any(path.name == f and text in lines[line - 1] for f, text in NOT_ARMS)
            if value in names and not exempt:
                out.append(f"{path}:{line}: {value!r}")
    return out


def test_no_arm_name_literal_in_the_plugin():
    assert arm_literals(PLUGIN) == []


def test_the_literal_check_sees_a_branch_on_an_arm_name(tmp_path):
    module = tmp_path / "pkg" / "scheduler.py"
    module.parent.mkdir()
    module.write_text('"""Docstrings may say zipage."""\n\n\ndef f(config):\n'
                      '    """Or ``diffkv``."""\n    return config.arm == "zipage"\n', encoding="utf-8")
    assert arm_literals(tmp_path) == [f"{module}:6: 'zipage'"]


def test_every_arm_list_is_the_registry():
    import importlib.util

    from tests.golden import trial
    from vtoken.bench.grid import validate
    from vtoken.bench.analysis import process, quality
    from vtoken.bench.harness import run_config

    spec = importlib.util.spec_from_file_location("figstyle", REPO / "workflows/scripts/figstyle.py")
    figstyle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figstyle)

    registry = arm_names()
    schema = yaml.safe_load((REPO / "workflows/schemas/config.schema.yaml").read_text())
    assert "enum" not in schema["$defs"]["arm"]
    assert {(("arms", "[]"), "arm"), (("baseline",), "arm"), (("arm_variants", "*", "arm"), "arm"),
            (("trial", "policies", "[]"), "policy")} <= set(validate.registered_keys(schema))
    for name, style in (("ARM_COLOURS", figstyle.ARM_COLOURS), ("ARM_LABELS", figstyle.ARM_LABELS),
                        ("ARM_MARKERS", figstyle.ARM_MARKERS), ("LINESTYLES", figstyle.LINESTYLES)):
        assert sorted(style) == registry, name
    assert sorted(validate.ARMS) == sorted(run_config.ARMS) == sorted(trial.ARMS) == registry
    assert sorted(process.RECLAMATION_BASELINES) == sorted(a for a in registry if issubclass(adapter_class(a), SelfEvicting))
    assert sorted(quality.EXACTNESS_ARMS) == sorted(a for a in registry if adapter_class(a) is PolicyDriven)


@pytest.mark.parametrize("arm", arm_names())
def test_every_arm_has_an_engine_side(arm):
    side = adapter_class(arm)
    core = get_arm_class(arm)
    if issubclass(side, SelfEvicting):
        package = core.__module__.rpartition(".")[0]
        assert side.__module__ == f"{package}.engine" and side.arm == arm
    elif core.applies_policy_evictions:
        assert side is PolicyDriven
    else:
        assert side is NoEviction


def test_every_arm_shows_itself_and_no_two_look_alike():
    """Each registered arm sets its own display (a subclass does not inherit its parent's look):
    the figures' colours, labels and markers, one per arm, all distinct."""
    from vtoken.arms.registry import arm_display

    displays = [arm_display(arm) for arm in arm_names()]
    for field in ("label", "colour", "marker"):
        values = [getattr(d, field) for d in displays]
        assert len(set(values)) == len(values), field


def test_the_grid_check_refuses_an_unregistered_arm_or_policy_naming_the_key():
    import copy

    from vtoken.bench.grid import validate

    config = yaml.safe_load((REPO / "workflows/config/config.yaml").read_text())
    for key, change in (("arms", lambda c: c["arms"].__setitem__(1, "naiv")),
                        ("arm_variants.naive_aa.arm", lambda c: c["arm_variants"]["naive_aa"].__setitem__("arm", "x")),
                        ("factorial.scorers", lambda c: c["factorial"].__setitem__("scorers", ["h2"])),
                        ("prefix_sharing.arms", lambda c: c["prefix_sharing"].__setitem__("arms", ["naive", "zipage"]))):
        bad = copy.deepcopy(config)
        change(bad)
        with pytest.raises(ValueError, match=re.escape(repr(key))):
            validate.check(bad, str(REPO))
