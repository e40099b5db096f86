"""The project's CUDA pieces on a GPU (skipped without one): ``benchmarks/cuda_pieces.py``'s
checks -- the reference attention and the mass pass on the device against the CPU, the
page-size-1 table, the side-stream relocator, and its planted race -- as tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")

_spec = importlib.util.spec_from_file_location(
    "cuda_pieces", Path(__file__).resolve().parents[3] / "benchmarks" / "cuda_pieces.py")
cuda_pieces = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cuda_pieces)


@pytest.mark.parametrize("name", sorted(cuda_pieces.CHECKS))
def test_cuda_piece(name):
    torch.backends.cuda.matmul.allow_tf32 = False
    result = cuda_pieces.CHECKS[name]("cuda")
    assert result["ok"], result
