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

    @classmethod
    def from_config(cls, config: dict, dtype_bytes: int) -> KVShape:
        """The shape of a Llama-architecture HF ``config.json`` (KV heads default to the query
        heads, head_dim to hidden / heads, as in transformers)."""
        heads = config["num_attention_heads"]
        return cls(config["num_hidden_layers"], config.get("num_key_value_heads", heads),
                   config.get("head_dim", config["hidden_size"] // heads), dtype_bytes)

    @property
    def bytes_per_token(self) -> int:
        """K + V bytes of one token over all layers."""
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * self.dtype_bytes


SMOLLM2_135M = KVShape(num_layers=30, num_kv_heads=3, head_dim=64, dtype_bytes=2)
# bf16 K+V over all layers of SmolLM2-135M: 30 layers x 3 KV heads x 64 dims x 2 x 2 bytes.
SMOLLM2_BYTES_PER_TOKEN = SMOLLM2_135M.bytes_per_token


def weight_elements(config: dict) -> dict[str, int]:
    """Parameter counts of a Llama-architecture decoder (SmolLM2's) from its HF ``config.json``.

    Returns ``{"embedding", "layers", "final_norm", "lm_head"}``; ``lm_head`` is 0 where the
    output projection is the embedding matrix (``tie_word_embeddings``). No biases (Llama has none).
    """
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = KVShape.from_config(config, dtype_bytes=1)
    per_layer = (hidden * config["num_attention_heads"] * kv.head_dim * 2  # q_proj, o_proj
                 + hidden * kv.num_kv_heads * kv.head_dim * 2             # k_proj, v_proj
                 + hidden * inter * 3                                   # gate, up, down
                 + hidden * 2)                                          # the two RMSNorms
    return {"embedding": vocab * hidden, "layers": per_layer * config["num_hidden_layers"], "final_norm": hidden,
            "lm_head": 0 if config.get("tie_word_embeddings", False) else vocab * hidden}


def decode_step_bytes(config: dict, dtype_bytes: int, live_tokens: list[int]) -> dict[str, int]:
    """Bytes one decode step of a batch must read from memory at least (the roofline's numerator).

    Every weight matrix once (the output projection reads the whole vocabulary; with tied
    embeddings that is the embedding matrix, counted once), the embedding rows of the batch's
    tokens, and the K and V of every live token of every request (``live_tokens``, one entry per
    request, the tokens its new token attends), plus the new tokens' K and V written.

    Returns ``{"weights", "kv", "total"}`` in bytes.
    """
    n = weight_elements(config)
    hidden = config["hidden_size"]
    kv = KVShape.from_config(config, dtype_bytes)
    output_matrix = n["lm_head"] or n["embedding"]
    weights = (n["layers"] + n["final_norm"] + output_matrix + len(live_tokens) * hidden) * dtype_bytes
    kv_bytes = (sum(live_tokens) + len(live_tokens)) * kv.bytes_per_token
    return {"weights": weights, "kv": kv_bytes, "total": weights + kv_bytes}
