"""A GPU check anyone can run: the plugin's CUDA path against stock vLLM, in one process.

Four in-process engines on the embedded SmolLM2-135M, built one after the other and kept
alive to the end (deleting an in-process engine tears down vLLM's parallel state):

- ``stock``:  stock vLLM with the attention backend the plugin builds on (CUDA:
  ``TRITON_ATTN``; CPU: vLLM's default ``CPU_ATTN``);
- ``full``:   the plugin, no eviction (``{"arm": "full"}``);
- ``naive``:  H2O at ratio 0.5, holes left in place (``{"arm": "naive", ...}``);
- ``vtoken``: the same victims, compacted (``watermark`` 1.0: every step, as
  ``tests/plugin/test_eviction.py``).

Prompts need no data set: consecutive token windows of the repository's README.md and
docs/*.md (4 x ``--prompt-tokens`` for the checks, then ``--timing-requests`` x
``--timing-prompt-tokens`` for the timing). Greedy, EOS ignored, ``--max-tokens`` each. The
windows change when the docs do: compare runs at one commit (the JSON has the commit and a
hash of the prompts).

Checks (exit status 1 if any fails; each with its numbers in the JSON):

- ``full_equals_stock``: the greedy token ids of ``full`` and ``stock`` are identical. CUDA
  (the model's bfloat16): the same Triton kernel over a positional page-size-1 view, expected
  bit-identical. CPU: two different kernels (CPU_ATTN, the token-view kernel) summing in
  different orders, compared in float32: in float16 (``tests/plugin/test_equivalence.py``'s
  dtype, on ShareGPT prompts) a docs window has flipped at token 16 at a one-ulp logit tie
  (stock's top-2 log-prob margin 0.0156 = 2^-6), in bfloat16 another at token 30 (margin 0).
  Where a prompt diverges the JSON gives the reference's top-2 margin there (``tie_margin``),
  a diagnostic only: the check fails on any divergence;
- ``naive_equals_vtoken``: identical token ids (the token view lists live slots in logical
  order, so compaction changes no attention input);
- ``tokens_evicted``: naive's sink evicted > 0 tokens and vtoken's the same number;
- ``vtoken_holds_fewer_blocks``: over the steps in which every request runs (the same number
  for both), the sum and the max of the blocks held are smaller for vtoken than for naive;
- ``vtoken_releases_mid_flight``: vtoken returned blocks to vLLM's pool in a step after which
  every request kept running;
- ``no_preemptions``: no recompute preemption in any plugin engine's sink (checks and timing).

Timing (reported, with targets; ``--strict-timing`` makes a missed target that applies to the
device fail the exit status too): median pure-decode-step time of every engine
(``benchmarks/decode_step.py``'s stepping; the engines step in lockstep, the order
alternating every round, so a drifting machine hits them alike), ``--timing-requests``
requests of ``--timing-prompt-tokens`` tokens. Ratios: ``full / stock`` (target <= 1.05 on
CUDA; on the CPU the two run different kernels and the target does not apply) and
``vtoken / full``. The H2O mass cost: on the CPU, the sink's ``score_ms`` (the time of the
attention calls that also produced mass: an upper bound) as a fraction of the ``full`` step
(target <= 0.5, ``benchmarks/decode_step.py``'s); on CUDA ``score_ms`` times asynchronous
kernel launches only, so the measure reported is ``vtoken / full`` (the whole arm: mass,
policy and compaction, over half the live tokens) and the JSON says so.

Output: one JSON file (``--out``, default ``results/gpu_check.json``), rewritten atomically after
every engine and every timing round, so a run cut short still leaves a whole file: device and
versions, per-engine token summaries (hash per prompt, first divergence), sink summaries,
timings, checks, targets. The sinks stay next to it (``<out stem>-sinks/<engine>.jsonl``).
An engine that fails to start or generate is recorded with its traceback and the run stops
there (a broken in-process engine may break the next ones); the checks it feeds fail.
On CUDA every engine takes ``--gpu-memory-utilization`` 0.15 of the GPU (four share it).

The command, from the repository root (``benchmarks`` is not an installed package), on a GPU
machine after ``pip install -r requirements/gpu.txt && pip install --no-deps -e .`` and
``python -m vtoken.assets model``::

    python -m benchmarks.gpu_check

The CPU dry run (float32, a smaller timing workload by default; 1 min 53 s - 2 min 15 s on the shared
2-core machine)::

    python -m benchmarks.gpu_check --device cpu --out results/gpu_check_cpu.json

Expected on a GPU (the design's claims, not measured): every check passes, full / stock
within 1.05. **Not run on a GPU yet**: only the ``--device cpu`` dry run has run, every check
passing there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = "data/models/smollm2-135m-instruct"
ENGINES = ("stock", "full", "naive", "vtoken")
EVICTION = {"policy": "h2o", "ratio": 0.5, "watermark": 1.0}
NUM_PROMPTS = 4
TARGETS = {
    "full_over_stock": {"max": 1.05, "devices": ["cuda"],
                        "why": "the plugin's full arm costs at most 5 % over stock TRITON_ATTN per decode step"},
    "mass_cost": {"max": 0.5, "devices": ["cpu"],
                  "why": "H2O's scoring at most half a full step (benchmarks/decode_step.py); on CUDA the "
                         "measure is vtoken/full, which has no target"},
}
# Per-device defaults of the flags that size the run (None: the flag's value is required per device).
DEVICE_FLAG_DEFAULTS = {
    "cuda": {"timing_requests": 8, "timing_prompt_tokens": 1024, "timing_output_tokens": 48, "timing_repeats": 3,
             "dtype": None},
    "cpu": {"timing_requests": 8, "timing_prompt_tokens": 256, "timing_output_tokens": 24, "timing_repeats": 2,
            "dtype": "float32"},
}


# ----------------------------------------------------------------------------- pure logic
def token_summary(tokens: list[list[int]]) -> dict[str, Any]:
    """Lengths and a sha256 per prompt of one engine's greedy token ids."""
    return {"lengths": [len(t) for t in tokens],
            "sha256": [hashlib.sha256(json.dumps(t).encode()).hexdigest()[:16] for t in tokens]}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_tokens(name: str, a: list[list[int]] | None, b: list[list[int]] | None, max_tokens: int,
                   top2: list[list[list[float]]] | None = None) -> dict:
    """Check ``name``: both engines produced ``max_tokens`` ids per prompt, identical ones.

    ``top2``: the reference engine's (``b``'s) two best log-probs per prompt and position; where
    a prompt diverges, their difference there is reported (``tie_margin``: a margin of one
    rounding step of the logits means the paths split at a near-tie, not at a wrong read). It
    is a diagnostic only: any divergence fails the check.
    """
    if a is None or b is None:
        return {"name": name, "passed": False, "reason": "an engine did not run"}
    diverge = [first_divergence(x, y) for x, y in zip(a, b)]
    full_length = all(len(t) == max_tokens for t in a + b) and len(a) == len(b)
    out = {"name": name, "passed": full_length and all(d is None for d in diverge),
           "first_divergence": diverge, "identical_prompts": sum(d is None for d in diverge),
           "num_prompts": len(a), "all_max_tokens": full_length}
    if top2 is not None and any(d is not None for d in diverge):
        out["tie_margin"] = [None if d is None or d >= len(top2[i]) or len(top2[i][d]) < 2
                             else top2[i][d][0] - top2[i][d][1] for i, d in enumerate(diverge)]
    return out


