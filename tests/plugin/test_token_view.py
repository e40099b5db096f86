"""The token view and the token-view attention math against a float64 reference.

Slots are scattered over a pool on purpose: a bug that reads positional slots, the wrong
head or the wrong causal boundary changes the result far beyond the tolerance.
"""

import pytest
import torch

from vtoken.plugin import token_view
from vtoken.plugin.kv_layout import kv_rows
from vtoken.plugin.token_attention import decode_attention, extend_attention

H, HKV, D = 9, 3, 64


def test_positional_view_has_exact_slots():
    block_table = torch.tensor([[7, 2, 0], [4, 0, 0]], dtype=torch.int32)
    view = token_view.positional_token_view(block_table, torch.tensor([6, 3], dtype=torch.int32), block_size=4)
    assert view.seq_lens.tolist() == [6, 3]
    assert view.req_to_token[0].tolist() == [28, 29, 30, 31, 8, 9]
    assert view.req_to_token[1, :3].tolist() == [16, 17, 18]


def test_published_view_wins_until_withdrawn():
    view = token_view.TokenView(torch.zeros(1, 2, dtype=torch.int32), torch.tensor([2]))
    assert token_view.current() is None
    with token_view.published(view):
        assert token_view.current() is view
    assert token_view.current() is None


def test_view_rejects_wrong_dtypes():
    with pytest.raises(ValueError, match="int32"):
        token_view.TokenView(torch.zeros(1, 2, dtype=torch.int64), torch.tensor([2]))


def _reference(q, keys, values, num_prefix):
    """Causal attention of n new queries over prefix + new keys, float64, GQA by repeat."""
    q, k, v = q.double(), keys.double().repeat_interleave(H // HKV, 1), values.double().repeat_interleave(H // HKV, 1)
    scores = torch.einsum("nhd,lhd->hnl", q, k) / D**0.5
    n, length = q.shape[0], k.shape[0]
    future = torch.arange(length)[None, :] > (num_prefix + torch.arange(n))[:, None]
    probs = scores.masked_fill(future[None], float("-inf")).softmax(-1)
    return torch.einsum("hnl,lhd->nhd", probs, v)


@pytest.fixture
def pool():
    torch.manual_seed(0)
    return torch.randn(64, HKV, 16, 2 * D, dtype=torch.float32)  # [blocks, kv heads, B, 2D]


def _lbnhc(pool):
    # The same logical shape with token-major strides, as vLLM builds LBNHC views.
    return pool.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


def test_kv_rows_is_a_view_of_token_major_cache(pool):
    cache = _lbnhc(pool)
    rows = kv_rows(cache)
    assert rows.shape == (64 * 16, HKV, 2 * D) and rows.data_ptr() == cache.data_ptr()
    assert torch.equal(rows[5 * 16 + 3], cache[5, :, 3])
    with pytest.raises(RuntimeError, match="LBNHC"):
        kv_rows(pool)  # head-major (LBHNC, CPU_ATTN's) strides


def test_decode_attends_exactly_the_listed_slots(pool):
    rows = kv_rows(_lbnhc(pool))
    torch.manual_seed(1)
    lens = [37, 5, 64]
    slots = [torch.randperm(rows.shape[0])[:n] for n in lens]
    table = torch.full((3, 70), -1, dtype=torch.int32)  # garbage past seq_len must not matter
    for r, s in enumerate(slots):
        table[r, : len(s)] = s
    q = torch.randn(3, H, D)
    out = torch.empty_like(q)
    decode_attention(q, rows, table, torch.tensor(lens), D**-0.5, out)
    for r, s in enumerate(slots):
        ref = _reference(q[r : r + 1], rows[s, :, :D], rows[s, :, D:], len(s) - 1)
        assert torch.allclose(out[r : r + 1].double(), ref, atol=1e-5), r


def test_extend_is_causal_over_prefix_and_new_tokens(pool):
    rows = kv_rows(_lbnhc(pool))
    torch.manual_seed(2)
    prefixes, news = [0, 23, 40], [7, 5, 1]  # prefill, chunked prefill, decode in one batch
    slots = [torch.randperm(rows.shape[0])[: p + n] for p, n in zip(prefixes, news)]
    table = torch.zeros(3, 48, dtype=torch.int32)
    for r, s in enumerate(slots):
        table[r, : len(s)] = s
    q = torch.randn(sum(news), H, D)
    out = torch.empty_like(q)
    starts = [0, 7, 12, 13]
    extend_attention(q, rows, table, torch.tensor([len(s) for s in slots]), starts, D**-0.5, out)
    for r, s in enumerate(slots):
        ref = _reference(q[starts[r] : starts[r + 1]], rows[s, :, :D], rows[s, :, D:], prefixes[r])
        assert torch.allclose(out[starts[r] : starts[r + 1]].double(), ref, atol=1e-5), r
