"""A request's eviction decisions do not depend on its batch, in the real engine.

The same request A runs alone, then between two requests of other lengths (B longer, C shorter):
with ``vtoken.batch_invariant`` (the default) A's attention mass per step -- the scores H2O
ranks -- is bit-identical, its kept positions after every step are the same and so are its
tokens, for Naive-Evict and vToken under H2O and vk_norm (scores read from the pool). Without
it, vLLM's CPU GEMM computes a lone decode row in another order than a row among others
(``benchmarks/batch_shape.py``: the MLP's down projection, K = 1,536), and on such a CPU the
mass differs in the last bits. The pairing itself, and the startup check that names a shape
whose rows still vary, are tested on fake linears.
"""

import numpy as np
import pytest
import torch

from tests.plugin.conftest import in_child, in_process_llm, release
from vtoken.plugin.cpu import batch_invariance
from vtoken.plugin.request_records import RequestRecords, user_request_id

BUDGET = 48
LEN_A, LEN_B, LEN_C = 150, 187, 86


def _prompt(n: int, seed: int):
    from vllm import TokensPrompt

    return TokensPrompt(prompt_token_ids=np.random.default_rng(seed).integers(100, 40000, n).tolist())


def _alone_and_batched(model_dir, vtoken: dict) -> list[tuple[list[int], list, list[list[int]]]]:
    """One engine: A alone, then A again between B and C. Per run of A: its tokens, its mass row per step
    (none when the arm measures none) and its live positions after each step."""
    from vllm import SamplingParams

    from vtoken.engine_args import engine_args

    runs = {"0": ([], []), "2": ([], [])}  # request ids: A alone is "0"; then B "1", A "2", C "3"
    original = RequestRecords.after_forward

    def after_forward(self, step, pool, copy):
        for i, r in enumerate(step.req_ids):
            if user_request_id(r) in runs and step.mass is not None:
                live = self.requests[r].state.table.tokens.live_positions().size
                runs[user_request_id(r)][0].append(np.array(step.mass[i, :live]))
        report = original(self, step, pool, copy)
        for r in step.req_ids:
            if user_request_id(r) in runs and r in self.requests:
                runs[user_request_id(r)][1].append(self.requests[r].state.table.tokens.live_positions().tolist())
        return report

    llm = in_process_llm(**engine_args(model_dir, vtoken=vtoken, kv_cache_memory_bytes=128 << 20, dtype="float32",
                                       max_model_len=512, block_size=16))
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    RequestRecords.after_forward = after_forward
    try:
        alone = llm.generate([_prompt(LEN_A, 0)], params, use_tqdm=False)[0]
        batched = llm.generate([_prompt(LEN_B, 1), _prompt(LEN_A, 0), _prompt(LEN_C, 2)], params, use_tqdm=False)[1]
    finally:
        RequestRecords.after_forward = original
        release(llm)
    if (alone.request_id, batched.request_id) != ("0", "2"):
        raise AssertionError(f"request ids {alone.request_id!r}, {batched.request_id!r}: expected '0' and '2'")
    return [(list(o.outputs[0].token_ids), *runs[k]) for o, k in ((alone, "0"), (batched, "2"))]


CASES = [("naive", "h2o"), ("vtoken", "h2o"), ("naive", "vk_norm"), ("vtoken", "vk_norm")]


def _every_case(model_dir) -> dict:
    return {case: _alone_and_batched(model_dir, {"arm": case[0], "policy": case[1], "budget": BUDGET})
            for case in CASES}


@pytest.fixture(scope="module")
def traces(model_dir):
    return in_child(_every_case, model_dir)  # one spawned process, an engine per case


