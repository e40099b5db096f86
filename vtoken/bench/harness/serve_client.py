"""vLLM's own benchmark client (``vllm.benchmarks.serve``) on a project request sample.

``vllm bench serve`` does not start on the CPU wheel (docs/design.md §2), so this drives the same
code through its module: ``add_cli_args`` builds vLLM's parser, ``main`` runs the benchmark
and returns its result (with ``--save-detailed``: per-request ``input_lens``,
``output_lens``, ``ttfts``, ``itls``, ``latencies``, ``start_times``, ``errors``, in
request order). The sample is a custom-dataset JSONL (``{"prompt", "output_tokens"}``
per line, prompts already rendered with the chat template), sent in file order
(``--disable-shuffle``, ``--skip-chat-template``) with its own output lengths
(``--custom-output-len -1``) and ``--ignore-eos``, greedy. Request ``i`` carries the header
``X-Request-Id: <prefix><i>``; the server's completion id is ``cmpl-<prefix><i>-0`` and the
engine adds ``-<8 hex>`` (:func:`request_index`).

Command line (the same client, any server)::

    python -m vtoken.bench.harness.serve_client --base-url http://127.0.0.1:8000 --model data/models/smollm2-135m-instruct \
        --served-model-name smollm2 --dataset-name custom --dataset-path sample.jsonl --custom-output-len -1 \
        --disable-shuffle --skip-chat-template --ignore-eos --request-rate 2 --num-prompts 16 --save-detailed
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

REQUEST_PREFIX = "q"


def write_sample(path: Path, prompts: list[str], output_tokens: list[int]) -> Path:
    """The custom-dataset JSONL of one request sample (one line per request, in order)."""
    if len(prompts) != len(output_tokens):
        raise ValueError(f"{len(prompts)} prompts but {len(output_tokens)} output lengths")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for prompt, n in zip(prompts, output_tokens):
            f.write(json.dumps({"prompt": prompt, "output_tokens": int(n)}) + "\n")
    return path


def client_args(base_url: str, model: str | Path, served_model_name: str, sample: Path, num_prompts: int,
                rate: float, seed: int, request_prefix: str = REQUEST_PREFIX, progress: bool = False,
                extra: list[str] = ()) -> list[str]:
    """vLLM benchmark arguments for ``sample`` at Poisson ``rate`` requests/s (seeded arrivals);
    ``progress``: the client's progress bar."""
    if not (rate > 0):
        raise ValueError(f"rate={rate!r}: must be > 0 requests/s")
    return ["--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", str(model), "--tokenizer", str(model), "--served-model-name", served_model_name,
            "--dataset-name", "custom", "--dataset-path", str(sample), "--custom-output-len", "-1",
            "--disable-shuffle", "--skip-chat-template", "--no-oversample", "--num-prompts", str(num_prompts),
            "--ignore-eos", "--temperature", "0", "--request-rate", str(rate), "--seed", str(seed),
            "--request-id-prefix", request_prefix, "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,95", "--save-detailed", *([] if progress else ["--disable-tqdm"]), *extra]


def run(argv: list[str]) -> dict[str, Any]:
    """Run vLLM's benchmark client with ``argv``; returns its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="python -m vtoken.bench.harness.serve_client")
    add_cli_args(parser)
    args = parser.parse_args(argv)
    return main(args)


def request_index(req_id: str, prefix: str = REQUEST_PREFIX) -> int | None:
    """The sample position of a server-side request id (``cmpl-<prefix><i>-0-<8 hex>``), or None
    for a request the client did not send (a warm-up)."""
    m = re.fullmatch(rf"cmpl-{re.escape(prefix)}(\d+)-0(?:-[0-9a-f]{{8}})?", req_id)
    return int(m.group(1)) if m else None


if __name__ == "__main__":
    result = run(sys.argv[1:])
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}, indent=2))
