"""StreamingLLM: attention sinks + recent window (Xiao et al., ICLR'24; mit-han-lab).

Keep the first 4 tokens (sinks, `StartRecentKVCache(start_size=4)`) and the most recent
tokens; evict the oldest non-sink tokens. Scores are ignored. Positions are not shifted
(vLLM caches post-RoPE keys; literature §5.2).
"""

from dataclasses import dataclass

from vtoken.policies.base import EvictionPolicy, PolicyConfig
from vtoken.policies.registry import register_policy


@dataclass(frozen=True)
class StreamingLLMConfig(PolicyConfig):
    """StreamingLLM defaults: 4 sink tokens; everything else kept is the recent window."""

    num_sink: int = 4


@register_policy
class StreamingLLMPolicy(EvictionPolicy):
    """Evict the oldest non-sink tokens."""

    name = "streamingllm"
    config_cls = StreamingLLMConfig

    def _accumulate(self, state, live_pos, scores):
        pass  # scores are not used

    def _select(self, state, cand, num):
        return cand[:num]
