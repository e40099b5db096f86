"""KV shapes of the models the artifact runs, for byte counts without loading the model.

The embedded default is SmolLM2-135M-Instruct (built by `vtoken.assets.model`); its numbers
come from the asset's `config.json` (`tests/core/test_models.py` checks them against it when
the asset is present). The engine measures the real pool instead (`vtoken.plugin`), so these
constants only feed core-side metrics (replay, benchmarks) that count bytes moved.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVShape:
    """What one token's K and V occupy over all layers.

    Args:
        num_layers: attention layers (`num_hidden_layers`).
        num_kv_heads: KV heads per layer (`num_key_value_heads`).
        head_dim: dimensions per head.
        dtype_bytes: bytes per element of the KV cache (bf16: 2).
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        """K + V bytes of one token over all layers."""
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * self.dtype_bytes


SMOLLM2_135M = KVShape(num_layers=30, num_kv_heads=3, head_dim=64, dtype_bytes=2)
# bf16 K+V over all layers of SmolLM2-135M: 30 layers x 3 KV heads x 64 dims x 2 x 2 bytes.
SMOLLM2_BYTES_PER_TOKEN = SMOLLM2_135M.bytes_per_token
