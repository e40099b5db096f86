"""DiffKV-style tiers in the real engine.

- Attention over both tiers equals a float32 reference over [high rows of the pool ∪ the
  dequantised low rows] (checked inside the engine on every tiered decode step of layer 0;
  float32 engine, like every engine of the suite that counts blocks; tolerance TIER_TOL).
- Memory: a request's low tier is charged exactly ceil(low tokens x low bytes per token /
  (B x high bytes per token)) pool blocks (K4V2 at head size 64: 56 B per token-head vs
  512 B in float32), and the scheduler holds exactly that many side blocks; the high tier is
  packed after every step (ceil(high / B) blocks + the tail) and blocks are released while
  requests still run (from the end of prefill on).
- With the low tier off it only prunes (α_low raised so short prompts have victims): no low
  tokens, no charge.
"""

import pytest
import torch

from tests.plugin.conftest import greedy, in_process_llm
from vtoken.plugin import sink
from baselines.diffkv.engine import LowTierView

pytestmark = pytest.mark.engine

NUM_PROMPTS, MAX_TOKENS, B = 4, 32, 32
HIGH_BYTES = 30 * 3 * 128 * 4  # float32 K|V of all layers per token
POOL_BYTES = 128 << 20  # 2,912 float32 tokens: 91 blocks of B
TIER_TOL = 1e-5  # float32 accumulation order (2.4e-7 measured on an AVX-512 CPU)
LOW_BYTES = 30 * 3 * 56  # K int4 + V int2 + 4 fp16 per head
_runs: dict[str, dict] = {}


def _checked_tiered(log):
    original = LowTierView.attend

    def tiered(self, layer_index, query, rows, view, query_start_loc, decode, scale, output, mass):
        original(self, layer_index, query, rows, view, query_start_loc, decode, scale, output, mass)
        if not decode or layer_index != 0:
            return
        rows_low = self.store.rows_batch(0, self.batch)
        low = [rows_low[r, : int(n)] for r, n in enumerate(self.batch.lens)]
        for r in range(query.shape[0]):
            high = rows.index_select(0, view.req_to_token[r, : view.seq_lens[r]].long()).float()
            kv = torch.cat([low[r].float(), high])  # order is irrelevant to a softmax
            d = query.shape[-1]
            group = query.shape[1] // kv.shape[1]
            k = kv[..., :d].repeat_interleave(group, 1)
            v = kv[..., d:].repeat_interleave(group, 1)
            q = query[r].float()
            p = torch.softmax(torch.einsum("hd,nhd->hn", q, k) * scale, dim=-1)
            ref = torch.einsum("hn,nhd->hd", p, v)
            err = (output[r].float() - ref).abs().max().item()
            log["max_err"] = max(log["max_err"], err)
            log["checked"] += int(low[r].shape[0] > 0)

    return original, tiered


def run(model_dir, prompts, tmp_path_factory, name, options):
    if name not in _runs:
        from vtoken.engine_args import engine_args

        path = tmp_path_factory.mktemp(name) / "sink.jsonl"
        cfg = {"arm": "diffkv", "metrics_path": str(path), "arm_options": options}
        llm = in_process_llm(**engine_args(model_dir, vtoken=cfg, dtype="float32", kv_cache_memory_bytes=POOL_BYTES))
        log = {"max_err": 0.0, "checked": 0}
        original, checked = _checked_tiered(log)
        LowTierView.attend = checked
        try:
            tokens = greedy(llm, prompts[:NUM_PROMPTS], MAX_TOKENS)
        finally:
            LowTierView.attend = original
        _runs[name] = {"tokens": tokens, "steps": sink.read(path)[1], "log": log, "llm": llm}
    return _runs[name]


def test_tiered_attention_equals_fp32_reference_over_dequantised_tokens(model_dir, sharegpt_prompts, tmp_path_factory):
    out = run(model_dir, sharegpt_prompts, tmp_path_factory, "diffkv", {"kv_buffer": 16})
    assert [len(t) for t in out["tokens"]] == [MAX_TOKENS] * NUM_PROMPTS
    assert out["log"]["checked"] > 0, "no decode step attended a low tier"
    assert out["log"]["max_err"] < TIER_TOL, out["log"]["max_err"]


def test_low_tier_memory_is_charged_exactly(model_dir, sharegpt_prompts, tmp_path_factory):
    out = run(model_dir, sharegpt_prompts, tmp_path_factory, "diffkv", {"kv_buffer": 16})
    rows = [r for s in out["steps"] for r in s["requests"] if r["blocks_held"]]
    assert sum(s["demoted"] for s in out["steps"]) > 0 and any(r["low_tokens"] for r in rows)
    for r in rows:
        assert r["charged_blocks"] == -(-r["low_tokens"] * LOW_BYTES // (B * HIGH_BYTES))
        assert r["side_blocks"] == r["low_tokens"] * LOW_BYTES / (B * HIGH_BYTES)  # the metrics' exact size
        high = r["live_tokens"] - r["low_tokens"]
        assert -(-high // B) <= r["blocks_held"] <= -(-high // B) + 1  # packed: + the tail at most
    assert all(s["charge_short"] == 0 for s in out["steps"])
    # blocks go back to the pool while the requests run (released before their last step)
    final = {}
    for r in rows:
        final[r["req_id"]] = max(final.get(r["req_id"], 0), r["tokens"])
    assert sum(r["released"] for r in rows if r["tokens"] < final[r["req_id"]]) > 0


def test_low_tier_off_only_prunes(model_dir, sharegpt_prompts, tmp_path_factory):
    # α_low raised to 0.5 so that these short prompts have tokens to prune (at DiffKV's 0.02
    # none of them falls that low).
    out = run(model_dir, sharegpt_prompts, tmp_path_factory, "diffkv-high-only",
              {"kv_buffer": 16, "low_tier": False, "prune_threshold": 0.5})
    assert [len(t) for t in out["tokens"]] == [MAX_TOKENS] * NUM_PROMPTS
    steps = out["steps"]
    assert sum(s["demoted"] for s in steps) == 0 and sum(s["evicted"] for s in steps) > 0
    assert all(r["charged_blocks"] == 0 and not r["low_tokens"] for s in steps for r in s["requests"])
