"""DiffKV tiers: quantisation, the low-tier store, the lse output and tiered attention.

References are float64 and computed from the very same inputs the code sees (bf16 pool rows,
the *dequantised* low rows), so quantisation error is not part of the attention comparison:
the only differences are float32 accumulation and exp, hence ``OUT_TOL`` = 2e-5 absolute on
outputs (O(1)), ``LSE_TOL`` = 2e-5 absolute on log-sum-exps (O(10)), ``MASS_TOL`` = 2e-5 on
masses (as in test_token_attention). The quantisation bound is exact: every element's error
is at most scale / 2 (measured in float64 from the stored codes and fp16 parameters).
Both the C++ kernel (skipped if it cannot be built) and the PyTorch reference run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from baselines.diffkv import DiffKVConfig
from baselines.diffkv import quant
from vtoken.plugin import token_attention as ta
from baselines.diffkv.lowtier import LowBatch, LowTierStore
from vtoken.plugin.cpu import extension
from vtoken.plugin.relocation import AllLayerKV
from baselines.diffkv.tiered_attention import _low_part, _merge, tiered_decode_attention, tiered_extend_attention

H, HKV, D = 9, 3, 64  # GQA group 3, SmolLM2-135M
LAYERS = 30
SCALE = D**-0.5
OUT_TOL = 2e-5
LSE_TOL = 2e-5
MASS_TOL = 2e-5
SETTINGS = [(8, 4), (4, 2)]  # DiffKV's K8V4 and K4V2 (its low tier, the default)


def _batch(store, layer, low_slots):
    """The padded batch attention reads, and each request's real rows split back out."""
    batch = LowBatch.of(low_slots)
    rows = store.rows_batch(layer, batch)
    return rows, batch.lens, [rows[r, : len(s)] for r, s in enumerate(low_slots)]


def _as_table(rows):
    """Padded rows [R, M, Hkv, 2D] as decode's low view: flat rows and an int32 row table."""
    r, m = rows.shape[:2]
    return rows.reshape(r * m, *rows.shape[2:]), torch.arange(r * m, dtype=torch.int32).view(r, m)


@pytest.fixture(params=["cpp", "torch"])
def impl(request, monkeypatch):
    if request.param == "cpp":
        if ta.implementation() != "cpp":
            pytest.skip(f"C++ kernel unavailable: {ta.implementation()}")
    else:
        monkeypatch.setattr(extension, "load", lambda: None)  # the PyTorch reference
    return request.param


# ---- quantisation ---------------------------------------------------------------------------

def _rows(n, seed, dtype=torch.bfloat16, spread=2.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, HKV, 2 * D, generator=gen) * spread
    x[0] = 0.75  # constant rows (fp16-representable): scale 0, exact
    x[1, 0, :D] = 1e-3 * torch.arange(D)  # tiny range, bf16 values off the fp16 grid
    x[2, 1, D:] += 40.0  # all positive, far from 0
    x[3, 2, :3] = torch.tensor([-30.0, 25.0, 1e-9])  # outliers
    # small range at a large magnitude, off the fp16 grid in float32 (fp16 step 0.5 there):
    # a nearest-rounded zero point would miss by up to 0.25, far beyond scale / 2
    x[4, 0, :] = 1000.3 + 0.01 * torch.rand(2 * D, generator=gen)
    return x.to(dtype)


