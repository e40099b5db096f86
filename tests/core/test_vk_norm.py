"""vk_norm: PagedEviction's ||V|| / ||K|| as a token policy. On one request's keys and
values, with PagedEviction's protections (the first block, one block of recent tokens), its
kept set after the prompt equals PagedEviction's prefill top-k on the same K/V; the score is
the engine's reduction (per layer the norm over the head dimension, the mean over KV heads, the
sum over layers, then V / K), not a per-layer ratio."""

import numpy as np
import pytest
import torch

from sim import Sim
from vtoken.policies.registry import get_policy, policy_names
from vtoken.policies.vk_norm import VKNormConfig, VKNormPolicy

B, C, L, LAYERS, HEADS, DIM = 16, 64, 160, 3, 2, 8


def _kv(seed: int) -> torch.Tensor:
    """[layers, tokens, KV heads, K|V, head dim], norms spread so that no two ratios tie."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.rand(1, L, HEADS, 2, 1, generator=g) * 3 + 0.1
    return torch.randn(LAYERS, L, HEADS, 2, DIM, generator=g) * scale


def _engine_norms(kv: torch.Tensor) -> np.ndarray:
    """What PagedEviction's K/V writer accumulates per token: [L, K|V], layer by layer."""
    out = torch.zeros(L, 2)
    for layer in kv:
        out += layer.norm(dim=-1).mean(dim=1)
    return out.numpy()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_kept_set_equals_paged_evictions_prefill_top_k(seed):
    kv = _kv(seed)
    norms = _engine_norms(kv)
    sim = Sim("paged_eviction", num_blocks=20, block_size=B, budget=C, score="v_over_k")
    sim.append("r", L)
    st = sim.states["r"]
    sim.arm.observe_norms(st, np.arange(L), norms[:, 0], norms[:, 1])
    sim.plan()  # the first plan after the prompt: PagedEviction's prefill prune
    block_kept = st.table.tokens.live_positions()
    assert block_kept.size == C

    policy = VKNormPolicy(VKNormConfig(budget=C))  # defaults: 16 sinks, recent 0.25 * 64 = one block
    victims = policy.observe(policy.new_request("r"), L, np.arange(L), np.zeros(L), kv=lambda: kv)
    token_kept = np.setdiff1d(np.arange(L), victims)
    assert token_kept.tolist() == block_kept.tolist()


def test_the_ratio_of_sums_not_the_sum_of_ratios_decides():
    """Token 0 has the larger summed V / summed K, token 1 the larger per-layer ratios summed."""
    kv = torch.zeros(2, 2, 1, 2, 1)
    kv[:, 0, 0, 0, 0] = torch.tensor([1.0, 10.0])  # K norms of token 0 per layer
    kv[:, 0, 0, 1, 0] = torch.tensor([3.0, 30.0])  # V: ratio of sums 3.0, sum of ratios 6.0
    kv[:, 1, 0, 0, 0] = torch.tensor([1.0, 100.0])
    kv[:, 1, 0, 1, 0] = torch.tensor([5.0, 100.0])  # ratio of sums 1.04, sum of ratios 6.0
    policy = VKNormPolicy(VKNormConfig(budget=1, num_sink=0, recent_fraction=0.0))
    victims = policy.observe(policy.new_request("r"), 2, np.arange(2), np.zeros(2), kv=lambda: kv)
    assert victims.tolist() == [1]


def test_registered_and_refused_without_the_engine():
    assert "vk_norm" in policy_names()
    policy = get_policy("vk_norm", budget=4)
    with pytest.raises(ValueError, match="runs in the engine"):
        policy.observe(policy.new_request("r"), 40, np.arange(40), np.zeros(40))
