"""Prefix caching on vs off, per policy: where greedy outputs first diverge, and the blocks held.

Four requests share a ``--prefix``-token prefix (the first ShareGPT turn of one conversation)
and differ after it (20, 25, 30, 35 tokens of four others), run together, so three of them hit
the first one's prefix blocks. For each policy and arm, one engine with vLLM's prefix cache on
and one with it off (float32, B = 16, a ``--budget``-token budget, compaction every step). Per
request it prints the prompt tokens taken from the cache and the first output position where
the two runs differ ("=" when identical over ``--max-tokens``), then the summed per-step blocks
held by the requests, split into prefix (read-only) and private blocks, and the pool's free
blocks. Under a score-free policy (StreamingLLM, Random) the victims do not depend on how the
prompt was computed, so on and off are expected token-identical; under H2O a hit skips the
prefill attention the scores sum, so the victims, and then the tokens, may differ.

Usage::

    HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 .venv/bin/python benchmarks/prefix_caching.py \
        --policies h2o,streamingllm,random --arms naive,vtoken
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path


def first_difference(a: list[int], b: list[int]) -> str:
    """The first index where two token lists differ, or '=' when they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return str(i)
    return "=" if len(a) == len(b) else str(min(len(a), len(b)))


def run(args, prompts, arm: str, policy: str, caching: bool, sinks: Path) -> dict:
    """Greedy tokens, hits and per-step block sums of one engine."""
    from vllm import LLM, SamplingParams

    from vtoken.engine_args import engine_args
    from vtoken.plugin import sink

    path = sinks / f"{arm}-{policy}-{caching}.jsonl"
    cfg = {"arm": arm, "policy": policy, "budget": args.budget, "watermark": 1.0, "metrics_path": str(path)}
    llm = LLM(**engine_args(args.model, vtoken=cfg, dtype="float32", block_size=16, max_model_len=512,
                            kv_cache_memory_bytes=64 << 20, enable_prefix_caching=caching))
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    steps = sink.read(path)[1]
    held = sum(r["blocks_held"] for s in steps for r in s["requests"])
    prefix = sum(r["prefix_blocks"] for s in steps for r in s["requests"])
    free = sum(s["free_blocks"] for s in steps) / max(1, len(steps))
    return {"tokens": [list(o.outputs[0].token_ids) for o in outs], "cached": [o.num_cached_tokens for o in outs],
            "held": held, "prefix": prefix, "free": free, "llm": llm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--sharegpt", default="data/sharegpt")
    ap.add_argument("--policies", default="h2o,streamingllm,random")
    ap.add_argument("--arms", default="naive,vtoken")
    ap.add_argument("--prefix", type=int, default=150)
    ap.add_argument("--budget", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from transformers import AutoTokenizer

    from vtoken.assets.prompts import first_human_turns

    tok = AutoTokenizer.from_pretrained(args.model)
    texts = first_human_turns(Path(args.sharegpt), num=8, chars=900, min_chars=600)
    prefix = tok(texts[0]).input_ids[: args.prefix]
    prompts = [prefix + tok(t).input_ids[: 20 + 5 * i] for i, t in enumerate(texts[1:5])]
    keep = []  # in-process engines stay referenced (deleting one tears down vLLM's state)
    with tempfile.TemporaryDirectory() as tmp:
        print("policy        arm       cached (on)          first difference on/off   block-steps on (prefix) / off   "
              "mean free on / off")
        for policy in args.policies.split(","):
            for arm in args.arms.split(","):
                on, off = (run(args, prompts, arm, policy, c, Path(tmp)) for c in (True, False))
                keep += [on["llm"], off["llm"]]
                diffs = [first_difference(a, b) for a, b in zip(on["tokens"], off["tokens"])]
                print(f"{policy:<13} {arm:<9} {str(on['cached']):<20} {str(diffs):<25} "
                      f"{on['held']} ({on['prefix']}) / {off['held']}{'':>12} {on['free']:.1f} / {off['free']:.1f}")


if __name__ == "__main__":
    main()
