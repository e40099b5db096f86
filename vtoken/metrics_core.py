"""Engine-free metrics of docs/design.md §6, gathered while an arm replays a trace.

Per request per step: blocks held (`KVArm.memory_blocks`: block-equivalents for `diffkv`),
live tokens, logical tokens, ideal blocks ceil(live/B). Per step: utilisation bins of every
held block (live/B in [0, .25], (.25, .5], (.5, .75], (.75, 1]). Per plan: tokens and bytes
moved, blocks freed. The summary follows docs/design.md §6: retained blocks per request = mean over
requests of the time-average of blocks held over the steps it was present (peak as well);
packing efficiency = sum ideal / sum held; waste F = 1 - sum live / (B * sum held blocks)
over all (request, step) pairs. For `diffkv`, held and F use its block-equivalents while
the bins describe its physical (holefill) layout.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

import numpy as np

BIN_EDGES = np.array([0.25, 0.5, 0.75])
BIN_NAMES = ("util_le_25", "util_25_50", "util_50_75", "util_gt_75")


@dataclass
class Recorder:
    """Accumulates replay metrics; `summary()` reduces them.

    Args:
        block_size: B.
    """

    block_size: int
    steps: list = field(default_factory=list)
    req_ids: list = field(default_factory=list)
    tokens: list = field(default_factory=list)
    live: list = field(default_factory=list)
    held: list = field(default_factory=list)
    bins: np.ndarray = field(default_factory=lambda: np.zeros(4, dtype=np.int64))
    num_plans: int = 0
    tokens_moved: int = 0
    bytes_moved: int = 0
    blocks_freed_by_plans: int = 0
    blocks_taken_by_plans: int = 0

    def __post_init__(self) -> None:
        # Bin of each possible live count 0..B: ceil(4 * live / B) - 1 clipped to [0, 3],
        # the integer form of the BIN_EDGES cut, as a lookup table (one gather per call).
        b = self.block_size
        self._bin_of = np.clip((4 * np.arange(b + 1) + b - 1) // b - 1, 0, 3)

    def record_request(self, step: int, req_id: str, num_tokens: int, num_live: int,
                       held: float) -> None:
        """One (request, step) sample."""
        self.steps.append(step)
        self.req_ids.append(req_id)
        self.tokens.append(num_tokens)
        self.live.append(num_live)
        self.held.append(held)

    def record_requests(self, step: int, req_ids: list, num_tokens: list, num_live: list,
                        held: list) -> None:
        """`record_request` for every request of one step at once (aligned lists)."""
        self.steps.extend([step] * len(req_ids))
        self.req_ids.extend(req_ids)
        self.tokens.extend(num_tokens)
        self.live.extend(num_live)
        self.held.extend(held)

    def record_blocks(self, live_counts: np.ndarray, num_released: int = 0) -> None:
        """Utilisation bins of held blocks at one step (one request's, or several requests'
        concatenated).

        Args:
            live_counts: live tokens per block, each in [0, B].
            num_released: entries of `live_counts` that are released blocks (count 0) and
                are left out; lets a caller pass a table's whole local row without masking.
        """
        self.bins += np.bincount(self._bin_of[live_counts], minlength=4)
        self.bins[0] -= num_released

    def record_plan(self, plan) -> None:
        """Counters of an applied plan."""
        self.num_plans += 1
        self.tokens_moved += plan.num_tokens_moved
        self.bytes_moved += plan.bytes_moved
        self.blocks_freed_by_plans += int(plan.freed_block_ids.size)
        self.blocks_taken_by_plans += int(plan.new_block_ids.size)

    def summary(self) -> dict:
        """docs/design.md §6 engine-free metrics as a flat dict."""
        b = self.block_size
        held = np.asarray(self.held, dtype=np.float64)
        live = np.asarray(self.live, dtype=np.int64)
        ideal = -(-live // b)
        req = np.asarray(self.req_ids)
        per_req_avg, per_req_peak = [], []
        for r in np.unique(req):
            h = held[req == r]
            per_req_avg.append(h.mean())
            per_req_peak.append(h.max())
        net = self.blocks_freed_by_plans - self.blocks_taken_by_plans
        nbins = max(1, int(self.bins.sum()))
        out = {
            "num_samples": int(held.size),
            "num_requests": len(per_req_avg),
            "retained_blocks_per_request": float(np.mean(per_req_avg)) if per_req_avg else 0.0,
            "peak_blocks_per_request": float(np.mean(per_req_peak)) if per_req_peak else 0.0,
            "mean_ideal_blocks": float(ideal.mean()) if ideal.size else 0.0,
            "packing_efficiency": float(ideal.sum() / held.sum()) if held.sum() else 1.0,
            "waste_f": float(1 - live.sum() / (b * held.sum())) if held.sum() else 0.0,
            "num_plans": self.num_plans,
            "tokens_moved": self.tokens_moved,
            "bytes_moved": self.bytes_moved,
            "blocks_freed_by_plans": self.blocks_freed_by_plans,
            "blocks_taken_by_plans": self.blocks_taken_by_plans,
            "tokens_moved_per_block_freed": self.tokens_moved / net if net > 0 else 0.0,
            "bytes_moved_per_block_freed": self.bytes_moved / net if net > 0 else 0.0,
        }
        out.update({n: float(c / nbins) for n, c in zip(BIN_NAMES, self.bins)})
        return out

    def write_steps_csv(self, path) -> None:
        """One row per (step, request): step, req_id, num_tokens, num_live, blocks_held,
        ideal_blocks."""
        b = self.block_size
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["step", "req_id", "num_tokens", "num_live", "blocks_held",
                        "ideal_blocks"])
            for row in zip(self.steps, self.req_ids, self.tokens, self.live, self.held):
                w.writerow([*row[:4], f"{row[4]:g}", -(-row[3] // b)])
