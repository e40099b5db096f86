"""vLLM's own Triton attention kernels, compiled on a GPU, over the token view -- without a vLLM
install (what a GPU machine with PyTorch and Triton but no network can run).

The CUDA backend (``vtoken/plugin/cuda/backend.py``) launches vLLM's ``unified_attention`` and
``triton_reshape_and_cache_flash`` over a page-size-1 view of the pool
(:mod:`vtoken.plugin.cuda.triton_ops`). On the CPU those kernels run under Triton's interpreter
only (``tests/plugin/test_cuda_path.py``). Here they run compiled:

1. ``--stage DIR`` (on a machine with vLLM installed: ``.venv``) copies the three kernel
   modules (``triton_attention_helpers``, ``triton_unified_attention``,
   ``triton_reshape_and_cache_flash``) out of the installed vLLM into DIR -- vLLM's files,
   read at run time, never committed (``data/`` is ignored).
2. ``--kernels DIR`` (on the GPU machine) puts DIR's modules under a throwaway ``vllm`` package
   whose other modules are stand-ins answering what the kernels ask on an NVIDIA GPU (``envs``,
   ``logger``, ``platforms.current_platform``, ``triton_utils``, ``KVQuantMode``, the FP8
   helpers), then runs the checks with the real Triton.

Checks (each a line of the JSON result, ``ok`` and its numbers):

* ``page1_bitwise``: the kernel over the page-size-1 *positional* view equals, bit for bit, the
  same kernel over vLLM's block table (B = 16), decode and extend, float32 / float16 / bfloat16
  -- what makes ``full`` compute what stock ``TRITON_ATTN`` computes;
* ``scattered_vs_reference``: over a scattered (vToken-like) view, against the PyTorch reference
  on the device; a *negative control* reads one row's tokens one slot off and must
  exceed the tolerance (so the check can fail);
* ``write_kv``: vLLM's K/V writer through the view = the reference writer (a copy: bitwise);
* ``decode_timing`` (reported, no target): a decode step's attention at a serving shape
  (Mistral-7B's 32 query / 8 KV heads of 128, bfloat16) over vLLM's block table, the positional
  page-size-1 view and a scattered view, CUDA-event medians; and the view's build
  (``positional_token_view`` + ``padded_table``), which the runner does every step.

Usage::

    .venv/bin/python benchmarks/vllm_triton_gpu.py --stage data/vllm-kernels        # here
    python3 benchmarks/vllm_triton_gpu.py --kernels data/vllm-kernels --out $OUT/vllm_triton_gpu.json  # GPU

Exit status 1 if a check fails. The kernels' split-softmax (3D) variant is not exercised: the
backend passes the builder's scratch buffers, these checks none (the 2D variant), the same on
both sides of every comparison.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.check_run import run_checks  # noqa: E402

KERNELS = ("triton_attention_helpers", "triton_unified_attention", "triton_reshape_and_cache_flash")
H, HKV, D, B = 9, 3, 64, 16  # SmolLM2-135M's attention shapes, vLLM's block size
SCALE = D**-0.5
DEVICE = "cuda"  # --device cpu: the dry run under Triton's interpreter (TRITON_INTERPRET=1)
# A wrong token moves an output by O(1) (the negative control: 5-7); rounding stays below these:
# float32 runs the kernel's dots in TF32 on NVIDIA GPUs (10-bit mantissa, like float16), bfloat16
# has an 8-bit one (max 0.011 seen on an H200).
TOL = {torch.float32: 1e-2, torch.float16: 1e-2, torch.bfloat16: 5e-2}

# What the kernels import from vLLM besides each other, answered as on an NVIDIA GPU.
STAND_INS = {
    "envs.py": "VLLM_BATCH_INVARIANT = False\n",
    "logger.py": "import logging\n\n\ndef init_logger(name):\n    return logging.getLogger(name)\n",
    "platforms/__init__.py": '''import torch


class _Cuda:
    @staticmethod
    def _cap():
        major, minor = torch.cuda.get_device_capability()
        return major * 10 + minor

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def is_fp8_fnuz(self):
        return False

    def has_device_capability(self, capability, device_id=0):
        if isinstance(capability, tuple):
            return torch.cuda.get_device_capability() >= capability
        return self._cap() >= capability

    def is_device_capability_family(self, capability, device_id=0):
        return self._cap() // 10 == capability // 10

    def is_cuda(self):
        return True

    def is_rocm(self):
        return False

    def is_xpu(self):
        return False


current_platform = _Cuda()
''',
    "triton_utils/__init__.py": "import triton\nimport triton.language as tl\n\nHAS_TRITON = True\n",
    "v1/__init__.py": "",
    "v1/attention/__init__.py": "",
    "v1/attention/ops/__init__.py": "",
    "v1/kv_cache_interface.py": '''from enum import IntEnum


class KVQuantMode(IntEnum):
    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4
    NVFP4 = 5
''',
    "model_executor/__init__.py": "",
    "model_executor/layers/__init__.py": "",
    "model_executor/layers/quantization/__init__.py": "",
    "model_executor/layers/quantization/utils/__init__.py": "",
    "model_executor/layers/quantization/utils/quant_utils.py": '''import torch

FP8_DTYPE = torch.float8_e4m3fn


def get_fp8_min_max():
    info = torch.finfo(FP8_DTYPE)
    return info.min, info.max
''',
    "utils/__init__.py": "",
    "utils/torch_utils.py": '''def is_quantized_kv_cache(kv_cache_dtype):
    return (kv_cache_dtype.startswith("fp8") or kv_cache_dtype.endswith("per_token_head")
            or kv_cache_dtype.startswith("nvfp4"))
''',
}


def stage(dest: Path) -> None:
    """Copy the kernel modules out of the installed vLLM into ``dest``."""
    import vllm.v1.attention.ops as ops

    src = Path(ops.__file__).parent
    dest.mkdir(parents=True, exist_ok=True)
    for name in KERNELS:
        shutil.copy2(src / f"{name}.py", dest / f"{name}.py")
    import vllm

    (dest / "VERSION").write_text(f"vllm {vllm.__version__}\n", encoding="utf-8")


def install_stand_ins(kernels: Path) -> Path:
    """A ``vllm`` package in a temporary folder (first on ``sys.path``): the stand-ins, and the
    staged kernel modules under ``vllm/v1/attention/ops``."""
    missing = [n for n in KERNELS if not (kernels / f"{n}.py").is_file()]
    if missing:
        raise FileNotFoundError(f"--kernels {kernels}: no {', '.join(missing)}.py (run --stage here first)")
    root = Path(tempfile.mkdtemp(prefix="vllm-stand-ins-"))
    pkg = root / "vllm"
    (pkg / "__init__.py").parent.mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    for rel, text in STAND_INS.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text, encoding="utf-8")
    for name in KERNELS:
        shutil.copy2(kernels / f"{name}.py", pkg / "v1/attention/ops" / f"{name}.py")
    sys.path.insert(0, str(root))
    return root


def _dtypes():
    """float32, float16, bfloat16; not bfloat16 under the interpreter (numpy has none: garbage)."""
    return (torch.float32, torch.float16) + ((torch.bfloat16,) if DEVICE == "cuda" else ())


def _starts(news):
    out = [0]
    for n in news:
        out.append(out[-1] + n)
    return out


def _pool(num_blocks, dtype, seed, heads=HKV, size=D):
    """``store [blocks, B, heads, 2 * size]`` on the GPU: vLLM's key/value caches are its two
    halves, the plugin's rows ``[slots, heads, 2 * size]`` a view of it."""
    gen = torch.Generator().manual_seed(seed)
    store = (torch.randn(num_blocks, B, heads, 2 * size, generator=gen) * 1.5).to(dtype).to(DEVICE)
    return store, store.view(num_blocks * B, heads, 2 * size), gen


