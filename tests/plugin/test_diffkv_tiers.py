"""DiffKV-style tiers on the worker side without an engine: planted attention, a real pool.

A prompt's attention is planted (the mass each token receives is chosen so that its mean
received attention puts it in a known tier); after the step in which the prompt completes
(the end of prefill) and after a decode step:
- the high tier occupies exactly ceil(high / B) non-tail blocks plus the tail, every other
  block is released (exact ids), and every high token's K/V is unchanged (bytes);
- the low tier holds exactly the demoted tokens, their rows are the quantised originals, its
  bytes and its charge in pool blocks are exact;
- at the calibrated operating point (``budget``) the retained tokens are exactly the budget.
Also the rule itself (``tiers.classify``) on hand-worked values.
"""

import numpy as np
import pytest
import torch

from baselines.diffkv import quant
from baselines.diffkv.arm import DiffKVConfig
from baselines.diffkv.tiers import classify
from vtoken.plugin.adapter import ModelShape
from vtoken.plugin.config import PluginConfig
from vtoken.plugin.protocol import PoolSnapshot
from vtoken.plugin.relocation import AllLayerKV
from vtoken.plugin.request_records import RequestRecords, StepMeasurements

B, NUM_BLOCKS, LAYERS, HEADS, HKV, D = 4, 16, 2, 9, 3, 64
PROMPT = 24
PRUNED = [1, 5, 6, 7, 9]  # mean << alpha_low / L
LOW = [0, 2, 3, 10, 11, 12, 13, 16]  # alpha_low / L < mean < alpha_high / L
REQ = "0-0000aaaa"


def test_classify_thresholds_are_relative_to_the_mean_and_budget_prunes_the_lowest():
    mean = np.array([0.001, 0.03, 2.0, 1.1, 5.0, 0.9]) / 10  # L = 10: the mean is 0.1
    c = DiffKVConfig(prune_threshold=0.02, quant_threshold=1.0, kv_buffer=2)
    pruned, low = classify(mean, 10, c)
    assert pruned.tolist() == [True, False, False, False, False, False]  # 0.0001 < 0.02 / 10
    assert low.tolist() == [False, True, False, False, False, True]  # 0.003, 0.09 < 1.0 / 10
    pruned, low = classify(mean, 10, DiffKVConfig(prune_threshold=0.02, kv_buffer=2, budget=7))
    assert pruned.tolist() == [True, True, False, False, False, True]  # 9 left, 2 over: the 2 lowest
    assert not low.any()
    _, low = classify(mean, 10, DiffKVConfig(kv_buffer=2, low_tier=False))
    assert not low.any()


def _setup(budget=None, **options):
    buf = (torch.randn(LAYERS, NUM_BLOCKS, B, HKV, 2 * D, generator=torch.Generator().manual_seed(0)) * 2)
    buf = buf.to(torch.bfloat16)
    kv = AllLayerKV([buf[i].permute(0, 2, 1, 3) for i in range(LAYERS)])
    config = PluginConfig(arm="diffkv", budget=budget, arm_options={"kv_buffer": 4, **options})
    tables = RequestRecords(config, block_size=B, bytes_per_token=kv.bytes_per_token)
    tables.attach(kv, ModelShape(num_layers=LAYERS, num_heads=HEADS, num_kv_heads=HKV, head_size=D, itemsize=2,
                                 page_size_bytes=B * HKV * 2 * D * 2, num_slots=NUM_BLOCKS * B))
    tables.add(REQ, prompt_len=PROMPT)
    return tables, kv


def _mass(tables, num_tokens, live, targets):
    """This step's mass per live token: as if every query that saw token p gave it
    targets[p] / L (default 2 / L), L = the live count."""
    per_query = tables.adapter.tiers.per_query
    return np.array([targets.get(int(p), 2.0) / live.size * (num_tokens - p) * per_query for p in live],
                    dtype=np.float32)[None]


def _held_after(tables, kv, num_tokens, targets, mass_low=None):
    st = tables.requests[REQ].state
    live = st.table.tokens.live_positions()
    before = dict(zip(live.tolist(), kv.read(st.table.tokens.translation()).unbind(1)))
    step = StepMeasurements([REQ], [num_tokens], num_new=[1], mass=_mass(tables, num_tokens, live, targets),
                            side_mass=mass_low)
    report = tables.after_forward(step, PoolSnapshot(NUM_BLOCKS, NUM_BLOCKS), kv.move)
    after = st.table.tokens.live_positions()
    rows = kv.read(st.table.tokens.translation())
    for i, p in enumerate(after.tolist()):  # every high token's K/V is where the table says
        assert torch.equal(rows[:, i], before[p]), p
    return report, before


