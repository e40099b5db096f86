"""decode_attention / extend_attention against an explicit float64 masked-softmax reference.

Both implementations are checked: the C++ kernel (skipped if it cannot be built here) and the
PyTorch fallback. Inputs: several requests of different lengths, GQA group 3, slot lists that
are random permutations of a larger pool (non-contiguous, unsorted), garbage past seq_len,
bf16 / fp16 / fp32 rows. The reference computes in float64 from the very same (rounded) rows
and queries, so the only differences are float32 accumulation order and the final cast of
the output: tolerance ``OUT_TOL`` (absolute, outputs are O(1)) on the float32 result before
that cast, and ``MASS_TOL`` on the attention mass.
"""

from __future__ import annotations

import pytest
import torch

from vtoken.plugin import token_attention as ta

H, HKV, D = 9, 3, 64  # GQA group 3, SmolLM2-135M's shapes
SCALE = D**-0.5
OUT_TOL = 2e-5
MASS_TOL = 2e-5
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@pytest.fixture(params=["cpp", "torch"])
def impl(request, monkeypatch):
    """Run the test with the C++ kernel or with the PyTorch path forced."""
    if request.param == "cpp":
        if ta.implementation() != "cpp":
            pytest.skip(f"C++ kernel unavailable: {ta.implementation()}")
    else:
        monkeypatch.setattr(ta, "_load", lambda: None)
    return request.param


def _case(lens, dtype, seed, width=None, scale_q=3.0):
    gen = torch.Generator().manual_seed(seed)
    pool = 3 * sum(lens) + 7
    rows = (torch.randn(pool, HKV, 2 * D, generator=gen) * 1.5).to(dtype)
    width = width or max(lens) + 5
    table = torch.randint(0, pool, (len(lens) + 1, width), generator=gen, dtype=torch.int32)  # garbage
    perm = torch.randperm(pool, generator=gen)
    at = 0
    for r, n in enumerate(lens):
        table[r, :n] = perm[at : at + n].to(torch.int32)
        at += n
    return rows, table, gen


def _reference(q, rows, slots, limits):
    """float64 output [n, H, D] and probabilities [n, H, L] of queries q [n, H, D]; query i
    attends entries < limits[i] of the slot list."""
    kv = rows[slots.long()].double()  # [L, Hkv, 2D]
    k = kv[..., :D].repeat_interleave(H // HKV, 1).transpose(0, 1)  # [H, L, D]
    v = kv[..., D:].repeat_interleave(H // HKV, 1).transpose(0, 1)
    scores = torch.einsum("nhd,hld->nhl", q.double(), k) * SCALE
    pos = torch.arange(len(slots))
    allowed = pos[None, :] < torch.as_tensor(limits)[:, None]  # [n, L]
    scores = scores.masked_fill(~allowed[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("nhl,hld->nhd", probs, v), probs


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_matches_reference(impl, dtype):
    lens = [1, 37, 200, 64, 129, 5]
    rows, table, gen = _case(lens, dtype, seed=1)
    q = (torch.randn(len(lens), H, D, generator=gen) * 3).to(dtype)
    out = torch.empty(len(lens), H, D, dtype=torch.float32)
    mass = torch.zeros(len(lens), max(lens) + 3)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass)
    for r, n in enumerate(lens):
        ref, probs = _reference(q[r : r + 1], rows, table[r, :n], [n])
        assert (out[r].double() - ref[0]).abs().max() < OUT_TOL, r
        assert torch.allclose(mass[r, :n].double(), probs[0].sum(0), atol=MASS_TOL, rtol=0), r
        assert (mass[r, n:] == 0).all(), r  # nothing beyond the row
        assert abs(float(mass[r].sum()) - H) < 1e-4, r


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_output_in_row_dtype_and_without_mass(impl, dtype):
    lens = [300, 2, 77]
    rows, table, gen = _case(lens, dtype, seed=2)
    q = torch.randn(len(lens), H, D, generator=gen).to(dtype)
    out = torch.empty_like(q)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out)
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: OUT_TOL}[dtype]  # final cast
    for r, n in enumerate(lens):
        ref, _ = _reference(q[r : r + 1], rows, table[r, :n], [n])
        assert (out[r].double() - ref[0]).abs().max() < tol, r


def test_decode_mass_accumulates(impl):
    lens = [50, 90]
    rows, table, gen = _case(lens, torch.bfloat16, seed=3)
    q = torch.randn(2, H, D, generator=gen).to(torch.bfloat16)
    out = torch.empty(2, H, D)
    mass = torch.full((2, 100), 0.5)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass)
    for r, n in enumerate(lens):
        _, probs = _reference(q[r : r + 1], rows, table[r, :n], [n])
        assert torch.allclose(mass[r, :n].double(), 0.5 + 2 * probs[0].sum(0), atol=2 * MASS_TOL, rtol=0)
        assert (mass[r, n:] == 0.5).all()


