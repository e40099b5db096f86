"""The CUDA path's device-independent pieces, checked on the CPU.

* vLLM's own Triton kernels (``unified_attention``, ``triton_reshape_and_cache_flash``: the
  ones its CUDA ``TRITON_ATTN`` backend launches), executed by Triton's interpreter
  (:mod:`triton_interpreter`), over the page-size-1 view the CUDA backend builds
  (:mod:`vtoken.plugin.cuda.triton_ops`): bit-identical to the same kernel over vLLM's block
  table when the view is positional (what makes ``full`` == stock ``TRITON_ATTN`` on a GPU),
  and equal to the C++ kernel / reference over a scattered vToken view, decode and extend;
* the CUDA implementation's glue (:class:`VTokenTritonImpl` with :func:`over_view` metadata)
  against the CPU implementation, mass included;
* the K-only mass pass (:func:`reference_attention.attention_mass`) against the kernel's mass,
  and bit-identical when the same logical tokens sit at other slots (naive vs vtoken);
* engine arguments, registration, backend declarations and class wiring on CUDA.

Shapes are SmolLM2-135M's (9 query heads, 3 KV heads, head size 64); the interpreter is slow,
so the cases are small. What needs a GPU is in ``tests/plugin/gpu/`` (skipped here).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from triton_interpreter import interpreted

from vtoken.plugin import reference_attention as ref
from vtoken.plugin import token_attention as ta
from vtoken.plugin.cuda import triton_ops

H, HKV, D, B = 9, 3, 64, 16
SCALE = D**-0.5
TOL = 2e-5


@pytest.fixture(scope="module")
def kernels():
    mods, why = interpreted()
    if mods is None:
        pytest.skip(why)
    return mods


def _pool(num_blocks, dtype=torch.float32, seed=0):
    """A token-major pool: ``cache`` [blocks, Hkv, B, 2D] with LBNHC strides, and its rows."""
    gen = torch.Generator().manual_seed(seed)
    store = (torch.randn(num_blocks, B, HKV, 2 * D, generator=gen) * 1.5).to(dtype)
    return store.permute(0, 2, 1, 3), store.view(num_blocks * B, HKV, 2 * D), gen


def _block_attention(kernels, q, cache, block_table, lens, starts):
    """vLLM's kernel over vLLM's block table, called as its Triton backend calls it."""
    key_cache, value_cache = cache.transpose(1, 2).split(D, dim=-1)
    out = torch.empty_like(q)
    kernels["triton_unified_attention"].unified_attention(
        q=q, k=key_cache, v=value_cache, out=out, cu_seqlens_q=torch.tensor(starts, dtype=torch.int32),
        max_seqlen_q=max(b - a for a, b in zip(starts, starts[1:])), seqused_k=torch.tensor(lens, dtype=torch.int32),
        max_seqlen_k=max(lens), softmax_scale=SCALE, causal=True, window_size=(-1, -1), block_table=block_table,
        softcap=0, q_descale=None, k_descale=None, v_descale=None)
    return out


def _view_attention(q, rows, req_to_token, lens, starts):
    table = triton_ops.padded_table(req_to_token, len(lens), max(lens))
    out = torch.empty_like(q)
    triton_ops.attend(q, rows, table, torch.tensor(lens, dtype=torch.int32), max(lens),
                      torch.tensor(starts, dtype=torch.int32), max(b - a for a, b in zip(starts, starts[1:])),
                      SCALE, out)
    return out


def _starts(news):
    out = [0]
    for n in news:
        out.append(out[-1] + n)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("news", [[1, 1, 1], [5, 1, 12]], ids=["decode", "extend"])
def test_page1_view_is_bitwise_the_block_table(kernels, dtype, news):
    from vtoken.plugin.token_view import positional_token_view

    cache, rows, gen = _pool(12, dtype)
    lens = [40, 7, 35]
    block_table = torch.tensor([[3, 5, 8, 0], [6, 0, 0, 0], [1, 9, 11, 0]], dtype=torch.int32)
    starts = _starts(news)
    q = (torch.randn(starts[-1], H, D, generator=gen) * 2).to(dtype)
    view = positional_token_view(block_table, torch.tensor(lens), B)
    stock = _block_attention(kernels, q, cache, block_table, lens, starts)
    ours = _view_attention(q, rows, view.req_to_token, lens, starts)
    assert torch.equal(stock, ours)


def _scattered(lens, seed):
    """A vToken-like view: each row's slots a random, unsorted subset of a 12-block pool."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(12 * B, generator=gen).to(torch.int32)
    table = torch.full((len(lens), max(lens) + 3), 7, dtype=torch.int32)  # valid-slot garbage past lens
    at = 0
    for r, n in enumerate(lens):
        table[r, :n] = perm[at:at + n]
        at += n
    return table