def all_running(steps: list[dict], num_requests: int) -> list[dict]:
    """Step records in which every request is scheduled and still running (the test's rule)."""
    return [s for s in steps if s["running"] == num_requests and len(s["requests"]) == num_requests]


def sink_summary(steps: list[dict], num_requests: int, preemptions_before: int = 0) -> dict[str, Any]:
    """What the checks read from one engine's sink slice (``docs/metrics-sink.md`` fields)."""
    running = all_running(steps, num_requests)
    held = [sum(r["blocks_held"] for r in s["requests"]) for s in running]
    return {
        "steps": len(steps),
        "all_running_steps": len(running),
        "blocks_held_sum": sum(held),
        "blocks_held_max": max(held, default=0),
        "released_mid_flight_steps": sum(1 for s in running[:-1] if s["blocks_released"] > 0),
        "blocks_released": sum(s["blocks_released"] for s in steps),
        "evicted": sum(s["evicted"] for s in steps),
        "moves": sum(s["moves"] for s in steps),
        "preemptions": (steps[-1]["preemptions"] - preemptions_before) if steps else 0,
        "score_ms": sum(s["score_ms"] for s in steps),
    }


def eviction_checks(naive: dict | None, vtoken: dict | None) -> list[dict]:
    """The sink checks of naive vs vtoken (``sink_summary`` outputs; None: the engine did not run)."""
    if naive is None or vtoken is None:
        return [{"name": n, "passed": False, "reason": "an engine did not run"}
                for n in ("tokens_evicted", "vtoken_holds_fewer_blocks", "vtoken_releases_mid_flight")]
    keys = ("all_running_steps", "blocks_held_sum", "blocks_held_max")
    return [
        {"name": "tokens_evicted", "naive": naive["evicted"], "vtoken": vtoken["evicted"],
         "passed": naive["evicted"] > 0 and naive["evicted"] == vtoken["evicted"]},
        {"name": "vtoken_holds_fewer_blocks", "naive": {k: naive[k] for k in keys},
         "vtoken": {k: vtoken[k] for k in keys},
         "passed": (naive["all_running_steps"] == vtoken["all_running_steps"] > 0
                    and vtoken["blocks_held_sum"] < naive["blocks_held_sum"]
                    and vtoken["blocks_held_max"] < naive["blocks_held_max"])},
        {"name": "vtoken_releases_mid_flight", "steps": vtoken["released_mid_flight_steps"],
         "passed": vtoken["released_mid_flight_steps"] > 0},
    ]


