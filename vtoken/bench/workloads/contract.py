"""Fixed-length output-contract workloads for the capacity frontier (docs/design.md §6, feasible
concurrency).

Each request is a short ShareGPT question (prompt in a window) with a fixed output
contract generated to the end (``ignore_eos``), so every arm must hold the same number of
tokens per request and "does the contract complete under the pool without preemption" is
well defined. The paper used 8K and 12K output contracts on an H100; the embedded default
scales them to 256 and 512 tokens, which a 135M model on 2 CPU cores finishes in well under
a minute per trial at concurrency 8 (about 10-40 output tok/s per request).
"""

from __future__ import annotations

from vtoken.bench.workloads.sharegpt import ShareGPTConfig

# Output contracts (tokens) per profile.
CONTRACTS = {"embedded": (256, 512), "paper": (8192, 12288)}
# The pressing default: short questions (32-128 rendered tokens) with a 128-token
# contract, so decode-time eviction fragments blocks while the prompt stays a minor share.
PRESS = {"output_tokens": 128, "min_prompt_tokens": 32, "max_prompt_tokens": 128}


def contract_config(output_tokens: int, num_requests: int = 128, seed: int = 0,
                    min_prompt_tokens: int = 64, max_prompt_tokens: int = 256) -> ShareGPTConfig:
    """ShareGPT sampling for an output contract of ``output_tokens`` per request.

    Args:
        output_tokens: tokens every request generates (EOS ignored).
        num_requests: requests in the workload (the largest concurrency tried should not
            exceed it).
        seed: shuffle seed.
        min_prompt_tokens, max_prompt_tokens: prompt window (rendered tokens).

    Returns:
        The config; ``max_total_tokens`` is exactly prompt maximum + contract.
    """
    return ShareGPTConfig(
        num_requests=num_requests, seed=seed, min_prompt_tokens=min_prompt_tokens,
        max_prompt_tokens=max_prompt_tokens, max_total_tokens=max_prompt_tokens + output_tokens,
        output_tokens=output_tokens, ignore_eos=True,
    )
