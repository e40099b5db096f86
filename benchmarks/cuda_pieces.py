"""The project's own CUDA pieces, standalone: no vLLM, only PyTorch (what a GPU machine without
network access can run; ``benchmarks/gpu_check.py`` is the check with CUDA vLLM installed).

Checks (each one a line of the JSON result, ``ok`` and its numbers):

* ``reference_attention``: the PyTorch reference (:mod:`vtoken.plugin.reference_attention`) on
  the device against the same call on the CPU -- decode and extend over a scattered token
  view, outputs, log-sum-exps and attention mass (TF32 off: float32 matmuls);
* ``mass_pass``: the K-only mass pass (``attention_mass``, what the CUDA backend's scored
  layers add) against the reference's mass on the device, and bit-identical over two runs
  and when the same logical tokens sit at other slots (naive vs vtoken: no atomics);
* ``padded_table``: the page-size-1 block table built on the device equals the CPU one;
* ``relocation``: :class:`vtoken.plugin.cuda.relocation.StreamRelocator` moves every layer's
  rows like ``index_copy_`` on the CPU (overlapping sources and destinations);
* ``relocation_race`` (a planted race): the side stream is held back (``torch.cuda._sleep``
  before its copy) while the main stream then overwrites a move's source slot, as the next
  step's new token may; with :meth:`~vtoken.plugin.cuda.relocation.StreamRelocator.wait`
  before the write the destination holds the old row; without it (the negative control) the
  copy reads the new one -- so the check can fail, and the ordering is what prevents it. And
  the other direction: the main stream's pending write of a source row (held back by a sleep)
  lands before the copy reads it.

Usage (one GPU, < 1 min; ``--device cpu`` runs the device-independent checks against
themselves, as a dry run of the harness)::

    python benchmarks/cuda_pieces.py --out results/cuda_pieces.json

Exit status 1 if a check fails. docs/cuda.md says where the checks last ran on a GPU; the
``--device cpu`` dry run is CI's.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.check_run import run_checks  # noqa: E402
from vtoken.plugin import reference_attention as ref  # noqa: E402
from vtoken.plugin.cuda import triton_ops  # noqa: E402

H, HKV, D = 9, 3, 64  # SmolLM2-135M's attention shapes
SCALE = D**-0.5
TOL = 1e-4


def _case(lens, news, seed, device, pool=2048):
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(pool, HKV, 2 * D, generator=gen)
    perm = torch.randperm(pool, generator=gen).to(torch.int32)
    table = torch.zeros(len(lens), max(lens) + 5, dtype=torch.int32)
    at = 0
    for r, n in enumerate(lens):
        table[r, :n] = perm[at:at + n]
        at += n
    starts = [0]
    for n in news:
        starts.append(starts[-1] + n)
    q = torch.randn(starts[-1], H, D, generator=gen) * 2
    return rows.to(device), table.to(device), torch.tensor(lens).to(device), starts, q.to(device)


def check_reference_attention(device) -> dict:
    worst = {"out": 0.0, "lse": 0.0, "mass": 0.0}
    for news in ([1] * 6, [7, 1, 33, 2, 1, 12]):
        lens = [300, 41, 1000, 9, 128, 513]
        results = []
        for dev in ("cpu", device):
            rows, table, seq_lens, starts, q = _case(lens, news, 1, dev)
            out = torch.empty_like(q)
            lse = torch.empty(q.shape[0], H, device=dev)
            mass = torch.zeros(len(lens), max(lens) + 5, device=dev)
            if max(news) == 1:
                ref.decode_attention(q, rows, table, seq_lens, SCALE, out, mass=mass, lse=lse)
            else:
                ref.extend_attention(q, rows, table, seq_lens, starts, SCALE, out, mass=mass, lse=lse)
            results.append((out.cpu(), lse.cpu(), mass.cpu()))
        for key, a, b in zip(worst, results[0], results[1]):
            worst[key] = max(worst[key], (a - b).abs().max().item())
    return {"ok": all(v < TOL for v in worst.values()), "max_abs_diff": worst, "tol": TOL}


def check_mass_pass(device) -> dict:
    lens, news = [300, 41, 1000, 9], [1, 1, 1, 1]
    rows, table, seq_lens, starts, q = _case(lens, news, 2, device)
    want = torch.zeros(4, 1005, device=device)
    ref.decode_attention(q, rows, table, seq_lens, SCALE, torch.empty_like(q), mass=want)
    got, again = torch.zeros_like(want), torch.zeros_like(want)
    ref.attention_mass(q, rows, table, seq_lens, starts, SCALE, got)
    ref.attention_mass(q, rows, table, seq_lens, starts, SCALE, again)
    # The same logical tokens at other slots (a bijection of the pool).
    gen = torch.Generator().manual_seed(3)
    dest = torch.randperm(rows.shape[0], generator=gen).to(device)
    moved = torch.empty_like(rows)
    moved[dest] = rows
    other = table.clone()
    for r, n in enumerate(lens):
        other[r, :n] = dest[table[r, :n].long()].to(torch.int32)
    permuted = torch.zeros_like(want)
    ref.attention_mass(q, moved, other, seq_lens, starts, SCALE, permuted)
    diff = (got - want).abs().max().item()
    return {"ok": diff < TOL and torch.equal(got, again) and torch.equal(got, permuted),
            "max_abs_diff_vs_reference": diff, "repeat_bit_identical": torch.equal(got, again),
            "other_slots_bit_identical": torch.equal(got, permuted)}


def check_padded_table(device) -> dict:
    table = torch.randint(0, 4096, (5, 300), dtype=torch.int32)
    a = triton_ops.padded_table(table, 5, 257)
    b = triton_ops.padded_table(table.to(device), 5, 257)
    return {"ok": torch.equal(a, b.cpu()) and a.shape == (5, 512), "shape": list(b.shape)}


def _layers(device, slots=512, layers=4, width=2 * HKV * D):
    gen = torch.Generator().manual_seed(4)
    return torch.randn(layers, slots, width, generator=gen).to(device)


def check_relocation(device) -> dict:
    if device == "cpu":
        return {"ok": True, "skipped": "needs CUDA streams"}
    from vtoken.plugin.cuda.relocation import StreamRelocator

    view = _layers(device)
    expect = view.cpu().clone()
    src = np.array([3, 4, 5, 100, 7], dtype=np.int64)
    dst = np.array([4, 5, 6, 3, 200], dtype=np.int64)  # 4 and 5 are sources and destinations
    expect.index_copy_(1, torch.from_numpy(dst), expect.index_select(1, torch.from_numpy(src)))
    reloc = StreamRelocator(view)
    reloc.move(src, dst)
    reloc.wait()
    torch.cuda.synchronize()
    # Rounds larger than the staging buffers grow them.
    big = StreamRelocator(view, capacity=2)
    big.move(np.arange(10, 20), np.arange(300, 310))
    big.wait()
    expect[:, 300:310] = expect[:, 10:20]
    return {"ok": torch.equal(view.cpu(), expect)}


def _delayed_relocator(view, cycles):
    """A StreamRelocator whose side stream sleeps before its copy (the planted delay)."""
    from vtoken.plugin.cuda.relocation import StreamRelocator

    class Delayed(StreamRelocator):
        def _before_copy(self):
            torch.cuda._sleep(cycles)

    return Delayed(view)


def check_relocation_race(device, cycles=200_000_000) -> dict:
    if device == "cpu":
        return {"ok": True, "skipped": "needs CUDA streams"}
    from vtoken.plugin.cuda.relocation import StreamRelocator

    out = {}
    for waited in (True, False):
        view = _layers(device)
        old = view[:, 3].clone()
        reloc = _delayed_relocator(view, cycles)
        reloc.move(np.array([3]), np.array([9]))
        if waited:
            reloc.wait()
        view[:, 3] = -1.0  # the next step's new token written into the vacated slot
        torch.cuda.synchronize()
        out["waited" if waited else "not_waited"] = bool(torch.equal(view[:, 9], old))
    # The other direction: the main stream's pending write of a source row lands first.
    view = _layers(device)
    torch.cuda._sleep(cycles)
    view[:, 5] = 7.0  # K/V the forward writes, still queued behind the sleep
    reloc = StreamRelocator(view)
    reloc.move(np.array([5]), np.array([11]))
    reloc.wait()
    torch.cuda.synchronize()
    out["reads_the_forwards_write"] = bool((view[:, 11] == 7.0).all())
    out["ok"] = out["waited"] and not out["not_waited"] and out["reads_the_forwards_write"]
    out["negative_control"] = "without wait() the copy read the overwritten slot" if not out["not_waited"] else \
        "without wait() the copy still read the old row: the planted delay did not expose the race"
    return out


CHECKS = {"reference_attention": check_reference_attention, "mass_pass": check_mass_pass,
          "padded_table": check_padded_table, "relocation": check_relocation,
          "relocation_race": check_relocation_race}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "results")) / "cuda_pieces.json")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device=cuda: torch sees no CUDA device (torch.cuda.is_available() is False); "
                 "--device cpu runs the dry run")
    torch.backends.cuda.matmul.allow_tf32 = False
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__}
    return run_checks({name: partial(check, args.device) for name, check in CHECKS.items()}, result, args.out)


if __name__ == "__main__":
    sys.exit(main())
