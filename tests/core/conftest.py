"""Core-library test configuration: the `slow` marker and a summary line with the number
of hypothesis sequences the property tests generated.

Slow tests are skipped unless the marker expression names them: `pytest tests/core -m slow`
runs only them, `-m "slow or not slow"` runs everything.
"""

import sys
from pathlib import Path

import pytest

# The tests import their helper `sim.py` by name; make that work under any import mode.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long property runs (>= 10,000 sequences)")


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    mods = [m for n, m in list(sys.modules.items())
            if n.endswith("test_properties") and hasattr(m, "COUNTS")]
    mod = mods[0] if mods else None
    if mod is not None and any(mod.COUNTS.values()):
        terminalreporter.write_line(
            f"hypothesis sequences: default={mod.COUNTS['fast']} slow={mod.COUNTS['slow']}")
