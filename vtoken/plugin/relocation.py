"""Relocation: copy tokens' K/V from one slot to another in every layer at once.

With the token-major layout (LBNHC) a slot's K|V of one layer is one contiguous row of
``num_kv_heads * 2 * head_size`` elements, and vLLM allocates all layers' pages in one
buffer at a constant layer stride. :class:`AllLayerKV` views that buffer as
``[layers, slots, row]`` without copying, so a round of moves is one gather of every source row of every layer followed by one scatter:
a destination may be a slot another move of the round vacates. The copy is a C++ loop of
row ``memcpy`` s (``relocate`` in ``cpu/csrc/token_attention.cpp``, the extension
:mod:`vtoken.plugin.cpu.extension` builds); without it, ``index_select`` + ``index_copy_``
on the zero-copy view (6-18 % of memcpy bandwidth on the 2-core VM). When the layers do not share
one evenly strided buffer it falls back to a loop over layers (same result, slower).

On CUDA the same gather/scatter runs on a side stream (:class:`vtoken.plugin.cuda.relocation.StreamRelocator`):
it starts after the step's forward on the main stream, and :meth:`AllLayerKV.wait` makes the
main stream wait for it before the next step writes or attends any K/V (invariant I3). The
model runner calls ``wait`` at the start of every step; on the CPU the copy is already done.
"""

from __future__ import annotations

import numpy as np
import torch

from vtoken.plugin.cpu import extension
from vtoken.plugin.kv_layout import kv_rows


class AllLayerKV:
    """The KV rows of every attention layer, addressed by slot.

    Args:
        layer_caches: each layer's LBNHC cache ``[num_blocks, num_kv_heads, B, 2 * head_size]``
            in layer order.
    """

    def __init__(self, layer_caches: list[torch.Tensor]) -> None:
        if not layer_caches:
            raise ValueError("AllLayerKV: no layer caches")
        rows = [kv_rows(c).flatten(1) for c in layer_caches]  # [slots, H * 2D] each
        first = rows[0]
        self.num_layers = len(rows)
        self.num_slots, self.row_width = first.shape
        self.bytes_per_token = self.num_layers * self.row_width * first.element_size()
        self._layers = rows
        self.use_kernel = True  # the C++ row copy when built (tests switch it off to compare)
        self.view: torch.Tensor | None = None
        if self.num_layers > 1:
            stride = rows[1].data_ptr() - first.data_ptr()
            even = all(
                r.data_ptr() - first.data_ptr() == i * stride and r.shape == first.shape and r.dtype == first.dtype
                for i, r in enumerate(rows)
            )
            if even and stride % first.element_size() == 0 and stride > 0:
                self.view = torch.as_strided(
                    first, (self.num_layers, self.num_slots, self.row_width),
                    (stride // first.element_size(), self.row_width, 1),
                )
        else:
            self.view = first.unsqueeze(0)
        self._stream = None
        if first.device.type == "cuda" and self.view is not None:
            from vtoken.plugin.cuda.relocation import StreamRelocator

            self._stream = StreamRelocator(self.view)

    def wait(self) -> None:
        """Order the device's main stream after every move issued so far (a no-op on the CPU)."""
        if self._stream is not None:
            self._stream.wait()

    def move(self, src_slots: np.ndarray, dst_slots: np.ndarray) -> None:
        """Copy K/V of every layer from ``src_slots[i]`` to ``dst_slots[i]`` (gather, then scatter;
        on CUDA issued on the side stream, complete for the main stream after :meth:`wait`)."""
        if len(src_slots) != len(dst_slots):
            raise ValueError(f"move: {len(src_slots)} sources, {len(dst_slots)} destinations")
        if len(src_slots) == 0:
            return
        if self._stream is not None:
            self._stream.move(np.asarray(src_slots, dtype=np.int64), np.asarray(dst_slots, dtype=np.int64))
            return
        src = torch.from_numpy(np.array(src_slots, dtype=np.int64))
        dst = torch.from_numpy(np.array(dst_slots, dtype=np.int64))
        if self.view is not None and self.use_kernel:
            ext = extension.load()
            if ext is not None:
                size = self.view.element_size()
                ext.relocate(self._layers[0], self.num_layers, self.view.stride(0) * size, self.row_width * size, src, dst)
                return
        if self.view is not None:
            self.view.index_copy_(1, dst, self.view.index_select(1, src))
            return
        for layer in self._layers:
            layer.index_copy_(0, dst, layer.index_select(0, src))

    def read(self, slots: np.ndarray) -> torch.Tensor:
        """K/V rows of ``slots`` in every layer, ``[layers, len(slots), row]`` (a copy: what a
        policy that reads keys and values scores, and what tests compare)."""
        self.wait()
        idx = torch.from_numpy(np.array(slots, dtype=np.int64)).to(self._layers[0].device)
        if self.view is not None:  # one gather over the all-layer view (3x faster than one per layer)
            return self.view.index_select(1, idx)
        return torch.stack([layer.index_select(0, idx) for layer in self._layers])