@pytest.mark.parametrize("news", [[1, 1, 1, 1], [3, 1, 9, 2]], ids=["decode", "extend"])
def test_triton_over_a_scattered_view_matches_the_token_kernel(kernels, news):
    _, rows, gen = _pool(12)
    lens = [30, 9, 45, 2]
    table = _scattered(lens, seed=3)
    starts = _starts(news)
    q = torch.randn(starts[-1], H, D, generator=gen) * 2
    got = _view_attention(q, rows, table, lens, starts)
    want = torch.empty_like(q)
    ta.extend_attention(q, rows, table, torch.tensor(lens), starts, SCALE, want)
    assert (got - want).abs().max().item() < TOL


def test_triton_write_kv_is_the_reference_write(kernels, monkeypatch):
    # vLLM's launcher picks its tile from the GPU's compute capability: an H100's here.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    _, rows, gen = _pool(4, torch.bfloat16)
    ours, theirs = rows.clone(), rows.clone()
    key = torch.randn(5, HKV, D, generator=gen).to(torch.bfloat16)
    value = torch.randn(5, HKV, D, generator=gen).to(torch.bfloat16)
    slots = torch.tensor([17, -1, 3, 60, -1])
    one = torch.ones((), dtype=torch.float32)
    triton_ops.write_kv(ours, key, value, slots, one, one)
    ref.write_kv(theirs, key, value, slots)
    assert torch.equal(ours, theirs)
    assert torch.equal(ours[17, :, :D], key[0]) and not torch.equal(ours, rows)


def test_padded_table_pads_with_slot_zero_past_a_tile():
    table = torch.arange(1, 13, dtype=torch.int32).view(2, 6)
    out = triton_ops.padded_table(table, 2, 5)
    assert out.shape == (2, 256) and out.dtype == torch.int32
    assert out[:, :5].tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 10, 11]]
    assert int(out[:, 5:].abs().sum()) == 0
    wide = torch.ones(1, 129, dtype=torch.int32)
    assert triton_ops.padded_table(wide, 1, 128).shape == (1, 256)
    assert triton_ops.padded_table(wide, 1, 129).shape == (1, 384)


@pytest.mark.parametrize("news", [[1, 1, 1, 1], [4, 1, 16, 2]], ids=["decode", "extend"])
def test_attention_mass_is_the_kernels_mass(news):
    _, rows, gen = _pool(12)
    lens = [30, 9, 45, 2]
    table = _scattered(lens, seed=5)
    starts = _starts(news)
    q = torch.randn(starts[-1], H, D, generator=gen) * 3
    seq_lens = torch.tensor(lens)
    want = torch.zeros(len(lens), max(lens) + 3)
    ta.extend_attention(q, rows, table, seq_lens, starts, SCALE, torch.empty_like(q), mass=want)
    got = torch.zeros_like(want)
    ref.attention_mass(q, rows, table, seq_lens, starts, SCALE, got)
    per_query = H  # each query spreads mass H over its entries (one per head)
    assert abs(float(got.sum()) - per_query * starts[-1]) < 1e-3
    assert (got - want).abs().max().item() < TOL
    assert float(got[:, max(lens):].abs().sum()) == 0.0