def preemption_check(preemptions: dict[str, int | None]) -> dict:
    """No plugin engine preempted (engine -> preemptions in its whole sink; None: not read)."""
    return {"name": "no_preemptions", "preemptions": preemptions,
            "passed": bool(preemptions) and all(p == 0 for p in preemptions.values())}


def timing_summary(step_s: dict[str, list[list[float]]], score_ms: dict[str, list[float]], device: str) -> dict:
    """Medians (ms) per engine over every repeat, per-repeat ratios, the mass-cost measure and
    the targets (``TARGETS``; ``met`` is None where a target does not apply to ``device``)."""
    med = {e: 1e3 * statistics.median([t for rep in reps for t in rep]) for e, reps in step_s.items()
           if any(reps)}
    out: dict[str, Any] = {"median_step_ms": med,
                           "decode_steps": {e: sum(len(r) for r in reps) for e, reps in step_s.items()}}

    def ratio(a: str, b: str) -> dict | None:
        if a not in med or b not in med:
            return None
        paired = [statistics.median(x) / statistics.median(y) for x, y in zip(step_s[a], step_s[b]) if x and y]
        return {"pooled": med[a] / med[b], "per_repeat": paired}

    out["full_over_stock"] = ratio("full", "stock")
    out["vtoken_over_full"] = ratio("vtoken", "full")
    out["naive_over_full"] = ratio("naive", "full")
    if device == "cpu" and score_ms.get("vtoken") and "full" in med:
        mass = {"measure": "median sink score_ms of vtoken's decode steps / median full decode step "
                           "(score_ms: the attention calls that also produced mass, an upper bound)",
                "value": statistics.median(score_ms["vtoken"]) / med["full"]}
    elif out["vtoken_over_full"] is not None:
        mass = {"measure": "vtoken / full median decode step (on CUDA score_ms times kernel launches only; "
                           "this is the whole arm: mass, policy, compaction, over half the live tokens)",
                "value": out["vtoken_over_full"]["pooled"]}
    else:
        mass = None
    out["mass_cost"] = mass
    targets = {}
    for name, target in TARGETS.items():
        value = out[name]["pooled"] if name == "full_over_stock" and out[name] else (
            out[name]["value"] if name == "mass_cost" and out[name] else None)
        applies = device in target["devices"]
        targets[name] = {**target, "value": value, "applies": applies,
                         "met": (value is not None and value <= target["max"]) if applies else None}
    out["targets"] = targets
    return out


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would outlive the rename
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------- workload
def doc_windows(tokenizer, num_tokens: list[int]) -> list[list[int]]:
    """Consecutive, non-overlapping token windows of README.md + docs/*.md (sorted), one per
    entry of ``num_tokens``: deterministic prompts that need no data set."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    ids = tokenizer("\n\n".join(f.read_text(encoding="utf-8") for f in files), add_special_tokens=False).input_ids
    if sum(num_tokens) > len(ids):
        raise SystemExit(f"the docs hold {len(ids)} tokens; the prompts need {sum(num_tokens)} "
                         "(lower --prompt-tokens / --timing-requests / --timing-prompt-tokens)")
    out, start = [], 0
    for n in num_tokens:
        out.append(ids[start:start + n])
        start += n
    return out


def engine_settings(name: str, sink: Path) -> dict | None:
    """The ``vtoken=`` settings of engine ``name`` (None: stock vLLM)."""
    return {"stock": None, "full": {"arm": "full", "metrics_path": str(sink)},
            "naive": {"arm": "naive", **EVICTION, "metrics_path": str(sink)},
            "vtoken": {"arm": "vtoken", **EVICTION, "metrics_path": str(sink)}}[name]


def common_overrides(args) -> dict[str, Any]:
    """The settings every engine shares (only the arm differs)."""
    out = {"block_size": 32, "max_model_len": 2048, "max_num_seqs": 8, "seed": 0, "enable_prefix_caching": False}
    if args.dtype:
        out["dtype"] = args.dtype
    if args.device == "cuda":
        out["gpu_memory_utilization"] = args.gpu_memory_utilization
    return out


def greedy(llm, prompts: list[list[int]], max_tokens: int) -> tuple[list[list[int]], list[list[list[float]]]]:
    """Greedy token ids (EOS ignored) and, per position, the two best log-probs (descending)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=2)
    outs = [o.outputs[0] for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)]
    top2 = [[sorted((lp.logprob for lp in pos.values()), reverse=True)[:2] for pos in o.logprobs] for o in outs]
    return [list(o.token_ids) for o in outs], top2


