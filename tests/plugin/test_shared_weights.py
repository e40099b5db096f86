"""The engines of one process share one copy of the model's weights, and no output changes.

Real engines: a second engine of the same model adopts the first's parameters and CPU GEMMs (the
same objects), generates the same greedy tokens as the first, keeps doing so after the first is
shut down, and the table goes once both are collected. On fakes: a model whose parameter bits or
GEMM differ is refused and keeps its own weights.
"""

import gc

import pytest
import torch

from tests.plugin.conftest import greedy, in_child, in_process_llm, release
from vtoken.plugin.cpu import shared_weights


def _model(llm):
    return llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model


def _engine(model_dir, arm: str):
    from vtoken.engine_args import engine_args

    return in_process_llm(**engine_args(model_dir, vtoken={"arm": arm, "policy": "h2o", "budget": 32},
                                        dtype="float32", max_model_len=256, block_size=16,
                                        kv_cache_memory_bytes=64 << 20))


def _share_and_release(model_dir, prompts) -> dict:
    """In a fresh process (a long test process may hold on to an engine it no longer uses): two engines,
    what the second shares, their tokens, and the table's users after each is released."""
    first = _engine(model_dir, "naive")
    second = _engine(model_dir, "vtoken")
    a, b = _model(first), _model(second)
    key = next(k for k in shared_weights.registered() if k[0] == str(model_dir))
    linears = [n for n, m in a.named_modules() if callable(getattr(m, "cpu_linear", None))]
    mods_b = dict(b.named_modules())
    out = {"users": [shared_weights.registered()[key]], "linears": linears,
           "same_gemms": all(mods_b[n].cpu_linear is m.cpu_linear for n, m in a.named_modules() if n in linears),
           "same_params": all(pb is pa for (_, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(),
                                                                   strict=True)),
           "tokens": [greedy(first, prompts, max_tokens=8), greedy(second, prompts, max_tokens=8)]}
    release(first)
    del first, a
    gc.collect()
    out["users"].append(shared_weights.registered().get(key, 0))
    out["tokens"].append(greedy(second, prompts, max_tokens=8))  # the table outlives the engine that made it
    release(second)
    del second, b, mods_b
    gc.collect()
    out["users"].append(shared_weights.registered().get(key, 0))
    return out


@pytest.mark.engine
def test_a_second_engine_runs_on_the_first_engines_weights_with_the_same_tokens(model_dir, sharegpt_prompts):
    got = in_child(_share_and_release, model_dir, sharegpt_prompts[:3])
    assert len(got["linears"]) == 30 * 4 + 2 and {"model.embed_tokens", "lm_head"} <= set(got["linears"])  # tied head
    assert got["same_gemms"] and got["same_params"]
    # Budget 32 does not bind before 24 tokens of a short prompt: the same greedy tokens in both arms,
    # and in the second after the first is gone.
    assert got["tokens"][1] == got["tokens"][0] and got["tokens"][2] == got["tokens"][0]
    assert got["users"] == [2, 1, 0]  # both engines use the table, then one, then none: it is gone


class _Linear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        packed = weight.clone()  # the GEMM's own copy, as vLLM's packed weight
        self.cpu_linear = lambda x, w, b: x @ packed.t()


class _Model(torch.nn.Module):
    def __init__(self, seed: int, bump: tuple[str, float] = ("", 0.0)):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.norm = torch.nn.Parameter(torch.randn(4, generator=g), requires_grad=False)
        self.proj = _Linear(torch.randn(5, 4, generator=g))
        if bump[0] == "norm":
            self.norm.data[1] += bump[1]
        if bump[0] == "gemm":
            packed = self.proj.weight.detach().clone()
            packed[0, 0] += bump[1]
            self.proj.cpu_linear = lambda x, w, b: x @ packed.t()


def test_a_model_with_other_bits_keeps_its_own_weights():
    key = ("fake", "float32", None, None, 1, True)
    donor = _Model(0)
    assert shared_weights.share(donor, key) is False  # the first registers
    same = _Model(0)
    assert shared_weights.share(same, key) is True
    assert same.proj.cpu_linear is donor.proj.cpu_linear and same.norm is donor.norm
    for bump, diff in ((("norm", 1e-6), "norm"), (("gemm", 1e-6), "GEMM of proj")):
        other = _Model(0, bump)
        assert shared_weights.same_weights(other, shared_weights._TABLES[key]) == diff
        assert shared_weights.share(other, key) is False
        assert other.proj.cpu_linear is not donor.proj.cpu_linear and other.norm is not donor.norm
    assert shared_weights.same_weights(_Model(1), shared_weights._TABLES[key]) == "norm"
    assert shared_weights.registered()[key] == 2
    del donor, same, other
    gc.collect()
    assert key not in shared_weights.registered()
