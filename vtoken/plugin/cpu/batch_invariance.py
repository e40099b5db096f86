"""Batch-invariant per-row operations on the CPU: a token's hidden states must not depend on which
other tokens share its engine step, or eviction decisions follow the schedule.

Measured (``benchmarks/batch_shape.py``): with one request alone and the same request batched,
every operation of a prompt step is bit-identical, and the first operation of a decode step that
differs is the MLP's ``down_proj`` -- vLLM's CPU GEMM (oneDNN, ``onednn_mm``) reduces a K = 1,536
product in another order when the step has a single row (M = 1) than for any M >= 2. Every linear
is therefore called through :func:`canonical`: a lone row computed as a pair (the row twice, the
first result kept), and a call of more than ``cap`` rows computed ``cap`` rows at a time (the last
chunk padded with copies of its last row), so the kernel only ever sees 2 .. ``cap`` rows, whatever
``max_num_batched_tokens`` is. :func:`row_variant_shapes` then probes **every** row count from 1 to
``cap`` with the probed rows at every position of the call (each count at another offset into a
block of random rows, compared row by row with each row computed alone), once per distinct linear
shape: a shape that passes gives every row the same bits in every call the engine can make. A shape
that fails is computed in tiles of ``TILE`` rows instead (:func:`tile_rows`: the kernel sees one
shape), which costs more (many small GEMMs in a long prompt), so only where the probe needs it.
The vocabulary head (N = the vocabulary) runs on the sampled rows only (one per request), so its cap
is ``HEAD_CAP`` (a step with more requests calls it in chunks): probing it up to 256 rows would
cost seconds at every start.

The model's other per-row operations are probed the same way at the engine's thread count
(:func:`row_variant_ops`): RMSNorm (with and without its fused residual add) and SiLU-and-mul, the
ones whose kernels are split across threads by element count (a row cut between a vector loop and
a scalar tail would get other last bits). The rest is row-local by construction: the embedding is a
gather, the rotary embedding an element-wise function of the token's own position, the attention
the plugin's kernel (:mod:`vtoken.plugin.token_attention`: a row's splits fixed by its own length),
and sampling reads each request's own logits row.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

CAP = 256  # the most rows a linear's kernel is called with (more are chunked); every count up to it probed
HEAD_CAP = 64  # the same for the vocabulary head (its rows: one per request of the step)
TILE = 16  # rows per call where the probe finds a count whose rows vary


def pair_single_rows(linear):
    """``linear(x, weight, bias)`` that computes a single-row ``x`` as two identical rows."""

    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() == 2 and x.shape[0] == 1:
            return linear(x.expand(2, -1).contiguous(), weight, bias)[:1]
        return linear(x, weight, bias)

    forward.vtoken_paired = True
    return forward


def canonical(linear, cap: int = CAP):
    """``linear(x, weight, bias)`` whose kernel sees 2 .. ``cap`` rows only: a lone row paired, a
    longer ``x`` computed ``cap`` rows per call (the last chunk padded)."""
    paired = pair_single_rows(linear)

    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() != 2 or x.shape[0] <= cap:
            return paired(x, weight, bias)
        return _in_chunks(linear, x, weight, bias, cap)

    forward.vtoken_paired = True
    forward.vtoken_cap = cap
    return forward


def tile_rows(linear, tile: int = TILE):
    """``linear(x, weight, bias)`` computed ``tile`` rows per call (the last tile padded)."""

    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() != 2:
            return linear(x, weight, bias)
        return _in_chunks(linear, x, weight, bias, tile)

    forward.vtoken_paired = True
    forward.vtoken_cap = tile
    return forward


def _in_chunks(linear, x: torch.Tensor, weight, bias, size: int) -> torch.Tensor:
    """``linear`` over ``x`` ``size`` rows per call, the last chunk padded with copies of its last row,
    so the kernel sees ``size`` rows in every call."""
    m, pad = x.shape[0], -x.shape[0] % size
    xs = torch.cat([x, x[-1:].expand(pad, -1)]) if pad else x
    return torch.cat([linear(xs[i : i + size].contiguous(), weight, bias) for i in range(0, m + pad, size)])[:m]


def linears(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's modules with vLLM's CPU GEMM (``cpu_linear``)."""
    return [m for m in model.modules() if callable(getattr(m, "cpu_linear", None))]


def cap_of(m: torch.nn.Module) -> int:
    """The most rows ``m``'s kernel is called with: ``HEAD_CAP`` for the vocabulary head, else ``CAP``."""
    return HEAD_CAP if getattr(m, "embedding_dim", None) else CAP