def test_prefill_end_packs_the_high_tier_stores_the_low_tier_and_frees_the_rest():
    tables, kv = _setup()
    st = tables.requests[REQ].state
    tables.append(REQ, PROMPT, list(range(1, 7)))  # blocks 1..6, the tail 6 full
    targets = {p: 0.001 for p in PRUNED} | {p: 0.5 for p in LOW}
    report, before = _held_after(tables, kv, PROMPT, targets)
    high = sorted(set(range(PROMPT)) - set(PRUNED) - set(LOW))
    assert st.table.tokens.live_positions().tolist() == high  # 11 high tokens
    # 7 non-tail high tokens (blocks 1-5) packed into 2 blocks; the tail (6: 20-23) stays
    held = st.table.blocks.held_block_ids().tolist()
    assert len(held) == -(-7 // B) + 1 == 3 and 6 in held
    assert sorted(report.control.released[REQ]) == sorted(set(range(1, 7)) - set(held))
    assert report.stats.evicted == len(PRUNED) and report.stats.demoted == len(LOW)
    # the low tier: exactly the demoted tokens, quantised from their original rows, exact bytes
    tiers = tables.adapter.tiers
    assert tiers.low_pos[REQ].tolist() == LOW and st.num_low == len(LOW)
    store = tiers.store
    per_token = LAYERS * HKV * quant.token_bytes(D, 4, 2)
    assert store.bytes_per_token == per_token and tiers.low_bytes(REQ) == len(LOW) * per_token
    for layer in range(LAYERS):
        want = torch.stack([before[p][layer].view(HKV, 2 * D) for p in LOW])
        assert torch.equal(store.rows(layer, tiers.low_slots[REQ]), quant.dequantize(quant.quantize(want, 4, 2), D, 4, 2))
    charge = report.control.charge[REQ]
    assert charge == -(-len(LOW) * per_token // (B * kv.bytes_per_token)) == 1
    assert report.stats.side_blocks[REQ] == len(LOW) * per_token / (B * kv.bytes_per_token)  # exact, fractional
    assert tables.arm.memory_blocks(st) == 3 + len(LOW) * per_token / kv.bytes_per_token / B
    assert report.stats.side[REQ] == len(LOW) and report.stats.live[REQ] == len(high) + len(LOW)


def test_decode_demotions_are_packed_and_release_blocks_mid_request():
    tables, kv = _setup()
    st = tables.requests[REQ].state
    tables.append(REQ, PROMPT, list(range(1, 7)))
    falling = [4, 8, 14, 15]  # just above the mean at prefill, then never attended again
    _held_after(tables, kv, PROMPT, {p: 0.5 for p in LOW} | {p: 1.004 for p in falling})  # 16 high
    assert st.table.blocks.num_held == 4 and st.num_low == len(LOW)
    # decode: one token in a fresh block 7; the falling tokens' mean drops below 1 / 25
    tables.append(REQ, 1, [7])
    report, _ = _held_after(tables, kv, PROMPT + 1, {p: 0.0 for p in falling},
                            mass_low=np.zeros((1, 8), dtype=np.float32) + 1e-3)
    assert tables.adapter.tiers.low_pos[REQ].tolist() == sorted(LOW + falling)
    n_high = st.table.num_live
    assert n_high == 13 and st.num_low == 12
    held = st.table.blocks.held_block_ids()
    assert held.size == -(-(n_high - 1) // B) + 1 == 4  # 12 non-tail tokens in 3 blocks + the tail (7)
    assert report.control.released[REQ] and report.stats.moves > 0


def test_calibrated_budget_keeps_exactly_the_budget():
    tables, kv = _setup(budget=12)
    st = tables.requests[REQ].state
    tables.append(REQ, PROMPT, list(range(1, 7)))
    targets = {p: 0.5 for p in LOW} | {p: 0.9 + p / 100 for p in range(PROMPT) if p not in LOW}
    _held_after(tables, kv, PROMPT, targets)
    assert st.table.num_live + st.num_low == 12
    # the 12 lowest means outside the buffer were pruned: all the LOW ones (0.5) and 4 of the rest
    kept = sorted(st.table.tokens.live_positions().tolist() + tables.adapter.tiers.low_pos[REQ].tolist())
    # candidates 0-19; the budget prunes the 8 LOW (0.5) and the next 4 lowest (1, 4, 5, 6)
    assert kept == [7, 8, 9, 14, 15, 17, 18, 19, 20, 21, 22, 23]
    assert tables.adapter.tiers.low_pos[REQ].tolist() == [7, 8, 9]  # 0.9 + p / 100 < 1: below the mean


@pytest.mark.parametrize("field, value", [("budget", 4), ("prune_threshold", 2.0)])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        DiffKVConfig(kv_buffer=4, **{field: value})