@pytest.mark.parametrize("k_bits,v_bits", SETTINGS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_quantisation_error_at_most_half_a_step(k_bits, v_bits, dtype):
    x = _rows(64, seed=k_bits + 10 * v_bits, dtype=dtype)
    packed = quant.quantize(x, k_bits, v_bits)
    assert packed.dtype == torch.uint8 and packed.shape == (64, HKV, quant.token_bytes(D, k_bits, v_bits))
    f = quant.fields(packed, D, k_bits, v_bits)
    x64 = x.double()
    for part, codes, scale, zero, bits in [
        (x64[..., :D], f.k_codes, f.k_scale, f.k_zero, k_bits),
        (x64[..., D:], f.v_codes, f.v_scale, f.v_zero, v_bits),
    ]:
        assert int(codes.max()) <= (1 << bits) - 1
        s, z = scale.double()[..., None], zero.double()[..., None]
        deq = codes.double() * s + z  # exact in float64 (11-bit x 8-bit products)
        assert ((part - deq).abs() <= s / 2).all()
        assert (s >= 0).all()
        # the step is not wasted: at most one fp16 ulp (plus double rounding) above the ideal
        ideal = (part.amax(-1, keepdim=True) - z) / ((1 << bits) - 1)
        assert (s <= ideal * (1 + 2**-9) + 2**-24).all()
    # dequantize (float32) is the float32 rounding of that float64 value
    deq32 = quant.dequantize(packed, D, k_bits, v_bits)
    k64 = f.k_codes.double() * f.k_scale.double()[..., None] + f.k_zero.double()[..., None]
    v64 = f.v_codes.double() * f.v_scale.double()[..., None] + f.v_zero.double()[..., None]
    ref = torch.cat([k64, v64], -1)
    assert deq32.dtype == torch.float32 and deq32.shape == x.shape
    assert ((deq32.double() - ref).abs() <= ref.abs() * 2**-23 + 1e-30).all()
    # constant row of an fp16-representable value: exact
    assert torch.equal(quant.dequantize(packed[:1], D, k_bits, v_bits), x[:1].float())


def test_byte_counts_match_the_core_accounting():
    assert quant.token_bytes(64, 8, 4) == 64 + 32 + 8 == 104
    assert quant.token_bytes(64, 4, 2) == 32 + 16 + 8 == 56
    assert quant.token_bytes(128, 8, 4) == 200
    # the core arm's default: a low-tier (K4V2) token weighs low_bytes_ratio of a bf16 token
    assert quant.token_bytes(D, 4, 2) / (2 * D * 2) == DiffKVConfig().low_bytes_ratio == 0.21875
    for kb, vb in SETTINGS:
        x = _rows(5, seed=3)
        assert quant.quantize(x, kb, vb).numel() == 5 * HKV * quant.token_bytes(D, kb, vb)


def test_pack_layout_and_round_trip():
    assert quant.pack(torch.tensor([1, 2], dtype=torch.uint8), 4).tolist() == [0x21]
    assert quant.pack(torch.tensor([1, 2, 3, 0], dtype=torch.uint8), 2).tolist() == [0b00111001]
    gen = torch.Generator().manual_seed(0)
    for bits in (8, 4, 2):
        q = torch.randint(0, 1 << bits, (7, 3, 64), generator=gen).to(torch.uint8)
        p = quant.pack(q, bits)
        assert p.shape == (7, 3, 64 * bits // 8)
        assert torch.equal(quant.unpack(p, bits), q)


# ---- low-tier store -------------------------------------------------------------------------

def _pool(num_blocks=8, block=16, layers=4, seed=0):
    """A bf16 pool laid out like vLLM's LBNHC layer caches in one buffer, filled at random."""
    gen = torch.Generator().manual_seed(seed)
    buf = (torch.randn(layers, num_blocks, block, HKV, 2 * D, generator=gen) * 2).to(torch.bfloat16)
    caches = [buf[i].permute(0, 2, 1, 3) for i in range(layers)]
    return AllLayerKV(caches), buf.view(layers, num_blocks * block, HKV, 2 * D)


def test_store_slots_free_list():
    store = LowTierStore(2, HKV, D, capacity=6)
    a = store.allocate(4)
    assert a.dtype == np.int64 and sorted(a.tolist()) == [0, 1, 2, 3]
    with pytest.raises(RuntimeError):
        store.allocate(3)
    store.free(a[[1, 3]])
    with pytest.raises(RuntimeError):
        store.free(a[[1]])  # double free
    b = store.allocate(4)
    assert len(set(b.tolist()) | set(a[[0, 2]].tolist())) == 6
    assert store.num_used == 6 and store.num_free == 0


@pytest.mark.parametrize("k_bits,v_bits", SETTINGS)
def test_demote_stores_every_layer(k_bits, v_bits):
    kv, rows = _pool()
    store = LowTierStore(kv.num_layers, HKV, D, capacity=20, k_bits=k_bits, v_bits=v_bits)
    src = np.array([77, 3, 120, 5, 64])
    low = store.allocate(len(src))
    store.demote(kv, src, low)
    for layer in range(kv.num_layers):
        want = quant.dequantize(quant.quantize(rows[layer, src], k_bits, v_bits), D, k_bits, v_bits)
        assert torch.equal(store.rows(layer, low), want)
        assert not torch.equal(store.rows(layer, low), store.rows((layer + 1) % kv.num_layers, low))
    # a callable reader gives the same bytes
    other = LowTierStore(kv.num_layers, HKV, D, capacity=20, k_bits=k_bits, v_bits=v_bits)
    low2 = other.allocate(len(src))
    other.demote(lambda s: rows[:, torch.from_numpy(s)].flatten(2), src, low2)
    assert torch.equal(other.buffer[:, low2], store.buffer[:, low])
    # a padded batch of requests in logical order: [2, 0, 1] real rows, width 2
    rows2, lens, parts = _batch(store, 2, [low[3:], np.array([], dtype=np.int64), low[:1]])
    assert rows2.shape == (3, 2, HKV, 2 * D) and lens.tolist() == [2, 0, 1]
    assert torch.equal(parts[0], store.rows(2, low[3:])) and torch.equal(parts[2], store.rows(2, low[:1]))


@pytest.mark.parametrize("k_bits,v_bits", SETTINGS)
def test_memory_accounting_is_tier_counts_times_bytes(k_bits, v_bits):
    store = LowTierStore(LAYERS, HKV, D, capacity=100, k_bits=k_bits, v_bits=v_bits)
    per_token = LAYERS * HKV * quant.token_bytes(D, k_bits, v_bits)
    assert store.bytes_per_token == per_token
    assert store.buffer.numel() == 100 * per_token  # the preallocation, byte for byte
    high = LAYERS * HKV * 2 * D * 2  # bf16 pool bytes per token
    a = store.allocate(37)
    store.allocate(5)
    store.free(a[:10])
    assert store.num_used == 32 and store.used_bytes == 32 * per_token
    for n in (0, 1, 16, 37, 39, 40, 100):
        assert store.block_equivalents(n, 16, high) == math.ceil(n * per_token / (16 * high))
    if (k_bits, v_bits) == (8, 4):
        assert store.bytes_ratio(high) == 0.40625
        assert store.block_equivalents(39, 16, high) == 1  # 39 * 0.40625 = 15.84 tokens
        assert store.block_equivalents(40, 16, high) == 2  # 16.25


# ---- lse of the token-view attention ----------------------------------------------------------

def _case(lens, seed, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    pool = 3 * sum(lens) + 7
    rows = (torch.randn(pool, HKV, 2 * D, generator=gen) * 1.5).to(dtype)
    table = torch.randint(0, pool, (len(lens) + 1, max(lens) + 5), generator=gen, dtype=torch.int32)
    perm = torch.randperm(pool, generator=gen)
    at = 0
    for r, n in enumerate(lens):
        table[r, :n] = perm[at : at + n].to(torch.int32)
        at += n
    return rows, table, gen


def _scores64(q, k_rows):
    """float64 scores [n, H, L] of queries q [n, H, D] against rows [L, Hkv, 2D]."""
    k = k_rows[..., :D].double().repeat_interleave(H // HKV, 1)  # [L, H, D]
    return torch.einsum("nhd,lhd->nhl", q.double(), k) * SCALE


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_decode_lse_matches_float64(impl, dtype):
    lens = [1, 37, 200, 64, 300]
    rows, table, gen = _case(lens, seed=4, dtype=dtype)
    q = (torch.randn(len(lens), H, D, generator=gen) * 3).to(dtype)
    out = torch.empty(len(lens), H, D)
    lse = torch.full((len(lens), H), float("nan"))
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, out, lse=lse)
    for r, n in enumerate(lens):
        ref = torch.logsumexp(_scores64(q[r : r + 1], rows[table[r, :n].long()]), -1)[0]
        assert (lse[r].double() - ref).abs().max() < LSE_TOL, r


def test_extend_lse_matches_float64(impl):
    # 1, 3, 8 new tokens use the kernel (auto mode), 20 and 40 the torch path
    news, prefixes = [1, 3, 8, 20, 40], [0, 50, 7, 100, 0]
    lens = [n + p for n, p in zip(news, prefixes)]
    rows, table, gen = _case(lens, seed=5)
    starts = np.concatenate([[0], np.cumsum(news)]).tolist()
    q = (torch.randn(starts[-1], H, D, generator=gen) * 3).to(torch.bfloat16)
    out = torch.empty(starts[-1], H, D)
    lse = torch.full((starts[-1], H), float("nan"))
    ta.extend_attention(q, rows, table, torch.tensor(lens), starts, SCALE, out, lse=lse)
    for r, n in enumerate(lens):
        scores = _scores64(q[starts[r] : starts[r + 1]], rows[table[r, :n].long()])
        allowed = torch.arange(n)[None, :] <= (prefixes[r] + torch.arange(news[r]))[:, None]
        ref = torch.logsumexp(scores.masked_fill(~allowed[:, None, :], float("-inf")), -1)
        assert (lse[starts[r] : starts[r + 1]].double() - ref).abs().max() < LSE_TOL, r


def test_mass_under_a_joint_softmax(impl):
    lens = [5, 130, 64]
    rows, table, gen = _case(lens, seed=6)
    q = (torch.randn(len(lens), H, D, generator=gen) * 3).to(torch.bfloat16)
    other = torch.randn(len(lens), H, generator=gen) * 3
    other[0, :4] = float("-inf")  # no outside keys for these heads
    mass = torch.zeros(len(lens), max(lens))
    ta.decode_attention(q, rows, table, torch.tensor(lens), SCALE, torch.empty(len(lens), H, D), mass=mass,
                        mass_lse_other=other)
    for r, n in enumerate(lens):
        scores = _scores64(q[r : r + 1], rows[table[r, :n].long()])[0]  # [H, L]
        joint = torch.logaddexp(torch.logsumexp(scores, -1), other[r].double())
        ref = torch.exp(scores - joint[:, None]).sum(0)
        assert torch.allclose(mass[r, :n].double(), ref, atol=MASS_TOL, rtol=0), r


# ---- tiered attention -------------------------------------------------------------------------

def _reference(q, high_rows, low_rows, limits=None):
    """float64 output [n, H, D], lse [n, H] and probabilities [n, H, L_high + L_low] of queries
    q over [high rows (causal by `limits`) ; low rows (all visible)]."""
    kv = torch.cat([high_rows.double(), low_rows.double()])
    scores = _scores64(q, kv)
    if limits is not None:
        pos = torch.arange(kv.shape[0])
        allowed = (pos[None, :] < torch.as_tensor(limits)[:, None]) | (pos[None, :] >= high_rows.shape[0])
        scores = scores.masked_fill(~allowed[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, -1)
    probs = torch.exp(scores - lse[..., None])
    v = kv[..., D:].repeat_interleave(H // HKV, 1)
    return torch.einsum("nhl,lhd->nhd", probs, v), lse, probs


def _tiered_case(high, low, seed, k_bits=8, v_bits=4):
    rows, table, gen = _case(high, seed)
    store = LowTierStore(1, HKV, D, capacity=sum(low) + 3, k_bits=k_bits, v_bits=v_bits)
    src = (torch.randn(sum(low) + 1, HKV, 2 * D, generator=gen) * 1.5).to(torch.bfloat16)
    low_slots = [store.allocate(n) for n in low]
    flat = np.concatenate(low_slots)
    store.demote(lambda s: src[torch.from_numpy(s)].flatten(1)[None], np.arange(len(flat)), flat)
    return rows, table, gen, store, low_slots


@pytest.mark.parametrize("low", [[0, 3, 100, 0, 150, 64], [2, 3, 100, 1, 150, 64]])  # some / every request
@pytest.mark.parametrize("k_bits,v_bits", SETTINGS)
def test_tiered_decode_matches_reference_over_dequantised_rows(impl, k_bits, v_bits, low):
    high = [1, 5, 70, 200, 33, 2]
    rows, table, gen, store, low_slots = _tiered_case(high, low, seed=7, k_bits=k_bits, v_bits=v_bits)
    q = (torch.randn(len(high), H, D, generator=gen) * 3).to(torch.bfloat16)
    low_rows, low_lens, lows = _batch(store, 0, low_slots)
    out = torch.empty(len(high), H, D)
    lse = torch.empty(len(high), H)
    mass_high = torch.zeros(len(high), max(high) + 2)
    mass_low = torch.zeros(len(high), max(low) + 2)
    tiered_decode_attention(q, rows, table, torch.tensor(high), *_as_table(low_rows), low_lens, SCALE, out, mass_high,
                            mass_low, lse=lse)
    for r in range(len(high)):
        ref, ref_lse, probs = _reference(q[r : r + 1], rows[table[r, : high[r]].long()], lows[r])
        assert (out[r].double() - ref[0]).abs().max() < OUT_TOL, r
        assert (lse[r].double() - ref_lse[0]).abs().max() < LSE_TOL, r
        per_entry = probs[0].sum(0)
        assert torch.allclose(mass_high[r, : high[r]].double(), per_entry[: high[r]], atol=MASS_TOL, rtol=0), r
        assert torch.allclose(mass_low[r, : low[r]].double(), per_entry[high[r] :], atol=MASS_TOL, rtol=0), r
        assert (mass_high[r, high[r] :] == 0).all() and (mass_low[r, low[r] :] == 0).all()
        assert abs(float(mass_high[r].sum() + mass_low[r].sum()) - H) < 1e-4, r


def test_tiered_decode_without_low_tokens_is_plain_attention(impl):
    high = [4, 90]
    rows, table, gen = _case(high, seed=8)
    q = (torch.randn(2, H, D, generator=gen) * 3).to(torch.bfloat16)
    out, plain = torch.empty(2, H, D), torch.empty(2, H, D)
    # padding rows of garbage must not count: lens 0
    garbage = torch.randn(2, 3, HKV, 2 * D, generator=gen)
    tiered_decode_attention(q, rows, table, torch.tensor(high), *_as_table(garbage), torch.tensor([0, 0]), SCALE, out)
    ta.decode_attention(q, rows, table, torch.tensor(high), SCALE, plain)
    assert torch.equal(out, plain)


def test_tiered_extend_matches_reference(impl):
    news, prefixes = [1, 4, 8, 20, 12], [0, 30, 9, 60, 0]
    low = [5, 0, 40, 17, 0]
    high = [n + p for n, p in zip(news, prefixes)]
    rows, table, gen, store, low_slots = _tiered_case(high, low, seed=9)
    starts = np.concatenate([[0], np.cumsum(news)]).tolist()
    q = (torch.randn(starts[-1], H, D, generator=gen) * 3).to(torch.bfloat16)
    low_rows, low_lens, lows = _batch(store, 0, low_slots)
    out = torch.empty(starts[-1], H, D, dtype=torch.bfloat16)  # cast at the very end
    out32 = torch.empty(starts[-1], H, D)
    lse = torch.empty(starts[-1], H)
    mass_high = torch.zeros(len(high), max(high))
    mass_low = torch.zeros(len(high), max(low))
    tiered_extend_attention(q, rows, table, torch.tensor(high), starts, low_rows, low_lens, SCALE, out32, mass_high,
                            mass_low, lse=lse)
    tiered_extend_attention(q, rows, table, torch.tensor(high), starts, low_rows, low_lens, SCALE, out)
    for r in range(len(high)):
        a, b = starts[r], starts[r + 1]
        ref, ref_lse, probs = _reference(q[a:b], rows[table[r, : high[r]].long()], lows[r],
                                         limits=prefixes[r] + 1 + torch.arange(news[r]))
        assert (out32[a:b].double() - ref).abs().max() < OUT_TOL, r
        assert (out[a:b].double() - ref).abs().max() < 2e-2, r  # bf16 output
        assert (lse[a:b].double() - ref_lse).abs().max() < LSE_TOL, r
        per_entry = probs.sum((0, 1))
        assert torch.allclose(mass_high[r, : high[r]].double(), per_entry[: high[r]], atol=MASS_TOL, rtol=0), r
        assert torch.allclose(mass_low[r, : low[r]].double(), per_entry[high[r] :], atol=MASS_TOL, rtol=0), r
        assert abs(float(mass_high[r].sum() + mass_low[r].sum()) - H * news[r]) < 1e-4 * news[r], r


def test_lse_merge_equals_joint_softmax():
    gen = torch.Generator().manual_seed(10)
    q = torch.randn(3, H, D, generator=gen) * 3
    kv = torch.randn(50, HKV, 2 * D, generator=gen)
    perm = torch.randperm(50, generator=gen)
    a, b = kv[perm[:17]], kv[perm[17:]]
    _, o_a, lse_a = _low_part(q[None], a[None], torch.tensor([17]), SCALE)
    _, o_b, lse_b = _low_part(q[None], b[None], torch.tensor([33]), SCALE)
    out, lse = _merge(o_a[0], lse_a[0], o_b[0], lse_b[0])
    ref, ref_lse, _ = _reference(q, kv[:0], kv)
    assert (out.double() - ref).abs().max() < OUT_TOL
    assert (lse.double() - ref_lse).abs().max() < LSE_TOL
    # an empty part (lse -inf) leaves the other one unchanged
    _, o_c, lse_c = _low_part(q[None], b[None], torch.tensor([0]), SCALE)  # all masked: the empty part
    assert torch.equal(o_c, torch.zeros_like(o_c)) and torch.isneginf(lse_c).all()
    out2, lse2 = _merge(o_a[0], lse_a[0], o_c[0], lse_c[0])
    assert torch.equal(out2, o_a[0]) and torch.equal(lse2, lse_a[0])


def test_end_to_end_pool_demotion_then_tiered_decode(impl):
    """Tokens demoted from a real multi-layer pool: attention over [high ; low] in every layer
    equals the reference over the original high rows and the dequantised demoted rows."""
    kv, pool_rows = _pool(num_blocks=8, block=16, layers=3, seed=11)
    gen = torch.Generator().manual_seed(11)
    store = LowTierStore(kv.num_layers, HKV, D, capacity=64)
    order = torch.randperm(128, generator=gen).numpy()
    req_slots = [order[:40], order[40:41], order[41:100]]
    demote_mask = [np.arange(40) < 30, np.zeros(1, bool), np.arange(59) % 3 == 0]
    demote_mask[2][-1] = False  # the new token stays high
    highs, lows = [], []
    for slots, m in zip(req_slots, demote_mask):
        low = store.allocate(int(m.sum()))
        store.demote(kv, slots[m], low)
        highs.append(slots[~m])
        lows.append(low)
    assert store.used_bytes == sum(int(m.sum()) for m in demote_mask) * store.bytes_per_token
    lens = [len(h) for h in highs]
    table = torch.zeros(3, max(lens), dtype=torch.int32)
    for r, h in enumerate(highs):
        table[r, : len(h)] = torch.from_numpy(h.astype(np.int32))
    q = (torch.randn(3, H, D, generator=gen) * 3).to(torch.bfloat16)
    for layer in range(kv.num_layers):
        layer_rows = pool_rows[layer]
        low_rows, low_lens, per_request = _batch(store, layer, lows)
        out = torch.empty(3, H, D)
        tiered_decode_attention(q, layer_rows, table, torch.tensor(lens), store.cache[layer], LowBatch.of(lows).table,
                                low_lens, SCALE, out)
        for r in range(3):
            deq = quant.dequantize(quant.quantize(layer_rows[req_slots[r][demote_mask[r]]], 4, 2), D, 4, 2)
            assert torch.equal(per_request[r], deq)
            ref, _, _ = _reference(q[r : r + 1], layer_rows[highs[r]], deq)
            assert (out[r].double() - ref[0]).abs().max() < OUT_TOL, (layer, r)