def make_batch_invariant(model: torch.nn.Module, decided: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """Call every CPU linear of ``model`` through :func:`canonical`, or in fixed tiles
    (:func:`tile_rows`) where the probe finds a row count whose rows still vary there. Returns how
    many linears needed tiles and the shapes whose rows vary even in tiles (each shape probed once
    per wrapper tried). ``decided`` (shape -> ``"canonical"`` | ``"tiles"``): a shape named there is
    wrapped so without a probe, and every shape probed is added to it."""
    gen, wrappers, tiled, varying = torch.Generator().manual_seed(0), {}, 0, []
    decided = {} if decided is None else decided
    for m in linears(model):
        key = _key(m)
        if key is None or getattr(m.cpu_linear, "vtoken_paired", False):
            continue
        name = _shape(key)
        if key not in wrappers and name in decided:
            wrappers[key] = tile_rows if decided[name] == "tiles" else (lambda f, cap=cap_of(m): canonical(f, cap))
        if key not in wrappers:
            cap = cap_of(m)
            wrappers[key] = lambda f, cap=cap: canonical(f, cap)
            if _row_variant(canonical(m.cpu_linear, cap), m, key, gen, cap) is not None:
                wrappers[key] = tile_rows
                found = _row_variant(tile_rows(m.cpu_linear), m, key, gen, cap)
                varying += [found] if found is not None else []
            decided[name] = "tiles" if wrappers[key] is tile_rows else "canonical"
        tiled += wrappers[key] is tile_rows
        m.cpu_linear = wrappers[key](m.cpu_linear)
    return tiled, varying


def row_variant_shapes(model: torch.nn.Module, seed: int = 0) -> list[str]:
    """Linear shapes ``"K -> N (dtype, rows)"`` whose row result still depends on the call (empty:
    none), each probed once with the layer's kernel as called (module docstring)."""
    gen, seen, varying = torch.Generator().manual_seed(seed), set(), []
    for m in linears(model):
        key = _key(m)
        if key is None or key in seen:
            continue
        seen.add(key)
        found = _row_variant(m.cpu_linear, m, key, gen, getattr(m.cpu_linear, "vtoken_cap", cap_of(m)))
        if found is not None:
            varying.append(found)
    return varying


def _shape(key: tuple) -> str:
    k, n, dtype = key
    return f"{k} -> {n} ({dtype})"


def _key(m: torch.nn.Module) -> tuple | None:
    """(input width, output width, dtype) of a linear, or None when the width cannot be read."""
    k = in_features(m)
    if k is None:
        return None
    dtype = param_dtype(m)
    out = m.cpu_linear(torch.zeros(2, k, dtype=dtype), getattr(m, "weight", None), getattr(m, "bias", None))
    return k, int(out.shape[-1]), dtype


def _every_count(fn, rows: torch.Tensor, cap: int) -> int | None:
    """The first row count in 2 .. ``cap`` + 1 at which ``fn`` gives some row another result than
    that row alone (None: none). Count M takes ``M`` consecutive rows of ``rows`` from an offset
    that moves with M, so each probed row sits at every position class over the counts."""
    alone = torch.cat([fn(rows[i : i + 1]) for i in range(rows.shape[0])])
    for m in range(2, cap + 2):  # cap + 1: the first count that is chunked
        start = (m * 37) % (rows.shape[0] - m + 1)
        if not torch.equal(fn(rows[start : start + m]), alone[start : start + m]):
            return m
    return None


def _row_variant(linear, m: torch.nn.Module, key: tuple, gen: torch.Generator, cap: int) -> str | None:
    """How ``linear`` (``m``'s kernel as called) gives a row another result in some call (None: it does not)."""
    k, n, dtype = key
    weight, bias = getattr(m, "weight", None), getattr(m, "bias", None)
    rows = torch.randn(2 * cap + 2, k, generator=gen).to(dtype)
    count = _every_count(lambda x: linear(x, weight, bias), rows, cap)
    return None if count is None else f"{k} -> {n} ({dtype}, {count} rows)"


def row_variant_ops(model: torch.nn.Module, seed: int = 0, cap: int = CAP) -> list[str]:
    """The per-row operations other than linears (RMSNorm with and without its residual, SiLU-and-mul)
    whose row result depends on the call, probed as the linears are (empty: none)."""
    gen, seen, varying = torch.Generator().manual_seed(seed), set(), []
    for m in model.modules():
        kind = type(m).__name__
        if kind not in ("RMSNorm", "SiluAndMul"):
            continue
        width = int(m.weight.shape[0]) if kind == "RMSNorm" else _mlp_width(model)
        if width is None or (kind, width) in seen:
            continue
        seen.add((kind, width))
        dtype = param_dtype(m)
        calls = {"RMSNorm": lambda x: m(x.clone()),
                 "RMSNorm+residual": lambda x: torch.cat(m(x.clone(), x.flip(-1).clone()), dim=-1)}
        if kind == "SiluAndMul":
            calls = {"SiluAndMul": lambda x: m(x.clone())}
        for name, fn in calls.items():
            rows = torch.randn(2 * cap + 2, width * (2 if kind == "SiluAndMul" else 1), generator=gen).to(dtype)
            count = _every_count(fn, rows, cap)
            if count is not None:
                varying.append(f"{name} of width {width} ({dtype}, {count} rows)")
    return varying


def _mlp_width(model: torch.nn.Module) -> int | None:
    """The MLP's intermediate width (SiLU-and-mul's output; its input is twice that)."""
    for m in model.modules():
        if hasattr(m, "down_proj"):
            return in_features(m.down_proj)
    return None


def probe(model: torch.nn.Module, cache_dir: Path | None = None) -> tuple[int, list[str], float, bool]:
    """Make ``model``'s linears batch-invariant (probing each shape as it is wrapped) and probe the
    other per-row operations: (linears computed in tiles, what still varies, seconds spent, whether
    the outcome came from the cache).

    The outcome depends only on the machine and the build (the CPU and its flags, torch and its
    oneDNN, vLLM), the thread count, the dtype and the shapes, so with ``cache_dir`` it is kept in a
    file named by a hash of all of these (:func:`probe_key`) and a later engine with the same key
    applies it without probing (a probe costs seconds at every engine start: docs/plugin.md)."""
    t0 = time.perf_counter()
    key = probe_key(model)
    path = None if cache_dir is None else Path(cache_dir) / f"batch_invariance-{_digest(key)}.json"
    cached = _read(path, key)
    if cached is not None:
        tiled, _ = make_batch_invariant(model, dict(cached["linears"]))
        return tiled, list(cached["varying"]), time.perf_counter() - t0, True
    decided: dict[str, str] = {}
    tiled, varying = make_batch_invariant(model, decided)
    varying += row_variant_ops(model)
    seconds = time.perf_counter() - t0
    if path is not None:
        _write(path, {"key": key, "linears": decided, "varying": varying, "probe_seconds": seconds})
    return tiled, varying, seconds, False


PROBE_VERSION = 1  # raised whenever what the probe checks changes: older files are not read


def probe_key(model: torch.nn.Module) -> dict:
    """What a probe's outcome depends on: the CPU, the build, the threads, the probe and the shapes."""
    import vllm

    shapes = sorted({_shape(k) for k in (_key(m) for m in linears(model)) if k is not None})
    ops = sorted({f"{type(m).__name__} {tuple(p.shape)} {p.dtype}" for m in model.modules()
                  if type(m).__name__ in ("RMSNorm", "SiluAndMul") for p in m.parameters()})
    return {"cpu": _cpu(), "torch": torch.__version__, "torch_config": _digest(torch.__config__.show()),
            "vllm": vllm.__version__, "threads": torch.get_num_threads(), "probe": [PROBE_VERSION, CAP, HEAD_CAP, TILE],
            "linears": shapes, "ops": ops, "mlp_width": _mlp_width(model)}


def _cpu() -> str:
    """The CPU's model name and flags (``/proc/cpuinfo``'s first processor), or the platform."""
    try:
        info = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return " | ".join(fields.get(k, "").strip() for k in ("vendor_id", "model name", "flags"))


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read(path: Path | None, key: dict) -> dict | None:
    if path is None or not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("key") == json.loads(json.dumps(key, default=str)) else None


def _write(path: Path, data: dict) -> None:
    """Written whole or not at all (a temporary file renamed), so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, default=str, indent=1)
    os.replace(tmp, path)


def default_cache_dir() -> Path:
    """``$VTOKEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/vtoken-artifact``, else ``~/.cache/vtoken-artifact``."""
    if os.environ.get("VTOKEN_CACHE_DIR"):
        return Path(os.environ["VTOKEN_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vtoken-artifact"


def param_dtype(m: torch.nn.Module) -> torch.dtype:
    """The dtype of ``m``'s floating-point parameters (float32 where it has none)."""
    return next((p.dtype for p in m.parameters() if p.is_floating_point()), torch.float32)


def in_features(m: torch.nn.Module) -> int | None:
    """A linear's input width (vLLM's linears and the LM head; the weight may be repacked away)."""
    for name in ("input_size_per_partition", "embedding_dim"):
        if getattr(m, name, None):
            return int(getattr(m, name))
    w = getattr(m, "weight", None)
    return int(w.shape[1]) if w is not None and w.dim() == 2 and w.numel() else None
