"""Table RULER screen: Native (`full`, no eviction) on each offline RULER task at each length, at
the pressing pool: lm-eval's score (RULER's string_match_all) with its standard error and n, the
permutation chance (the same outputs scored against another document's references) and the
verdict of the screen rule (vtoken.bench.lmeval.ruler_table.informative): only informative cells can
show an arm losing quality (data/processed/<run>/ruler/<cell>/full/)."""

import logging
from pathlib import Path

import pandas as pd
import tablefmt
from vtoken.bench.lmeval.ruler_table import Z95, informative, run_row

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
margin = smk.params.min_margin
raw = pd.DataFrame([run_row(Path(p)) for p in smk.input.results]).sort_values(["task", "length"])
raw["lower"] = raw.score - Z95 * raw.stderr
raw["informative"] = [informative(r.score, r.stderr, r.chance, margin) for r in raw.itertuples()]
shown = pd.DataFrame({
    "task": raw.task, "length (tokens)": raw.length.astype(int),
    "median prompt": raw.median_prompt_tokens.map(lambda v: f"{v:.0f}"),
    "Native score ± s.e. (n)": [f"{r.score:.3f} ± {r.stderr:.3f} ({r.n})" for r in raw.itertuples()],
    "chance": raw.chance.map(lambda v: f"{v:.3f}"),
    "verdict": ["kept" if ok else f"dropped: {r.lower:.3f} ≤ chance + {margin}" for ok, r in
                zip(raw.informative, raw.itertuples())],
    "seconds": raw.seconds.map(lambda v: f"{v:.0f}")})
tablefmt.write(raw, shown, {"csv": smk.output.csv, "md": smk.output.md, "tex": smk.output.tex},
               caption=f"RULER screen: Native on each offline RULER task and length (lm-eval, local-completions, "
                       f"greedy, RULER's output length). A cell is kept when score − {Z95} s.e. exceeds the "
                       f"permutation chance (outputs scored against another document's references) by {margin}; "
                       "a dropped cell cannot show an arm losing quality, so the RULER grid runs kept cells only.",
               label="tab:ruler-screen")
logging.info("table_ruler_screen: %d cells, %d kept", len(raw), int(raw.informative.sum()))
