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
    "TOVAPress": "the newest query's attention row (decode firings only)",
}

# The presses that score from the attention mass (the engine measures it for them only), and
# which mass: everything the request's queries gave each token so far, or this step's row only.
READS_MASS = {"ObservedAttentionPress": "accumulated", "TOVAPress": "step"}

# How a press prunes (``vtoken.policy_options.mode``): "continuous" keeps the interface's budget at
# every firing (ceil((1 - r) L) of the L tokens so far, or ``budget``); "prefill_once" is kvpress's
# ``compression_ratio``: once, when the prompt is complete, keep int(L (1 - r)) of its L context tokens.
MODES = ("continuous", "prefill_once")

# How the adapter reduces a press's scores per (layer, KV head) to the token table's one liveness per
# token (vtoken/policies/kvpress.py), as the tables name it.
REDUCTION = "mean rank over layers and KV heads (kvpress: a top-k per layer and KV head)"

# Presses that cannot run in a mode, and why.
MODE_REFUSED = {
    ("TOVAPress", "prefill_once"): ("scores with the prompt's last query's attention row; the engine measures the "
                                    "prompt step's mass summed over all its queries (TOVA runs in mode 'continuous', "
                                    "firing at decode steps)"),
}

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


def check_mode(policy: str, mode: str) -> None:
    """ValueError naming the mode and what is allowed, or why the press cannot run in it."""
    if mode not in MODES:
        raise ValueError(f"policy_options.mode={mode!r}: must be one of {list(MODES)}")
    why = MODE_REFUSED.get((policy.removeprefix(PREFIX), mode))
    if why:
        raise ValueError(f"policy={policy!r}, policy_options.mode={mode!r}: {policy.removeprefix(PREFIX)} {why}")


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
