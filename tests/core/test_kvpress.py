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
from vtoken.policies.base import observed_queries
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
    victims = pol.observe(st, n, np.arange(n), scores, kv=lambda: kv, queries=observed_queries(n, np.arange(n), n))
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


def _random_firings(req_id, seed=0, steps=6):
    """RandomPress at a budget of 20 over decode steps of the same length (the evicted token's
    slot refilled by the new one): its victim at each firing."""
    pol = get_policy("kvpress:RandomPress", budget=20, seed=seed)
    st, live, out = pol.new_request(req_id), np.arange(21), []
    for step in range(steps):
        num = 21 + step
        kv = _kv(n=21, seed=step)
        v = pol.observe(st, num, live, np.zeros(21), kv=lambda kv=kv: kv, queries=np.ones(21))
        out.append(int(np.flatnonzero(live == v[0])[0]))  # which of the 21 live tokens went
        live = np.append(np.delete(live, np.flatnonzero(live == v[0])), num)
    return out


def test_random_press_draws_fresh_per_firing_per_request_and_reruns_identically():
    a = _random_firings("a")
    assert len(set(a)) > 1  # firings of the same length evict different tokens (kvpress's fixed seed: one index)
    assert _random_firings("b") != a  # another request, another stream
    assert _random_firings("a") == a  # the same request again: the same draws
    assert _random_firings("a", seed=1) != a  # the policy's seed enters


def test_streaming_llm_with_no_more_live_tokens_than_sinks_keeps_them_all():
    pol = get_policy("kvpress:StreamingLLMPress", budget=2)
    kv = _kv(n=3)
    assert pol.observe(pol.new_request("r"), 9, np.array([0, 5, 8]), np.zeros(3), kv=lambda: kv).size == 0


def test_observed_queries_sum_over_chunks_to_the_unsplit_prompts_and_skip_a_cached_prefix():
    whole = observed_queries(190, np.arange(190), 190)
    assert whole.tolist() == list(range(190, 0, -1))
    chunks = sum(np.pad(observed_queries(end, np.arange(end), end - start), (0, 190 - end))
                 for start, end in [(0, 64), (64, 128), (128, 190)])
    assert chunks.tolist() == whole.tolist()
    cached = observed_queries(190, np.arange(190), 190 - 64)  # 64 tokens from the prefix cache: never queried
    assert cached[:64].tolist() == [126] * 64 and cached[64:].tolist() == list(range(126, 0, -1))
    assert observed_queries(200, np.array([3, 50, 199]), 1).tolist() == [1, 1, 1]  # one decode query


