"""Attention over a token view: the C++ kernel on the CPU, the PyTorch reference elsewhere.

The KV pool of one layer is seen as ``kv_rows[slot, kv_head, 2 * head_size]`` (token-major,
K in the first half of the last dimension, V in the second). Each request attends exactly
the slots its token-view row lists (:mod:`vtoken.plugin.token_view`); the tokens scheduled
in this step are the last ``query_len`` entries of the row and attend causally. The
semantics (outputs, attention mass, LSE, ``mass_lse_other``) are those of
:mod:`vtoken.plugin.reference_attention`, which documents them; this module dispatches:

* ``cpp`` (CPU tensors, extension built): ``token_attention`` of
  :mod:`vtoken.plugin.cpu.extension` (``cpu/csrc/token_attention.cpp``). It reads the
  listed bf16/fp16/fp32 rows in place (no gather copy), the query and the output in their
  own dtype and strides (no conversion copies), runs an online softmax in float32 with
  OpenMP over (query, kv head, kv split), and derives the mass from the exponentials of that
  same pass (the keys are read once). Used for decode and for the requests of an extend
  batch with at most :data:`EXTEND_KERNEL_MAX_NEW` new tokens.
* the reference (:mod:`vtoken.plugin.reference_attention`): for long prefills (SDPA's GEMMs
  beat the kernel there), for tensors on another device, and when the extension is
  unavailable (``VTOKEN_TOKEN_ATTENTION=torch`` or a failed build, which logs a warning).

:func:`implementation` says whether the kernel is in use. Why not the token-granular sgl
kernels (``torch.ops._C.decode_attention_cpu`` / ``extend_attention_cpu``) vLLM itself
uses for token-granular attention: vLLM's CPU wheel ships them only in its AVX-512-BF16 library
(``vllm/_C.abi3.so``); an AVX2 or plain AVX-512 machine loads ``_C_AVX2`` / ``_C_AVX512``,
which do not contain them (the machine this was built on is an AVX2 AMD EPYC).

On CUDA the backend does not call this module's attention: it launches vLLM's Triton kernel
over a page-size-1 view (:mod:`vtoken.plugin.cuda.triton_ops`). CUDA tensors given here take
the reference path (a side tier's attention does), which has not run on a GPU.
"""

from __future__ import annotations

import torch

from vtoken.plugin import reference_attention as reference
from vtoken.plugin.cpu import extension

# Extend requests with at most this many new tokens use the kernel (one query row each);
# longer ones use SDPA, whose GEMMs win (benchmarks/token_attention.py --extend: kernel
# 0.68x SDPA at 4 new tokens per request, 1.27x at 16, 2.0x for a 1024-token prefill).
EXTEND_KERNEL_MAX_NEW = 8

# Entries per kv split of the kernel (a multiple of its 16-row block). A fixed size makes a row's
# result (output, LSE, attention mass) a function of that row alone: the kernel's own heuristic
# (split_rows 0, ``auto_split_rows``) chooses from the number of queries in the call, the longest
# row in it and the thread count, so past 256 entries a request's numbers changed with the requests
# beside it (batch_invariant: false asks for it; benchmarks/token_attention.py --splits measures both).
SPLIT_ROWS = 256

# The kernel's block loops: 0 = the widest instruction set compiled in (AVX-512, AVX2, generic C++);
# 1 / 2 / 3 force generic / AVX2 / AVX-512 (tests compare them against the reference).
KERNEL_ISA = 0

# "Not given" for the kernel's optional tensors (read-only: the kernel never writes an
# empty tensor).
_NONE_F32 = torch.empty(0, dtype=torch.float32)
_NONE_I64 = torch.empty(0, dtype=torch.int64)