def _meta(lens, starts):
    """The kernels' per-request arguments: seq lens and query starts on the device, their maxima."""
    return (torch.tensor(lens, dtype=torch.int32, device=DEVICE), max(lens),
            torch.tensor(starts, dtype=torch.int32, device=DEVICE), max(b - a for a, b in zip(starts, starts[1:])))


def _padded(req_to_token, lens):
    from vtoken.plugin.cuda import triton_ops

    return triton_ops.padded_table(req_to_token, len(lens), max(lens))


def _block_attention(q, store, block_table, meta, scale):
    """vLLM's kernel over vLLM's block table, called as its Triton backend calls it."""
    from vllm.v1.attention.ops import triton_unified_attention as tua

    seq_lens, max_len, starts, max_q = meta
    size = q.shape[-1]
    out = torch.empty_like(q)
    tua.unified_attention(
        q=q, k=store[..., :size], v=store[..., size:], out=out, cu_seqlens_q=starts, max_seqlen_q=max_q,
        seqused_k=seq_lens, max_seqlen_k=max_len, softmax_scale=scale, causal=True, window_size=(-1, -1),
        block_table=block_table, softcap=0, q_descale=None, k_descale=None, v_descale=None)
    return out


def _view_attention(q, rows, table, meta, scale):
    """The plugin's call of the same kernel over a padded page-size-1 table (:func:`_padded`)."""
    from vtoken.plugin.cuda import triton_ops

    seq_lens, max_len, starts, max_q = meta
    out = torch.empty_like(q)
    triton_ops.attend(q, rows, table, seq_lens, max_len, starts, max_q, scale, out)
    return out