@pytest.mark.engine
@pytest.mark.parametrize("arm,policy", CASES)
def test_a_request_alone_and_in_a_mixed_batch_keeps_the_same_tokens(traces, arm, policy):
    (out_a, mass_a, kept_a), (out_b, mass_b, kept_b) = traces[arm, policy]
    assert len(kept_a) == 12 and len(kept_a[0]) <= BUDGET and kept_a[0][-1] == LEN_A - 1  # pruned at the prompt
    assert kept_b == kept_a  # the same eviction decision at every step
    assert out_b == out_a
    if policy == "h2o":
        assert len(mass_a) == len(mass_b) == 12
        assert all(np.array_equal(x, y) for x, y in zip(mass_a, mass_b))  # bit for bit, not within a tolerance
    else:
        assert mass_a == mass_b == []  # vk_norm reads keys and values, no attention mass


class _OrderedLinear(torch.nn.Module):
    """A fake CPU linear that, like oneDNN at K = 1,536 here, sums a lone row in another order."""

    def __init__(self, k: int = 64, n: int = 8) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(n, k, generator=gen), requires_grad=False)
        self.bias = None
        self.input_size_per_partition = k
        self.cpu_linear = self._gemm

    @staticmethod
    def _gemm(x, weight, bias):
        if x.shape[0] == 1:  # another reduction: the same sum, other rounding
            return (x.double() @ weight.double().T).float()
        return (x.unsqueeze(1) * weight.unsqueeze(0)).cumsum(-1)[..., -1]


def test_pairing_a_lone_row_gives_it_the_batched_result():
    layer = _OrderedLinear()
    model = torch.nn.Sequential(layer)
    row = torch.randn(1, 64, generator=torch.Generator().manual_seed(1))
    batch = torch.cat([torch.randn(4, 64), row])
    assert not torch.equal(layer.cpu_linear(row, layer.weight, None)[0], layer.cpu_linear(batch, layer.weight, None)[4])
    assert batch_invariance.row_variant_shapes(model) == ["64 -> 8 (torch.float32, 2 rows)"]
    assert batch_invariance.make_batch_invariant(model) == (0, [])  # pairing is enough: no tiles
    assert batch_invariance.make_batch_invariant(model) == (0, [])  # wrapped once
    assert torch.equal(layer.cpu_linear(row, layer.weight, None)[0], layer.cpu_linear(batch, layer.weight, None)[4])
    assert batch_invariance.row_variant_shapes(model) == []


class _SizedLinear(_OrderedLinear):
    """A fake CPU linear whose reduction order changes between batch sizes >= 2 as well (below 4
    rows one order, from 4 on another): pairing a lone row is not enough, fixed tiles are."""

    threshold = 4

    @staticmethod
    def _gemm(x, weight, bias):
        if x.shape[0] < _SizedLinear.threshold:
            return (x.double() @ weight.double().T).float()
        return (x.unsqueeze(1) * weight.unsqueeze(0)).cumsum(-1)[..., -1]


def test_a_kernel_that_varies_between_batch_sizes_is_computed_in_fixed_tiles():
    layer = _SizedLinear()
    model = torch.nn.Sequential(layer)
    assert batch_invariance.row_variant_shapes(model) == ["64 -> 8 (torch.float32, 4 rows)"]
    assert batch_invariance.make_batch_invariant(model) == (1, [])
    assert batch_invariance.row_variant_shapes(model) == []
    rows = torch.randn(37, 64, generator=torch.Generator().manual_seed(2))
    out = layer.cpu_linear(rows, layer.weight, None)
    assert out.shape == (37, 8)
    assert all(torch.equal(out[i], layer.cpu_linear(rows[i : i + 1], layer.weight, None)[0]) for i in range(37))


class _OneCountLinear(_OrderedLinear):
    """Varies at exactly one row count (97) -- between any sampled set of batch sizes."""

    @staticmethod
    def _gemm(x, weight, bias):
        if x.shape[0] == 97:
            return (x.double() @ weight.double().T).float()
        return (x.unsqueeze(1) * weight.unsqueeze(0)).cumsum(-1)[..., -1]


class _PlacedLinear(_OrderedLinear):
    """Varies by position: rows from index 200 of a call on are summed in another order."""

    @staticmethod
    def _gemm(x, weight, bias):
        out = (x.unsqueeze(1) * weight.unsqueeze(0)).cumsum(-1)[..., -1]
        out[200:] = (x[200:].double() @ weight.double().T).float()
        return out


