"""Per-token, per-KV-head asymmetric quantisation of K/V rows (DiffKV's low tier).

DiffKV (Zhang et al., SOSP'25; code zyqCSL/DiffKV, ``csrc/quantization/kv_cache_quant``)
quantises each token's K and V of one head with uniform min/max quantisation: an fp16
``scale`` and an fp16 ``zero`` (the minimum, a float offset) per group, values
``q = round((x - zero) / scale)`` saturated to ``[0, 2^bits - 1]``, dequantised as
``q * scale + zero``; sub-byte values are packed little-end first (the element with the
lower index in the lower bits). Its high tier is K int8 / V int4 ("K8V4"), its low tier
K4V2 (the baseline's low tier here, ``baselines/diffkv/arm.py``). Here a group is one token's K (or V) of one KV head, as in DiffKV's
(k-groups, v-groups) = (1, 1) configurations.

Record of one token-head (``token_bytes(D, kb, vb)`` bytes, uint8)::

    [ K: D*kb/8 bytes | V: D*vb/8 bytes | k_scale k_zero v_scale v_zero: 4 x fp16 ]

At head_size 64, K8V4: 64 + 32 + 8 = 104 bytes vs 256 in bf16 (ratio 0.40625); K4V2:
32 + 16 + 8 = 56 bytes (0.21875, the default ``low_bytes_ratio`` of ``baselines/diffkv/arm.py``).

Rounding of the parameters, so that every element's error is at most ``scale / 2``:
``zero`` is the fp16 value at or below the minimum and ``scale`` the fp16 value at or above
``(max - zero) / (2^bits - 1)``, so the grid ``zero + [0, 2^bits - 1] * scale`` covers
``[min, max]``. The code ``(x - zero) / scale`` is computed in float64 (exact difference, one
rounding), so ``|x - (q * scale + zero)| <= scale / 2`` holds up to one float64 rounding of
the quotient. Values must lie within fp16 range (|x| < 65504), which K/V activations do.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

K_BITS = (8, 4)
V_BITS = (4, 2)
_META = 4  # fp16 values per token-head: k_scale, k_zero, v_scale, v_zero


def _check(head_size: int, k_bits: int, v_bits: int) -> None:
    if k_bits not in (8, 4, 2) or v_bits not in (8, 4, 2):
        raise ValueError(f"k_bits={k_bits}, v_bits={v_bits}: each must be 8, 4 or 2 "
                         f"(DiffKV: K in {K_BITS}, V in {V_BITS})")
    if head_size % 8:
        raise ValueError(f"head_size={head_size}: must be a multiple of 8")


def token_bytes(head_size: int, k_bits: int = 8, v_bits: int = 4) -> int:
    """Bytes of one token of one KV head: packed K and V plus four fp16 (scale and zero of K
    and of V). 104 at head_size 64, K8V4."""
    _check(head_size, k_bits, v_bits)
    return head_size * k_bits // 8 + head_size * v_bits // 8 + 2 * _META


def _fp16_down(x: torch.Tensor) -> torch.Tensor:
    """An fp16 value <= x, the largest one up to double rounding (float64 in, fp16 out)."""
    h = x.to(torch.float16)
    bits = h.view(torch.int16).clone()
    over = h.double() > x
    bits[over & (h > 0)] -= 1
    bits[over & (h < 0)] += 1  # sign-magnitude: one step away from zero
    bits[over & (h == 0)] = -32767  # 0x8001: the negative smallest subnormal
    return bits.view(torch.float16)


def _fp16_up(x: torch.Tensor) -> torch.Tensor:
    """An fp16 value >= x >= 0, the smallest one up to double rounding (float64 in, fp16 out)."""
    h = x.to(torch.float16)
    bits = h.view(torch.int16).clone()
    bits[h.double() < x] += 1
    return bits.view(torch.float16)


def _quantize_part(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x float [..., D] -> packed uint8 [..., D*bits/8], fp16 scale [...], fp16 zero [...]."""
    levels = (1 << bits) - 1
    x64 = x.double()
    lo, hi = x64.amin(-1), x64.amax(-1)
    zero = _fp16_down(lo)
    z64 = zero.double()
    scale = _fp16_up((hi - z64) / levels)
    s64 = scale.double()
    if not bool(torch.isfinite(s64).all() and torch.isfinite(z64).all()):
        raise ValueError("quantize: K/V values beyond fp16 range")
    safe = torch.where(s64 > 0, s64, torch.ones_like(s64))
    q = torch.round((x64 - z64[..., None]) / safe[..., None]).clamp_(0, levels).to(torch.uint8)
    return pack(q, bits), scale, zero


def pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes ``[..., n]`` (each < 2^bits) -> ``[..., n * bits / 8]``; element i of a byte's
    group sits in bits ``[i*bits, (i+1)*bits)``."""
    if bits == 8:
        return q.contiguous()
    per = 8 // bits
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8)
    grouped = q.reshape(*q.shape[:-1], q.shape[-1] // per, per)
    return (grouped << shifts).sum(-1, dtype=torch.uint8)


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`pack`: uint8 ``[..., m]`` -> codes ``[..., m * 8 / bits]``."""
    if bits == 8:
        return packed
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8)
    codes = (packed[..., None] >> shifts) & ((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * (8 // bits))


class Fields(NamedTuple):
    """The parts of packed records ``[..., token_bytes]``: integer codes and fp16 parameters."""

    k_codes: torch.Tensor  # uint8 [..., D]
    v_codes: torch.Tensor  # uint8 [..., D]
    k_scale: torch.Tensor  # fp16 [...]
    k_zero: torch.Tensor
    v_scale: torch.Tensor
    v_zero: torch.Tensor


def quantize(rows: torch.Tensor, k_bits: int = 8, v_bits: int = 4) -> torch.Tensor:
    """Quantise K/V rows ``[n, H, 2 * D]`` (K | V, any float dtype) to uint8 records
    ``[n, H, token_bytes(D, k_bits, v_bits)]`` (contiguous; ``.view(n, -1)`` is one token)."""
    n, heads, width = rows.shape
    head_size = width // 2
    _check(head_size, k_bits, v_bits)
    kp, ks, kz = _quantize_part(rows[..., :head_size], k_bits)
    vp, vs, vz = _quantize_part(rows[..., head_size:], v_bits)
    meta = torch.stack([ks, kz, vs, vz], dim=-1).contiguous().view(torch.uint8)  # [n, H, 8]
    return torch.cat([kp, vp, meta], dim=-1)


def fields(packed: torch.Tensor, head_size: int, k_bits: int = 8, v_bits: int = 4) -> Fields:
    """Split records ``[..., token_bytes]`` into codes and fp16 parameters."""
    kb, vb = head_size * k_bits // 8, head_size * v_bits // 8
    if packed.shape[-1] != token_bytes(head_size, k_bits, v_bits):
        raise ValueError(f"records of {packed.shape[-1]} bytes, expected {token_bytes(head_size, k_bits, v_bits)}")
    meta = packed[..., kb + vb :].contiguous().view(torch.float16)  # [..., 4]
    return Fields(unpack(packed[..., :kb], k_bits), unpack(packed[..., kb : kb + vb], v_bits),
                  meta[..., 0], meta[..., 1], meta[..., 2], meta[..., 3])


def _code_table(bits: int) -> torch.Tensor:
    """float32 ``[256, 8 / bits]``: the codes a packed byte holds (:func:`unpack`'s order)."""
    byte = torch.arange(256, dtype=torch.uint8)[:, None]
    return unpack(byte, bits).float()


_TABLES = {bits: _code_table(bits) for bits in (4, 2)}


def _codes_float(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 ``[n, m]`` -> float32 codes ``[n, m * 8 / bits]`` (one table lookup per byte)."""
    if bits == 8:
        return packed.float()
    table = _TABLES[bits]
    return table.index_select(0, packed.reshape(-1).int()).view(packed.shape[0], packed.shape[1] * table.shape[1])


def dequantize(packed: torch.Tensor, head_size: int, k_bits: int = 8, v_bits: int = 4) -> torch.Tensor:
    """Records ``[n, H, token_bytes]`` -> float32 rows ``[n, H, 2 * D]`` (``q * scale + zero``,
    rounded to float32 after the product and after the sum). Codes are read through a
    byte -> codes table (one gather instead of shifts and masks: this runs for every low-tier
    token of every layer at every step)."""
    n, heads, width = packed.shape
    kb, vb = head_size * k_bits // 8, head_size * v_bits // 8
    if width != token_bytes(head_size, k_bits, v_bits):
        raise ValueError(f"records of {width} bytes, expected {token_bytes(head_size, k_bits, v_bits)}")
    flat = packed.reshape(n * heads, width)
    meta = flat[:, kb + vb :].contiguous().view(torch.float16).float()  # [nH, 4]: ks kz vs vz
    out = torch.cat([_codes_float(flat[:, :kb], k_bits), _codes_float(flat[:, kb : kb + vb], v_bits)], dim=1)
    out = out.view(n * heads, 2, head_size).mul_(meta[:, 0::2, None]).add_(meta[:, 1::2, None])
    return out.view(n, heads, 2 * head_size)
