"""Snakemake script: greedy generation for a few ShareGPT prompts on the real engine.

Runs vLLM in its default multiprocess mode (engine core in a spawned process), which is
why the work sits under a ``__main__`` guard. Output is JSONL, written atomically.
"""

import json
import logging
import os
import sys
from pathlib import Path


def main(smk) -> None:
    from vllm import LLM, SamplingParams

    from vtoken.assets import sharegpt
    from vtoken.engine_args import engine_args

    ds = sharegpt.load(Path(smk.params.sharegpt_dir))
    convs = ds.select(range(smk.params.num_prompts))
    prompts = [c["conversations"][0]["value"][:600] for c in convs]
    llm = LLM(**engine_args(smk.params.model_dir, dtype=smk.params.dtype))  # the trials' dtype, not the CPU's
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=smk.params.max_tokens))
    out = Path(smk.output.generations)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        for conv, o in zip(convs, outputs):
            row = {"id": conv["id"], "text": o.outputs[0].text, "token_ids": list(o.outputs[0].token_ids)}
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, out)
    logging.info("wrote %d generations to %s", len(outputs), out)


if __name__ == "__main__":
    sys.stderr = sys.stdout = open(snakemake.log[0], "w")  # noqa: F821 (injected by Snakemake)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"):
        os.environ.setdefault(key, "1")
    main(snakemake)  # noqa: F821