def _gqa_attention(q_heads, n, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(q_heads, n, n, generator=g).masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
    return logits.softmax(-1)  # [query heads, queries, keys], causal


def test_observed_attention_with_gqa_and_a_cached_prefix_divides_by_the_queries_observed():
    # 9 query heads over 3 KV heads, 120 tokens of which the first 40 came from the prefix cache (no
    # query of theirs computed): the engine's mass sums the 80 computed queries over all 9 heads.
    n, cached, q_heads, kv_heads = 120, 40, 9, 3
    attn = _gqa_attention(q_heads, n, 7)
    observed = attn[:, cached:]  # the queries the engine ran
    mass = observed.sum((0, 1)).double().numpy()
    queries = observed_queries(n, np.arange(n), n - cached)
    kv = _kv(heads=kv_heads, n=n, seed=4)
    reader = lambda: kv  # noqa: E731
    reader.num_heads = q_heads
    pol = get_policy("kvpress:ObservedAttentionPress", budget=60)
    victims = pol.observe(pol.new_request("r"), n, np.arange(n), mass, kv=reader, queries=queries)
    kept = sorted(set(range(n)) - set(victims.tolist()))
    # kvpress's own score on the mean per observed query (heads averaged: the engine's one row per token).
    per_query = torch.from_numpy(mass / queries / q_heads).float()
    expected = sorted(per_query.topk(60).indices.tolist())
    assert kept == expected
    # ... which the old division (by every later position, as if the cached prefix had been queried) misses.
    biased = torch.from_numpy(mass / np.arange(n, 0, -1)).float()
    assert sorted(biased.topk(60).indices.tolist()) != expected


@pytest.mark.parametrize("press, ratio", [(p, r) for p in ("KnormPress", "KeyDiffPress", "CURPress", "StreamingLLMPress")
                                          for r in (0.25, 0.5)])
def test_gaps_in_live_positions_keep_what_kvpress_keeps_of_the_cache_it_holds(press, ratio):
    # A request that already evicted: 60 live tokens at scattered positions of 150. kvpress's cache
    # after a compression is those 60 rows; its compress of them is the policy's choice.
    live = np.sort(np.random.default_rng(3).choice(150, 60, replace=False))
    kv = _kv(n=60, seed=9)
    expected_idx = _kept_by_compress(getattr(kvpress, press)(compression_ratio=ratio), kv)
    keep = len(expected_idx)
    pol = get_policy(f"kvpress:{press}", budget=keep)
    victims = pol.observe(pol.new_request("r"), 150, live, np.zeros(60), kv=lambda: kv, queries=np.ones(60))
    assert sorted(set(live.tolist()) - set(victims.tolist())) == live[expected_idx].tolist()


@pytest.mark.parametrize("press", ["KnormPress", "KeyDiffPress"])
def test_gqa_keys_reduce_per_kv_head_by_mean_rank_of_kvpress_scores(press):
    # 3 KV heads (9 query heads): kvpress scores each KV head; the adapter keeps the tokens whose
    # rank, averaged over the 3 heads, is highest -- computed here from kvpress's own score.
    kv = _kv(heads=3, n=80, seed=13)  # no tie in mean rank at the boundary (asserted below)
    p = getattr(kvpress, press)(compression_ratio=0.5)
    keys, values = kv[0, :, :, 0].transpose(0, 1)[None], kv[0, :, :, 1].transpose(0, 1)[None]
    config = SimpleNamespace(num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=1, head_dim=D)
    s = p.score(SimpleNamespace(head_dim=D, layer_idx=0, config=config), None, keys, values, None, {})[0].numpy()
    ranks = np.argsort(np.argsort(s, axis=1, kind="stable"), axis=1, kind="stable").mean(0)
    assert np.sort(ranks)[39] < np.sort(ranks)[40]
    expected = sorted(np.argsort(ranks, kind="stable")[-40:].tolist())
    reader = lambda: kv  # noqa: E731
    reader.num_heads = 9
    pol = get_policy(f"kvpress:{press}", budget=40)
    victims = pol.observe(pol.new_request("r"), 80, np.arange(80), np.zeros(80), kv=reader, queries=np.ones(80))
    assert sorted(set(range(80)) - set(victims.tolist())) == expected
    per_head = [sorted(np.argsort(s[h])[-40:].tolist()) for h in range(3)]
    assert all(k != expected for k in per_head)  # kvpress's per-head rule keeps other sets


def test_tova_fires_on_the_newest_querys_row_and_not_on_the_prompt():
    n = 50
    kv = _kv(n=n)
    pol = get_policy("kvpress:TOVAPress", budget=40)
    st = pol.new_request("r")
    prompt_mass = np.random.default_rng(1).random(n) * 5
    assert pol.observe(st, n, np.arange(n), prompt_mass, kv=lambda: kv,
                       queries=observed_queries(n, np.arange(n), n)).size == 0  # a prompt: many queries' rows
    row = _gqa_attention(9, n, 5)[:, -1].sum(0).double().numpy()  # the newest query's row, heads summed
    victims = pol.observe(st, n, np.arange(n), row, kv=lambda: kv, queries=np.ones(n))
    expected = kvpress.TOVAPress(compression_ratio=10.5 / n)
    scores = expected.score(SimpleNamespace(head_dim=D, layer_idx=0), None, kv[0, :, :, 0].transpose(0, 1)[None],
                            None, torch.from_numpy(row).float().view(1, 1, 1, n), {})
    assert sorted(victims.tolist()) == sorted(scores[0, 0].topk(10, largest=False).indices.tolist())
    assert n - 1 not in victims  # the newest token is kept (TOVA pads it with the maximum)


def test_tova_is_refused_in_prefill_once_mode_naming_why():
    from vtoken.plugin.config import PluginConfig

    with pytest.raises(ValueError, match="TOVAPress scores with the prompt's last query's attention row"):
        PluginConfig(arm="vtoken", policy="kvpress:TOVAPress", ratio=0.5, policy_options={"mode": "prefill_once"})
    with pytest.raises(ValueError, match=r"mode='sometimes': must be one of \['continuous', 'prefill_once'\]"):
        PluginConfig(arm="vtoken", policy="kvpress:KnormPress", ratio=0.5, policy_options={"mode": "sometimes"})
    with pytest.raises(ValueError, match="mode='prefill_once' is kvpress's compression_ratio: set ratio"):
        PluginConfig(arm="vtoken", policy="kvpress:KnormPress", budget=8, policy_options={"mode": "prefill_once"})


@pytest.mark.parametrize("press", ["KnormPress", "StreamingLLMPress", "KeyDiffPress"])
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_prefill_once_keeps_exactly_kvpress_count_of_the_context_once(press, ratio):
    # 137 prompt tokens, the first 101 of them context (the rest the question, kept): kvpress's
    # pipeline compresses the context alone to int(101 (1 - r)), by the press's score of the
    # context's rows; then nothing more is pruned.
    n, ctx = 137, 101
    kv = _kv(n=n, seed=2)
    pol = get_policy(f"kvpress:{press}", ratio=ratio, mode="prefill_once")
    st = pol.new_request("r")
    st.context = ctx
    victims = pol.observe(st, n, np.arange(n), np.zeros(n), kv=lambda: kv, queries=np.ones(n))
    expected = _kept_by_compress(getattr(kvpress, press)(compression_ratio=ratio), kv[:, :ctx])
    assert len(expected) == compute_n_kept(ctx, ratio)
    assert sorted(set(range(ctx)) - set(victims.tolist())) == expected and victims.max() < ctx
    later = pol.observe(st, n + 1, np.setdiff1d(np.arange(n + 1), victims), np.zeros(n + 1 - victims.size),
                        kv=lambda: _kv(n=n + 1 - victims.size), queries=np.ones(n + 1 - victims.size))
    assert later.size == 0  # once


def test_without_the_engines_kv_a_press_cannot_score():
    pol = get_policy("kvpress:KnormPress", budget=4)
    with pytest.raises(ValueError, match="scores the request's keys and values: it runs in the engine"):
        pol.observe(pol.new_request("r"), 8, np.arange(8), np.zeros(8))


@pytest.mark.parametrize("press, why", [("SnapKVPress", "needs hidden states"), ("CapPress", "needs hidden states"),
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
    v = pol.observe(pol.new_request("r"), 40, np.arange(40), np.ones(40), kv=lambda: kv, queries=np.ones(40))
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
