"""One table, three formats from the same rows: CSV (raw numbers), Markdown and LaTeX
(formatted strings). Byte-stable: fixed float format, LF line ends."""

from __future__ import annotations

import math

import pandas as pd


def ci(est: float, lo: float, hi: float, fmt: str = "{:.2f}") -> str:
    """'est [lo, hi]', or 'est' without an interval, or '—' when not measured; a zero-width
    interval (every pair gave the same value) is never printed as a CI: 'est (no spread)'."""
    if est is None or (isinstance(est, float) and math.isnan(est)):
        return "—"
    if lo is None or hi is None or any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
        return fmt.format(est)
    if abs(hi - lo) <= 1e-9 * max(1.0, abs(est)):
        return f"{fmt.format(est)} (no spread)"
    return f"{fmt.format(est)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def pct_change(est: float, lo: float, hi: float) -> str:
    """A ratio as a change in percent with its interval."""
    if est is None or math.isnan(est):
        return "—"
    return ci(100 * (est - 1), 100 * (lo - 1), 100 * (hi - 1), "{:+.1f} %")


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
