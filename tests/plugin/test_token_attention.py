"""Token-view attention: the C++ kernel, the PyTorch reference, and the extension's loading.

Two kinds of checks, on SmolLM2-135M's shapes (9 query heads, 3 KV heads: GQA group 3, head
size 64), several requests of different lengths, slot lists that are random permutations of
a larger pool (non-contiguous, unsorted), garbage past seq_len, bf16 / fp16 / fp32 rows:

* both implementations against an explicit float64 masked softmax (``_oracle``) computed from
  the very same (rounded) rows and queries, so the only differences are float32 accumulation
  order, the kernel's polynomial exp and the final cast of the output: tolerance ``OUT_TOL``
  (absolute, outputs are O(1)) on a float32 output, ``MASS_TOL`` per query on the attention
  mass (a probability, summed over heads and queries);
* the C++ kernel against the reference (:mod:`vtoken.plugin.reference_attention`, the
  oracle of the coming CUDA path), both in float32: decode and extend (a batch mixing short
  requests, which the kernel serves, and long ones, which take the reference's SDPA or
  explicit path), with mass, LSE and ``mass_lse_other``. Tolerances: ``OUT_TOL`` on outputs,
  ``LSE_TOL`` (absolute; log-sum-exps are O(10)) on LSEs, ``MASS_TOL`` per query on masses.

The kernel tests are skipped if the extension cannot be built here.
"""

from __future__ import annotations

import pytest
import torch

from vtoken.plugin import reference_attention as ref
from vtoken.plugin import token_attention as ta
from vtoken.plugin.cpu import extension

H, HKV, D = 9, 3, 64  # GQA group 3, SmolLM2-135M's shapes
SCALE = D**-0.5
OUT_TOL = 2e-5
LSE_TOL = 2e-5
MASS_TOL = 2e-5
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _need_kernel():
    if ta.implementation() != "cpp":
        pytest.skip(f"C++ kernel unavailable: {ta.implementation()}")


@pytest.fixture(params=["cpp", "reference"])
def impl(request, monkeypatch):
    """Run the test with the C++ kernel or with the reference (the extension 'unavailable')."""
    if request.param == "cpp":
        _need_kernel()
    else:
        monkeypatch.setattr(extension, "load", lambda: None)
    return request.param


def _case(lens, dtype, seed, width=None):
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


def _oracle(q, rows, slots, limits):
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


def _extend_case(prefixes, news, dtype, seed):
    lens = [p + n for p, n in zip(prefixes, news)]
    rows, table, gen = _case(lens, dtype, seed)
    starts = [0]
    for n in news:
        starts.append(starts[-1] + n)
    q = (torch.randn(starts[-1], H, D, generator=gen) * 3).to(dtype)
    return lens, starts, rows, table, q, gen


# ---- both implementations against the float64 oracle ----------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_matches_oracle(impl, dtype):
    lens = [1, 37, 200, 64, 129, 5]
    rows, table, gen = _case(lens, dtype, seed=1)
    q = (torch.randn(len(lens), H, D, generator=gen) * 3).to(dtype)
    out = torch.empty(len(lens), H, D, dtype=torch.float32)
    mass = torch.zeros(len(lens), max(lens) + 3)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass)
    for r, n in enumerate(lens):
        want, probs = _oracle(q[r : r + 1], rows, table[r, :n], [n])
        assert (out[r].double() - want[0]).abs().max() < OUT_TOL, r
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
        want, _ = _oracle(q[r : r + 1], rows, table[r, :n], [n])
        assert (out[r].double() - want[0]).abs().max() < tol, r


def test_decode_strided_query_and_output(impl):
    """A query that is a slice of a fused QKV row and an output slice are used in place."""
    lens = [50, 120]
    rows, table, gen = _case(lens, torch.bfloat16, seed=8)
    qkv = torch.randn(2, (H + 2 * HKV) * D, generator=gen).to(torch.bfloat16)
    q = qkv[:, : H * D].view(2, H, D)  # row stride (H + 2 HKV) D, not contiguous
    assert not q.is_contiguous()
    out = torch.zeros(4, H, D)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out[1:3])
    for r, n in enumerate(lens):
        want, _ = _oracle(q[r : r + 1], rows, table[r, :n], [n])
        assert (out[1 + r].double() - want[0]).abs().max() < OUT_TOL, r
    assert (out[0] == 0).all() and (out[3] == 0).all()


