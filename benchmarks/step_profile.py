"""Per-operator account of the eager decode step: where a step's time goes, stock vLLM vs the plugin.

For each arm and batch size b, b requests of ``--prompt-tokens`` ShareGPT tokens generate
``--output-tokens`` tokens in an in-process engine stepped by hand (``benchmarks/decode_step.py``'s
``Generation``). Pure decode steps (every request past its first token, none finished) are timed
twice: ``--steps`` of them unprofiled (the step's median: what a trial pays), then ``--steps``
under ``torch.profiler`` (CPU activities), which gives the account. The profiler adds its own
cost to every operator, so the account is read as shares of the profiled step, and the unprofiled
median is the step's time.

The account (ms per decode step, profiled; the parts are disjoint and sum to the step):

* ``linear``: self time of vLLM's oneDNN GEMM (``_C::onednn_mm``: QKV, O, gate/up, down of every
  layer and the LM head) and any ``aten::mm``/``addmm``;
* ``attention``: the attention implementation's ``forward`` (vLLM's CPU attention, or the
  plugin's token-view attention with its mass for the policy), all it calls;
* ``fused ops``: self time of vLLM's fused CPU kernels (RMSNorm, SiLU-and-mul, rotary);
* ``plugin tables``: the plugin's per-step bookkeeping after the forward (the token table, the
  policy's scores and victims, compaction plans): ``RequestRecords.after_forward``, which the
  plugin's ``execute_model`` calls;
* ``forward other``: the rest of the model runner's ``execute_model`` (eager PyTorch's other
  operators, dispatch, the Python of 30 decoder layers, input preparation);
* ``sampler``: ``sample_tokens``;
* ``scheduler``: the scheduler's ``schedule`` and ``update_from_output``;
* ``engine other``: the rest of ``LLMEngine.step`` (output processing, detokenisation, IPC-free
  engine core calls).

Arms: ``stock`` (vLLM's CPU_ATTN, B = 32 as it needs), ``full`` (the plugin, no eviction, B = 16),
``vtoken`` (the pipeline's vToken arm: H2O at budget 64, B = 16, every layer scored),
``stock-compiled`` (stock with ``enforce_eager=False``: vLLM's compiled CPU path, for its step
time; its start is reported too).

Usage (one run; report the table it prints, ``--out`` keeps every number as JSON)::

    .venv/bin/python -m benchmarks.step_profile --batch-sizes 1,4,8,16 --out /tmp/step_profile.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.decode_step import Generation, build_prompts

ARMS = {"stock": None, "full": {"arm": "full"},
        "vtoken": {"arm": "vtoken", "policy": "h2o", "budget": 64, "theta_f": 0.25, "watermark": 0.2},
        # vLLM's compiled CPU path (torch.compile, inductor): its step time; its account is the
        # compiled graph's, where the fused kernels carry other names
        "stock-compiled": None}
FUSED = ("rms_norm", "silu_and_mul", "rotary_embedding")
RANGES = {"attention": "vt.attention", "forward": "vt.execute_model", "tables": "vt.tables",
          "sampler": "vt.sample_tokens", "scheduler": "vt.scheduler"}


def _ranged(fn, label: str):
    import torch

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)

    return wrapper


def install_ranges() -> None:
    """Wrap the methods the account names in profiler ranges (classes that define them)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    from vtoken.plugin.attention import VTokenAttentionImpl
    from vtoken.plugin.scheduler import VTokenScheduler
    from vtoken.plugin.request_records import RequestRecords

    targets = [(CPUAttentionBackendImpl, "forward", RANGES["attention"]),
               (VTokenAttentionImpl, "forward", RANGES["attention"]),
               (RequestRecords, "after_forward", RANGES["tables"])]
    for cls in CPUModelRunner.__mro__:
        targets += [(cls, "execute_model", RANGES["forward"]), (cls, "sample_tokens", RANGES["sampler"])]
    for cls in (Scheduler, VTokenScheduler):
        targets += [(cls, "schedule", RANGES["scheduler"]), (cls, "update_from_output", RANGES["scheduler"])]
    for cls, name, label in targets:
        if name in cls.__dict__ and not getattr(cls.__dict__[name], "_vt_ranged", False):
            wrapped = _ranged(cls.__dict__[name], label)
            wrapped._vt_ranged = True
            setattr(cls, name, wrapped)


