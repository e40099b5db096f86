"""Capacity under a capped pool: how many requests run at once per arm (research e6).

``--num-requests`` requests of ``--prompt-tokens`` ShareGPT tokens each, ``--output-tokens``
greedy tokens (EOS ignored), all submitted at once to an engine whose pool is capped at
``--blocks`` blocks (``num_gpu_blocks_override``; one is vLLM's null block) and whose
``max_num_seqs`` is the number of requests. Each arm gets a fresh in-process engine and
writes the plugin's metrics sink, from which the table is computed:

- steps: engine steps until every request finished;
- peak / mean running: requests running per step (mean over steps with any running);
- preemptions: vLLM recompute preemptions; released: blocks returned mid-request;
- peak held: most blocks held by the running requests in one step (side-storage charges
  of Zipage's query cache and DiffKV's low tier included, in the whole blocks the pool
  hands out);
- retained: blocks held per request, time-averaged over its decode steps, mean over
  requests (docs/design.md §6), side storage at its exact (fractional) block-equivalents;
- side: those side-storage block-equivalents per request, and their share of retained
  (Zipage's query cache: 1.5 of ~6.5 blocks at B = 16, budget 64; 0.09 of ~9 at B = 256,
  budget 2,048);
- shrinks: how often a request's row held fewer blocks than at its previous step, the
  later one a decode step (an arm's compaction or eviction once the prompt is in, an
  asynchronous compaction applied while the request sat a step out included);
- live: live tokens per request, time-averaged the same way (equal budgets show here);
- ideal: the packing optimum of the same tokens, time-averaged the same way: ceil(tokens in
  the pool / B) + the side storage (Zipage's query cache, DiffKV's low tier, as in
  retained); retained / ideal is how close an arm packs (1 = optimal, + the tail block);
- step ms: median wall time between consecutive decode-only steps (sink timestamps).

Arms, given what their engine side takes (``vtoken.plugin.adapter``): ``full`` (evicts
nothing) no eviction settings; the policy-driven arms (``naive``, ``holefill``, ``vtoken``)
``--policy`` at ``--ratio``, or at the token budget ``--budget`` when given; the baselines
that are their own policy and take a budget (``paged_eviction``, ``zipage``) ``--budget``, or
else a token budget equal to what the ratio keeps of the prompt,
``ceil((1 - ratio) * prompt_tokens)`` rounded up to whole blocks of ``--block-size``; the one that prunes by its own
thresholds (``diffkv``, and ``diffkv-high``: low tier off) DiffKV's thresholds, or the
``--diffkv-options`` given (e.g. a larger α_low, ``prune_threshold``, to prune as much as the
ratio does).

``--budget T`` (equal live tokens) replaces the ratio: the policy-driven arms run H2O in its
token-budget mode at T, the budgeted baselines get T (``--arm-settings`` overrides an arm's,
e.g. PagedEviction's calibrated nominal budget), ``diffkv`` keeps its released thresholds and
``diffkv-budget`` is DiffKV-style at its calibrated operating point: at most T retained tokens,
its always-high buffer T / 2 (H2O's recent window at the same budget).

Usage (one run takes a few minutes per arm)::

    .venv/bin/python -m benchmarks.capped_pool --arms full,naive,holefill,vtoken

Zipage's own setting (B = 256, budget 2,048 tokens: 8 + 1 blocks) on prompts past its budget::

    .venv/bin/python -m benchmarks.capped_pool --arms naive,zipage --block-size 256 --budget 2048 \
        --num-requests 4 --prompt-tokens 3072 --output-tokens 300 --blocks 80
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.decode_step import build_prompts


def _side(r: dict) -> float:
    """Side storage of a sink request record in block-equivalents (whole charge if older sink)."""
    return r["side_blocks"]


def summarize(steps: list[dict], block_size: int) -> dict:
    running = [s["running"] for s in steps if s["running"]]
    held: dict[str, list[float]] = {}
    side: dict[str, list[float]] = {}
    live: dict[str, list[int]] = {}
    ideal: dict[str, list[int]] = {}
    shrinks = 0
    last_held: dict[str, int] = {}
    for s in steps:
        for r in s["requests"]:
            before = last_held.get(r["req_id"])
            last_held[r["req_id"]] = r["blocks_held"]
            if r["scheduled"] == 1 and r["blocks_held"]:  # a decode step of this request
                held.setdefault(r["req_id"], []).append(r["blocks_held"] + _side(r))
                side.setdefault(r["req_id"], []).append(_side(r))
                shrinks += before is not None and r["blocks_held"] < before
                if r["live_tokens"] is not None:
                    live.setdefault(r["req_id"], []).append(r["live_tokens"])
                    in_pool = r["live_tokens"] - r["low_tokens"]
                    ideal.setdefault(r["req_id"], []).append(-(-in_pool // block_size) + _side(r))
    retained = statistics.fmean(statistics.fmean(v) for v in held.values())
    side_mean = statistics.fmean(statistics.fmean(v) for v in side.values())
    decode = [b["t"] - a["t"] for a, b in zip(steps, steps[1:])
              if b["requests"] and all(r["scheduled"] == 1 for r in b["requests"])]
    return {
        "steps": len(steps),
        "peak_running": max(running),
        "mean_running": statistics.fmean(running),
        "preemptions": steps[-1]["preemptions"],
        "released": sum(s["blocks_released"] for s in steps),
        "peak_held": max(sum(r["blocks_held"] + r["charged_blocks"] for r in s["requests"]) for s in steps),
        "retained": retained,
        "side": side_mean,
        "side_share": side_mean / retained,
        "shrinks": shrinks,
        "live": statistics.fmean(statistics.fmean(v) for v in live.values()) if live else float("nan"),
        "ideal": statistics.fmean(statistics.fmean(v) for v in ideal.values()) if ideal else float("nan"),
        "step_ms": 1e3 * statistics.median(decode) if decode else float("nan"),
        # Compaction: tokens moved per block it freed, and the offline minimum for those blocks.
        "moves_per_block": _ratio(sum(s["moves"] for s in steps), sum(s["freed_by_moves"] for s in steps)),
        "min_moves_per_block": _ratio(sum(s["min_moves"] for s in steps),
                                      sum(s["freed_by_moves"] for s in steps)),
        # Compaction before preemption: rounds, blocks freed, and the round's share of its step.
        "reclaim_rounds": sum(1 for s in steps if s["reclaim"]),
        "reclaimed": sum(s["reclaimed"] for s in steps),
        "reclaim_share": _reclaim_share(steps),
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _reclaim_share(steps: list[dict]) -> float:
    """Median share of a reclaim round's time in its step (round ms / time since the last step)."""
    shares = [b["reclaim_ms"] / 1e3 / (b["t"] - a["t"]) for a, b in zip(steps, steps[1:])
              if b["reclaim"] and b["t"] > a["t"]]
    return statistics.median(shares) if shares else float("nan")


