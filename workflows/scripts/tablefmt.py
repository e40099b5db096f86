"""One table, three formats from the same rows: CSV (raw numbers), Markdown and LaTeX
(formatted strings). Byte-stable: fixed float format, LF line ends."""

from __future__ import annotations

import pandas as pd

from vtoken.bench.analysis.text import ci, pct_change  # noqa: F401 -- the table scripts read them here


def _latex_escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("≤", r"$\le$"), ("×", r"$\times$"), ("θ_F", r"$\theta_F$"), ("−", "--"), ("…", r"\ldots{}"),
                 ("<", r"$<$"), (">", r"$>$")):
        text = text.replace(a, b)
    return text


def write(raw: pd.DataFrame, shown: pd.DataFrame, paths: dict[str, str], caption: str, label: str) -> None:
    """Write ``raw`` as CSV and ``shown`` (formatted strings) as Markdown and LaTeX."""
    raw.to_csv(paths["csv"], index=False, float_format="%.6g", lineterminator="\n")
    cols = list(shown.columns)
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in shown.itertuples(index=False)]
    with open(paths["md"], "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(md) + "\n\n" + caption + "\n")
    tex = [r"\begin{table}[t]", r"\centering\small", r"\caption{" + _latex_escape(caption) + "}",
           r"\label{" + label + "}", r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule",
           " & ".join(_latex_escape(c) for c in cols) + r" \\", r"\midrule"]
    tex += [" & ".join(_latex_escape(str(v)) for v in row) + r" \\" for row in shown.itertuples(index=False)]
    tex += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    with open(paths["tex"], "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(tex) + "\n")