def test_attention_mass_depends_on_logical_tokens_only():
    """Naive and vtoken hold the same logical tokens at other slots: the mass must be the same
    bits (the token-identity guarantee, which atomics would break on a GPU)."""
    _, rows, gen = _pool(12)
    lens = [30, 9, 45]
    table = _scattered(lens, seed=7)
    moved = rows.clone()
    other = table.clone()
    dest = torch.randperm(12 * B, generator=gen).to(torch.int32)  # a bijection of slots
    moved[dest.long()] = rows
    for r, n in enumerate(lens):
        other[r, :n] = dest[table[r, :n].long()]
    q = torch.randn(3, H, D, generator=gen)
    a, b = torch.zeros(3, 50), torch.zeros(3, 50)
    ref.attention_mass(q, rows, table, torch.tensor(lens), [0, 1, 2, 3], SCALE, a)
    ref.attention_mass(q, moved, other, torch.tensor(lens), [0, 1, 2, 3], SCALE, b)
    assert torch.equal(a, b) and float(a.sum()) > 0


# ---- the CUDA implementation's glue, run with CPU tensors ---------------------------------------

def _triton_metadata(view, starts, max_query_len):
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadata

    from vtoken.plugin.cuda.backend import over_view

    md = TritonAttentionMetadata(
        num_actual_tokens=starts[-1], max_query_len=max_query_len,
        query_start_loc=torch.tensor(starts, dtype=torch.int32), max_seq_len=-1, seq_lens=torch.zeros(1),
        block_table=torch.zeros(1, 1, dtype=torch.int32), slot_mapping=torch.zeros(1), seq_threshold_3D=None,
        num_par_softmax_segments=None, softmax_segm_output=None, softmax_segm_max=None, softmax_segm_expsum=None,
        causal=True)
    return over_view(md, view, starts)


@pytest.mark.parametrize("news", [[1, 1, 1], [6, 1, 3]], ids=["decode", "extend"])
def test_cuda_impl_attends_and_scores_like_the_cpu_impl(kernels, news):
    from vtoken.plugin.attention import VTokenAttentionImpl
    from vtoken.plugin.attention_metadata import VTokenAttentionMetadata
    from vtoken.plugin.cuda.backend import VTokenTritonImpl
    from vtoken.plugin.token_view import TokenView

    _, rows, gen = _pool(12)
    lens = [20, 8, 33]
    table = _scattered(lens, seed=11)
    starts = _starts(news)
    q = torch.randn(starts[-1], H, D, generator=gen)
    view = TokenView(table, torch.tensor(lens), max_len=max(lens))
    md = _triton_metadata(view, starts, max(news))
    assert md.block_table.shape == (3, 256) and md.seq_lens.dtype == torch.int32 and md.max_seq_len == 33
    assert md.num_reqs == 3 and md.query_starts == starts
    args = dict(num_heads=H, head_size=D, scale=SCALE, num_kv_heads=HKV, alibi_slopes=None, sliding_window=None,
                kv_cache_dtype="auto")
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        impls = VTokenTritonImpl(**args), VTokenAttentionImpl(**args)
    outs, masses = [], []
    for impl, meta in zip(impls, (md, VTokenAttentionMetadata(starts[-1], max(news), starts, view))):
        out, mass = torch.empty_like(q), torch.zeros(3, 40)
        impl._attend(q, rows, meta, out, mass)
        outs.append(out)
        masses.append(mass)
    assert (outs[0] - outs[1]).abs().max().item() < TOL
    assert (masses[0] - masses[1]).abs().max().item() < TOL and float(masses[0].sum()) > 0