# Arms of this benchmark that run an implemented arm with fixed options.
VARIANTS = {"diffkv-high": ("diffkv", {"low_tier": False}), "diffkv-budget": ("diffkv", {}),
            # Beyond the paper: the pressure-aware theta and compaction before preemption.
            "vtoken-pressure": ("vtoken", {"theta_rule": "pressure", "before_preemption": True}),
            "vtoken-reclaim": ("vtoken", {"before_preemption": True})}  # the paper's theta


def arm_settings(arm: str, args) -> dict:
    """The vtoken settings of one arm at the run's policy and ratio (see the docstring),
    chosen by what the arm's engine side takes (``vtoken.plugin.adapter``)."""
    # Imported here: the baselines' engine sides import vLLM, which main() configures first.
    from vtoken.arms.registry import arm_names
    from vtoken.plugin.adapter import SelfEvicting, adapter_class

    base, options = VARIANTS.get(arm, (arm, {}))
    if base not in arm_names():
        raise SystemExit(f"--arms: unknown arm {arm!r}; valid: {[*arm_names(), *VARIANTS]}")
    side = adapter_class(base)
    if not side.evicts:
        return {"arm": base}
    own = (args.arm_settings or {}).get(arm, {})
    if side.takes_policy:
        share = {"budget": args.budget} if args.budget is not None else {"ratio": args.ratio}
        return {"arm": base, "policy": args.policy, **share, **({"arm_options": options} if options else {}), **own}
    assert issubclass(side, SelfEvicting), f"arm {base!r}: evicts without the policy, so its own: {side}"
    if arm == "diffkv-budget":
        if not args.budget:
            raise SystemExit("--arms diffkv-budget: give --budget (its calibrated operating point)")
        return {"arm": base, "budget": args.budget, "arm_options": {"kv_buffer": args.budget // 2}, **own}
    if side.needs_budget:
        if args.budget is not None:
            return {"arm": base, "budget": args.budget, **own}
        block = args.block_size
        keep = -(-int((1.0 - args.ratio) * args.prompt_tokens) // block) * block
        return {"arm": base, "budget": keep}
    # Prunes by its own thresholds (DiffKV): those, or --diffkv-options.
    options = {**(args.diffkv_options or {}), **options}
    return {"arm": base, **({"arm_options": options} if options else {}), **own}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--sharegpt", default="data/sharegpt")
    ap.add_argument("--arms", default="full,naive,holefill,vtoken")
    ap.add_argument("--policy", default="h2o")
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--arm-settings", type=json.loads, default=None,
                    help='JSON per-arm vtoken settings over the defaults, e.g. \'{"paged_eviction": {"budget": 240}}\'')
    ap.add_argument("--admission", default="vllm", choices=["vllm", "projected"])
    ap.add_argument("--num-requests", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=140)
    ap.add_argument("--block-size", type=int, default=None, help="B (default: the CPU engine's, 32)")
    ap.add_argument("--budget", type=int, default=None,
                    help="token budget of every evicting arm that takes one (instead of --ratio)")
    ap.add_argument("--dtype", default="float32", help="every engine's dtype (default float32, the pipeline's, "
                                                       "computed alike on every CPU; bf16 is emulated without AVX512_BF16)")
    ap.add_argument("--diffkv-options", type=json.loads, default=None,
                    help='JSON arm_options of the diffkv arms, e.g. \'{"prune_threshold": 0.5}\' (α_low)')
    ap.add_argument("--out", help="write the summary as JSON here")
    args = ap.parse_args()
    from vtoken.engine_args import CPU_DEFAULTS

    args.block_size = args.block_size or CPU_DEFAULTS["block_size"]
    # Room for the prompt and the output (SmolLM2's context is 8k).
    max_model_len = max(CPU_DEFAULTS["max_model_len"], args.prompt_tokens + args.output_tokens)

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    from vtoken.engine_args import engine_args
    from vtoken.plugin import sink

    params = SamplingParams(temperature=0.0, max_tokens=args.output_tokens, ignore_eos=True)
    results, prompts, engines = {}, None, []  # engines stay referenced (see tests/plugin/conftest.py)
    tmp = Path(tempfile.mkdtemp(prefix="capped-pool-"))
    for arm in args.arms.split(","):
        cfg = {**arm_settings(arm, args), "admission": args.admission, "metrics_path": str(tmp / f"{arm}.jsonl")}
        llm = LLM(**engine_args(args.model, vtoken=cfg, dtype=args.dtype, num_gpu_blocks_override=args.blocks,
                                max_num_seqs=args.num_requests, block_size=args.block_size,
                                max_model_len=max_model_len))
        engines.append(llm)
        if prompts is None:
            prompts = build_prompts(llm.get_tokenizer(), Path(args.sharegpt), args.num_requests, args.prompt_tokens)
        start = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        wall = time.perf_counter() - start
        lengths = {len(o.outputs[0].token_ids) for o in outs}
        assert lengths == {args.output_tokens}, f"{arm}: output lengths {lengths}"
        results[arm] = {**summarize(sink.read(tmp / f"{arm}.jsonl")[1], args.block_size), "wall_s": wall}
        r = results[arm]
        print(f"{arm:9s} steps {r['steps']:4d}  running peak {r['peak_running']} mean {r['mean_running']:.2f}  "
              f"preemptions {r['preemptions']:3d}  released {r['released']:4d}  peak held {r['peak_held']:4d}  "
              f"retained {r['retained']:5.2f} (side {r['side']:.3f} = {100 * r['side_share']:.1f} %)  "
              f"ideal {r['ideal']:5.2f} ({r['retained'] / r['ideal']:.2f}x)  "
              f"shrinks {r['shrinks']:3d}  live {r['live']:6.1f}  step {r['step_ms']:6.1f} ms  wall {wall:6.1f} s  "
              f"moves/block {r['moves_per_block']:.2f} (min {r['min_moves_per_block']:.2f})  "
              f"reclaim rounds {r['reclaim_rounds']} freed {r['reclaimed']} share {r['reclaim_share']:.3f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
