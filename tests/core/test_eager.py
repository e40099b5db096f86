"""vToken eager: every step, whatever the pool, every plan that frees a block, the tail block
left alone (the packing limit with the tail packed too: test_limit.py) -- so a request holds
exactly ceil(T/B) blocks besides its tail
after each step (T: its live tokens outside the tail), on a hand-driven table with random
evictions; the lazy arm (the paper's) does not, and eager refuses the lazy-only knobs."""

import numpy as np
import pytest

from sim import Sim
from vtoken.arms.vtoken import VTokenConfig

B = 4


def _packed(st) -> tuple[int, int]:
    """(blocks held, ceil(T/B) + the tail): what the request holds and the packing limit."""
    bl, tail = st.table.blocks, st.tail_block
    ids, counts = bl.block_live_counts()
    nontail = int(counts[ids != tail].sum())
    has_tail = int(tail is not None and tail in set(ids.tolist()))
    return bl.num_held, -(-nontail // B) + has_tail


def _drive(packing: str, seed: int, steps: int = 80) -> list[tuple[int, int]]:
    """One request: a 24-token prompt, then per step one appended token, a random eviction of
    0-3 live tokens and a plan; the pool far from any watermark (40 blocks, a dozen used)."""
    sim = Sim("vtoken", num_blocks=40, block_size=B, packing=packing, theta_f=0.25, watermark=0.2)
    rng = np.random.default_rng(seed)
    sim.append("r", 24)
    seen = []
    for _ in range(steps):
        st = sim.states["r"]
        live = st.table.tokens.live_positions()
        victims = rng.choice(live[:-1], size=min(int(rng.integers(0, 4)), live.size - 1), replace=False)
        sim.evict("r", np.sort(victims))
        sim.plan()
        seen.append(_packed(st))
        sim.append("r", 1)
    return seen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eager_holds_the_packing_limit_after_every_step(seed):
    seen = _drive("eager", seed)
    assert all(held == limit for held, limit in seen), [s for s in seen if s[0] != s[1]][:5]


def test_lazy_tolerates_sparse_blocks_where_eager_packs():
    """The control: the paper's lazy arm with the pool far above its watermark plans nothing, so
    its blocks drift above the limit (the difference the eager variant measures)."""
    seen = _drive("lazy", 0)
    assert any(held > limit for held, limit in seen)
    assert max(held - limit for held, limit in seen) >= 2  # two blocks or more above the limit


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"packing": "eager", "theta_rule": "pressure"}, "theta_rule='pressure'"),
    ({"packing": "eager", "before_preemption": True}, "before_preemption=True"),
    ({"packing": "greedy"}, "packing='greedy': must be one of ('lazy', 'eager', 'limit')"),
])
def test_eager_refuses_the_lazy_only_knobs(kwargs, named):
    with pytest.raises(ValueError) as err:
        VTokenConfig(block_size=B, **kwargs)
    assert named in str(err.value)