def test_decode_mass_accumulates(impl):
    lens = [50, 90]
    rows, table, gen = _case(lens, torch.bfloat16, seed=3)
    q = torch.randn(2, H, D, generator=gen).to(torch.bfloat16)
    out = torch.empty(2, H, D)
    mass = torch.full((2, 100), 0.5)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass)
    for r, n in enumerate(lens):
        _, probs = _oracle(q[r : r + 1], rows, table[r, :n], [n])
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
    want, probs = _oracle(q, rows, table[0, :3000], [3000])
    assert (out.double() - want).abs().max() < OUT_TOL
    assert torch.allclose(mass[0].double(), probs[0].sum(0), atol=MASS_TOL, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel_max_new", [0, 16, 10_000])  # SDPA only, mixed, kernel only
def test_extend_matches_oracle(impl, dtype, kernel_max_new, monkeypatch):
    monkeypatch.setattr(ta, "EXTEND_KERNEL_MAX_NEW", kernel_max_new)
    prefixes = [0, 23, 40, 0, 130, 7]
    news = [7, 5, 1, 0, 20, 66]  # prefill, chunked prefill, decode, idle, longer chunks
    lens, starts, rows, table, q, _ = _extend_case(prefixes, news, dtype, seed=5)
    out = torch.zeros(starts[-1], H, D)
    mass = torch.zeros(len(lens), max(lens) + 2)
    ta.extend_attention(q, rows, table, torch.tensor(lens), starts, SCALE, out, mass=mass)
    for r, (p, n) in enumerate(zip(prefixes, news)):
        if n == 0:
            assert (mass[r] == 0).all()
            continue
        want, probs = _oracle(q[starts[r] : starts[r + 1]], rows, table[r, : p + n], range(p + 1, p + n + 1))
        assert (out[starts[r] : starts[r + 1]].double() - want).abs().max() < OUT_TOL, r
        col = probs.sum((0, 1))
        assert torch.allclose(mass[r, : p + n].double(), col, atol=MASS_TOL * n, rtol=0), r
        assert abs(float(mass[r].sum()) - H * n) < 1e-4 * n, r
        assert (mass[r, p + n :] == 0).all(), r


def test_extend_rejects_a_row_shorter_than_its_new_tokens(impl):
    rows, table, gen = _case([4], torch.float32, seed=9)
    q = torch.randn(6, H, D, generator=gen)
    with pytest.raises(ValueError, match="seq_len=4 < query_len=6"):
        ta.extend_attention(q, rows, table, torch.tensor([4]), [0, 6], SCALE, torch.empty(6, H, D))


def test_oracle_detects_a_wrong_slot(impl):
    """The comparison can fail: attending one wrong slot is caught."""
    lens = [40, 40]
    rows, table, gen = _case(lens, torch.float32, seed=6)
    q = torch.randn(2, H, D, generator=gen)
    out = torch.empty(2, H, D)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out)
    wrong = table.clone()
    wrong[0, 17] = table[1, 3]
    want, _ = _oracle(q[:1], rows, wrong[0, :40], [40])
    assert (out[0].double() - want[0]).abs().max() > OUT_TOL


# ---- the C++ kernel against the reference ---------------------------------------------------

def _other_lse(num, gen):
    """A log-denominator of 'other keys' per (token, head), some rows -inf (no other keys)."""
    other = torch.randn(num, H, generator=gen) * 2 + 3
    other[::3] = float("-inf")
    return other


def _assert_close(got, want, tol, what):
    assert got.shape == want.shape, what
    err = (got.double() - want.double()).abs().max()
    assert err < tol, f"{what}: max abs difference {float(err):.3g} >= {tol}"


# The kernel's block loops (KERNEL_ISA); those not compiled in on this CPU fail the op's
# check and are skipped: the kernel is built with -march=native, so a CPU without AVX-512F
# (an AVX2-only one) has no AVX-512 loops to run -- 9 tests skipped there, none elsewhere.
ISAS = {"generic": 1, "avx2": 2, "avx512": 3}
ISA_FLAGS = {"generic": None, "avx2": "avx2", "avx512": "avx512f"}