def decode_score_ms(records: list[dict], num_requests: int) -> list[float]:
    """``score_ms`` of the sink's pure decode steps (every request scheduled one token)."""
    return [s["score_ms"] for s in records
            if len(s["requests"]) == num_requests and all(r["scheduled"] == 1 for r in s["requests"])]


def block_metrics_of(header: dict, steps: list[dict], arm: str, prompt_tokens: int) -> dict:
    """``vtoken.bench.analysis.metrics.block_metrics`` (retained blocks, packing, waste) of a sink slice."""
    from vtoken.bench.analysis.metrics import block_metrics
    from vtoken.bench.harness.sink_tables import step_tables
    from vtoken.plugin.request_records import user_request_id

    uids = {user_request_id(r["req_id"]) for s in steps for r in s["requests"]}
    rows, _ = step_tables(steps, header, "check", arm, dict.fromkeys(uids, prompt_tokens), steps[0]["t"])
    row = block_metrics(rows).iloc[0]
    return {k: float(row[k]) for k in ("retained_blocks", "retained_blocks_peak", "packing_efficiency", "waste_f")}


def device_info(device: str) -> dict[str, Any]:
    import torch
    import vllm

    info = {"device": device, "torch": torch.__version__, "vllm": vllm.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "cpu_count": os.cpu_count()}
    if device == "cuda":
        info.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(),
                    gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            pass
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                        check=True).stdout.strip()
        info["dirty"] = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                            capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = None
    return info