def test_cuda_backend_declares_a_token_granular_triton_backend():
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.kv_cache_interface import KVCacheLayout

    from vtoken.plugin import BACKEND_PATH, CUDA_BACKEND_PATH, backend_path
    from vtoken.plugin.cuda.backend import VTokenTritonBackend, VTokenTritonImpl

    assert backend_path(True) == CUDA_BACKEND_PATH and backend_path(False) == BACKEND_PATH
    module, name = CUDA_BACKEND_PATH.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is VTokenTritonBackend
    assert VTokenTritonBackend.get_name() == "CUSTOM"
    assert VTokenTritonBackend.supported_kv_cache_layouts() == (KVCacheLayout.LBNHC,)
    assert VTokenTritonBackend.get_impl_cls() is VTokenTritonImpl
    assert VTokenTritonBackend.get_builder_cls()._cudagraph_support == AttentionCGSupport.NEVER
    ok = VTokenTritonBackend.validate_configuration(
        head_size=D, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=32, use_mla=False, has_sink=False,
        use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
        device_capability=DeviceCapability(9, 0), attn_type="decoder")
    assert ok == []
    bad = VTokenTritonBackend.validate_configuration(
        head_size=D, dtype=torch.bfloat16, kv_cache_dtype="fp8", block_size=32, use_mla=False, has_sink=True,
        use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
        device_capability=DeviceCapability(9, 0), attn_type="decoder")
    assert "kv_cache_dtype not supported" in bad


def test_gpu_worker_and_runner_extend_vllms_v1_classes():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.gpu_worker import Worker

    from vtoken.engine_args import VTOKEN_WORKERS
    from vtoken.plugin import vllm_compat
    from vtoken.plugin.cuda.model_runner import VTokenGPUModelRunner
    from vtoken.plugin.cuda.worker import VTokenGPUWorker
    from vtoken.plugin.model_runner import TokenTableRunner

    mro = VTokenGPUModelRunner.__mro__
    assert mro.index(TokenTableRunner) < mro.index(GPUModelRunner)
    for hook in ("_prepare_inputs", "execute_model", "sample_tokens", "initialize_kv_cache"):
        assert getattr(VTokenGPUModelRunner, hook) is getattr(TokenTableRunner, hook)
    assert VTokenGPUWorker._make_model_runner is not Worker._make_model_runner
    assert VTOKEN_WORKERS["cuda"] == f"{VTokenGPUWorker.__module__}.{VTokenGPUWorker.__qualname__}"
    assert ("vllm.v1.worker.gpu_worker", "Worker", "_make_model_runner") in vllm_compat.OVERRIDDEN
    vllm_compat.check_overrides()


class _Slots:
    def __init__(self, n):
        self.cpu = torch.full((n,), -1, dtype=torch.int64)
        self.np = self.cpu.numpy()
        self.copied = None

    def copy_to_gpu(self, n):
        self.copied = n


def test_gpu_runner_writes_the_arms_slots_through_vllms_buffer(monkeypatch):
    from vtoken.plugin import vllm_compat
    from vtoken.plugin.cuda.model_runner import VTokenGPUModelRunner

    buf = _Slots(8)
    monkeypatch.setattr(vllm_compat, "slot_mapping_buffer", lambda runner: buf)
    VTokenGPUModelRunner._vt_write_slots(object(), np.array([40, 41, 7]), 3)
    assert buf.cpu.tolist() == [40, 41, 7, -1, -1, -1, -1, -1] and buf.copied == 3


# ---- engine arguments on CUDA -------------------------------------------------------------------

def test_cuda_engine_args_for_stock_and_vtoken_engines(fake_model, monkeypatch):
    from vtoken.engine_args import CPU_DEFAULTS, device_engine_args

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    stock = device_engine_args(fake_model, None, "cuda")
    assert stock["async_scheduling"] is False and stock["dtype"] == "auto"
    assert stock["gpu_memory_utilization"] == 0.9 and "kv_cache_memory_bytes" not in stock
    assert "worker_cls" not in stock and "attention_backend" not in stock
    import os

    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    vt = device_engine_args(fake_model, {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}, "cuda", block_size=16)
    assert vt["worker_cls"] == "vtoken.plugin.cuda.worker.VTokenGPUWorker"
    assert vt["attention_backend"] == "CUSTOM" and vt["async_scheduling"] is False and vt["block_size"] == 16
    cpu = device_engine_args(fake_model, {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}, "cpu", dtype="float32")
    assert cpu["worker_cls"] == "vtoken.plugin.cpu.worker.VTokenCPUWorker"
    assert cpu["kv_cache_memory_bytes"] == CPU_DEFAULTS["kv_cache_memory_bytes"] and "async_scheduling" not in cpu