def check_page1_bitwise() -> dict:
    from vtoken.plugin.token_view import positional_token_view

    cases = {}
    for dtype in _dtypes():
        for label, news in (("decode", [1, 1, 1]), ("extend", [5, 1, 12])):
            store, rows, gen = _pool(12, dtype, seed=0)
            lens = [40, 7, 35]
            table = torch.tensor([[3, 5, 8, 0], [6, 0, 0, 0], [1, 9, 11, 0]], dtype=torch.int32, device=DEVICE)
            starts = _starts(news)
            q = (torch.randn(starts[-1], H, D, generator=gen) * 2).to(dtype).to(DEVICE)
            view = positional_token_view(table, torch.tensor(lens, device=DEVICE), B)
            meta = _meta(lens, starts)
            stock = _block_attention(q, store, table, meta, SCALE)
            ours = _view_attention(q, rows, _padded(view.req_to_token, lens), meta, SCALE)
            cases[f"{str(dtype).removeprefix('torch.')}/{label}"] = {
                "bit_identical": bool(torch.equal(stock, ours)),
                "max_abs_diff": float((stock.float() - ours.float()).abs().max())}
    return {"ok": all(c["bit_identical"] for c in cases.values()), "cases": cases}


def _scattered(lens, seed, slots):
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(slots, generator=gen).to(torch.int32)
    table = torch.full((len(lens), max(lens) + 3), 7, dtype=torch.int32)  # valid-slot garbage past lens
    at = 0
    for r, n in enumerate(lens):
        table[r, :n] = perm[at:at + n]
        at += n
    return table.to(DEVICE)


def check_scattered_vs_reference() -> dict:
    from vtoken.plugin import reference_attention as ref

    cases = {}
    for dtype in _dtypes():
        for label, news in (("decode", [1, 1, 1, 1]), ("extend", [3, 1, 9, 2])):
            _, rows, gen = _pool(12, dtype, seed=3)
            lens = [30, 9, 45, 2]
            table = _scattered(lens, seed=3, slots=12 * B)
            starts = _starts(news)
            q = (torch.randn(starts[-1], H, D, generator=gen) * 2).to(dtype).to(DEVICE)
            meta = _meta(lens, starts)
            got = _view_attention(q, rows, _padded(table, lens), meta, SCALE).float()
            want = torch.empty(q.shape, device=DEVICE)
            ref.extend_attention(q.float(), rows.float(), table, torch.tensor(lens, device=DEVICE), starts, SCALE,
                                 want)
            wrong = table.clone()  # row 2 read one slot off: other K/V (the check must see it)
            wrong[2, :lens[2]] = (table[2, :lens[2]] + 1) % (12 * B)
            control = _view_attention(q, rows, _padded(wrong, lens), meta, SCALE).float()
            cases[f"{str(dtype).removeprefix('torch.')}/{label}"] = {
                "max_abs_diff": float((got - want).abs().max()), "tol": TOL[dtype],
                "wrong_slot_max_abs_diff": float((control - want).abs().max())}
    ok = all(c["max_abs_diff"] < c["tol"] < c["wrong_slot_max_abs_diff"] for c in cases.values())
    return {"ok": ok, "cases": cases}


def check_write_kv() -> dict:
    from vtoken.plugin import reference_attention as ref
    from vtoken.plugin.cuda import triton_ops

    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        _, rows, gen = _pool(4, dtype, seed=5)
        ours, theirs = rows.clone(), rows.clone()
        key = torch.randn(5, HKV, D, generator=gen).to(dtype).to(DEVICE)
        value = torch.randn(5, HKV, D, generator=gen).to(dtype).to(DEVICE)
        slots = torch.tensor([17, -1, 3, 60, -1], device=DEVICE)
        one = torch.ones((), dtype=torch.float32, device=DEVICE)
        triton_ops.write_kv(ours, key, value, slots, one, one)
        ref.write_kv(theirs, key, value, slots)
        out[str(dtype).removeprefix("torch.")] = bool(torch.equal(ours, theirs) and torch.equal(ours[17, :, :D], key[0])
                                                      and not torch.equal(ours, rows))
    return {"ok": all(out.values()), "bit_identical": out}


