"""Which of NVIDIA kvpress 0.5.5's presses run as vToken policies (``kvpress:<Press>``), and why
the others do not -- read from kvpress's sources, checked against the installed package by
``tests/core/test_kvpress.py`` (every press it exports is in exactly one table below).

Data only, no kvpress import: a config naming a press is accepted or refused in milliseconds,
before any engine (or kvpress's ~10-25 s import) starts.
"""

PREFIX = "kvpress:"

# ScorerPress subclasses whose score reads only what the engine holds per live token, and what.
RUNS = {
    "KnormPress": "keys (L2 norm)",
    "KeyDiffPress": "keys (cosine to the mean key)",
    "LagKVPress": "keys and values (min-max spread against the next lag partition)",
    "CURPress": "keys and values (local leverage of squared norms)",
    "RandomPress": "nothing (seeded uniform scores)",
    "StreamingLLMPress": "positions (sinks and the most recent tokens)",
    "ObservedAttentionPress": "the attention mass each token received (H2O-like, mean per query that saw it)",
}

# The presses that score from the attention mass: the engine measures it for them only.
READS_MASS = ("ObservedAttentionPress",)

# ScorerPress subclasses that need more than keys, values, positions or the attention mass.
REFUSED = {
    "SnapKVPress": "needs hidden states (its observation window's queries)",
    "PyramidKVPress": "needs hidden states (SnapKV's window queries)",
    "ExpectedAttentionPress": "needs hidden states (statistics of future queries)",
    "ExpectedAttentionStatsPress": "needs hub files (precomputed query statistics) and hidden states",
    "LeverageScorePress": "needs hidden states (it recomputes pre-RoPE keys from them)",
    "CompactorPress": "needs hidden states (queries and pre-RoPE keys)",
    "NonCausalAttnPress": "needs hidden states (pre-RoPE queries)",
    "CapPress": "needs hidden states (historical queries)",
    "TOVAPress": ("needs the last query's attention row per layer (or hidden states to recompute it); the "
                  "engine measures mass summed over a step's queries, heads and layers"),
    "KVzapPress": "needs hub files (a trained scorer model) applied to hidden states",
    "QFilterPress": "needs hub files (per-model Q-filters)",
    "CriticalKVPress": "needs the layer's output projection weights (o_proj) besides a wrapped press",
}

# Everything else kvpress exports: not a ScorerPress (wrappers, merging, channel pruning,
# presses acting inside the forward), so there is no per-token score to adopt.
NOT_SCORERS = (
    "AdaKVPress", "BasePress", "BlockPress", "CAMPress", "ChunkKVPress", "ChunkPress", "ComposedPress",
    "CompressionRatioDecodingPress", "CriticalAdaKVPress", "DMSPress", "DecodingPress", "DuoAttentionPress",
    "EntropyGatedChunkKVPress", "FastKVzipPress", "FinchPress", "KVComposePress", "KVgradPress", "KVzipPress",
    "KeyRerotationPress", "LUKVPress", "MergingPress", "PerLayerCompressionPress", "PrefillDecodingPress",
    "RestoreKVPress", "ScorerPress", "SimLayerKVPress", "ThinKPress",
)


def slug(policy: str) -> str:
    """The policy's name in file and setup names (``kvpress:KnormPress`` -> ``kvpress-KnormPress``)."""
    return policy.replace(":", "-")


def unslug(name: str) -> str:
    """The policy a :func:`slug` names."""
    return PREFIX + name.removeprefix("kvpress-") if name.startswith("kvpress-") else name


def check_press(policy: str) -> str:
    """The press a ``kvpress:<Press>`` policy names; ValueError naming the press and why it
    cannot run (or the presses that can)."""
    press = policy.removeprefix(PREFIX)
    if press in RUNS:
        return press
    why = REFUSED.get(press) or (
        "is not a ScorerPress (no per-token score to adopt)" if press in NOT_SCORERS else "is not a kvpress 0.5.5 press")
    raise ValueError(f"policy={policy!r}: {press} {why}; kvpress presses that run: "
                     f"{[PREFIX + p for p in RUNS]}")
