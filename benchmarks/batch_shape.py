"""Where batch shape enters: one request alone and in two different batches,
compared bit for bit per layer and per operation, and the policy's scores beside.

The engine runs in this process (float32, the pipeline's dtype) with forward hooks on every
module of the model: the embedding, each decoder layer's norms, QKV projection, rotary
embedding, attention (the plugin's attention through the token table), output projection,
MLP, the final norm and the logits. Request A (``--len-a`` prompt tokens) is generated
alone, then batched with B and C (other lengths, so each request's rows are found by their
positions), then, with ``--chunk``, with B ahead of it in a step budget that splits A's
prompt. For every step and operation the script prints whether A's rows are bit-identical to
its rows alone, the largest absolute difference, and the first operation (in forward order)
that differs; then A's H2O attention mass per step (the scores its eviction ranks) and its
kept positions after the prompt. Read the first differing operation as the place batch shape
enters; everything downstream inherits it.

Usage::

    HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 .venv/bin/python benchmarks/batch_shape.py
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict

import numpy as np

TRACE: list[tuple[str, object]] = []  # (module name or "@positions", tensor), in call order
MASS: dict[str, list[np.ndarray]] = defaultdict(list)  # request -> its mass row per step
KEPT: dict[str, list[int]] = {}  # request -> live positions right after its prompt


def hook_model(model) -> None:
    """Record every module's output (and the step's positions) into TRACE."""
    import torch

    def pre(_, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        pos = kwargs.get("positions", args[1] if len(args) > 1 else None)
        TRACE.append(("@positions", torch.stack([pos.detach().clone(), ids.detach().clone()])))

    model.register_forward_pre_hook(pre, with_kwargs=True)
    for name, mod in model.named_modules():
        if not name:
            continue

        def post(_, __, out, name=name):
            t = out[0] if isinstance(out, tuple) else out
            if isinstance(t, torch.Tensor):
                TRACE.append((name, t.detach().clone()))

        mod.register_forward_hook(post)


def patch_tables() -> None:
    """Record each request's attention-mass row per step and its kept set after the prompt."""
    from vtoken.plugin.request_records import RequestRecords, user_request_id

    original = RequestRecords.after_forward

    def after_forward(self, step, pool, copy):
        for i, r in enumerate(step.req_ids):
            if step.mass is not None and r in self.requests:
                live = self.requests[r].state.table.tokens.live_positions().size
                MASS[user_request_id(r)].append(np.array(step.mass[i, :live]))
        report = original(self, step, pool, copy)
        for i, r in enumerate(step.req_ids):
            u = user_request_id(r)
            if u not in KEPT and r in self.requests and step.num_computed[i] >= self.requests[r].prompt_len:
                KEPT[u] = self.requests[r].state.table.tokens.live_positions().tolist()
        return report

    RequestRecords.after_forward = after_forward


def steps(trace) -> list[tuple[np.ndarray, list]]:
    """The trace split per forward: ([2, rows] positions and tokens, [(module, output)] in call order;
    a module shared by the layers -- the rotary embedding -- appears once per call)."""
    out = []
    for name, t in trace:
        if name == "@positions":
            out.append((t.cpu().numpy(), []))
        elif out:
            out[-1][1].append((name, t))
    return out


def rows_of(step: np.ndarray, alone: np.ndarray) -> np.ndarray:
    """Row indices of the rows whose (position, token) pairs are ``alone``'s (both ``[2, rows]``)."""
    count, start = alone.shape[1], int(alone[0, 0])
    for h in np.flatnonzero(step[0] == start):
        if h + count <= step.shape[1] and np.array_equal(step[:, h : h + count], alone):
            return np.arange(h, h + count)
    raise LookupError(f"no rows at positions {start}..{start + count - 1}")


def compare(alone, batched, label: str) -> None:
    """Per step and module: A's rows alone vs batched (first difference in forward order)."""
    print(f"\n== A alone vs {label} ==")
    for s, (pa, ma) in enumerate(alone):
        count = pa.shape[1]  # alone, the step is A's rows only
        start = int(pa[0, 0])
        try:
            pb, mb, rb = _find(batched, pa)
        except LookupError:
            print(f"step {s}: A's rows (positions {start}..{start + count - 1}) not in the batched step "
                  f"(its prompt was split differently)")
            continue
        first, worst = None, 0.0
        diffs = []
        for (name, ta), (name_b, tb) in zip(ma, mb):
            if name != name_b:
                raise RuntimeError(f"step {s}: the module sequence differs ({name} vs {name_b})")
            if ta.shape[0] == count and tb.shape[0] == pb.shape[1]:
                a, b = ta, tb[rb]
            elif name.endswith("logits_processor") and ta.shape[0] == 1:
                a, b = ta, tb[[_logit_row(pb[0], rb)]]
            else:
                continue
            d = (a.float() - b.float()).abs().max().item()
            same = bool(torch_equal(a, b))
            diffs.append((name, same, d))
            if not same and first is None:
                first = name
            worst = max(worst, d)
        kind = "prompt" if count > 1 else "decode"
        print(f"step {s} ({kind}, {count} rows of A among {pb.shape[1]}): "
              f"{sum(1 for _, same, _ in diffs if same)}/{len(diffs)} outputs bit-identical; "
              f"first differing: {first or '-'}; largest |diff| {worst:.3g}")
        if first is not None:
            k = next(j for j, (_, same, _) in enumerate(diffs) if not same)
            for name, same, d in diffs[max(0, k - 3) : k + 3]:
                print(f"    {name}: {'identical' if same else f'max |diff| {d:.3g}'}")


