"""Shared style of every figure: one colour and label per arm everywhere, error bars only
from the intervals computed in ``data/processed`` (never a plotting library's own
bootstrap), byte-stable PDF + PNG output, and readers for the processed tables."""

from __future__ import annotations

import logging

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# Okabe-Ito colours (colour-blind safe); an arm keeps its colour in every figure.
ARM_COLOURS = {
    "full": "#7f7f7f",
    "naive": "#E69F00",
    "holefill": "#56B4E9",
    "vtoken": "#009E73",
    "paged_eviction": "#CC79A7",
    "zipage": "#0072B2",
    "diffkv": "#D55E00",
}
ARM_LABELS = {
    "full": "Native (no eviction)",
    "naive": "Naive-Evict",
    "holefill": "HoleFill",
    "vtoken": "vToken",
    "paged_eviction": "PagedEviction",
    "zipage": "Zipage-style",
    "diffkv": "DiffKV-style",
}
ARM_MARKERS = {"full": "s", "naive": "o", "holefill": "v", "vtoken": "D", "paged_eviction": "^",
               "zipage": "P", "diffkv": "X"}


def apply() -> None:
    """Matplotlib settings shared by every figure."""
    plt.rcParams.update({
        "figure.dpi": 150, "savefig.dpi": 150, "font.size": 8, "axes.titlesize": 8.5,
        "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7, "ytick.labelsize": 7,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
        "grid.alpha": 0.3, "grid.linewidth": 0.5, "pdf.fonttype": 42, "svg.hashsalt": "vtoken",
    })


def log_to(path: str) -> logging.Logger:
    logging.basicConfig(filename=path, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return logging.getLogger("figure")


def read(path: str) -> pd.DataFrame:
    """A processed table (an empty one if it has no rows)."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def label(arm: str) -> str:
    return ARM_LABELS.get(arm, arm)


def colour(arm: str) -> str:
    return ARM_COLOURS.get(arm, "black")


def ordered(arms, config_arms) -> list[str]:
    """``arms`` in the config's plot order; names not in it (arm variants such as the A/A
    control ``naive_aa``, shown in the tables only) are left out."""
    arms = set(arms)
    return [a for a in config_arms if a in arms]


def yerr(df: pd.DataFrame, mean: str = "mean", low: str = "ci_low", high: str = "ci_high") -> np.ndarray:
    """Asymmetric error bars (2 x n) from computed interval columns; NaN -> no bar."""
    lo = (df[mean] - df[low]).to_numpy(dtype=float)
    hi = (df[high] - df[mean]).to_numpy(dtype=float)
    return np.nan_to_num(np.vstack([lo, hi]), nan=0.0)


def setup_title(setups: pd.DataFrame, name: str) -> str:
    """'model / workload' of a setup name."""
    row = setups[setups.setup == name]
    if row.empty:
        return name
    r = row.iloc[0]
    return f"{r.model} / {r.workload}"


def no_data(ax, text: str = "no data in this run") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=8, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def note(fig, text: str) -> None:
    """A footnote (n, interval method, setup) at the bottom left of the figure."""
    fig.text(0.01, 0.005, text, ha="left", va="bottom", fontsize=6, color="0.3", wrap=True)


def finish(fig, text: str, top: float = 1.0, note_lines: int = 3) -> None:
    """Add the footnote and lay the axes out above it (never over the x labels)."""
    note(fig, text)
    bottom = min(0.3, (0.12 * note_lines + 0.05) / fig.get_figheight())
    fig.tight_layout(rect=(0, bottom, 1, top))


def ratio_axis(ax) -> None:
    """Ratios spanning more than 4x get a log axis (r and 1/r equally far from 1), with
    plain tick labels; narrower ranges stay linear so that their ticks stay readable.
    Call after plotting."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    low, high = ax.get_ylim()
    if low <= 0 or high / low <= 4:
        return
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def title(setup_name: str, *parts: str) -> str:
    """Two-line panel title: the setup, then C / n / other facts."""
    return setup_name + "\n" + ", ".join(p for p in parts if p)


LINESTYLES = {"full": "-", "naive": "-", "holefill": "-.", "vtoken": "--", "paged_eviction": ":",
              "zipage": (0, (5, 1, 1, 1)), "diffkv": (0, (3, 1))}


def save(fig, pdf: str, png: str) -> None:
    """PDF + PNG, byte-stable: no creation date, fixed software tag."""
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": "vtoken artifact"})
    fig.savefig(png, metadata={"Software": "vtoken artifact"})
    plt.close(fig)


def legend_arms(fig, arms, ncol: int | None = None, y: float = 1.0) -> None:
    """One legend for the whole figure: a patch per arm, in plot order."""
    from matplotlib.patches import Patch

    handles = [Patch(color=colour(a), label=label(a)) for a in arms]
    fig.legend(handles=handles, loc="upper center", ncol=ncol or len(arms), frameon=False,
               bbox_to_anchor=(0.5, y))