def outermost_ms(events, label: str) -> float:
    """Total CPU ms of the outermost ``label`` ranges (a nested range of the same label --
    a subclass calling its parent's wrapped method -- counted once)."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == label)
    total, end = 0.0, -1.0
    for s, e in spans:
        if s >= end:
            total += e - s
            end = e
    return total / 1e3


def account(prof, steps: int, wall_ms: float) -> dict[str, float]:
    """The per-step account (ms) of a profiled run of ``steps`` decode steps."""
    events = prof.events()
    self_ms = {}
    for e in prof.key_averages():
        self_ms[e.key] = self_ms.get(e.key, 0.0) + e.self_cpu_time_total / 1e3
    linear = sum(v for k, v in self_ms.items() if "onednn_mm" in k or k in ("aten::mm", "aten::addmm"))
    fused = sum(v for k, v in self_ms.items() if k.startswith("_C::") and any(f in k for f in FUSED))
    ranges = {name: outermost_ms(events, label) for name, label in RANGES.items()}
    out = {"step_profiled": wall_ms, "linear": linear / steps, "attention": ranges["attention"] / steps,
           "fused ops": fused / steps}
    out["plugin tables"] = ranges["tables"] / steps  # inside the plugin runner's execute_model
    out["forward other"] = (ranges["forward"] / steps - out["linear"] - out["attention"] - out["fused ops"]
                            - out["plugin tables"])
    out |= {"sampler": ranges["sampler"] / steps, "scheduler": ranges["scheduler"] / steps}
    out["engine other"] = wall_ms - ranges["forward"] / steps - out["sampler"] - out["scheduler"]
    return out


def decode_steps(gen: Generation, n: int) -> list[float]:
    """Step until ``n`` more pure decode steps were timed; their seconds."""
    start = len(gen.times)
    while len(gen.times) < start + n and not gen.done():
        gen.step()
    return gen.times[start:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--sharegpt", default="data/sharegpt")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="the pipeline's contract-128 prompts are <= 128")
    ap.add_argument("--steps", type=int, default=20, help="decode steps timed, then as many profiled")
    ap.add_argument("--top", type=int, default=0, help="also print the N operators of most self time per step")
    ap.add_argument("--out", help="write every number as JSON here")
    args = ap.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        ap.error(f"--arms={args.arms!r}: unknown {unknown}; valid: {list(ARMS)}")
    batches = [int(b) for b in args.batch_sizes.split(",")]

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import torch
    from vllm import LLM

    from vtoken.bench.harness.arm_engine import release
    from vtoken.engine_args import engine_args, stock_reference

    install_ranges()
    output_tokens = 2 * args.steps + 4  # the timed and the profiled steps, then the last ones
    rows = []
    for arm in arms:
        vt = ARMS[arm]
        start = time.perf_counter()
        llm = LLM(**engine_args(args.model, vtoken=vt, dtype="float32", max_num_seqs=max(batches),
                                max_model_len=args.prompt_tokens + output_tokens + 16,
                                enforce_eager=arm != "stock-compiled",
                                **({"block_size": 16} if vt else stock_reference())))
        print(f"{arm}: engine started in {time.perf_counter() - start:.1f} s", flush=True)
        tokenizer = llm.get_tokenizer()
        for b in batches:
            prompts = build_prompts(tokenizer, Path(args.sharegpt), b, args.prompt_tokens)
            gen = Generation(llm, prompts, output_tokens, tag=f"{arm}-b{b}-")
            plain = decode_steps(gen, args.steps)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                profiled = decode_steps(gen, args.steps)
            while not gen.done():
                gen.step()
            acc = account(prof, len(profiled), 1e3 * sum(profiled) / len(profiled))
            row = {"arm": arm, "batch": b, "threads": torch.get_num_threads(),
                   "step_ms": 1e3 * statistics.median(plain)} | acc
            rows.append(row)
            if args.top:
                ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:args.top]
                print("   top self time per step: " + ", ".join(
                    f"{e.key} {e.self_cpu_time_total / 1e3 / len(profiled):.2f} ms ({e.count // len(profiled)}x)"
                    for e in ops))
            print(f"{arm:6s} b={b:2d} step {row['step_ms']:6.1f} ms | profiled {acc['step_profiled']:6.1f}: "
                  + ", ".join(f"{k} {v:5.1f}" for k, v in acc.items() if k != "step_profiled"), flush=True)
        release(llm)  # shut down without tearing down the process's parallel groups (the next engine's)
        del llm
    keys = [k for k in rows[0] if k not in ("arm", "batch", "threads", "step_ms", "step_profiled")]
    print("\n| arm | batch | step ms | profiled ms | " + " | ".join(keys) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(keys))
    for r in rows:
        shares = " | ".join(f"{r[k]:.1f} ({100 * r[k] / r['step_profiled']:.0f} %)" for k in keys)
        print(f"| {r['arm']} | {r['batch']} | {r['step_ms']:.1f} | {r['step_profiled']:.1f} | {shares} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