@pytest.fixture(params=list(ISAS))
def isa(request, monkeypatch):
    """Run the kernel with the given block loops (the widest one is the default)."""
    _need_kernel()
    monkeypatch.setattr(ta, "KERNEL_ISA", ISAS[request.param])
    q = torch.zeros(1, H, D)
    try:
        ta.decode_attention(q, torch.zeros(1, HKV, 2 * D), torch.zeros(1, 1, dtype=torch.int32),
                            torch.ones(1, dtype=torch.int64), SCALE, torch.empty_like(q))
    except RuntimeError as err:
        if "isa:" not in str(err):
            raise
        from vtoken.cpu_host import cpu_flags

        flag = ISA_FLAGS[request.param]
        assert flag is not None and flag not in cpu_flags(), f"{request.param} loops missing on a CPU with {flag}"
        pytest.skip(f"the kernel's {request.param} loops: this CPU has no {flag} (the kernel is built for the CPU "
                    "it runs on, -march=native); they run on every CPU with it")
    return request.param


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_reference_decode(dtype, isa):
    lens = [1, 37, 200, 64, 129, 5, 700]
    rows, table, gen = _case(lens, dtype, seed=11)
    q = (torch.randn(len(lens), H, D, generator=gen) * 3).to(dtype)
    other = _other_lse(len(lens), gen)
    results = {}
    for name, fn in (("cpp", ta.decode_attention), ("reference", ref.decode_attention)):
        out = torch.empty(len(lens), H, D)
        mass = torch.zeros(len(lens), max(lens) + 3)
        lse = torch.empty(len(lens), H)
        fn(q, rows, table, torch.tensor(lens), SCALE, out, mass=mass, lse=lse, mass_lse_other=other)
        results[name] = out, mass, lse
    (out, mass, lse), (r_out, r_mass, r_lse) = results["cpp"], results["reference"]
    _assert_close(out, r_out, OUT_TOL, "output")
    _assert_close(lse, r_lse, LSE_TOL, "lse")
    _assert_close(mass, r_mass, MASS_TOL, "mass")
    # The joint mass is below the plain one wherever other keys exist (rows 0, 3, 6: -inf).
    assert float(mass[1].sum()) < H - 1e-3 and abs(float(mass[0].sum()) - H) < 1e-4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_mass", [True, False])
def test_kernel_matches_reference_extend_mixed(dtype, with_mass, isa):
    """Short requests through the kernel, long ones through the reference, in one batch."""
    prefixes = [0, 23, 40, 0, 130, 7, 300]
    news = [7, 5, 1, 0, 20, 66, 3]  # 20 and 66 > EXTEND_KERNEL_MAX_NEW: the reference's part
    assert max(news) > ta.EXTEND_KERNEL_MAX_NEW >= 7
    lens, starts, rows, table, q, gen = _extend_case(prefixes, news, dtype, seed=12)
    other = _other_lse(starts[-1], gen)
    results = {}
    for name, fn in (("cpp", ta.extend_attention), ("reference", ref.extend_attention)):
        out = torch.full((starts[-1], H, D), float("nan"), dtype=dtype)  # every row must be written
        mass = torch.zeros(len(lens), max(lens) + 2) if with_mass else None
        lse = torch.full((starts[-1], H), float("nan"))
        fn(q, rows, table, torch.tensor(lens), starts, SCALE, out, mass=mass, lse=lse,
           mass_lse_other=other if with_mass else None)
        results[name] = out, mass, lse
    (out, mass, lse), (r_out, r_mass, r_lse) = results["cpp"], results["reference"]
    cast = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: OUT_TOL}[dtype]  # final cast
    _assert_close(out, r_out, cast, "output")
    _assert_close(lse, r_lse, LSE_TOL, "lse")
    if with_mass:
        _assert_close(mass, r_mass, MASS_TOL * max(news), "mass")