def test_cuda_engine_args_refuse_what_the_runner_cannot_run(fake_model, monkeypatch):
    from vtoken.engine_args import device_engine_args, engine_args

    vt = {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}
    with pytest.raises(ValueError, match="async_scheduling=True"):
        device_engine_args(fake_model, vt, "cuda", async_scheduling=True)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(ValueError, match="VLLM_USE_V2_MODEL_RUNNER='1'"):
        device_engine_args(fake_model, vt, "cuda")
    assert device_engine_args(fake_model, None, "cuda")["async_scheduling"] is False  # stock: vLLM's choice of runner
    with pytest.raises(ValueError, match=r"device='cuda': the installed vLLM runs on 'cpu'"):
        engine_args(fake_model, device="cuda")
    with pytest.raises(ValueError, match=r"device='tpu': must be one of \['cpu', 'cuda'\]"):
        engine_args(fake_model, device="tpu")
    monkeypatch.setenv("VTOKEN_DEVICE", "cuda")
    with pytest.raises(ValueError, match="VTOKEN_DEVICE='cuda'"):
        engine_args(fake_model)


def test_engine_check_names_the_cuda_worker():
    from types import SimpleNamespace

    from vtoken.plugin.config import PluginConfig
    from vtoken.plugin.engine_check import check_engine_classes

    config = PluginConfig.from_dict({"arm": "vtoken", "policy": "h2o", "ratio": 0.5})
    vllm_config = SimpleNamespace(
        cache_config=SimpleNamespace(block_size=32),
        scheduler_config=SimpleNamespace(scheduler_cls="vtoken.plugin.scheduler.VTokenScheduler"),
        parallel_config=SimpleNamespace(worker_cls="vtoken.plugin.cpu.worker.VTokenCPUWorker"))
    check_engine_classes(vllm_config, config, "cpu")
    with pytest.raises(ValueError, match="worker_cls='vtoken.plugin.cuda.worker.VTokenGPUWorker'"):
        check_engine_classes(vllm_config, config, "cuda")


def test_cuda_impl_takes_the_reference_when_asked(monkeypatch):
    """``VTOKEN_TOKEN_ATTENTION=torch``: the PyTorch reference, no Triton kernel launched."""
    from vllm.config import VllmConfig, set_current_vllm_config

    from vtoken.plugin.cuda.backend import VTokenTritonImpl
    from vtoken.plugin.token_view import TokenView

    def no_kernel(*args, **kwargs):
        raise AssertionError("the Triton kernel ran")

    monkeypatch.setattr(triton_ops, "attend", no_kernel)
    monkeypatch.setenv("VTOKEN_TOKEN_ATTENTION", "torch")
    _, rows, gen = _pool(12)
    lens = [20, 8, 33]
    table = _scattered(lens, seed=13)
    q = torch.randn(3, H, D, generator=gen)
    md = _triton_metadata(TokenView(table, torch.tensor(lens), max_len=33), [0, 1, 2, 3], 1)
    with set_current_vllm_config(VllmConfig()):
        impl = VTokenTritonImpl(num_heads=H, head_size=D, scale=SCALE, num_kv_heads=HKV, alibi_slopes=None,
                                sliding_window=None, kv_cache_dtype="auto")
    out, want = torch.empty_like(q), torch.empty_like(q)
    impl._attend(q, rows, md, out, None)
    ref.decode_attention(q, rows, table, torch.tensor(lens), SCALE, want)
    assert (out - want).abs().max().item() < TOL
