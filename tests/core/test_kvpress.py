"""kvpress's scorers as policies, with kvpress itself as the oracle (vtoken/policies/kvpress.py).

One layer and one head: the kept positions are those of the press's own
``ScorerPress.compress``. Several layers and heads: the stated reduction (mean rank over
(layer, head)) computed by hand. The catalog of runnable / refused presses is checked against
the installed kvpress, and kvpress imports and scores with the network cut off.
"""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vtoken.policies import get_policy
from vtoken.policies.kvpress_catalog import NOT_SCORERS, REFUSED, RUNS
from vtoken.policies.registry import check_policy

import kvpress  # in the lock (requirements/cpu.lock): never skipped
from kvpress.utils import compute_n_kept

N, D = 300, 16  # 300 tokens: past LagKV's n_sink + 2 x lag_size = 260, so its lag scoring runs


def test_kvpress_is_installed_from_the_lock():
    from importlib.metadata import version

    assert version("kvpress") == "0.5.5"


def _kv(layers=1, heads=1, n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(layers, n, heads, 2, D, generator=g)


def _kept_by_policy(name, kv, keep, mass=None):
    pol = get_policy(name, budget=keep)
    st = pol.new_request("r")
    n = kv.shape[1]
    scores = np.zeros(n) if mass is None else mass
    victims = pol.observe(st, n, np.arange(n), scores, kv=lambda: kv)
    return sorted(set(range(n)) - set(victims.tolist()))


def _kept_by_compress(press, kv, attentions=None):
    keys, values = kv[0, :, :, 0].transpose(0, 1)[None], kv[0, :, :, 1].transpose(0, 1)[None]
    module = SimpleNamespace(head_dim=D, layer_idx=0)
    kept_keys, _ = press.compress(module, None, keys, values, attentions, {})
    # Each kept key row is one of the originals (random keys: no two alike): recover its position.
    match = (kept_keys[0, 0][:, None, :] == keys[0, 0][None, :, :]).all(-1)
    assert (match.sum(1) == 1).all()
    return sorted(match.int().argmax(1).tolist())


# Cases whose kept set is unique: LagKV scores its 4 sinks and 168-token tail all 1.0 at 300
# tokens, so only a ratio keeping more than those 172 has no tie at the boundary (where
# torch.topk's choice among equals is unspecified).
COMPRESS_CASES = [(p, r) for p in ("KnormPress", "KeyDiffPress", "CURPress", "StreamingLLMPress")
                  for r in (0.25, 0.5, 0.8)] + [("LagKVPress", 0.25)]


@pytest.mark.parametrize("press, ratio", COMPRESS_CASES)
def test_one_layer_one_head_keeps_what_kvpress_compress_keeps(press, ratio):
    kv = _kv()
    expected = _kept_by_compress(getattr(kvpress, press)(compression_ratio=ratio), kv)
    assert len(expected) == compute_n_kept(N, ratio)
    assert _kept_by_policy(f"kvpress:{press}", kv, len(expected)) == expected


def test_observed_attention_press_keeps_what_kvpress_keeps_from_the_same_attention():
    # A causal attention matrix; the engine's mass of a token = the sum of what every query gave it.
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(N, N, generator=g).masked_fill(torch.ones(N, N).triu(1).bool(), float("-inf"))
    attn = logits.softmax(-1)
    kv = _kv()
    expected = _kept_by_compress(kvpress.ObservedAttentionPress(compression_ratio=0.5), kv, attn[None, None])
    got = _kept_by_policy("kvpress:ObservedAttentionPress", kv, len(expected), mass=attn.sum(0).double().numpy())
    assert got == expected


def test_several_layers_and_heads_reduce_to_the_mean_rank_by_hand():
    kv = _kv(layers=3, heads=2, n=40, seed=1)
    norms = torch.linalg.vector_norm(kv[:, :, :, 0], dim=-1).numpy()  # [layers, n, heads]; Knorm scores -norm
    ranks = np.argsort(np.argsort(-norms, axis=1, kind="stable"), axis=1, kind="stable") / 39
    mean = ranks.mean(axis=(0, 2))
    keep = 15
    expected = sorted(np.argsort(mean)[-keep:].tolist())
    assert _kept_by_policy("kvpress:KnormPress", kv, keep) == expected
    # ... which is not what any single head would keep (the reduction matters).
    per_head = [sorted(np.argsort(ranks[l, :, h])[-keep:].tolist()) for l in range(3) for h in range(2)]
    assert all(kept != expected for kept in per_head)


@pytest.mark.parametrize("press", sorted(set(RUNS) - {"RandomPress"}))  # Random: one draw per call, any shape
def test_layers_as_kvpress_batch_score_as_one_call_per_layer(press):
    # The adapter hands all layers to one score call as kvpress's batch dimension: it must
    # rank exactly as kvpress's per-layer forward hooks would.
    kv = _kv(layers=4, heads=3, n=N, seed=5)
    p = getattr(kvpress, press)(compression_ratio=0.5)
    keys, values = kv[..., 0, :].transpose(1, 2), kv[..., 1, :].transpose(1, 2)  # [layers, heads, n, D]
    attn = torch.rand(4, 3, 1, N, generator=torch.Generator().manual_seed(2))
    module = SimpleNamespace(head_dim=D, layer_idx=None)
    batched = p.score(module, None, keys, values, attn, {})
    for layer in range(4):
        one = p.score(SimpleNamespace(head_dim=D, layer_idx=layer), None, keys[layer:layer + 1],
                      values[layer:layer + 1], attn[layer:layer + 1], {})
        assert torch.equal(batched[layer:layer + 1].argsort(dim=-1, stable=True), one.argsort(dim=-1, stable=True))


def test_sinks_and_recent_window_protect_as_for_our_policies():
    kv = _kv(n=40)
    pol = get_policy("kvpress:KnormPress", budget=20, num_sink=4, recent_fraction=0.5)
    victims = pol.observe(pol.new_request("r"), 40, np.arange(40), np.zeros(40), kv=lambda: kv)
    assert victims.size == 20 and victims.min() >= 4 and victims.max() < 30


def test_decoding_mode_fires_every_n_steps_to_the_target_size():
    kv = _kv(n=40)
    pol = get_policy("kvpress:KnormPress", budget=32, fire_every=4)
    st = pol.new_request("r")
    sizes = [pol.observe(st, 40, np.arange(40), np.zeros(40), kv=lambda: kv).size for _ in range(8)]
    assert sizes == [0, 0, 0, 8, 0, 0, 0, 8]  # every 4th observed step (base.py)


def test_random_press_is_seeded_by_the_policy_seed():
    kv = _kv(n=40)

    def victims(seed):
        pol = get_policy("kvpress:RandomPress", budget=20, seed=seed)
        return pol.observe(pol.new_request("r"), 40, np.arange(40), np.zeros(40), kv=lambda: kv).tolist()

    assert victims(0) == victims(0) != victims(1)


def test_without_the_engines_kv_a_press_cannot_score():
    pol = get_policy("kvpress:KnormPress", budget=4)
    with pytest.raises(ValueError, match="scores the request's keys and values: it runs in the engine"):
        pol.observe(pol.new_request("r"), 8, np.arange(8), np.zeros(8))


@pytest.mark.parametrize("press, why", [("SnapKVPress", "needs hidden states"), ("TOVAPress", "needs the last query"),
                                        ("QFilterPress", "needs hub files"), ("AdaKVPress", "is not a ScorerPress"),
                                        ("NoSuchPress", "is not a kvpress 0.5.5 press")])
def test_presses_that_need_more_are_refused_naming_the_press_and_why(press, why):
    with pytest.raises(ValueError, match=rf"policy='kvpress:{press}': {press} {why}.*presses that run: \['kvpress:"):
        check_policy(f"kvpress:{press}")


def test_a_refused_press_fails_the_engine_config_without_importing_kvpress():
    code = ("import sys\nfrom vtoken.plugin.config import PluginConfig\n"
            "try:\n    PluginConfig(arm='vtoken', policy='kvpress:SnapKVPress', budget=4)\n"
            "except ValueError as err:\n    print(err)\nprint('kvpress' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines()[0].startswith("vtoken.policy='kvpress:SnapKVPress': SnapKVPress needs hidden states")
    assert out.stdout.splitlines()[1] == "False"


def test_the_catalog_covers_every_press_kvpress_exports():
    exported = {n for n in dir(kvpress) if isinstance(getattr(kvpress, n), type)
                and issubclass(getattr(kvpress, n), kvpress.BasePress)}
    scorers = {n for n in exported if issubclass(getattr(kvpress, n), kvpress.ScorerPress)} - {"ScorerPress"}
    assert set(RUNS) | set(REFUSED) == scorers
    assert not set(RUNS) & set(REFUSED)
    assert set(NOT_SCORERS) == exported - scorers


_OFFLINE = """
import socket
tried = []
def refuse(*a, **k):
    tried.append(a)
    raise OSError("network disabled by the test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.getaddrinfo = socket.create_connection = refuse
import numpy as np, torch
from vtoken.policies import get_policy
for name in {names!r}:
    pol = get_policy(name, budget=10)
    kv = torch.randn(2, 40, 3, 2, 8)
    v = pol.observe(pol.new_request("r"), 40, np.arange(40), np.ones(40), kv=lambda: kv)
    assert v.size == 30, (name, v)
assert not tried, tried
print("offline ok")
"""


def test_kvpress_imports_and_scores_with_the_network_cut_off():
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}  # no HF_HUB_OFFLINE: a hub call would try the network
    code = _OFFLINE.format(names=[f"kvpress:{p}" for p in RUNS])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "offline ok"
