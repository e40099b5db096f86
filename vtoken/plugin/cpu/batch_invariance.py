"""Batch-invariant linear layers on the CPU: a token's hidden states must not depend on
which other tokens share its engine step, or eviction decisions follow the schedule.

Measured (``benchmarks/batch_shape.py``): with one request alone and the same request batched,
every operation of a prompt step is bit-identical, and the first operation of a decode step
that differs is the MLP's ``down_proj`` -- vLLM's CPU GEMM (oneDNN, ``onednn_mm``) reduces a
K = 1,536 product in another order when the step has a single row (M = 1) than for any M >= 2,
where each row's result is the same whatever the other rows and whatever its place. So a lone
row is computed as a pair (the row twice) and the first result kept: every step then reaches the
linear with M >= 2 and takes the same path. Only the linears whose kernel varies are wrapped
(probed at startup, once per shape: here the 30 ``down_proj``; the other shapes keep their call).
Where pairing is not enough -- a kernel whose row result also changes between batch sizes >= 2,
as another CPU's oneDNN may choose -- the linear is computed in tiles of ``TILE`` rows (the last
padded with copies of its last row), so every row comes out of a call of the same shape; that
costs more (many small GEMMs in a long prompt), so it is used only where the probe needs it.

:func:`row_variant_shapes` is the check: for every distinct linear shape of the model it
compares a row alone with the same row placed among others in batches of 2 .. 257 rows; the
runner warns at startup naming any shape that still varies (another CPU's kernels may differ).
"""

from __future__ import annotations

import torch

PROBE_ROWS = (1, 2, 3, 5, 8, 17, 64, 257)  # batch sizes compared (decode batches and prompt chunks)
TILE = 16  # rows per call where pairing is not enough


def pair_single_rows(linear):
    """``linear(x, weight, bias)`` that computes a single-row ``x`` as two identical rows."""

    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() == 2 and x.shape[0] == 1:
            return linear(x.expand(2, -1).contiguous(), weight, bias)[:1]
        return linear(x, weight, bias)

    forward.vtoken_paired = True
    return forward


def tile_rows(linear, tile: int = TILE):
    """``linear(x, weight, bias)`` computed ``tile`` rows per call (the last tile padded)."""

    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() != 2:
            return linear(x, weight, bias)
        m, pad = x.shape[0], -x.shape[0] % tile
        xs = torch.cat([x, x[-1:].expand(pad, -1)]) if pad else x
        return torch.cat([linear(xs[i : i + tile].contiguous(), weight, bias) for i in range(0, m + pad, tile)])[:m]

    forward.vtoken_paired = True
    return forward


def linears(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's modules with vLLM's CPU GEMM (``cpu_linear``)."""
    return [m for m in model.modules() if callable(getattr(m, "cpu_linear", None))]


def make_batch_invariant(model: torch.nn.Module) -> int:
    """Wrap each CPU linear of ``model`` whose row result depends on the batch: pairing a lone row
    (:func:`pair_single_rows`) where that makes it invariant, else fixed tiles (:func:`tile_rows`);
    the others keep their kernel untouched, so the steps pay only where it matters. Returns how many."""
    gen, wrappers, wrapped = torch.Generator().manual_seed(0), {}, 0
    for m in linears(model):
        key = _key(m)
        if key is None or getattr(m.cpu_linear, "vtoken_paired", False):
            continue
        if key not in wrappers:
            wrappers[key] = None
            if _row_variant(m.cpu_linear, m, key, gen) is not None:
                wrappers[key] = next((w for w in (pair_single_rows, tile_rows)
                                      if _row_variant(w(m.cpu_linear), m, key, gen) is None), pair_single_rows)
        if wrappers[key] is not None:
            m.cpu_linear = wrappers[key](m.cpu_linear)
            wrapped += 1
    return wrapped


def row_variant_shapes(model: torch.nn.Module, seed: int = 0) -> list[str]:
    """Linear shapes ``"K -> N (dtype, rows)"`` whose row result still depends on the batch (empty:
    none), each probed once with the layer's own kernel: one row alone and placed among other rows in
    batches of ``PROBE_ROWS`` rows."""
    gen, seen, varying = torch.Generator().manual_seed(seed), set(), []
    for m in linears(model):
        key = _key(m)
        if key is None or key in seen:
            continue
        seen.add(key)
        found = _row_variant(m.cpu_linear, m, key, gen)
        if found is not None:
            varying.append(found)
    return varying


def _key(m: torch.nn.Module) -> tuple | None:
    """(input width, output width, dtype) of a linear, or None when the width cannot be read."""
    k = _in_features(m)
    if k is None:
        return None
    dtype = next((p.dtype for p in m.parameters() if p.is_floating_point()), torch.float32)
    out = m.cpu_linear(torch.zeros(1, k, dtype=dtype), getattr(m, "weight", None), getattr(m, "bias", None))
    return k, int(out.shape[-1]), dtype


def _row_variant(linear, m: torch.nn.Module, key: tuple, gen: torch.Generator) -> str | None:
    """How ``linear`` (``m``'s kernel, or a wrapper of it) gives one row another result in a batch
    (None: it does not)."""
    k, n, dtype = key
    weight, bias = getattr(m, "weight", None), getattr(m, "bias", None)
    row = torch.randn(1, k, generator=gen).to(dtype)
    alone = linear(row, weight, bias)
    for rows in PROBE_ROWS[1:]:
        batch = torch.randn(rows, k, generator=gen).to(dtype)
        batch[rows // 2] = row[0]
        if not torch.equal(linear(batch, weight, bias)[rows // 2], alone[0]):
            return f"{k} -> {n} ({dtype}, {rows} rows)"
    return None


def _in_features(m: torch.nn.Module) -> int | None:
    """A linear's input width (vLLM's linears and the LM head; the weight may be repacked away)."""
    for name in ("input_size_per_partition", "embedding_dim"):
        if getattr(m, name, None):
            return int(getattr(m, name))
    w = getattr(m, "weight", None)
    return int(w.shape[1]) if w is not None and w.dim() == 2 and w.numel() else None