def test_kernel_and_reference_disagree_on_a_wrong_input():
    """The kernel-vs-reference comparison can fail: a different scale changes all three outputs."""
    _need_kernel()
    lens = [30, 70]
    rows, table, gen = _case(lens, torch.float32, seed=13)
    q = torch.randn(2, H, D, generator=gen) * 3
    outs = []
    for fn, scale in ((ta.decode_attention, SCALE), (ref.decode_attention, SCALE * 1.01)):
        out, mass, lse = torch.empty(2, H, D), torch.zeros(2, 70), torch.empty(2, H)
        fn(q, rows, table, torch.tensor(lens), scale, out, mass=mass, lse=lse)
        outs.append((out, mass, lse))
    for got, want, tol in zip(outs[0], outs[1], (OUT_TOL, MASS_TOL, LSE_TOL)):
        assert (got - want).abs().max() > tol


def test_reference_creates_tensors_on_the_inputs_device():
    """Under a foreign default device, a tensor the reference made without ``device=`` would
    land there and fail against the CPU inputs (the CUDA path needs device-clean code)."""
    lens, starts, rows, table, q, gen = _extend_case([0, 20, 5], [12, 1, 3], torch.bfloat16, seed=14)
    out, mass, lse = torch.empty(starts[-1], H, D), torch.zeros(3, 25), torch.empty(starts[-1], H)
    other = _other_lse(starts[-1], gen)
    seq_lens = torch.tensor(lens)
    with torch.device("meta"):
        ref.extend_attention(q, rows, table, seq_lens, starts, SCALE, out, mass=mass, lse=lse, mass_lse_other=other)
        ref.extend_attention(q, rows, table, seq_lens, starts, SCALE, out)
        ref.decode_attention(q[:3], rows, table, seq_lens, SCALE, out[:3], mass=mass, lse=lse[:3],
                             mass_lse_other=other[:3])
    assert torch.isfinite(out).all() and torch.isfinite(lse).all() and mass.sum() > 0


# ---- the extension's loading -----------------------------------------------------------------

def test_implementation_is_reported():
    assert ta.implementation() == "cpp" or ta.implementation().startswith("torch (")
    assert ta.implementation() == extension.implementation()


def _fresh_extension(monkeypatch, env: str | None):
    monkeypatch.setattr(extension, "_ops", None)
    monkeypatch.setattr(extension, "_state", None)
    if env is None:
        monkeypatch.delenv(extension.ENV_IMPL, raising=False)
    else:
        monkeypatch.setenv(extension.ENV_IMPL, env)


def test_failed_build_falls_back_to_the_reference_with_a_warning(monkeypatch, caplog):
    from torch.utils import cpp_extension

    def broken(**kwargs):
        raise RuntimeError("compiler exploded")

    monkeypatch.setattr(cpp_extension, "load", broken)
    _fresh_extension(monkeypatch, None)
    with caplog.at_level("WARNING", logger=extension.__name__):
        assert ta.implementation().startswith("torch (C++ kernel unavailable: RuntimeError: compiler exploded")
    assert "using the PyTorch path" in caplog.text
    assert extension.load() is None
    lens = [10, 3]
    rows, table, gen = _case(lens, torch.bfloat16, seed=7)
    q = torch.randn(2, H, D, generator=gen).to(torch.bfloat16)
    out = torch.empty(2, H, D)
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out)  # the reference runs
    want, _ = _oracle(q[:1], rows, table[0, :10], [10])
    assert (out[0].double() - want[0]).abs().max() < OUT_TOL


def test_failed_build_raises_when_cpp_is_required(monkeypatch):
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: (_ for _ in ()).throw(RuntimeError("no compiler")))
    _fresh_extension(monkeypatch, "cpp")
    with pytest.raises(RuntimeError, match="no compiler"):
        extension.load()


def test_torch_choice_never_builds(monkeypatch):
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: pytest.fail("built despite torch"))
    _fresh_extension(monkeypatch, "torch")
    assert extension.load() is None
    assert extension.implementation() == "torch (VTOKEN_TOKEN_ATTENTION=torch)"


def test_unknown_choice_names_the_valid_ones(monkeypatch):
    _fresh_extension(monkeypatch, "cuda")
    with pytest.raises(ValueError, match=r"VTOKEN_TOKEN_ATTENTION='cuda': must be one of \['auto', 'cpp', 'torch'\]"):
        extension.load()