def _median_ms(fn, warmup=10, reps=50) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def _decode_timing(batch, context, heads=32, kv_heads=8, size=128) -> dict:
    from vtoken.plugin.token_view import positional_token_view

    blocks_per = context // B
    store, rows, gen = _pool(batch * blocks_per + 1, torch.bfloat16, seed=9, heads=kv_heads, size=size)
    perm = torch.randperm(batch * blocks_per, generator=gen).to(torch.int32) + 1
    table = perm.view(batch, blocks_per).to(DEVICE)
    lens = [context] * batch
    starts = list(range(batch + 1))
    scale = size**-0.5
    q = (torch.randn(batch, heads, size, generator=gen)).to(torch.bfloat16).to(DEVICE)
    seq_lens = torch.tensor(lens, device=DEVICE)
    positional = _padded(positional_token_view(table, seq_lens, B, max_len=context).req_to_token, lens)
    scattered = torch.randperm(rows.shape[0] - B, generator=gen)[: batch * context].to(torch.int32)
    scattered = _padded((scattered + B).view(batch, context).to(DEVICE), lens)
    meta = _meta(lens, starts)  # built once: the timed calls are the kernels alone
    out = {
        "shape": {"batch": batch, "context": context, "heads": heads, "kv_heads": kv_heads, "head_size": size,
                  "dtype": "bfloat16", "block_size": B},
        "block_table_ms": _median_ms(lambda: _block_attention(q, store, table, meta, scale)),
        "page1_positional_ms": _median_ms(lambda: _view_attention(q, rows, positional, meta, scale)),
        "page1_scattered_ms": _median_ms(lambda: _view_attention(q, rows, scattered, meta, scale)),
        "view_build_ms": _median_ms(lambda: _padded(
            positional_token_view(table, seq_lens, B, max_len=context).req_to_token, lens)),
    }
    out["positional_over_block_table"] = out["page1_positional_ms"] / out["block_table_ms"]
    out["scattered_over_block_table"] = out["page1_scattered_ms"] / out["block_table_ms"]
    return out


def check_decode_timing() -> dict:
    shapes = [_decode_timing(64, 2048), _decode_timing(16, 8192), _decode_timing(256, 512)]
    return {"ok": True, "shapes": shapes}  # reported, no target


CHECKS = {"page1_bitwise": check_page1_bitwise, "scattered_vs_reference": check_scattered_vs_reference,
          "write_kv": check_write_kv, "decode_timing": check_decode_timing}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stage", type=Path, help="copy vLLM's kernel modules here (needs vLLM installed), then exit")
    ap.add_argument("--kernels", type=Path, help="the staged kernel modules (on the GPU machine)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: the dry run (small checks under Triton's interpreter, no timing)")
    ap.add_argument("--out", type=Path, default=Path("results/vllm_triton_gpu.json"))
    args = ap.parse_args(argv)
    if args.stage:
        stage(args.stage)
        print(f"staged {', '.join(KERNELS)} -> {args.stage}")
        return 0
    if args.kernels is None:
        ap.error("--kernels DIR (the staged kernels) or --stage DIR is required")
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        ap.error("--device=cuda: torch sees no CUDA device (torch.cuda.is_available() is False); run this on "
                 "a GPU, or --device cpu (with TRITON_INTERPRET=1) for the dry run")
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        ap.error("--device=cpu: set TRITON_INTERPRET=1 (Triton's interpreter runs the kernels on the CPU)")
    if DEVICE == "cpu":  # the launchers pick tiles from the GPU's capability: an H100's / H200's
        torch.cuda.get_device_capability = lambda device=None: (9, 0)
    install_stand_ins(args.kernels)
    torch.backends.cuda.matmul.allow_tf32 = False
    import triton

    result = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (Triton's interpreter)",
              "torch": torch.__version__, "triton": triton.__version__,
              "kernels": (args.kernels / "VERSION").read_text().strip() if (args.kernels / "VERSION").exists() else None}
    # Under the interpreter the timings would say nothing about a GPU.
    checks = {k: v for k, v in CHECKS.items() if DEVICE == "cuda" or k != "decode_timing"}
    return run_checks(checks, result, args.out)


if __name__ == "__main__":
    sys.exit(main())
