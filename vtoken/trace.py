"""Eviction traces: the JSONL format (docs/trace-format.md) and a seeded synthetic generator.

A trace is what an engine run leaves behind with the KV bytes taken out: per step, per
request, how many tokens were appended, which logical positions the policy evicted, and
optionally one importance score per appended token (for the self-evicting baselines).
Within a step, a request's appends happen before its evictions; arms plan after every
request of the step; a `finish` releases the request after the step's metrics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vtoken.policies import get_policy

FORMAT, VERSION = "vtoken-trace", 1
PROCESSES = {"random": "random", "streaming": "streamingllm", "heavy_hitter": "h2o"}
_NO_POS = np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Event:
    """One request's activity in one step.

    Args:
        req_id: request id.
        append: tokens appended (>= 0).
        evict: logical positions evicted after the appends (unique, live).
        scores: one importance per appended token, or None.
        finish: the request ends after this step.
    """

    req_id: str
    append: int = 0
    evict: np.ndarray = field(default_factory=lambda: _NO_POS)
    scores: np.ndarray | None = None
    finish: bool = False

    def __post_init__(self) -> None:
        if self.append < 0:
            raise ValueError(f"{self.req_id}: append={self.append}: must be >= 0")
        if self.scores is not None and len(self.scores) != self.append:
            raise ValueError(f"{self.req_id}: {len(self.scores)} scores for append="
                             f"{self.append}: must be equal")


@dataclass
class Trace:
    """Steps of events plus free-form provenance (`meta`)."""

    steps: list[list[Event]] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def num_token_events(self) -> int:
        """Appended plus evicted tokens over the whole trace."""
        return sum(e.append + e.evict.size for s in self.steps for e in s)


def write_jsonl(trace: Trace, path: str | Path) -> None:
    """Write a trace as JSONL: a header line, then one line per event."""
    with open(path, "w") as fh:
        fh.write(json.dumps({"format": FORMAT, "version": VERSION, "meta": trace.meta}) + "\n")
        for step, events in enumerate(trace.steps):
            for e in events:
                rec = {"step": step, "req": e.req_id, "append": e.append}
                if e.evict.size:
                    rec["evict"] = e.evict.tolist()
                if e.scores is not None:
                    rec["scores"] = [round(float(x), 6) for x in e.scores]
                if e.finish:
                    rec["finish"] = True
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")


def read_jsonl(path: str | Path) -> Trace:
    """Read a JSONL trace; ValueError names the line and the problem."""
    with open(path) as fh:
        header = json.loads(fh.readline())
        if header.get("format") != FORMAT or header.get("version") != VERSION:
            raise ValueError(f"{path}: header {header!r}: expected format {FORMAT!r} "
                             f"version {VERSION}")
        trace = Trace(meta=header.get("meta", {}))
        for lineno, line in enumerate(fh, start=2):
            rec = json.loads(line)
            step = rec["step"]
            if step < len(trace.steps) - 1:
                raise ValueError(f"{path}:{lineno}: step={step} goes backwards")
            while len(trace.steps) <= step:
                trace.steps.append([])
            scores = rec.get("scores")
            trace.steps[step].append(Event(
                req_id=str(rec["req"]), append=int(rec.get("append", 0)),
                evict=np.asarray(rec.get("evict", ()), dtype=np.int64),
                scores=None if scores is None else np.asarray(scores, dtype=np.float64),
                finish=bool(rec.get("finish", False))))
    return trace


def _step_scores(process: str, rng, latent: np.ndarray, live: np.ndarray) -> np.ndarray:
    """Attention-like mass (sums to 1) over live tokens for one decode step."""
    if process == "random":
        raw = rng.random(live.size)
    elif process == "streaming":  # sinks and recency dominate
        raw = 1.0 / (1.0 + (live[-1] - live)) + 5.0 * (live < 4)
    else:  # heavy_hitter: persistent heavy-tailed importance with per-step noise
        raw = latent[live] * rng.gamma(4.0, 0.25, live.size)
    return raw / raw.sum()


def synthesize(num_requests: int = 8, prompt_len: int = 128, decode_len: int = 128,
               process: str = "heavy_hitter", ratio: float = 0.5,
               fire_every: int = 1, arrival_every: int = 0, seed: int = 0,
               policy: str | None = None, decode_chunk: int = 1, **policy_kwargs) -> Trace:
    """Generate a policy-driven trace: prompt as one chunk, then `decode_chunk` per step.

    Args:
        num_requests: requests; request i arrives at step i * arrival_every.
        prompt_len: tokens of each prompt (>= 1).
        decode_len: decode steps per request.
        process: score process, one of PROCESSES ("random", "streaming", "heavy_hitter").
        ratio: the policy's eviction ratio r.
        fire_every: the policy fires every k steps.
        seed: seeds scores, latent importances and the random policy.
        policy: policy name; default the process's own (random/streamingllm/h2o).
        decode_chunk: tokens appended per decode step (1 = token-by-token decode).
        policy_kwargs: further policy config fields.

    Returns:
        The trace; per appended token its latent importance is recorded as its score.
    """
    if process not in PROCESSES:
        raise ValueError(f"process={process!r}: must be one of {sorted(PROCESSES)}")
    if prompt_len < 1 or decode_len < 0 or num_requests < 1 or arrival_every < 0 \
            or decode_chunk < 1:
        raise ValueError("prompt_len >= 1, decode_len >= 0, num_requests >= 1, "
                         "arrival_every >= 0, decode_chunk >= 1 required")
    rng = np.random.default_rng(seed)
    pol = get_policy(policy or PROCESSES[process], ratio=ratio,
                     fire_every=fire_every, seed=seed, **policy_kwargs)
    total = prompt_len + decode_len * decode_chunk
    reqs = []
    for i in range(num_requests):
        latent = rng.lognormal(0.0, 1.5, total)
        reqs.append((f"r{i}", i * arrival_every, latent, np.zeros(total, dtype=bool),
                     pol.new_request(f"r{i}")))
    last = (num_requests - 1) * arrival_every + decode_len
    trace = Trace(meta={"generator": "vtoken.trace.synthesize", "seed": seed,
                        "process": process, "policy": pol.name, "ratio": ratio,
                        "fire_every": fire_every, "prompt_len": prompt_len,
                        "decode_len": decode_len, "num_requests": num_requests,
                        "arrival_every": arrival_every, "decode_chunk": decode_chunk})
    for step in range(last + 1):
        events = []
        for req_id, start, latent, live, pstate in reqs:
            k = step - start
            if k < 0 or k > decode_len:
                continue
            lo, n = ((0, prompt_len) if k == 0
                     else (prompt_len + (k - 1) * decode_chunk, decode_chunk))
            live[lo:lo + n] = True
            live_pos = np.flatnonzero(live[: lo + n])
            scores = _step_scores(process, rng, latent, live_pos)
            victims = pol.observe(pstate, lo + n, live_pos, scores)
            live[victims] = False
            events.append(Event(req_id, n, victims, latent[lo:lo + n].copy(),
                                finish=k == decode_len))
        trace.steps.append(events)
    return trace


def main(argv: list[str] | None = None) -> int:
    """`python -m vtoken.trace OUT.jsonl [options]`: write a synthetic trace."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vtoken.trace", description=main.__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--num-requests", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--decode-len", type=int, default=128)
    ap.add_argument("--decode-chunk", type=int, default=1)
    ap.add_argument("--process", choices=sorted(PROCESSES), default="heavy_hitter")
    ap.add_argument("--policy", help="default: the process's own policy")
    ap.add_argument("--ratio", type=float, default=0.5, help="eviction ratio r")
    ap.add_argument("--fire-every", type=int, default=1)
    ap.add_argument("--arrival-every", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    write_jsonl(synthesize(a.num_requests, a.prompt_len, a.decode_len, a.process,
                           a.ratio, a.fire_every, a.arrival_every, a.seed, a.policy,
                           a.decode_chunk), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
