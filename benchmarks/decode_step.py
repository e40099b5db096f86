"""Median decode-step time: stock vLLM vs the plugin's arms (token-view backend).

Arms (``--arms``): ``stock`` (vLLM's CPU_ATTN; on CUDA TRITON_ATTN, the kernel the plugin
launches: ``vtoken.engine_args.stock_reference``), ``full`` (plugin, no eviction),
``naive-h2o`` / ``vtoken-h2o`` (ratio 0.5, every layer scored: the default score
settings), ``naive-random`` (ratio 0.5, nothing scored). Scoring cost per step is
``naive-h2o - naive-random`` (same number of live tokens, only the mass differs), reported
as a fraction of the ``full`` step (target <= 0.5). At equal live tokens (``--budget T``):
``naive-budget`` (H2O keeping T tokens) vs ``diffkv-budget`` (DiffKV-style keeping at most T,
high and low tiers, its low tier dequantised and attended every step) and ``diffkv`` (its
released thresholds: more live tokens). ``zipage-sync`` / ``zipage-async``:
Zipage-style at budget 64 with ``async_compress`` off / on (compare them at the grid's
``--block-size 16``; with async a compacting request sits a step out, so those steps carry
fewer tokens).

Each arm gets its own in-process engine (built one after the other in this process; the
plugin keeps their backends apart) and the same workload: ``--num-requests`` requests of
``--prompt-tokens`` ShareGPT tokens each, greedy, ``--output-tokens`` tokens (EOS ignored).
The engine is stepped by hand (``llm.llm_engine.step()``); a step counts as a *decode
step* when every request already had its first token before it and none has finished,
i.e. the batch is exactly ``num_requests`` decode tokens. Reported: median and IQR of those
steps per arm and repeat, and the plugin/stock ratio of medians.

``--lockstep`` generates with every arm at once instead, one engine step of each arm in turn
(the order alternating every round): the machine's speed drifts by 10-30 % within minutes on
the shared 2-core VM, and sequential arms see different machines; in lockstep every arm's
step of a round sees the same one, and the per-repeat ratio to stock is a paired comparison.

Usage (the machine is shared and noisy: repeat, and compare within one run)::

    HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 .venv/bin/python benchmarks/decode_step.py \\
        --repeats 2 --output-tokens 24

Zipage-style with and without asynchronous compaction, at the default grid's budget and B::

    .venv/bin/python benchmarks/decode_step.py --arms zipage-sync,zipage-async \\
        --block-size 16 --lockstep --num-requests 4 --prompt-tokens 256 --output-tokens 48

What the batch-invariant linears cost per decode step (a lone decode row computed as a pair;
``--num-requests 1`` is the only batch that pays it)::

    .venv/bin/python benchmarks/decode_step.py --arms vtoken-h2o,vtoken-h2o-batch-variant \
        --lockstep --repeats 3 --num-requests 1 --prompt-tokens 512 --output-tokens 64

(``stock``, vLLM's CPU_ATTN, needs B a multiple of 32; the ratios to stock are printed when
it runs.)

The pipeline's end-to-end indirection cost (claims table) is this benchmark with
``--arms stock,full --distinct-prompts --csv``: every repeat runs its own prompts (repeat r
takes prompts r*N .. r*N+N-1 of ShareGPT), both arms on the same ones, in alternating
order, so the per-repeat ratio full / stock is a paired replicate over distinct samples.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

ARMS = {
    "stock": None,
    "full": {"arm": "full"},
    "naive-h2o": {"arm": "naive", "policy": "h2o", "ratio": 0.5},
    "vtoken-h2o": {"arm": "vtoken", "policy": "h2o", "ratio": 0.5},
    # The same without the batch-invariant linears: their cost, paired (--lockstep).
    "vtoken-h2o-batch-variant": {"arm": "vtoken", "policy": "h2o", "ratio": 0.5, "batch_invariant": False},
    "naive-random": {"arm": "naive", "policy": "random", "ratio": 0.5},
    # Equal live tokens (--budget T): H2O's token-budget mode vs DiffKV-style at its calibrated
    # operating point (at most T retained tokens, buffer T / 2) and at its released thresholds.
    "naive-budget": {"arm": "naive", "policy": "h2o", "budget": "T"},
    "diffkv-budget": {"arm": "diffkv", "budget": "T", "arm_options": {"kv_buffer": "T/2"}},
    "diffkv": {"arm": "diffkv"},
    # Zipage-style at the default grid's budget, compacting at the step it plans or one later.
    "zipage-sync": {"arm": "zipage", "budget": 64, "arm_options": {"async_compress": False}},
    "zipage-async": {"arm": "zipage", "budget": 64, "arm_options": {"async_compress": True}},
}


def arm_config(arm: str, budget: int) -> dict | None:
    """The vtoken settings of ``arm`` with the budget placeholders ("T", "T/2") filled in."""
    def fill(v):
        return {"T": budget, "T/2": budget // 2}.get(v, v) if isinstance(v, str) else v

    cfg = ARMS[arm]
    if cfg is None:
        return None
    return {k: ({kk: fill(vv) for kk, vv in v.items()} if isinstance(v, dict) else fill(v)) for k, v in cfg.items()}


def build_prompts(tokenizer, sharegpt_dir: Path, num: int, num_tokens: int, skip: int = 0) -> list[list[int]]:
    """``num`` prompts of exactly ``num_tokens`` token ids, each from consecutive ShareGPT
    human turns (different conversations per prompt), after the first ``skip`` such prompts."""
    from vtoken.assets import sharegpt

    num += skip
    prompts, ids = [], []
    for conv in sharegpt.load(sharegpt_dir):
        for turn in conv["conversations"]:
            if turn["from"] == "human":
                ids += tokenizer(turn["value"] + "\n").input_ids
        if len(ids) >= num_tokens:
            prompts.append(ids[:num_tokens])
            ids = []
            if len(prompts) == num:
                return prompts[skip:]
    raise RuntimeError(f"ShareGPT ran out after {len(prompts)} prompts")


class Generation:
    """One engine generating ``output_tokens`` for every prompt, stepped by hand."""

    def __init__(self, llm, prompts: list[list[int]], output_tokens: int, tag: str = "r") -> None:
        from vllm import SamplingParams

        self.engine = llm.llm_engine
        self.output_tokens = output_tokens
        params = SamplingParams(temperature=0.0, max_tokens=output_tokens, ignore_eos=True)
        for i, ids in enumerate(prompts):
            self.engine.add_request(f"{tag}{i}", {"prompt_token_ids": ids}, params)
        self.produced = {f"{tag}{i}": 0 for i in range(len(prompts))}
        self.times: list[float] = []

    def done(self) -> bool:
        return not self.engine.has_unfinished_requests()

    def step(self) -> list:
        """One engine step; its time is kept when it is a pure decode step. Returns the step's
        request outputs."""
        n = self.produced.values()
        all_decoding = all(k >= 1 for k in n) and all(k < self.output_tokens for k in n)
        start = time.perf_counter()
        outputs = self.engine.step()
        elapsed = time.perf_counter() - start
        for out in outputs:
            self.produced[out.request_id] = len(out.outputs[0].token_ids)
        if all_decoding:
            self.times.append(elapsed)
        return outputs


def decode_step_times(llm, prompts: list[list[int]], output_tokens: int) -> list[float]:
    """Seconds per pure decode step while generating ``output_tokens`` for every prompt."""
    gen = Generation(llm, prompts, output_tokens)
    while not gen.done():
        gen.step()
    return gen.times


def lockstep_times(engines: dict, order: list[str], prompts, output_tokens: int, tag: str) -> dict[str, list[float]]:
    """Every arm generates at once, one step of each arm in turn (the order alternating every
    round), so a change of the machine's speed hits every arm alike: paired step times."""
    gens = {arm: Generation(engines[arm], prompts, output_tokens, tag) for arm in order}
    rnd = 0
    while not all(g.done() for g in gens.values()):
        for arm in (order if rnd % 2 == 0 else list(reversed(order))):
            if not gens[arm].done():
                gens[arm].step()
        rnd += 1
    return {arm: g.times for arm, g in gens.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--sharegpt", default="data/sharegpt")
    ap.add_argument("--num-requests", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--output-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=1, help="rounds over the arms, order alternating")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    ap.add_argument("--dtype", default="float32", help="every engine's dtype (default float32, the pipeline's, "
                                                       "computed alike on every CPU; bf16 is emulated without AVX512_BF16)")
    ap.add_argument("--budget", type=int, default=512, help="T of the *-budget arms (live tokens per request)")
    ap.add_argument("--block-size", type=int, default=None, help="B of every engine (default: the CPU engine's, 32)")
    ap.add_argument("--out", help="write the raw step times as JSON here")
    ap.add_argument("--distinct-prompts", action="store_true", help="each repeat runs its own prompts")
    ap.add_argument("--csv", help="write one row per repeat x arm (median decode step) here, atomically")
    ap.add_argument("--lockstep", action="store_true",
                    help="step every arm's engine in turn within a repeat (paired under a drifting machine)")
    args = ap.parse_args()

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    from vtoken.engine_args import engine_args, platform_device, stock_reference

    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        ap.error(f"--arms={args.arms!r}: unknown {unknown}; valid: {list(ARMS)}")
    sized = {"block_size": args.block_size} if args.block_size else {}
    if platform_device() == "cuda":  # every arm's engine lives in this process: share the GPU's memory
        sized["gpu_memory_utilization"] = round(0.85 / len(arms), 3)
    def kwargs(arm):
        vt = arm_config(arm, args.budget)
        return engine_args(args.model, vtoken=vt, dtype=args.dtype, **sized, **({} if vt else stock_reference()))

    engines = {arm: LLM(**kwargs(arm)) for arm in arms}
    tokenizer = engines[arms[0]].get_tokenizer()
    prompts = build_prompts(tokenizer, Path(args.sharegpt), args.num_requests, args.prompt_tokens)
    results = {arm: [] for arm in arms}
    rows = []
    for rep in range(args.repeats):
        order = arms if rep % 2 == 0 else list(reversed(arms))
        if args.distinct_prompts and rep:
            prompts = build_prompts(tokenizer, Path(args.sharegpt), args.num_requests, args.prompt_tokens,
                                    skip=rep * args.num_requests)
        together = lockstep_times(engines, order, prompts, args.output_tokens, f"p{rep}-") if args.lockstep else {}
        for pos, arm in enumerate(order):
            times = together[arm] if args.lockstep else decode_step_times(engines[arm], prompts, args.output_tokens)
            results[arm].append(times)
            rows.append({"repeat": rep, "arm": arm, "position": pos, "median_step_s": statistics.median(times),
                         "n_steps": len(times), "num_requests": args.num_requests,
                         "prompt_tokens": args.prompt_tokens, "dtype": args.dtype,
                         "prompts": "distinct per repeat" if args.distinct_prompts else "same every repeat"})
            q = statistics.quantiles(times, n=4)
            print(f"repeat {rep} {arm:12s}: median {1e3 * statistics.median(times):7.1f} ms "
                  f"(IQR {1e3 * q[0]:.1f}-{1e3 * q[2]:.1f}, n={len(times)} decode steps)", flush=True)
    pooled = {arm: statistics.median([t for run in runs for t in run]) for arm, runs in results.items()}
    print("pooled medians: " + ", ".join(f"{arm} {1e3 * t:.1f} ms" for arm, t in pooled.items()))
    if "stock" in pooled:
        print("ratio to stock: " + ", ".join(f"{arm} {t / pooled['stock']:.3f}x" for arm, t in pooled.items()))
        paired = {arm: [statistics.median(r) / statistics.median(s) for r, s in zip(runs, results["stock"])]
                  for arm, runs in results.items() if arm != "stock"}
        print("per-repeat ratio to stock (median of repeats): " + ", ".join(
            f"{arm} {statistics.median(v):.3f}x [{', '.join(f'{x:.3f}' for x in v)}]" for arm, v in paired.items()))
    if {"naive-h2o", "naive-random", "full"} <= set(pooled):
        cost = pooled["naive-h2o"] - pooled["naive-random"]
        print(f"scoring cost per step: {1e3 * cost:.1f} ms = {cost / pooled['full']:.3f} of a full (no-eviction) step")
    if {"zipage-sync", "zipage-async"} <= set(pooled):
        ratio = [statistics.median(a) / statistics.median(s) for a, s in zip(results["zipage-async"], results["zipage-sync"])]
        print(f"zipage async / sync decode step: pooled {pooled['zipage-async'] / pooled['zipage-sync']:.3f}x, "
              f"per repeat [{', '.join(f'{x:.3f}' for x in ratio)}]")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "step_seconds": results}, indent=1))
    if args.csv:
        import pandas as pd

        from vtoken.bench.analysis.process import write_csv

        write_csv(pd.DataFrame(rows), Path(args.csv))


if __name__ == "__main__":
    main()