def test_build_name_depends_on_the_source(monkeypatch, tmp_path):
    name = extension.build_name()
    changed = tmp_path / "token_attention.cpp"
    changed.write_bytes(extension.SOURCE.read_bytes() + b"\n// changed\n")
    monkeypatch.setattr(extension, "SOURCE", changed)
    assert extension.build_name() != name and extension.build_name().startswith("vtoken_token_attention_")


def test_source_ships_with_the_package():
    assert extension.SOURCE.is_file() and extension.SOURCE.parent.name == "csrc"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
def test_kv_write_kernel_equals_reference(dtype, slot_dtype):
    """The kernel's write_rows puts exactly the reference's bytes at the slots (strided K/V
    slices of a QKV projection, padding slots skipped, every other row untouched)."""
    if extension.load() is None:
        pytest.fail(f"the C++ extension did not build: {extension.implementation()}")
    g = torch.Generator().manual_seed(7)
    n, hkv, d, slots_total = 6, 3, 64, 40
    qkv = torch.randn(n + 2, (9 + 2 * hkv) * d, generator=g).to(dtype)  # padded: 2 extra tokens
    key = qkv[:, 9 * d : (9 + hkv) * d].view(n + 2, hkv, d)
    value = qkv[:, (9 + hkv) * d :].view(n + 2, hkv, d)
    slots = torch.tensor([5, 17, -1, 0, 39, 22], dtype=slot_dtype)
    pools = [torch.randn(slots_total, hkv, 2 * d, generator=g).to(dtype) for _ in range(2)]
    pools[1].copy_(pools[0])
    before = pools[0].clone()
    extension.load().write_rows(pools[0], key, value, slots)  # the kernel's op itself
    ref.write_kv(pools[1], key, value, slots)
    assert torch.equal(pools[0], pools[1])
    written = [5, 17, 0, 39, 22]
    assert torch.equal(pools[0][written], torch.cat([key[[0, 1, 3, 4, 5]], value[[0, 1, 3, 4, 5]]], dim=-1))
    untouched = [s for s in range(slots_total) if s not in written]
    assert torch.equal(pools[0][untouched], before[untouched])


# ---- a row's result depends on that row alone -----------------------------------------------------

def _one_row_alone_and_among(target: int, others: list[int], threads: int, split_rows):
    """(output, mass, lse) of a request with a ``target``-entry row decoded alone and decoded in the
    middle of requests with rows ``others`` (the same rows, slots and query for the target)."""
    lens = [*others[: len(others) // 2], target, *others[len(others) // 2:]]
    at = len(others) // 2
    rows, table, gen = _case(lens, torch.float32, seed=11)
    q = (torch.randn(len(lens), H, D, generator=gen) * 3)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = []
        for pick in ([at], list(range(len(lens)))):
            out, mass, lse = torch.empty(len(pick), H, D), torch.zeros(len(pick), max(lens)), torch.empty(len(pick), H)
            ta.decode_attention(q[pick].contiguous(), rows, table[pick].contiguous(), torch.tensor(lens)[pick], SCALE,
                                out, mass=mass, lse=lse, split_rows=split_rows)
            i = pick.index(at)
            got.append((out[i], mass[i, :target], lse[i]))
    finally:
        torch.set_num_threads(before)
    return got


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("target, others", [(300, [40, 80, 500]), (1100, [64, 1500, 20, 300, 90, 700, 33])])
def test_a_long_row_gives_the_same_bits_alone_and_among_others(threads, target, others):
    """Past 256 entries the kernel splits a row; with the fixed split (``SPLIT_ROWS``, the default) the
    split depends on the row alone, so its output, mass and LSE are bit-identical alone and beside 3 or
    7 other requests, at one and at two threads."""
    _need_kernel()
    (alone, among) = _one_row_alone_and_among(target, others, threads, None)
    for a, b in zip(alone, among):
        assert torch.equal(a, b)


def test_the_thread_heuristic_split_changes_a_long_row_with_its_neighbours():
    """The check above can fail: with the kernel's own heuristic (split from the number of queries, the
    longest row and the threads; ``split_rows`` 0) the same row's numbers change beside other rows."""
    _need_kernel()
    alone, among = _one_row_alone_and_among(1100, [64, 1500, 20], 2, 0)
    assert not all(torch.equal(a, b) for a, b in zip(alone, among))