# ----------------------------------------------------------------------------- run
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL,
                    help="local HF model folder (built by `python -m vtoken.assets model`)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: vLLM's platform")
    ap.add_argument("--out", type=Path, default=Path("results/gpu_check.json"))
    ap.add_argument("--prompt-tokens", type=int, default=256, help="tokens per check prompt (4 prompts)")
    ap.add_argument("--max-tokens", type=int, default=48, help="greedy tokens per check prompt")
    ap.add_argument("--timing-requests", type=int, help="requests of the timing batch (8)")
    ap.add_argument("--timing-prompt-tokens", type=int, help="tokens per timing prompt (CUDA 1024, CPU 256)")
    ap.add_argument("--timing-output-tokens", type=int, help="tokens per timing request (CUDA 48, CPU 24)")
    ap.add_argument("--timing-repeats", type=int, help="lockstep timing rounds, order alternating (CUDA 3, CPU 2)")
    ap.add_argument("--dtype", help="every engine's dtype (CUDA: the model's own, bfloat16; CPU: float32, "
                                    "see the module doc)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.15,
                    help="per engine on CUDA (four engines share the GPU)")
    ap.add_argument("--strict-timing", action="store_true", help="a missed timing target that applies fails too")
    args = ap.parse_args(argv)
    if args.device is None:
        from vtoken.engine_args import resolve_device

        args.device = resolve_device()
    for key, value in DEVICE_FLAG_DEFAULTS[args.device].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for flag in ("prompt_tokens", "max_tokens", "timing_requests", "timing_prompt_tokens", "timing_output_tokens",
                 "timing_repeats"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')}={getattr(args, flag)}: must be >= 1")
    if args.timing_output_tokens < 3:
        ap.error(f"--timing-output-tokens={args.timing_output_tokens}: needs >= 3 for a pure decode step")
    if args.timing_requests > 8:
        ap.error(f"--timing-requests={args.timing_requests}: at most max_num_seqs=8 (all must decode together)")
    for p, o in (("prompt_tokens", "max_tokens"), ("timing_prompt_tokens", "timing_output_tokens")):
        if getattr(args, p) + getattr(args, o) > 2048:
            ap.error(f"--{p.replace('_', '-')} + --{o.replace('_', '-')} = "
                     f"{getattr(args, p) + getattr(args, o)}: over max_model_len=2048")
    if not 0 < args.gpu_memory_utilization <= 0.24:
        ap.error(f"--gpu-memory-utilization={args.gpu_memory_utilization}: must be in (0, 0.24] "
                 "(four engines share the GPU)")
    return args


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def say(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.t0:4.0f}s] {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"):
        os.environ.setdefault(key, "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engines, side by side
    args = parse_args(argv)
    model = Path(args.model)
    if not (model / "config.json").exists():
        raise SystemExit(f"--model={args.model!r}: no model there (no config.json); build the embedded one with "
                         "`python -m vtoken.assets model` (writes data/models/smollm2-135m-instruct)")
    from vtoken.engine_args import resolve_device

    try:
        resolve_device(args.device)  # the installed vLLM must run on --device
    except ValueError as exc:
        raise SystemExit(f"--device={args.device}: {exc}") from None
    clock = Clock()
    from transformers import AutoTokenizer
    from vllm import LLM

    from benchmarks.decode_step import lockstep_times
    from vtoken.bench.harness.sink_tables import read_lines
    from vtoken.engine_args import STOCK_REFERENCE_BACKEND, engine_args
    from vtoken.plugin import sink

    tokenizer = AutoTokenizer.from_pretrained(model)
    windows = doc_windows(tokenizer, [args.prompt_tokens] * NUM_PROMPTS
                          + [args.timing_prompt_tokens] * args.timing_requests)
    prompts, timing_prompts = windows[:NUM_PROMPTS], windows[NUM_PROMPTS:]
    sink_dir = args.out.parent / f"{args.out.stem}-sinks"
    result: dict[str, Any] = {
        "script": "benchmarks/gpu_check.py",
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "info": device_info(args.device), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "workload": {"prompts": "README.md + docs/*.md token windows", "num_prompts": NUM_PROMPTS,
                     "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens,
                     "prompts_sha256": hashlib.sha256(json.dumps(windows).encode()).hexdigest()[:16],
                     "eviction": EVICTION},
        "engines": {}, "checks": [], "timing": None, "passed": False, "complete": False,
    }
    write_json_atomic(args.out, result)
    clock.say(f"device {args.device}: {result['info'].get('gpu', platform.processor() or 'cpu')}; "
              f"writing {args.out}")

    llms: dict[str, Any] = {}  # every engine stays referenced to the end
    tokens: dict[str, list[list[int]]] = {}
    top2: dict[str, list] = {}
    sinks: dict[str, dict] = {}
    offsets: dict[str, int] = {}
    for name in ENGINES:
        entry: dict[str, Any] = {}
        result["engines"][name] = entry
        path = sink_dir / f"{name}.jsonl"
        vt = engine_settings(name, path)
        overrides = common_overrides(args)
        if vt is None and STOCK_REFERENCE_BACKEND[args.device]:  # None: vLLM's default (CPU_ATTN)
            overrides["attention_backend"] = STOCK_REFERENCE_BACKEND[args.device]
        try:
            kwargs = engine_args(model, vtoken=vt, device=args.device, **overrides)
            entry["engine_args"] = {k: v for k, v in kwargs.items() if k != "model"}
            start = time.monotonic()
            llms[name] = LLM(**kwargs)
            entry["start_s"] = round(time.monotonic() - start, 1)
            start = time.monotonic()
            tokens[name], top2[name] = greedy(llms[name], prompts, args.max_tokens)
            entry["generate_s"] = round(time.monotonic() - start, 1)
            entry["tokens"] = token_summary(tokens[name])
            if vt is not None:
                header, _ = sink.read(path)
                records, offsets[name] = read_lines(path, 0)
                steps = records[1:]
                sinks[name] = sink_summary(steps, NUM_PROMPTS)
                sinks[name]["blocks"] = block_metrics_of(header, steps, name, args.prompt_tokens)
                entry["sink"] = sinks[name]
                entry["sink_path"] = str(path)
        except Exception as exc:  # record it and stop: a failed in-process engine may break the next ones
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()
            clock.say(f"engine {name}: FAILED {entry['error']}")
            break
        extra = (f", sink {sinks[name]['evicted']} evicted, held sum {sinks[name]['blocks_held_sum']}"
                 if name in sinks else "")
        clock.say(f"engine {name}: started in {entry['start_s']}s, {NUM_PROMPTS} x {args.max_tokens} tokens in "
                  f"{entry['generate_s']}s{extra}")
        write_json_atomic(args.out, result)

    checks = [compare_tokens("full_equals_stock", tokens.get("full"), tokens.get("stock"), args.max_tokens,
                             top2.get("stock")),
              compare_tokens("naive_equals_vtoken", tokens.get("vtoken"), tokens.get("naive"), args.max_tokens,
                             top2.get("naive")),
              *eviction_checks(sinks.get("naive"), sinks.get("vtoken"))]
    plugin = [e for e in ENGINES if e != "stock"]
    result["checks"] = checks + [preemption_check({e: sinks[e]["preemptions"] if e in sinks else None
                                                   for e in plugin})]
    write_json_atomic(args.out, result)

    if len(llms) == len(ENGINES):
        step_s: dict[str, list[list[float]]] = {e: [] for e in ENGINES}
        score: dict[str, list[float]] = {e: [] for e in sinks}
        clock.say(f"timing: {args.timing_requests} x {args.timing_prompt_tokens}-token prompts, "
                  f"{args.timing_output_tokens} tokens, warm-up round + {args.timing_repeats} round(s)")
        lockstep_times(llms, list(ENGINES), timing_prompts, 4, "w-")  # warm-up (kernels, allocator)
        for e in sinks:
            _, offsets[e] = read_lines(sink_dir / f"{e}.jsonl", offsets[e])
        for rep in range(args.timing_repeats):
            order = list(ENGINES) if rep % 2 == 0 else list(reversed(ENGINES))
            times = lockstep_times(llms, order, timing_prompts, args.timing_output_tokens, f"t{rep}-")
            for e in ENGINES:
                step_s[e].append(times[e])
            for e in sinks:
                records, offsets[e] = read_lines(sink_dir / f"{e}.jsonl", offsets[e])
                score[e] += decode_score_ms(records, args.timing_requests)
            result["timing"] = timing_summary(step_s, score, args.device)
            result["timing"]["sink_score_ms_median"] = {e: statistics.median(v) for e, v in score.items() if v}
            med = result["timing"]["median_step_ms"]
            clock.say(f"timing round {rep}: " + ", ".join(f"{e} {1e3 * statistics.median(times[e]):.2f} ms"
                                                          for e in ENGINES) + f" (pooled: {med})")
            write_json_atomic(args.out, result)
        # Preemptions over each whole sink (checks and timing).
        whole = {e: sink.read(sink_dir / f"{e}.jsonl")[1] for e in sinks}
        result["checks"][-1] = preemption_check({e: (s[-1]["preemptions"] if s else 0) for e, s in whole.items()})

    passed = len(llms) == len(ENGINES) and all(c["passed"] for c in result["checks"])
    missed = [n for n, t in (result["timing"] or {}).get("targets", {}).items() if t["applies"] and not t["met"]]
    result["timing_targets_missed"] = missed
    result["passed"] = passed and not (args.strict_timing and missed)
    result["complete"] = True
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json_atomic(args.out, result)
    for c in result["checks"]:
        numbers = {k: v for k, v in c.items() if k not in ("name", "passed")}
        clock.say(f"check {c['name']}: {'PASS' if c['passed'] else 'FAIL'} {json.dumps(numbers)}")
    if result["timing"]:
        t = result["timing"]
        clock.say("timing: " + json.dumps({k: t[k] for k in ("median_step_ms", "full_over_stock", "vtoken_over_full",
                                                              "mass_cost")}))
        for n, tg in t["targets"].items():
            clock.say(f"target {n} <= {tg['max']}: value {tg['value']}, "
                      + (f"{'met' if tg['met'] else 'MISSED'}" if tg["applies"] else f"n/a on {args.device}"))
    clock.say(f"{'PASSED' if result['passed'] else 'FAILED'}; results in {args.out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
