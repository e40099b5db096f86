"""What `make venv` leaves behind beyond the packages themselves."""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from pathlib import Path

import pytest

# Modules every trial process imports (vLLM's config pulls in torch's inductor and transformers).
IMPORTED = ("vllm/config/model.py", "torch/_inductor/lowering.py", "transformers/modeling_utils.py",
            "pandas/core/frame.py", "matplotlib/pyplot.py")


def test_the_environment_is_byte_compiled():
    """`make venv` byte-compiles site-packages: where PYTHONDONTWRITEBYTECODE=1 is set (the
    machines this project runs on) no .pyc is ever written on import, and every process compiled
    the ~5,000 modules it imports from source (15 s of a trial process's 25 s before its engine)."""
    if not (Path(sys.prefix) / ".vtoken-installed").exists():
        pytest.skip(f"{sys.prefix} is not an environment `make venv` built")
    site = Path(sysconfig.get_paths()["purelib"])
    missing = [m for m in IMPORTED if not Path(importlib.util.cache_from_source(str(site / m))).is_file()]
    assert not missing, f"no .pyc for {missing} in {site}: `make venv` did not byte-compile the environment"