class _LongLinear(_OrderedLinear):
    """Varies only in calls of more than 300 rows: never reached once calls are capped at 256."""

    @staticmethod
    def _gemm(x, weight, bias):
        if x.shape[0] > 300:
            return (x.double() @ weight.double().T).float()
        return (x.unsqueeze(1) * weight.unsqueeze(0)).cumsum(-1)[..., -1]


@pytest.mark.parametrize(("layer", "found"), [(_OneCountLinear, "97 rows"), (_PlacedLinear, "201 rows")])
def test_every_row_count_and_position_up_to_the_cap_is_probed(layer, found):
    model = torch.nn.Sequential(layer())
    assert batch_invariance.row_variant_shapes(model) == [f"64 -> 8 (torch.float32, {found})"]
    assert batch_invariance.make_batch_invariant(model) == (1, [])  # tiles of 16: the kernel sees one shape
    assert batch_invariance.row_variant_shapes(model) == []


def test_a_call_longer_than_the_cap_is_computed_in_capped_chunks():
    layer = _LongLinear()
    rows = torch.randn(1000, 64, generator=torch.Generator().manual_seed(3))
    raw = layer.cpu_linear(rows, layer.weight, None)
    model = torch.nn.Sequential(layer)
    assert batch_invariance.make_batch_invariant(model) == (0, [])
    out = layer.cpu_linear(rows, layer.weight, None)
    alone = torch.cat([layer.cpu_linear(rows[i : i + 1], layer.weight, None) for i in range(1000)])
    assert torch.equal(out, alone) and not torch.equal(raw, alone)


class RMSNorm(torch.nn.Module):  # noqa: N801 -- the probe finds vLLM's class by its name
    """A fake RMSNorm whose rows from the 5th of a call on are normalised in another order."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width), requires_grad=False)

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
        var = x.pow(2).mean(-1, keepdim=True)
        var[4:] = x[4:].double().pow(2).mean(-1, keepdim=True).float() * (1 + 1e-5)
        out = x * torch.rsqrt(var + 1e-6) * self.weight
        return out if residual is None else (out, x)


def test_the_other_per_row_operations_are_probed():
    assert batch_invariance.row_variant_ops(torch.nn.Sequential(RMSNorm()), cap=16) == [
        "RMSNorm of width 32 (torch.float32, 5 rows)", "RMSNorm+residual of width 32 (torch.float32, 5 rows)"]


def test_the_probes_outcome_is_cached_per_machine_build_and_thread_count(tmp_path, monkeypatch):
    """A second engine with the same key applies the first one's outcome without probing (the tiles
    included); another thread count is another key, so it probes again."""
    calls = []
    real = batch_invariance._row_variant
    monkeypatch.setattr(batch_invariance, "_row_variant", lambda *a: calls.append(a[2]) or real(*a))
    first = torch.nn.Sequential(_SizedLinear())
    assert batch_invariance.probe(first, tmp_path)[:2] == (1, [])
    probed = len(calls)
    assert probed == 2 and len(list(tmp_path.glob("batch_invariance-*.json"))) == 1  # canonical failed, tiles passed
    second = torch.nn.Sequential(_SizedLinear())
    tiled, varying, _, cached = batch_invariance.probe(second, tmp_path)
    assert (tiled, varying, cached) == (1, [], True) and len(calls) == probed  # no probe ran
    assert second[0].cpu_linear.vtoken_cap == batch_invariance.TILE  # the cached decision applied: tiles
    # Another thread count (as the key reads it: an engine test earlier in the process may have pinned
    # torch's pool, so the count is faked rather than set).
    threads = torch.get_num_threads()
    monkeypatch.setattr(batch_invariance.torch, "get_num_threads", lambda: threads + 1)
    assert batch_invariance.probe(torch.nn.Sequential(_SizedLinear()), tmp_path)[3] is False
    assert len(calls) == 2 * probed and len(list(tmp_path.glob("batch_invariance-*.json"))) == 2
