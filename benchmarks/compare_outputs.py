"""Where greedy outputs of stock vLLM and the plugin's ``full`` arm first differ.

Runs both engines (in-process, one after the other) on the first human turn (cut to
600 characters) of the first 8 ShareGPT conversations whose turn has >= 200 characters,
``--max-tokens`` greedy tokens with EOS ignored. For every prompt it prints the first
position where the tokens differ and, from stock's top-2 log-probs at that position, the
margin between its two best tokens: a small margin means the paths split at a near-tie
(rounding), not at a wrong attention read.

Usage::

    HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 .venv/bin/python benchmarks/compare_outputs.py --dtype bfloat16
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--sharegpt", default="data/sharegpt")
    ap.add_argument("--dtype", default="float32", help="every engine's dtype (default float32, the pipeline's, "
                                                       "computed alike on every CPU; bf16 is emulated without AVX512_BF16)")
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    from vtoken.assets.prompts import first_human_turns
    from vtoken.engine_args import engine_args, stock_reference

    prompts = first_human_turns(Path(args.sharegpt))
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True, logprobs=2)
    runs = {}
    for arm, vt in (("stock", None), ("full", {"arm": "full"})):
        llm = LLM(**engine_args(args.model, vtoken=vt, dtype=args.dtype, **({} if vt else stock_reference())))
        runs[arm] = [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)]
        del llm
    same = 0
    for i, (a, b) in enumerate(zip(runs["stock"], runs["full"])):
        diff = next((j for j, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
        if diff is None:
            same += 1
            print(f"prompt {i}: identical {len(a.token_ids)} tokens")
            continue
        top = sorted(a.logprobs[diff].values(), key=lambda lp: -lp.logprob)
        margin = top[0].logprob - top[1].logprob if len(top) > 1 else float("nan")
        print(f"prompt {i}: first difference at token {diff} (stock {a.token_ids[diff]}, full {b.token_ids[diff]}); "
              f"stock top-2 log-prob margin there {margin:.4f}")
    print(f"{args.dtype}: {same}/{len(prompts)} prompts identical over {args.max_tokens} tokens")


if __name__ == "__main__":
    main()