def test_decode_long_rows_split_across_threads(impl):
    """One request, long row: the kernel splits it over threads and merges the partials."""
    lens = [3000]
    rows, table, gen = _case(lens, torch.bfloat16, seed=4)
    q = (torch.randn(1, H, D, generator=gen) * 3).to(torch.bfloat16)
    out = torch.empty(1, H, D)
    mass = torch.zeros(1, 3000)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass)
    ref, probs = _reference(q, rows, table[0, :3000], [3000])
    assert (out.double() - ref).abs().max() < OUT_TOL
    assert torch.allclose(mass[0].double(), probs[0].sum(0), atol=MASS_TOL, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel_max_new", [0, 16, 10_000])  # SDPA only, mixed, kernel only
def test_extend_matches_reference(impl, dtype, kernel_max_new, monkeypatch):
    monkeypatch.setattr(ta, "EXTEND_KERNEL_MAX_NEW", kernel_max_new)
    prefixes = [0, 23, 40, 0, 130, 7]
    news = [7, 5, 1, 0, 20, 66]  # prefill, chunked prefill, decode, idle, longer chunks
    lens = [p + n for p, n in zip(prefixes, news)]
    rows, table, gen = _case(lens, dtype, seed=5)
    starts = [0]
    for n in news:
        starts.append(starts[-1] + n)
    q = (torch.randn(starts[-1], H, D, generator=gen) * 3).to(dtype)
    out = torch.zeros(starts[-1], H, D)
    mass = torch.zeros(len(lens), max(lens) + 2)
    ta.extend_attention(q, rows, table, torch.tensor(lens), starts, SCALE, out, mass=mass)
    for r, (p, n) in enumerate(zip(prefixes, news)):
        if n == 0:
            assert (mass[r] == 0).all()
            continue
        ref, probs = _reference(q[starts[r] : starts[r + 1]], rows, table[r, : p + n], range(p + 1, p + n + 1))
        assert (out[starts[r] : starts[r + 1]].double() - ref).abs().max() < OUT_TOL, r
        col = probs.sum((0, 1))
        assert torch.allclose(mass[r, : p + n].double(), col, atol=MASS_TOL * n, rtol=0), r
        assert abs(float(mass[r].sum()) - H * n) < 1e-4 * n, r
        assert (mass[r, p + n :] == 0).all(), r


def test_reference_detects_a_wrong_slot(impl):
    """The comparison can fail: attending one wrong slot is caught."""
    lens = [40, 40]
    rows, table, gen = _case(lens, torch.float32, seed=6)
    q = torch.randn(2, H, D, generator=gen)
    out = torch.empty(2, H, D)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out)
    wrong = table.clone()
    wrong[0, 17] = table[1, 3]
    ref, _ = _reference(q[:1], rows, wrong[0, :40], [40])
    assert (out[0].double() - ref[0]).abs().max() > OUT_TOL


def test_implementation_is_reported():
    assert ta.implementation() == "cpp" or ta.implementation().startswith("torch (")


def test_failed_build_falls_back_to_torch_with_a_warning(monkeypatch, caplog):
    from torch.utils import cpp_extension

    def broken(**kwargs):
        raise RuntimeError("compiler exploded")

    monkeypatch.setattr(cpp_extension, "load", broken)
    monkeypatch.setattr(ta, "_ext", None)
    monkeypatch.setattr(ta, "_ext_state", None)
    monkeypatch.delenv("VTOKEN_TOKEN_ATTENTION", raising=False)
    with caplog.at_level("WARNING", logger=ta.__name__):
        assert ta.implementation().startswith("torch (C++ kernel unavailable: RuntimeError: compiler exploded")
    assert "using the PyTorch path" in caplog.text
    lens = [10, 3]
    rows, table, gen = _case(lens, torch.bfloat16, seed=7)
    q = torch.randn(2, H, D, generator=gen).to(torch.bfloat16)
    out = torch.empty(2, H, D)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out)  # the torch path runs
    ref, _ = _reference(q[:1], rows, table[0, :10], [10])
    assert (out[0].double() - ref[0]).abs().max() < OUT_TOL
