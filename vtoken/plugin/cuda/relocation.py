"""``StreamRelocator``: relocation's all-layer gather/scatter on a CUDA side stream.

The paper's design (invariant I3): the copy of a step's moves starts once that step's forward
has written its K/V (the side stream waits for the main stream), and the main stream waits
for the copy (an event) before the next step writes or attends any K/V -- a move's source
slot may be written by the next step's new token (holefill) and its destination is read by
the next step's attention. Between the two, sampling runs on the main stream alongside.

The slot lists go to the device through a pinned host buffer; the next round reuses it only
after the previous round's copy has consumed it (``synchronize`` on its event).

Plain PyTorch (no vLLM): ``benchmarks/cuda_pieces.py`` checks it standalone on a GPU with a
planted race; it passed on an H200 (docs/cuda.md), inside an engine it has not run.
"""

from __future__ import annotations

import numpy as np
import torch


class StreamRelocator:
    """Moves rows of an all-layer KV view ``[layers, slots, row]`` on a side stream.

    Args:
        view: the pool's ``[layers, slots, row]`` view on a CUDA device.
        capacity: slots per round the staging buffers hold (grown on demand).
    """

    def __init__(self, view: torch.Tensor, capacity: int = 1 << 14) -> None:
        self.view = view
        self.device = view.device
        self.stream = torch.cuda.Stream(self.device)
        self.done = torch.cuda.Event()
        self._alloc(capacity)
        self._issued = False  # a round was recorded on ``done`` (staging may be in use)
        self._pending = False  # the main stream has not waited for the last round yet

    def _alloc(self, capacity: int) -> None:
        self.capacity = capacity
        self._host = torch.empty(2, capacity, dtype=torch.int64, pin_memory=True)
        self._dev = torch.empty(2, capacity, dtype=torch.int64, device=self.device)

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Issue ``view[:, dst[i]] = view[:, src[i]]`` for every i (all sources gathered first)."""
        n = len(src)
        if n == 0:
            return
        if self._issued:
            self.done.synchronize()  # the last round has read the staging buffers
        if n > self.capacity:
            self._alloc(max(n, 2 * self.capacity))
        self._host[0, :n] = torch.from_numpy(src)
        self._host[1, :n] = torch.from_numpy(dst)
        main = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            self.stream.wait_stream(main)  # the forward that wrote these K/V has finished
            self._before_copy()
            idx = self._dev[:, :n]
            idx.copy_(self._host[:, :n], non_blocking=True)
            rows = self.view.index_select(1, idx[0])
            self.view.index_copy_(1, idx[1], rows)
            self.done.record(self.stream)
        self._issued = self._pending = True

    def wait(self) -> None:
        """Make the main stream wait for every round issued so far (call before the next step)."""
        if self._pending:
            torch.cuda.current_stream(self.device).wait_event(self.done)
            self._pending = False

    def _before_copy(self) -> None:
        """Runs on the side stream before the copy (a test delays the copy here)."""
