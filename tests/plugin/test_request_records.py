"""`RequestRecords` (the worker side) without an engine: slots, views, eviction, relocation.

A small real KV tensor stands in for the pool; `AllLayerKV.move` copies real bytes, so these
tests check I1 (every live token's K/V is the same before and after a relocation round)
with exact equality.
"""

import numpy as np
import pytest
import torch

from vtoken.plugin.adapter import ModelShape
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.protocol import PoolSnapshot
from vtoken.plugin.relocation import AllLayerKV
from vtoken.plugin.request_records import RequestRecords, StepMeasurements, user_request_id

B = 4
NUM_BLOCKS = 32
LAYERS, HEADS, WIDTH = 3, 2, 8


def pool_caches():
    """Layer caches shaped like vLLM's LBNHC views: one buffer, constant layer stride."""
    buf = torch.zeros(LAYERS, NUM_BLOCKS, B, HEADS, WIDTH, dtype=torch.float16)
    return [buf[i].permute(0, 2, 1, 3) for i in range(LAYERS)]  # [blocks, heads, B, width]


def write_tokens(kv: AllLayerKV, slots, req: int, pos) -> None:
    """Give every (request, position) a distinct K/V row in every layer."""
    for s, p in zip(slots, pos):
        for layer in range(kv.num_layers):
            kv._layers[layer][s] = float(1000 * req + 10 * p + layer) / 64


def test_user_request_id_strips_vllm_suffix():
    assert user_request_id("7-1a2b3c4d") == "7"
    assert user_request_id("chat-abc-deadbeef") == "chat-abc"
    assert user_request_id("plain") == "plain"
    assert user_request_id("x-12345678z") == "x-12345678z"


def test_all_layer_view_is_zero_copy_and_moves_every_layer():
    caches = pool_caches()
    kv = AllLayerKV(caches)
    assert kv.view is not None and kv.view.data_ptr() == caches[0].data_ptr()
    assert kv.bytes_per_token == LAYERS * HEADS * WIDTH * 2
    write_tokens(kv, [5, 9], 0, [0, 1])
    kv.move(np.array([5, 9]), np.array([9, 12]))  # 9 is read before it is overwritten
    got = kv.read(np.array([9, 12]))
    assert torch.equal(got[:, 0], torch.stack([torch.full((HEADS * WIDTH,), (10 * 0 + l) / 64) for l in range(LAYERS)]).half())
    assert torch.equal(got[:, 1], torch.stack([torch.full((HEADS * WIDTH,), (10 * 1 + l) / 64) for l in range(LAYERS)]).half())
    # read gathers through the all-layer view: the same rows as one gather per layer
    slots = torch.tensor([12, 9, 3])
    assert torch.equal(kv.read(slots.numpy()), torch.stack([layer[slots] for layer in kv._layers]))