def _find(batched, pa: np.ndarray):
    """The batched step holding A's rows ``pa``, its modules and the rows."""
    for pb, mb in batched:
        try:
            return pb, mb, rows_of(pb, pa)
        except LookupError:
            continue
    raise LookupError("not found")


def _logit_row(positions: np.ndarray, rows: np.ndarray) -> int:
    """The logits row of the request whose last row is rows[-1] (one row per request, in batch order):
    requests end where the next position does not continue the previous one."""
    ends = [i for i in range(positions.size) if i + 1 == positions.size or positions[i + 1] != positions[i] + 1]
    return ends.index(int(rows[-1]))


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def run(llm, prompts, max_tokens: int) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--len-a", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--budget", type=int, default=96)
    ap.add_argument("--policy", default="h2o")
    ap.add_argument("--chunk", type=int, default=256, help="the split run's step budget (tokens)")
    ap.add_argument("--no-batch-invariant", action="store_true",
                    help="vtoken.batch_invariant off: vLLM's GEMM as it is, batch-variant")
    ap.add_argument("--custom-ops", default=None,
                    help="vLLM's compilation_config.custom_ops, comma-separated (e.g. 'all,-rotary_embedding')")
    args = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, TokensPrompt

    from vtoken.engine_args import engine_args

    rng = np.random.default_rng(0)
    ids = lambda n: TokensPrompt(prompt_token_ids=rng.integers(100, 40000, n).tolist())  # noqa: E731
    a, b, c = ids(args.len_a), ids(args.len_a + 37), ids(args.len_a // 2 + 11)
    patch_tables()
    vt = {"arm": "naive", "policy": args.policy, "budget": args.budget,
          "batch_invariant": not args.no_batch_invariant}
    ops = {} if args.custom_ops is None else {"compilation_config": {"custom_ops": args.custom_ops.split(",")}}
    results = {}
    for label, prompts, extra in (("alone", [a], {}), ("batched with B", [b, a], {}),
                                  ("batched with B and C", [b, a, c], {}),
                                  (f"B ahead in a {args.chunk}-token step budget (A's prompt split)", [b, a],
                                   {"max_num_batched_tokens": args.chunk, "enable_chunked_prefill": True})):
        llm = LLM(**engine_args(args.model, vtoken=vt, dtype="float32", max_model_len=2048, block_size=16,
                                kv_cache_memory_bytes=256 << 20, **ops, **extra))
        llm.apply_model(hook_model)
        TRACE.clear()
        MASS.clear()
        KEPT.clear()
        outs = run(llm, prompts, args.max_tokens)
        a_req = str([a, b, c].index(a) if label == "alone" else 1)
        results[label] = (steps(TRACE), outs[0 if label == "alone" else 1], {k: list(v) for k, v in MASS.items()},
                          dict(KEPT), a_req)
        del llm
    alone = results["alone"]
    for label, (trace, out, mass, kept, req) in list(results.items())[1:]:
        compare(alone[0], trace, label)
        ma, mb = alone[2].get(alone[4], []), mass.get(req, [])
        same_kept = alone[3].get(alone[4]) == kept.get(req)
        print(f"A's output tokens: alone {alone[1]}, here {out} -> {'identical' if alone[1] == out else 'DIFFERENT'}")
        print(f"A's kept positions after its prompt: {'identical' if same_kept else 'DIFFERENT'}")
        ma, mb = ma[-min(len(ma), len(mb)):], mb[-min(len(ma), len(mb)):]  # a split prompt adds a step: align the ends
        for s, (x, y) in enumerate(zip(ma, mb)):
            n = min(x.size, y.size)
            print(f"  mass step {s}: bit-identical {np.array_equal(x[:n], y[:n])}, "
                  f"max |diff| {np.abs(x[:n] - y[:n]).max() if n else 0:.3g}")


if __name__ == "__main__":
    main()
