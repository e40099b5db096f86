"""Table lm-eval: per arm and budget, lm-eval's ROUGE-L (continuation: against the data set's
reply; fidelity: against the full arm's output) with its standard error and n, the retained KV
blocks per request while the tasks ran (mean over requests with its 95 % interval, from the
run's sink: vtoken.bench.lmeval.memory) and the tokens the arm evicted
(data/processed/<run>/lmeval/*/results.json and sink.jsonl beside it)."""

import json
import logging
from pathlib import Path

import figstyle as fs
import pandas as pd
import tablefmt
from vtoken.bench.lmeval.memory import run_memory

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
raw_rows, shown_rows = [], []
for path in smk.input.results:
    body = json.loads(Path(path).read_text())
    vt = body["vtoken"] or {}
    # The run's budget is its folder's (<arm>-b<budget>); an arm may run a calibrated nominal one.
    arm, _, folder_budget = Path(path).parent.name.partition("-b")
    budget, nominal = (int(folder_budget) if folder_budget else None), vt.get("budget")
    mem = run_memory(Path(path).with_name("sink.jsonl"))
    raw = {"arm": arm, "budget": budget, "nominal_budget": nominal, "evicted_tokens": body["evicted_tokens"], **mem}
    shown = {"arm": fs.label(arm), "budget": "—" if budget is None else (
        str(budget) if nominal in (None, budget) else f"{budget} (nominal {nominal})"),
        "retained blocks / request [95 % CI]": f"{mem['retained_blocks']:.2f} [{mem['retained_blocks_ci_low']:.2f}, "
                                               f"{mem['retained_blocks_ci_high']:.2f}] (n = {mem['requests']})",
        "pool: fewest free / usable blocks": f"{mem['min_free_blocks']} / {mem['usable_blocks']}",
        "tokens moved": str(mem["moved_tokens"])}
    for task, name in (("sharegpt_continuation", "continuation"), ("sharegpt_fidelity", "fidelity")):
        r = body["tasks"].get(task)
        raw |= {f"{name}_rougeL": r["score"] if r else None, f"{name}_stderr": r["stderr"] if r else None,
                f"{name}_n": r["n"] if r else None}
        shown[f"ROUGE-L {name} (± s.e.)"] = f"{r['score']:.3f} ± {r['stderr']:.3f} (n = {r['n']})" if r else "—"
    shown["tokens evicted"] = str(body["evicted_tokens"])
    raw_rows.append(raw)
    shown_rows.append(shown)
order = {a: i for i, a in enumerate(smk.params.arms)}
keys = sorted(range(len(raw_rows)), key=lambda i: (order.get(raw_rows[i]["arm"], 99), raw_rows[i]["budget"] or 0))
raw_df = pd.DataFrame([raw_rows[i] for i in keys])
shown_df = pd.DataFrame([shown_rows[i] for i in keys])
tablefmt.write(raw_df, shown_df, {"csv": smk.output.csv, "md": smk.output.md, "tex": smk.output.tex},
               caption="Quality per arm and budget through lm-eval (ROUGE-L F1, lm-eval's standard error). "
                       "Retained blocks per request while lm-eval ran; vToken compacts only when the pool presses "
                       "(free < watermark x usable): where the fewest free blocks stay above that, its blocks equal "
                       "Naive-Evict's and this run does not test its memory claim (the trials and the serving "
                       "experiment do).",
               label="tab:lmeval")
logging.info("table_lmeval: %d runs", len(raw_df))