def implementation() -> str:
    """``"cpp"`` or ``"torch (<reason>)"``: what CPU tensors use (builds the kernel if not tried)."""
    return extension.implementation()


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
    split_rows: int | None = None,
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
        split_rows: entries per kv split (``SPLIT_ROWS`` when None: a row's result then depends on
            that row alone; 0: the kernel's thread-count heuristic, ``auto_split_rows``).
    """
    num_reqs = query.shape[0]
    if num_reqs == 0:
        return
    ops = _kernel_ops(query)
    if ops is None:
        reference.decode_attention(query, kv_rows, req_to_token, seq_lens, scale, output, mass=mass, lse=lse,
                                   mass_lse_other=mass_lse_other)
        return
    lens = seq_lens if seq_lens.dtype == torch.int64 and seq_lens.stride(0) == 1 else seq_lens.to(torch.int64)
    _run_kernel(ops, query, kv_rows, req_to_token, _NONE_I64, _NONE_I64, lens.contiguous(), _NONE_I64, scale,
                output[:num_reqs], mass, None if lse is None else lse[:num_reqs],
                None if mass_lse_other is None else mass_lse_other[:num_reqs], split_rows)


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
    split_rows: int | None = None,
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
        split_rows: as in ``decode_attention``.

    Raises:
        ValueError: a row has fewer entries than the request has new tokens.
    """
    starts = [int(x) for x in query_start_loc]
    num_reqs = len(starts) - 1
    lens = seq_lens[:num_reqs].tolist()
    for r, seq_len in enumerate(lens):
        if seq_len < starts[r + 1] - starts[r]:
            raise ValueError(f"token view row {r}: seq_len={seq_len} < query_len={starts[r + 1] - starts[r]}")
    ops = _kernel_ops(query)
    if ops is None:
        reference.extend_attention(query, kv_rows, req_to_token, seq_lens, starts, scale, output, mass=mass,
                                   lse=lse, mass_lse_other=mass_lse_other)
        return
    num_new = [starts[r + 1] - starts[r] for r in range(num_reqs)]
    for r in (r for r in range(num_reqs) if num_new[r] > EXTEND_KERNEL_MAX_NEW):
        a, b = starts[r], starts[r + 1]
        reference.extend_request(
            query[a:b], kv_rows, req_to_token[r, : lens[r]], scale, output[a:b],
            mass=None if mass is None else mass[r], lse=None if lse is None else lse[a:b],
            mass_lse_other=None if mass_lse_other is None else mass_lse_other[a:b])
    short = [r for r in range(num_reqs) if 0 < num_new[r] <= EXTEND_KERNEL_MAX_NEW]
    if short:
        q_tok, q_req, q_len, req_qstart = _kernel_queries(starts, lens, short)
        _run_kernel(ops, query, kv_rows, req_to_token, q_tok, q_req, q_len, req_qstart, scale, output, mass,
                    lse, mass_lse_other, split_rows)


def write_kv(kv_rows: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> None:
    """Write each new token's ``K|V`` at its slot (negative slots are padding): one call of the
    kernel's ``write_rows`` when it serves the pool's dtype, else the reference's ``write_kv``."""
    ops = _kernel_ops(kv_rows)
    if ops is not None and key.dtype == value.dtype == kv_rows.dtype and key.stride(-1) == value.stride(-1) == 1:
        ops.write_rows(kv_rows, key, value, slots)
    else:
        reference.write_kv(kv_rows, key, value, slots)


def _kernel_ops(query: torch.Tensor):
    """The extension's ops when the C++ kernel serves ``query``'s device (the CPU), else None."""
    return extension.load() if query.device.type == "cpu" else None


def _kernel_queries(starts: list[int], lens: list[int], requests: list[int]):
    """The kernel's query lists for the new tokens of ``requests`` (each with >= 1 new
    token): token index, table row, entries attended (new token i of a row of L entries with
    n new attends L - n + i + 1) and per-request query offsets (other requests get none)."""
    chosen = set(requests)
    q_tok: list[int] = []
    q_req: list[int] = []
    q_len: list[int] = []
    req_qstart = [0]
    for r, seq_len in enumerate(lens):
        a, b = starts[r], starts[r + 1]
        if r in chosen:
            q_tok += range(a, b)
            q_req += [r] * (b - a)
            q_len += range(seq_len - (b - a) + 1, seq_len + 1)
        req_qstart.append(len(q_tok))
    every = len(q_tok) == starts[-1] and starts[0] == 0  # all tokens, in order: no index needed
    tok = _NONE_I64 if every else torch.tensor(q_tok, dtype=torch.int64)
    return tok, torch.tensor(q_req, dtype=torch.int64), torch.tensor(q_len, dtype=torch.int64), \
        torch.tensor(req_qstart, dtype=torch.int64)


def _run_kernel(ops, query, kv_rows, req_to_token, q_tok, q_req, q_len, req_qstart, scale, output, mass, lse,
                mass_lse_other, split_rows: int | None = None) -> None:
    """Call the kernel, staging only the tensors whose dtype or strides it cannot take."""
    out = output if output.stride(-1) == 1 and output.dtype in _KERNEL_DTYPES else torch.empty_like(query)
    lse_buf = None
    if lse is not None:
        lse_buf = lse if lse.dtype == torch.float32 and lse.stride(-1) == 1 else torch.empty(lse.shape)
    other = _NONE_F32
    if mass is not None and mass_lse_other is not None:
        other = mass_lse_other.to(torch.float32)
        other = other if other.stride(-1) == 1 else other.contiguous()
    ops.token_attention(
        query if query.stride(-1) == 1 else query.contiguous(),
        kv_rows if kv_rows.stride(-1) == 1 else kv_rows.contiguous(),
        req_to_token if req_to_token.dtype == torch.int32 and req_to_token.stride(-1) == 1
        else req_to_token.to(torch.int32).contiguous(),
        q_tok, q_req, q_len, req_qstart, out,
        _NONE_F32 if mass is None else mass,
        _NONE_F32 if lse_buf is None else lse_buf,
        other, float(scale), SPLIT_ROWS if split_rows is None else int(split_rows), KERNEL_ISA,
    )
    if out is not output:
        _copy_rows(output, out, q_tok)
    if lse_buf is not None and lse_buf is not lse:
        _copy_rows(lse, lse_buf, q_tok)


_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _copy_rows(dst: torch.Tensor, src: torch.Tensor, q_tok: torch.Tensor) -> None:
    """``dst[t] = src[t]`` for the kernel's tokens (all of them when ``q_tok`` is empty)."""
    if q_tok.numel() == 0:
        dst.copy_(src)
    else:
        dst[q_tok] = src[q_tok].to(dst.dtype)