def run_steps(arm: str, steps: int = 12, policy: str = "random", **budget):
    """Two requests: 10-token prompts, then decode with the policy (default Random, ratio 0.5)
    and compaction always on. Returns the tables, the KV and the per-step reports."""
    config = PluginConfig(arm=arm, policy=policy, watermark=1.0, theta_f=0.0, **(budget or {"ratio": 0.5}))
    caches = pool_caches()
    kv = AllLayerKV(caches)
    tables = RequestRecords(config, block_size=B, bytes_per_token=kv.bytes_per_token)
    tables.attach(kv, ModelShape(num_layers=LAYERS, num_heads=HEADS, num_kv_heads=HEADS, head_size=WIDTH // 2,
                                 itemsize=2, page_size_bytes=B * HEADS * WIDTH * 2, num_slots=NUM_BLOCKS * B))
    free = list(range(NUM_BLOCKS - 1, 0, -1))
    room = {}
    reports = []
    for r, name in enumerate(["0-0000aaaa", "1-0000bbbb"]):
        tables.add(name, prompt_len=10)
    for step in range(steps):
        for r, name in enumerate(["0-0000aaaa", "1-0000bbbb"]):
            n = 10 if step == 0 else 1
            need = -(-max(0, n - room.get(name, 0)) // B)
            new = [free.pop() for _ in range(need)]
            slots = tables.append(name, n, new)
            st = tables.requests[name].state
            write_tokens(kv, slots, r, range(st.table.num_tokens - n, st.table.num_tokens))
        before = {name: (tables.requests[name].state.table.tokens.live_positions(), kv.read(tables.requests[name].state.table.tokens.translation()))
                  for name in tables.requests}
        rows, lens = tables.view(list(tables.requests))
        assert rows.dtype == np.int32 and lens.tolist() == [tables.requests[n].state.table.num_live for n in tables.requests]
        for i, name in enumerate(tables.requests):
            assert rows[i, : lens[i]].tolist() == tables.requests[name].state.table.tokens.translation().tolist()
        report = tables.after_forward(StepMeasurements(list(tables.requests), [10 + step] * 2), PoolSnapshot(0, NUM_BLOCKS),
                                      kv.move)
        reports.append(report)
        for name, ids in report.control.released.items():
            free.extend(ids)
        room.update(report.control.room)
        for name in tables.requests:
            pos_before, bytes_before = before[name]
            st = tables.requests[name].state
            keep = np.isin(pos_before, st.table.tokens.live_positions())
            after = kv.read(st.table.tokens.translation())
            assert torch.equal(after, bytes_before[:, keep]), f"{arm}: K/V of a live token changed (step {step})"
    return tables, kv, reports


@pytest.mark.parametrize("arm", ["naive", "holefill", "vtoken"])
def test_live_kv_survives_eviction_and_relocation(arm):
    tables, _, reports = run_steps(arm)
    assert sum(r.stats.evicted for r in reports) > 0
    if arm == "vtoken":
        assert sum(r.stats.moves for r in reports) > 0
        assert all(r.stats.bytes_moved == r.stats.moves * LAYERS * HEADS * WIDTH * 2 for r in reports)


def test_same_victims_and_live_sets_in_every_arm():
    lives = {}
    for arm in ["naive", "holefill", "vtoken"]:
        tables, _, _ = run_steps(arm)
        lives[arm] = {n: tables.requests[n].state.table.tokens.live_positions().tolist() for n in tables.requests}
    assert lives["naive"] == lives["holefill"] == lives["vtoken"]


def test_vtoken_releases_more_blocks_than_naive():
    held = {}
    for arm in ["naive", "vtoken"]:
        tables, _, reports = run_steps(arm)
        held[arm] = sum(tables.requests[n].state.table.num_held for n in tables.requests)
        assert all(v >= 0 for r in reports for v in r.control.room.values())
    assert held["vtoken"] < held["naive"]


@pytest.mark.parametrize("arm", ["naive", "vtoken"])
def test_a_policy_reading_kv_scores_the_live_tokens_rows_in_logical_order(arm):
    # write_tokens gives position p rows of (1000 req + 10 p + layer) / 64: key norms grow with p,
    # so kvpress's KnormPress (keep the lowest norms) keeps a request's oldest tokens -- only if
    # it reads each live token's own rows (zeros would tie, and ties evict the oldest first).
    tables, _, reports = run_steps(arm, policy="kvpress:KnormPress", budget=6)
    assert sum(r.stats.evicted for r in reports) == 2 * (10 + 11 - 6)
    for name in tables.requests:
        assert tables.requests[name].state.table.tokens.live_positions().tolist() == [0, 1, 2, 3, 4, 5]


def test_scheduler_block_mismatch_fails_loudly():
    config = PluginConfig(arm="naive", policy="random", ratio=0.5)
    tables = RequestRecords(config, block_size=B, bytes_per_token=1)
    tables.add("r", prompt_len=6)
    with pytest.raises(ValueError, match="needs 2"):
        tables.append("r", 6, [1])


def test_sizes_count_every_held_request_and_drop_empties_them():
    config = PluginConfig(arm="vtoken", policy="h2o", budget=4)
    tables = RequestRecords(config, block_size=B, bytes_per_token=1)
    assert tables.sizes() == {"requests": 0, "paused": 0, "held": 0, "staged": 0}
    tables.add("a", prompt_len=6)
    tables.add("b", prompt_len=3)
    assert tables.sizes() == {"requests": 2, "paused": 0, "held": 0, "staged": 0}
    tables.drop("a")
    tables.drop("b")
    assert set(tables.sizes().values()) == {0}


def test_fill_bins_by_quarter_of_the_block():
    from vtoken.plugin.request_records import fill_bins

    assert fill_bins([0, 1, 8, 9, 16, 17, 24, 25, 32], 32) == [3, 2, 2, 2]
    assert fill_bins([], 32) == [0, 0, 0, 0]
    assert fill_bins([4, 4], 4) == [0, 0, 0, 2]


def test_kernel_and_torch_relocation_agree():
    results = []
    for use_kernel in (True, False):
        kv = AllLayerKV(pool_caches())
        kv.use_kernel = use_kernel
        for s in range(NUM_BLOCKS * B):
            for layer in range(LAYERS):
                kv._layers[layer][s] = float(s % 97 + 100 * layer) / 8
        kv.move(np.array([3, 7, 40, 41]), np.array([7, 90, 3, 5]))  # 7 and 3 are read before written
        results.append(kv.read(np.arange(NUM_BLOCKS * B)))
    assert torch.equal(results[0], results[1])
    assert torch.equal(results[0][:, 90], torch.stack([torch.full((HEADS * WIDTH,), (7 + 100 * l) / 8) for l in range(LAYERS)]).half())


def _prompt_in_chunks(arm, policy, chunks, **options):
    """One 20-token prompt written in ``chunks`` (token counts), each step's mass and norms made up
    per position so that the sum over the chunks equals one unsplit step's: each query gives every
    token up to itself 0.1; norms are each token's own. Returns the tables after the prompt is
    complete (budget 12: the policy or the arm prunes at completion)."""
    config = PluginConfig(arm=arm, policy=policy, budget=12, arm_options=options or None)
    tables = RequestRecords(config, block_size=B, bytes_per_token=1)
    tables.add("r", prompt_len=20)
    free = list(range(NUM_BLOCKS - 1, 0, -1))
    pos0 = 0
    for k, n in enumerate(chunks):
        st = tables.requests["r"].state
        need = -(-(st.table.num_tokens + n) // B) - st.table.num_held
        tables.append("r", n, [free.pop() for _ in range(need)])
        live = pos0 + n
        # the chunk's queries (positions pos0..live-1) attend to every token up to themselves
        mass = 0.1 * np.array([sum(1.0 for q in range(pos0, live) if q >= p) for p in range(live)])
        norms = np.array([[1.0 + p, 2.0 + 3 * (p % 5)] for p in range(pos0, live)], dtype=np.float32)
        tables.after_forward(StepMeasurements(req_ids=["r"], num_computed=[live], num_new=[n],
                                              mass=mass[None, :].astype(np.float32), norms=norms), None, lambda a, b: None)
        pos0 = live
    return tables


@pytest.mark.parametrize("chunks", [(8, 8, 4), (5, 15), (1, 18, 1)])
def test_a_chunked_prompt_is_scored_as_the_unsplit_one(chunks):
    """vLLM splits a prompt into chunks when a step's token budget runs out; the
    worker observes a request only once its prompt is complete, so without holding the earlier
    chunks PagedEviction's norms of those tokens stay 0 (pruned first) and H2O loses their mass."""
    one = _prompt_in_chunks("paged_eviction", None, (20,))
    split = _prompt_in_chunks("paged_eviction", None, chunks)
    assert split.requests["r"].state.scores[:20].tolist() == one.requests["r"].state.scores[:20].tolist()  # norms: exactly
    assert split.requests["r"].state.table.tokens.live_positions().tolist() == one.requests["r"].state.table.tokens.live_positions().tolist()
    one, split = _prompt_in_chunks("naive", "h2o", (20,)), _prompt_in_chunks("naive", "h2o", chunks)
    assert split.requests["r"].policy_state.acc[:20] == pytest.approx(one.requests["r"].policy_state.acc[:20], rel=1e-6)  # mass: to rounding
    assert split.requests["r"].policy_state.step == one.requests["r"].policy_state.step == 1  # the policy steps once for the prompt
    assert split.requests["r"].state.table.tokens.live_positions().tolist() == one.requests["r"].state.table.tokens.live_positions().tolist()
    assert split.sizes()["held"] == 0


class _Recording:
    """A policy that reads keys and values (as a kvpress press does) and records what each firing
    is given: the mass per live token and how many queries' mass it holds; it evicts nothing."""

    name, reads_scores, reads_kv, reads_queries = "recording", True, True, True

    def __init__(self):
        self.seen = []

    def new_request(self, req_id):
        from vtoken.policies.base import PolicyState, request_rng

        return PolicyState(req_id=req_id, rng=request_rng(0, req_id))

    def observe(self, state, num_tokens, live_pos, scores, kv=None, queries=None):
        self.seen.append((np.asarray(scores).copy(), np.asarray(queries).copy(), kv().shape))
        return np.empty(0, dtype=np.int64)


@pytest.mark.parametrize("chunks", [[24], [10, 8, 6]], ids=["whole", "three_chunks"])
def test_a_policy_reading_kv_gets_the_mass_and_query_counts_of_the_whole_prompt(chunks):
    # A 24-token prompt computed whole or in 3 chunks: at the step that completes it the policy sees
    # the mass summed over the chunks and, per token, the queries of every chunk that attended it --
    # the unsplit prompt's 24 - position. Then a decode step: one query for every live token.
    config = PluginConfig(arm="naive", policy="h2o", budget=64)
    kv = AllLayerKV(pool_caches())
    tables = RequestRecords(config, block_size=B, bytes_per_token=kv.bytes_per_token)
    tables.policy = _Recording()
    tables.attach(kv, ModelShape(num_layers=LAYERS, num_heads=3 * HEADS, num_kv_heads=HEADS, head_size=WIDTH // 2,
                                 itemsize=2, page_size_bytes=B * HEADS * WIDTH * 2, num_slots=NUM_BLOCKS * B))
    tables.add("r", prompt_len=24)
    free, done = list(range(1, NUM_BLOCKS)), 0
    for n in chunks + [1]:
        held = tables.requests["r"].state.table.num_tokens
        tables.append("r", n, [free.pop(0) for _ in range(-(-(held + n) // B) - -(-held // B))])
        done += n
        mass = np.zeros((1, done), dtype=np.float32)
        # each of the step's queries gives every position it attends 1 / (query + 1)
        mass[0] = [sum(1.0 / (q + 1) for q in range(max(p, done - n), done)) for p in range(done)]
        tables.after_forward(StepMeasurements(["r"], [done], [n], mass), PoolSnapshot(len(free), NUM_BLOCKS), kv.move)
    (prompt_scores, prompt_queries, shape), (_, decode_queries, _) = tables.policy.seen
    assert prompt_queries.tolist() == list(range(24, 0, -1))
    assert np.allclose(prompt_scores, [sum(1.0 / (q + 1) for q in range(p, 24)) for p in range(24)], rtol=1e-6)
    assert shape == (LAYERS, 24, HEADS, 2, WIDTH // 2)
    assert tables.shape.num_heads == 3 * HEADS and decode_queries.tolist() == [1.0] * 25
