"""Teacher-forced quality per factorial cell: per scorer x phase x mechanism x budget, retained blocks
and live tokens per request and what eviction costs against Native on the same text -- KL per token,
the NLL increase per token, top-1 agreement and the NLL of the whole forced continuation (a RULER
answer's) -- each the mean over pairs with its 95 % t interval (``frontiers.csv``;
``vtoken.bench.analysis.forced``)."""

import logging

import figstyle as fs
import pandas as pd
import tablefmt

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
front = fs.read(smk.input.frontiers)
COLUMNS = {"retained_blocks": ("blocks / request", "{:.2f}"), "live_tokens": ("live tokens", "{:.1f}"),
           "kl_mean": ("KL vs Native / token", "{:.4f}"), "dnll_mean": ("ΔNLL / token", "{:+.4f}"),
           "top1_mean": ("top-1 agreement", "{:.3f}"), "answer_nll_mean": ("NLL of the continuation", "{:.2f}")}
rows = []
keys = ["scorer", "phase", "mechanism", "granularity", "budget"]
for key, g in (front.groupby(keys, sort=False) if len(front) else []):
    at = g.set_index("metric")
    row = dict(zip(keys, key)) | {"mechanism": fs.label(key[2]), "n": int(at.loc["retained_blocks", "n"])}
    for metric, (name, fmt) in COLUMNS.items():
        if metric not in at.index or pd.isna(at.loc[metric, "mean"]):
            row[name] = "—"
            continue
        r = at.loc[metric]
        row[name] = tablefmt.ci(r["mean"], r.ci_low, r.ci_high, fmt)
    rows.append(row)
shown = pd.DataFrame(rows) if rows else pd.DataFrame([{"scorer": "—", "n": "no factorial in this run"}])
caption = ("Teacher-forced quality per factorial cell: every mechanism decodes the same text (decode phase: Native's "
           "own greedy continuation; prefill phase: each RULER document's answer after the pruned prompt), so each of "
           "its tokens pairs with Native's. KL: of the mechanism's next-token distribution from Native's (Native's "
           "top-32 ids, the rest lumped; a lower bound of the full-vocabulary KL); ΔNLL: its negative log-likelihood of "
           "the forced token minus Native's; top-1: its arg-max equals Native's; NLL of the continuation: summed over "
           "the forced tokens (the answer's negative log-likelihood on RULER). Per request the mean over its tokens, "
           "per pair over its requests; mean over pairs [95 % t CI].")
tablefmt.write(front, shown, dict(smk.output.items()), caption, "tab:forced-quality")
