"""Pool arithmetic of the grid: the manifests' requests and the KV pool of each setup
(``pool_blocks``): a fixed ``pool.num_gpu_blocks``, or the pressing rule -- the pool
holds ``c_press`` requests of the manifest's longest request (prompt + output contract) with
no eviction at all, ``c_press x ceil(max(prompt + contract) / B) + 1`` blocks (the null block;
a prefix setup adds the shared documents those requests need, each stored once:
``ceil(c_press / degree) x ceil(prefix_tokens / B)``, so every degree presses alike),
so Native needs more than the pool above ``c_press`` while a budget of T tokens needs about
``ceil(T / B) + 1`` blocks per request (``press_demand`` replays both on a sample).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vtoken.bench.grid import factorial

MANIFEST_DIR = "data/workloads"


def press_pool(request_tokens, block_size: int, c_press: int) -> int:
    """The pressing rule: blocks that hold ``c_press`` requests of the manifest's longest
    request (prompt + output contract) with no eviction, plus vLLM's null block."""
    return c_press * -(-max(request_tokens) // block_size) + 1


def press_demand(prompt_tokens, output_tokens: int, block_size: int, budget: int) -> dict[str, int]:
    """Replay of one wave of requests (the rule's arithmetic, no engine): blocks with no
    eviction (``no_eviction``: sum of ceil((p + k) / B)) and with every request packed to a
    budget of T tokens plus one partly filled tail block (``packed``: sum of
    ceil(min(p + k, T) / B) + 1)."""
    full = sum(-(-(p + output_tokens) // block_size) for p in prompt_tokens)
    packed = sum(-(-min(p + output_tokens, budget) // block_size) + 1 for p in prompt_tokens)
    return {"no_eviction": full, "packed": packed}


def manifest_rows(workload: str, root: str = ".") -> list[dict[str, Any]]:
    """The rows of a workload's manifest (``data/workloads/<workload>.jsonl``)."""
    path = Path(root) / MANIFEST_DIR / f"{workload}.jsonl"
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def request_tokens(config: dict[str, Any], rows: list[dict[str, Any]]) -> list[int]:
    """Each manifest row's prompt plus its output contract, capped at ``trial.max_tokens``."""
    cap = config["trial"]["max_tokens"]
    return [r["prompt_tokens"] + (min(r["max_tokens"], cap) if cap else r["max_tokens"]) for r in rows]


# ``setup``: a ``vtoken.bench.grid.setups.Setup`` (not imported: that module imports this one).
def pool_blocks(config: dict[str, Any], setup: Setup, root: str = ".") -> int | None:
    """The setup's pool in blocks of its block size: ``pool.num_gpu_blocks``, or the pressing
    rule at the setup's ``c_press`` on its manifest (``press_pool``); another block size
    keeps the same usable tokens (the null block is one block of each size)."""
    trial, pool = config["trial"], config["pool"]
    own = setup.role in factorial.PHASE_ROLES.values() and setup.c_press is not None  # factorial.*.c_press
    if pool["num_gpu_blocks"] is not None and not own:
        blocks = pool["num_gpu_blocks"]
    elif setup.c_press is None:
        return None
    else:
        totals = request_tokens(config, manifest_rows(setup.workload, root))
        blocks = press_pool(totals, trial["block_size"], setup.c_press)
        if setup.prefix_degree is not None:  # + the shared documents of c_press requests, each stored once
            groups = -(-setup.c_press // setup.prefix_degree)
            blocks += groups * -(-setup.prefix_tokens // trial["block_size"])
    usable = (blocks - 1) * trial["block_size"]
    return -(-usable // setup.block_size) + 1
