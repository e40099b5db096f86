"""Attention over a token view on the CPU: a small C++ kernel, with a PyTorch fallback.

The KV pool of one layer is seen as ``kv_rows[slot, kv_head, 2 * head_size]`` (token-major,
K in the first half of the last dimension, V in the second). Each request attends exactly
the slots its token-view row lists (:mod:`vtoken.plugin.token_view`); the tokens scheduled
in this step are the last ``query_len`` entries of the row and attend causally.

Why not the token-granular sgl kernels (``torch.ops._C.decode_attention_cpu`` /
``extend_attention_cpu``) the research notes recommend: vLLM's CPU wheel ships them only in
its AVX-512-BF16 library (``vllm/_C.abi3.so``). On an AVX2 or plain AVX-512 machine vLLM
loads ``_C_AVX2`` / ``_C_AVX512``, which do not contain them (the machine this was built on
is an AVX2 AMD EPYC).

Two implementations, both accumulating in float32 (like CPU_ATTN):

* ``cpp``: ``csrc/token_attention.cpp``, compiled on first use with
  :func:`torch.utils.cpp_extension.load` (``-O3 -march=native``, OpenMP over
  (query, kv head, kv split)) into ``$VTOKEN_EXTENSIONS_DIR`` or
  ``~/.cache/vtoken/extensions``. It reads the listed bf16/fp16/fp32 rows in place (no
  gather copy) and runs an online softmax. Used for decode and for the requests of an
  extend batch with few new tokens.
* ``torch``: gathers the listed K/V rows, converts them to float32 and uses bmm/softmax
  (decode) or SDPA per request (extend). Used when the extension cannot be built (a
  warning is logged), when ``VTOKEN_TOKEN_ATTENTION=torch``, and for long prefills, where
  SDPA's GEMMs beat the kernel.

:func:`implementation` says which one is active.

Both functions optionally add the H2O attention mass into ``mass[r, j]``: the probability
entry j of request r's row received, summed over query heads and over the request's queries.
They optionally write ``lse[t, h]``, the natural log of the softmax denominator
``log sum_j exp(scale * q . k_j)`` of query token t and head h over the entries it attends,
so a caller can merge this attention exactly with attention over other keys (the tiered
attention of :mod:`baselines.diffkv.tiered_attention`). With ``mass_lse_other[t, h]`` (the
log-denominator of those other keys) the mass is the probability under the joint softmax
over both key sets; ``output`` and ``lse`` always cover this call's keys alone.

Only the CPU is implemented; there is no CUDA path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("csrc") / "token_attention.cpp"
_CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fno-finite-math-only", "-fopenmp", "-std=c++17"]
_ENV_IMPL = "VTOKEN_TOKEN_ATTENTION"  # auto (default) | cpp | torch
# Extend requests with at most this many new tokens use the kernel (one query row each);
# longer ones use SDPA, whose GEMMs win (benchmarks/token_attention.py --extend: kernel
# 0.68x SDPA at 4 new tokens per request, 1.27x at 16, 2.0x for a 1024-token prefill).
EXTEND_KERNEL_MAX_NEW = 8
_BLOCK = 64

_ext = None
_ext_state: str | None = None  # None: not tried yet; "cpp" or "torch (<reason>)"
compile_seconds: float | None = None


def _cpu_fingerprint() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return flags + platform.machine()


def _build_dir(name: str) -> Path:
    root = os.environ.get("VTOKEN_EXTENSIONS_DIR") or Path.home() / ".cache" / "vtoken" / "extensions"
    path = Path(root) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _load():
    """The compiled extension, building it on first use; None (with a warning) if that fails."""
    global _ext, _ext_state, compile_seconds
    if _ext_state is not None:
        return _ext
    choice = os.environ.get(_ENV_IMPL, "auto")
    if choice == "torch":
        _ext_state = f"torch ({_ENV_IMPL}=torch)"
        return None
    try:
        from torch.utils import cpp_extension

        key = hashlib.sha256()
        for part in (_SOURCE.read_bytes(), " ".join(_CFLAGS).encode(), torch.__version__.encode(),
                     _cpu_fingerprint().encode()):
            key.update(part)
        name = f"vtoken_token_attention_{key.hexdigest()[:12]}"
        start = time.perf_counter()
        cpp_extension.load(
            name=name,
            sources=[str(_SOURCE)],
            extra_cflags=_CFLAGS,
            extra_ldflags=["-fopenmp"],
            build_directory=str(_build_dir(name)),
            is_python_module=False,
            verbose=False,
        )
        _ext = torch.ops.vtoken_token_attention
        compile_seconds = time.perf_counter() - start
        _ext_state = "cpp"
        logger.info("vtoken token attention: C++ kernel %s ready in %.1f s", name, compile_seconds)
    except Exception as err:  # noqa: BLE001 - any build failure falls back to PyTorch
        if choice == "cpp":
            raise
        _ext = None
        _ext_state = f"torch (C++ kernel unavailable: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        logger.warning("vtoken token attention: %s; using the PyTorch path", _ext_state)
    return _ext


def implementation() -> str:
    """``"cpp"`` or ``"torch (<reason>)"``: the implementation in use (builds the kernel if
    it was not tried yet)."""
    _load()
    assert _ext_state is not None
    return _ext_state


def _split_rows(num_items: int, max_len: int) -> int:
    """Rows per kv split: split long rows only when (query, kv head) items are too few to
    keep every thread busy."""
    threads = torch.get_num_threads()
    whole = max(_BLOCK, -(-max_len // _BLOCK) * _BLOCK)
    if num_items >= 2 * threads:
        return whole
    want = -(-2 * threads // max(num_items, 1))  # splits per item
    rows = max(4 * _BLOCK, -(-max_len // want))
    return min(whole, -(-rows // _BLOCK) * _BLOCK)


def _kernel(ext, query, kv_rows, req_to_token, q_req, q_len, req_qstart, scale, mass,
            lse=None, lse_other=None) -> torch.Tensor:
    """Float32 ``[num_q, H, D]`` attention of the kernel's query rows; ``lse`` (contiguous
    float32 ``[num_q, H]``) is written when given, ``lse_other`` (same shape) is read."""
    q = query.to(torch.float32).mul(scale).contiguous()
    out = torch.empty_like(q)
    table = req_to_token if req_to_token.dtype == torch.int32 else req_to_token.to(torch.int32)
    if table.stride(1) != 1:
        table = table.contiguous()
    if kv_rows.stride(2) != 1:
        kv_rows = kv_rows.contiguous()
    max_len = int(q_len.max()) if q_len.numel() else 0
    split = _split_rows(q.shape[0] * kv_rows.shape[1], max_len)
    empty = torch.empty(0, dtype=torch.float32)
    if lse_other is not None:
        lse_other = lse_other.to(torch.float32).contiguous()
    ext.token_attention(q, kv_rows, table, q_req, q_len, req_qstart, out, empty if mass is None else mass,
                        empty if lse is None else lse, empty if lse_other is None else lse_other, split)
    return out


def decode_attention(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    output: torch.Tensor,
    *,
    mass: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    mass_lse_other: torch.Tensor | None = None,
) -> None:
    """One query token per request, attending every slot of its row.

    Args:
        query: ``[num_reqs, num_heads, head_size]``.
        kv_rows: ``[num_slots, num_kv_heads, 2 * head_size]`` token-major pool of a layer.
        req_to_token: int32 ``[>= num_reqs, >= max(seq_lens)]`` slots per row.
        seq_lens: int64 ``[num_reqs]`` valid entries per row (this step's token included).
        scale: softmax scale.
        output: ``[num_reqs, num_heads, head_size]``, written in place.
        mass: optional float32 ``[num_reqs, >= max(seq_lens)]``; ``mass[r, j]`` is increased
            by the probability entry j of row r received, summed over the query heads.
        lse: optional float32 ``[num_reqs, num_heads]``, written: log of the softmax
            denominator (scale included) of each request's row and head.
        mass_lse_other: optional ``[num_reqs, num_heads]`` log-denominator of keys attended
            elsewhere (``-inf``: none); the mass is then relative to the joint softmax.
    """
    num_reqs = query.shape[0]
    if num_reqs == 0:
        return
    ext = _load()
    if ext is None:
        _decode_torch(query, kv_rows, req_to_token, seq_lens, scale, output, mass, lse, mass_lse_other)
        return
    lens = seq_lens[:num_reqs].to(torch.int64).contiguous()
    idx = torch.arange(num_reqs + 1, dtype=torch.int64)
    lse_buf = None
    if lse is not None:
        lse_buf = lse if lse.is_contiguous() and lse.dtype == torch.float32 else torch.empty(lse.shape)
    out = _kernel(ext, query, kv_rows, req_to_token, idx[:-1], lens, idx, scale, mass, lse_buf,
                  None if mass_lse_other is None else mass_lse_other[:num_reqs])
    output.copy_(out)
    if lse_buf is not None and lse_buf is not lse:
        lse.copy_(lse_buf)


def _decode_torch(query, kv_rows, req_to_token, seq_lens, scale, output, mass=None, lse=None,
                  mass_lse_other=None) -> None:
    num_reqs, num_heads, head_size = query.shape
    num_kv_heads = kv_rows.shape[1]
    group = num_heads // num_kv_heads
    max_len = int(seq_lens.max())
    pos = torch.arange(max_len, dtype=torch.int64)
    valid = pos[None, :] < seq_lens[:, None]  # [R, L]
    # Entries past seq_len are unspecified; point them at slot 0 so the gather stays in range.
    slots = req_to_token[:num_reqs, :max_len].to(torch.int64).masked_fill_(~valid, 0)
    # Head-major gather: row (r, h, l) of the result is kv_rows[slots[r, l], h].
    rows = slots[:, None, :] * num_kv_heads + torch.arange(num_kv_heads, dtype=torch.int64)[None, :, None]
    kv = kv_rows.reshape(-1, 2 * head_size).index_select(0, rows.view(-1)).float()
    kv = kv.view(num_reqs * num_kv_heads, max_len, 2 * head_size)
    q = query.reshape(num_reqs * num_kv_heads, group, head_size).float()
    scores = torch.bmm(q, kv[..., :head_size].transpose(1, 2)).mul_(scale)  # [R*Hkv, G, L]
    scores.view(num_reqs, num_heads, max_len).masked_fill_(~valid[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.bmm(probs, kv[..., head_size:])  # [R*Hkv, G, D]
    output.copy_(out.view(num_reqs, num_heads, head_size))
    own = None
    if lse is not None or mass_lse_other is not None:
        own = torch.logsumexp(scores, dim=-1).view(num_reqs, num_heads)
    if lse is not None:
        lse[:num_reqs].copy_(own)
    if mass is not None:
        probs = probs.view(num_reqs, num_heads, max_len)
        if mass_lse_other is not None:
            other = mass_lse_other[:num_reqs].float()
            probs = probs * torch.exp(own - torch.logaddexp(own, other))[..., None]
        mass[:num_reqs, :max_len] += probs.sum(1)


def extend_attention(
    query: torch.Tensor,
    kv_rows: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: list[int],
    scale: float,
    output: torch.Tensor,
    *,
    mass: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    mass_lse_other: torch.Tensor | None = None,
) -> None:
    """Any number of new tokens per request (prefill, chunked prefill, mixed batches).

    Request r's new tokens are ``query[query_start_loc[r]:query_start_loc[r+1]]``; they
    are the last entries of its row, so new token i sees the row's entries
    ``[0, seq_len - query_len + i]``.

    Args:
        query: ``[num_tokens, num_heads, head_size]``.
        kv_rows: ``[num_slots, num_kv_heads, 2 * head_size]`` (new tokens already written).
        req_to_token: int32 ``[>= num_reqs, >= max(seq_lens)]`` slots per row.
        seq_lens: int64 ``[num_reqs]`` valid entries per row.
        query_start_loc: ``num_reqs + 1`` token offsets of each request in ``query``.
        scale: softmax scale.
        output: ``[num_tokens, num_heads, head_size]``, written in place.
        mass: optional float32 ``[num_reqs, >= max(seq_lens)]``; ``mass[r, j]`` is increased
            by the probability entry j of row r received, summed over the query heads and
            over request r's new tokens.
        lse: optional float32 ``[num_tokens, num_heads]``, written: log of each new token's
            softmax denominator (scale included) over the entries it attends.
        mass_lse_other: optional ``[num_tokens, num_heads]`` log-denominator of keys each new
            token attends elsewhere (``-inf``: none); the mass is then relative to the joint
            softmax.
    """
    lens = seq_lens.tolist()
    starts = [int(x) for x in query_start_loc]
    ext = _load()
    short: list[int] = []  # requests for the kernel
    for r, seq_len in enumerate(lens):
        num_new = starts[r + 1] - starts[r]
        if num_new == 0:
            continue
        if seq_len < num_new:
            raise ValueError(f"token view row {r}: seq_len={seq_len} < query_len={num_new}")
        if ext is not None and num_new <= EXTEND_KERNEL_MAX_NEW:
            short.append(r)
        else:
            _extend_one_torch(query, kv_rows, req_to_token, r, seq_len, starts[r], starts[r + 1], scale, output, mass,
                              lse, mass_lse_other)
    if not short:
        return
    # One kernel query per new token: token i of request r attends prefix + i + 1 entries.
    q_req, q_len, tokens, req_qstart = [], [], [], [0]
    for r in short:
        start, end = starts[r], starts[r + 1]
        prefix = lens[r] - (end - start)
        q_req += [r] * (end - start)
        q_len += range(prefix + 1, lens[r] + 1)
        tokens += range(start, end)
        req_qstart.append(len(tokens))
    contiguous = tokens == list(range(tokens[0], tokens[0] + len(tokens)))
    q = query[tokens[0] : tokens[0] + len(tokens)] if contiguous else query[tokens]
    sub_mass = None
    if mass is not None:
        sub_mass = mass if short == list(range(len(short))) else torch.zeros(len(short), mass.shape[1])
    # The kernel indexes mass and the table by position in `short`; give it those rows.
    if short == list(range(len(short))):
        table = req_to_token
        q_req_t = torch.tensor(q_req, dtype=torch.int64)
    else:
        table = req_to_token[short]
        remap = {r: i for i, r in enumerate(short)}
        q_req_t = torch.tensor([remap[r] for r in q_req], dtype=torch.int64)
    sub_lse = None if lse is None else torch.empty(len(tokens), query.shape[1])
    sub_other = None
    if mass_lse_other is not None and mass is not None:
        sub_other = (mass_lse_other[tokens[0] : tokens[0] + len(tokens)] if contiguous
                     else mass_lse_other[tokens])
    out = _kernel(ext, q, kv_rows, table, q_req_t, torch.tensor(q_len, dtype=torch.int64),
                  torch.tensor(req_qstart, dtype=torch.int64), scale, sub_mass, sub_lse, sub_other)
    if sub_lse is not None:
        if contiguous:
            lse[tokens[0] : tokens[0] + len(tokens)] = sub_lse
        else:
            lse[tokens] = sub_lse
    if contiguous:
        output[tokens[0] : tokens[0] + len(tokens)].copy_(out)
    else:
        output[tokens] = out.to(output.dtype)
    if sub_mass is not None and sub_mass is not mass:
        mass[short] += sub_mass


def _extend_one_torch(query, kv_rows, req_to_token, r, seq_len, start, end, scale, output, mass,
                      lse=None, mass_lse_other=None) -> None:
    head_size = query.shape[2]
    num_new = end - start
    prefix = seq_len - num_new
    kv = kv_rows.index_select(0, req_to_token[r, :seq_len].to(torch.int64)).float()
    k = kv[..., :head_size].transpose(0, 1).unsqueeze(0)  # [1, Hkv, L, D]
    v = kv[..., head_size:].transpose(0, 1).unsqueeze(0)
    q = query[start:end].float().transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
    if mass is not None or lse is not None:
        # Explicit probabilities (SDPA returns neither them nor the log-sum-exp): [H, n, L].
        group = q.shape[1] // k.shape[1]
        kk = k[0].repeat_interleave(group, 0)
        scores = torch.matmul(q[0], kk.transpose(1, 2)).mul_(scale)
        allowed = torch.arange(seq_len)[None, :] <= (prefix + torch.arange(num_new))[:, None]
        scores.masked_fill_(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v[0].repeat_interleave(group, 0))  # [H, n, D]
        output[start:end].copy_(out.transpose(0, 1))
        own = torch.logsumexp(scores, dim=-1)  # [H, n]
        if lse is not None:
            lse[start:end] = own.transpose(0, 1)
        if mass is not None:
            if mass_lse_other is not None:
                other = mass_lse_other[start:end].float().transpose(0, 1)
                probs = probs * torch.exp(own - torch.logaddexp(own, other))[..., None]
            mass[r, :seq_len] += probs.sum((0, 1))
        return
    if prefix == 0:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    else:
        # Bottom-right causal: new token i sits at row position prefix + i.
        mask = torch.arange(seq_len)[None, :] <= (prefix + torch.arange(num_new))[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    output[start:end].copy_(out[0].transpose(0, 1))
