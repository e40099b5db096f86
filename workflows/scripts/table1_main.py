"""Table 1: the main rows -- per main setup and arm, at the largest C every arm ran (C_ref in the
default), the memory, throughput and quality metrics with n and 95 % CIs, the change in
retained blocks the paired ratio vs the baseline -- and the prefix-sharing rows (the paper's
§5.7): per sharing degree and arm, with vLLM's prefix cache on, retained blocks split into
prefix blocks (full prompt blocks in the prefix cache, read-only: never reclaimed; the shared
document's among them) and private blocks, the pool's physical blocks, and the paired changes
vs the baseline in private blocks and output throughput. A profile without prefix setups has
no such rows, and the caption says so."""

import logging

import figstyle as fs
import pandas as pd
import results
import tablefmt

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
summary, setups, comps = fs.read(smk.input.summary), fs.read(smk.input.setups), fs.read(smk.input.comparisons)
MAIN = (("retained_blocks", "retained blocks", "{:.2f}", 1), ("packing_efficiency", "effective KV usage (%)", "{:.1f}", 100),
        ("waste_f", "waste F (%)", "{:.1f}", 100), ("output_tok_per_s", "output tok/s", "{:.1f}", 1),
        ("e2e_p95_s", "p95 e2e (s)", "{:.2f}", 1), ("rouge_l_mean", "ROUGE-L vs baseline", "{:.3f}", 1))
PREFIX = (("retained_blocks", "retained blocks", "{:.2f}", 1),
          ("retained_prefix_blocks", "prefix blocks (read-only)", "{:.2f}", 1),
          ("shared_blocks_mean", "of which shared", "{:.2f}", 1),
          ("retained_private_blocks", "private blocks", "{:.2f}", 1),
          ("pool_blocks_used", "pool blocks used", "{:.1f}", 1), ("output_tok_per_s", "output tok/s", "{:.1f}", 1),
          ("num_preemptions", "preemptions", "{:.1f}", 1))
# (metric, raw column, shown column) of the paired changes vs the baseline.
MAIN_DELTAS = (("retained_blocks", "retained_blocks_ratio", "Δ retained vs baseline"),)
PREFIX_DELTAS = (("retained_private_blocks", "private_blocks_ratio", "Δ private vs baseline"),
                 ("output_tok_per_s", "output_tok_per_s_ratio", "Δ tok/s vs baseline"))


def add_metrics(raw: dict, shown: dict, setup: str, arm: str, c: int, cols) -> None:
    """Mean [95 % CI] of each metric of ``cols`` for one arm of a setup at C."""
    for metric, name, fmt, scale in cols:
        r = results.at(summary, setup, metric, c)
        m = r.loc[arm] if arm in r.index else None
        for k in ("mean", "ci_low", "ci_high"):
            raw[f"{metric}_{k}"] = None if m is None else m[k]
        shown[name] = "—" if m is None else tablefmt.ci(scale * m["mean"], scale * m.ci_low, scale * m.ci_high, fmt)


def add_deltas(raw: dict, shown: dict, setup: str, arm: str, c: int, deltas) -> None:
    """The paired ratio vs the baseline of each metric of ``deltas``, as a change in percent."""
    for metric, col, name in deltas:
        comp = results.comparison(comps, setup, metric, arm, c)
        for suffix, key in (("", "estimate"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high")):
            raw[col + suffix] = None if comp is None else comp[key]
        shown[name] = "—" if comp is None else tablefmt.pct_change(comp.estimate, comp.ci_low, comp.ci_high)


def main_rows():
    for setup in results.main_setups(setups):
        c = results.shared_c(setups, setup)
        sla, feas = results.at(summary, setup, "sla_throughput", None), results.at(summary, setup, "feasible_c", None)
        base = results.at(summary, setup, "retained_blocks", c)
        for arm in fs.ordered(base.index, smk.params.arms):
            raw = {"rows": "main", "setup": setup, "arm": arm, "concurrency": c, "n": int(base.loc[arm, "n"])}
            shown = {"rows": "main", "setup": fs.setup_title(setups, setup), "arm": fs.label(arm), "C": c, "n": raw["n"]}
            add_metrics(raw, shown, setup, arm, c, MAIN)
            add_deltas(raw, shown, setup, arm, c, MAIN_DELTAS)
            for metric, frame, name, fmt in (("sla_throughput", sla, "SLA throughput (req/s)", "{:.3f}"),
                                             ("feasible_c", feas, "feasible C", "{:.1f}")):
                m = frame.loc[arm] if arm in frame.index else None
                for k in ("mean", "ci_low", "ci_high"):
                    raw[f"{metric}_{k}"] = None if m is None else m[k]
                shown[name] = "—" if m is None else tablefmt.ci(m["mean"], m.ci_low, m.ci_high, fmt)
            yield raw, shown


def prefix_rows():
    part = setups[setups.role == "prefix"].sort_values("prefix_degree")
    for r in part.itertuples():
        c, degree = int(r.concurrency), int(r.prefix_degree)
        base = results.at(summary, r.setup, "retained_blocks", c)
        for arm in fs.ordered(base.index, smk.params.arms):
            raw = {"rows": "prefix sharing", "setup": r.setup, "arm": arm, "concurrency": c,
                   "n": int(base.loc[arm, "n"]), "prefix_degree": degree, "prefix_tokens": int(r.prefix_tokens)}
            shown = {"rows": f"prefix sharing, degree {degree}", "setup": fs.setup_title(setups, r.setup),
                     "arm": fs.label(arm), "C": c, "n": raw["n"]}
            add_metrics(raw, shown, r.setup, arm, c, PREFIX)
            add_deltas(raw, shown, r.setup, arm, c, PREFIX_DELTAS)
            yield raw, shown


rows = list(main_rows()) + list(prefix_rows())
raw = pd.DataFrame([r for r, _ in rows])
shown = pd.DataFrame([s for _, s in rows]).fillna("—")
has_prefix = (setups.role == "prefix").any()
caption = ("Main results at the largest C every arm of each setup ran: mean over n pairs [95 % t interval]; Δ: "
           "geometric mean of per-pair ratios vs the baseline [95 % CI]; SLA throughput and feasible C over the "
           "concurrency grid. ")
caption += ("Prefix-sharing rows: vLLM's prefix cache on, each request behind a shared system-prompt document, "
            "degree requests per document, one wave; prefix blocks are full prompt blocks in the prefix cache, "
            "read-only (never reclaimed), shared ones held by another running request too; private blocks are "
            "the rest; pool blocks used count a shared block once."
            if has_prefix else "This profile runs no prefix-sharing setup (prefix_sharing.enabled is false; the "
                               "extended profile runs degrees 1-16).")
tablefmt.write(raw, shown, dict(smk.output.items()), caption, "tab:main")
