"""Serving experiment: every arm behind vLLM's OpenAI server, driven by vLLM's own benchmark
client at several Poisson request rates, as paired trials (``python -m vtoken.bench serving``).

A *serving trial* is one arm x rate x pair; its id is ``<setup>/<arm>/r<rate>/p<pair>``.
Pair p sends its own request sample of the manifest (``trial_requests.sample``: the same
rows as the paired trials of the grid, disjoint across pairs, the same for every arm and rate
of the pair) with the same Poisson arrival times in every arm (vLLM's client seeded with the
pair's seed and the rate's position). For each pair the arms run in row p of the Williams
design (``trials.arm_order``), one server at a time: a fresh server per (pair, arm), warmed
up, then every rate of the pair in ascending order; the server must be idle (every block
back, no request queued) after each rate. The optional ``stock`` arm is vLLM without the
plugin (the reference row; vLLM's CPU attention needs B a multiple of 32).

Per trial, written atomically (temporary dot-folder, then rename; a rerun skips the trials
already written, so a killed run resumes): ``client.json`` (vLLM's detailed result),
``steps.jsonl`` (the plugin's metrics-sink lines of the trial's window), ``requests.csv``
(one row per request: the client's TTFT, TPOT, latency joined through its
``X-Request-Id`` with the blocks the server's sink saw it hold) and ``trial.json``
(summary, settings, provenance). ``vtoken.bench.analysis.serving_tables`` turns them into tables.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vtoken.bench.harness import serve_client
from vtoken.bench.harness.arm_settings import engine_overrides
from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.trial_requests import sample
from vtoken.bench.raw import rawio
from vtoken.bench.raw.trials import arm_order, pair_seed, sample_sha256

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
STOCK = "stock"
RESUMABLE = ("pairs", "first_pair")
FILES = ("client.json", "steps.jsonl", "requests.csv", "trial.json")


def trial_id(setup: str, arm: str, rate: float, pair: int) -> str:
    """``<setup>/<arm>/r<rate>/p<pair>`` (the rate as ``%g``)."""
    return f"{setup}/{arm}/r{rate:g}/p{pair}"


class ServingRun:
    """The serving trials of one setup.

    Args:
        cfg: the run (arms, pairs, sample size, budget, pool, engine; ``concurrency``'s
            largest C is the server's ``max_num_seqs``).
        rates: Poisson request rates (requests/s), each > 0.
        stock: add stock vLLM as arm ``stock``.
        setup: the setup's name (default ``serving-<workload>``).

    Raises:
        ValueError: a bad rate, ``stock`` at a block size vLLM's CPU attention refuses, or a
            ``RunConfig`` the serving run cannot take (``one_wave``, ``rate``).
    """

    def __init__(self, cfg: RunConfig, rates: tuple[float, ...], stock: bool = False,
                 setup: str | None = None) -> None:
        if not rates or any(not (isinstance(r, (int, float)) and np.isfinite(r) and r > 0) for r in rates):
            raise ValueError(f"--rates={list(rates)!r}: give one or more finite rates > 0 (requests/s)")
        if len(set(rates)) != len(rates):
            raise ValueError(f"--rates={list(rates)!r}: rates must be distinct")
        if cfg.one_wave or cfg.rate is not None:
            raise ValueError("--one-wave / --rate: not for a serving run (its arrivals are --rates)")
        if cfg.num_requests is None:
            raise ValueError("--num-requests: required (each pair sends its own sample of N manifest rows)")
        if stock and (cfg.device or "cpu") == "cpu" and cfg.block_size % 32:
            raise ValueError(f"--block-size={cfg.block_size}: the stock arm's CPU attention needs a multiple "
                             "of 32; drop --stock or use --block-size 32")
        self.cfg = cfg
        self.rates = tuple(sorted(float(r) for r in rates))
        self.arms = tuple(cfg.arms) + ((STOCK,) if stock else ())
        self.setup = setup or cfg.setup or f"serving-{cfg.workload_name}"
        self.root = Path(cfg.raw_root)
        self.settings = cfg.to_dict() | {"rates": list(self.rates), "stock": stock, "setup": self.setup}
        self.progress = False

    # ------------------------------------------------------------------ plan
    def plan(self) -> list[tuple[int, str, float]]:
        """Every trial as (pair, arm, rate), in run order."""
        return [(p, arm, r) for p in self.cfg.pair_indices for arm in arm_order(self.arms, p, self.cfg.seed)
                for r in self.rates]

    def folder(self, pair: int, arm: str, rate: float) -> Path:
        return self.root / trial_id(self.setup, arm, rate, pair)

    def pending(self) -> list[tuple[int, str, float]]:
        """Trials not written yet; an interrupted write's temporary folder is removed; a
        written trial of other settings is an error naming the setting."""
        todo = []
        for key in self.plan():
            final = self.folder(*key)
            for stale in rawio.stale_temps(final):
                logger.warning("removing %s (an interrupted write)", stale)
                shutil.rmtree(stale)
            if (final / "trial.json").is_file():
                self._check_same_settings(final)
            else:
                todo.append(key)
        return todo

    def _check_same_settings(self, folder: Path) -> None:
        old = json.loads((folder / "trial.json").read_text(encoding="utf-8"))["settings"]
        for key in sorted(set(old) | set(self.settings)):
            if key not in RESUMABLE and old.get(key) != self.settings.get(key):
                raise ValueError(f"{folder}: written with {key}={old.get(key)!r}, this run has "
                                 f"{self.settings.get(key)!r}; delete {self.root / self.setup} to run the setup anew")

    # ------------------------------------------------------------------- run
    def run(self, done: Path | None = None, progress: bool = True) -> list[Path]:
        """Run every pending trial (one server per pair and arm; one INFO line per server and per
        trial, and with ``progress`` the client's progress bar); returns every trial folder."""
        self.progress = progress
        from vtoken.bench.harness.serving_requests import load_prompts

        todo = self.pending()
        logger.info("serving setup %s: %d trials planned, %d to run", self.setup, len(self.plan()), len(todo))
        if todo:
            prompts, spec = load_prompts(self.cfg)
            self.provenance = rawio.collect_provenance(self.settings, REPO, Path(self.cfg.model_dir), spec)
            self.spec = spec
        groups: dict[tuple[int, str], list[float]] = {}
        for pair, arm, rate in todo:
            groups.setdefault((pair, arm), []).append(rate)
        for i, ((pair, arm), rates) in enumerate(groups.items()):
            logger.info("[%d/%d] pair %d, arm %s: rates %s", i + 1, len(groups), pair, arm, rates)
            self._run_server(pair, arm, rates, prompts)
        folders = [self.folder(*key) for key in self.plan()]
        if done is not None:
            rawio.write_done(done, self.root, self.setup, [trial_id(self.setup, a, r, p) for p, a, r in self.plan()])
        return folders

    def _run_server(self, pair: int, arm: str, rates: list[float], prompts: dict[int, tuple[str, int]]) -> None:
        from vtoken.bench.harness.server import Server
        from vtoken.engine_args import stock_reference

        rows = sample(self.cfg, pair)
        work = self.root / ".work" / f"{self.setup}.{arm}.p{pair}.{os.getpid()}"
        work.mkdir(parents=True, exist_ok=True)
        sink_path = work / "sink.jsonl"
        sample_path = serve_client.write_sample(work / "sample.jsonl", [prompts[r][0] for r in rows],
                                                [prompts[r][1] for r in rows])
        overrides = engine_overrides(self.cfg) | {"seed": pair_seed(self.cfg.seed, pair)}
        if arm == STOCK:
            vt, overrides = None, overrides | stock_reference(self.cfg.device)
        else:
            vt = replace(self.cfg.arm_configs[arm], metrics_path=str(sink_path))
        with Server(self.cfg.model_dir, vtoken=vt, device=self.cfg.device, log_path=work / "server.log",
                    **overrides) as server:
            self._warm_up(server)
            for rate in rates:
                self._run_trial(server, pair, arm, rate, rows, sample_path, sink_path if vt else None)
        shutil.rmtree(work, ignore_errors=True)

    def _warm_up(self, server) -> None:
        for i in range(self.cfg.warmup):
            status, reply = server.post("/v1/completions", {"model": server.model_name, "prompt": "Hello",
                                                            "max_tokens": 8, "temperature": 0.0})
            if status != 200:
                raise RuntimeError(f"warm-up request {i}: HTTP {status} {reply}")
        server.wait_idle()

    def _run_trial(self, server, pair: int, arm: str, rate: float, rows: tuple[int, ...], sample_path: Path,
                   sink_path: Path | None) -> Path:
        from vtoken.bench.harness.serving_requests import join, summarize

        prefix = f"r{self.rates.index(rate)}q"
        seed = pair_seed(self.cfg.seed, pair) + self.rates.index(rate)
        t0 = time.time()
        result = serve_client.run(serve_client.client_args(
            server.url, self.cfg.model_dir, server.model_name, sample_path, len(rows), rate, seed, prefix,
            progress=self.progress))
        idle = server.wait_idle(timeout=120)
        if idle.get("vllm:kv_cache_usage_perc", 0) or idle.get("vllm:num_requests_running", 0):
            raise RuntimeError(f"{trial_id(self.setup, arm, rate, pair)}: server not idle after the trial: {idle}")
        steps = _sink_window(sink_path, t0, time.time()) if sink_path else []
        requests = join(result, steps, rows, prefix)
        trial = {"trial_id": trial_id(self.setup, arm, rate, pair), "setup": self.setup, "arm": arm,
                 "rate": rate, "pair": pair, "seed": seed, "req_index": list(rows),
                 "sample_sha256": sample_sha256(self.spec["manifest_sha256"], rows),
                 **summarize(result, requests, steps)}
        folder = self._write(pair, arm, rate, result, steps, requests, trial)
        logger.info("%s: %d/%d ok, %.1f output tok/s, TTFT p50 %.0f ms, TPOT p50 %.1f ms", trial["trial_id"],
                    trial["completed"], len(rows), trial["output_throughput"], 1e3 * trial["ttft_p50_s"],
                    1e3 * trial["tpot_p50_s"])
        return folder

    def _write(self, pair, arm, rate, result, steps, requests: pd.DataFrame, trial: dict[str, Any]) -> Path:
        final = self.folder(pair, arm, rate)
        tmp = final.with_name(f"{rawio.TEMP_PREFIX}{final.name}{rawio.TEMP_INFIX}{os.getpid()}")
        tmp.mkdir(parents=True)
        try:
            (tmp / "client.json").write_text(json.dumps(result) + "\n", encoding="utf-8")
            (tmp / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps), encoding="utf-8")
            requests.to_csv(tmp / "requests.csv", index=False)
            body = trial | {"settings": self.settings, "provenance": self.provenance}
            (tmp / "trial.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final


def _sink_window(path: Path, t0: float, t1: float) -> list[dict]:
    from vtoken.plugin import sink

    _, steps = sink.read(path)
    return [s for s in steps if t0 <= s["t"] <= t1]
