"""Shared style of every figure: seaborn's paper theme (white grid) under the artifact's own
settings, one colour, marker and label per arm everywhere (``palette`` is the seaborn
palette of a ``hue="arm"`` plot), error bars only from the intervals computed in
``data/processed`` (seaborn is always called with ``errorbar=None``: it never computes an
interval, nor bootstraps), byte-stable PDF + PNG output, and readers for the processed
tables."""

from __future__ import annotations

import logging

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from vtoken.arms.registry import arm_display, arm_names  # noqa: E402
from vtoken.bench.analysis import equal_live  # noqa: E402

# Each arm's colour (Okabe-Ito, colour-blind safe), label, marker and line style are its class's
# ``display`` (vtoken.arms.base.ArmDisplay), read from the arm registry: an arm keeps its look in
# every figure, and a new arm brings its own (docs/extending.md).
_DISPLAYS = {arm: arm_display(arm) for arm in arm_names()}
ARM_COLOURS = {arm: d.colour for arm, d in _DISPLAYS.items()}
ARM_LABELS = {arm: d.label for arm, d in _DISPLAYS.items()}
ARM_MARKERS = {arm: d.marker for arm, d in _DISPLAYS.items()}
LINESTYLES = {arm: d.linestyle for arm, d in _DISPLAYS.items()}
# The default colour cycle of every figure (series that are not arms), in this fixed order.
PALETTE = ("#7f7f7f", "#E69F00", "#56B4E9", "#009E73", "#CC79A7", "#0072B2", "#D55E00")

# Arm variants (config arm_variants) drawn by a figure: the colour and line style of the arm
# they run, a marker of their own (in config order), config's label (``use_variants``).
VARIANT_MARKERS = ("<", ">", "*", "h", "p", "8")
_VARIANTS: dict[str, tuple[str, str, str]] = {}  # name -> (arm, label, marker)


# Applied over seaborn's theme: the sizes every figure's layout was made for, no top / right
# spine, a fine grid, embedded TrueType fonts and a fixed SVG hash salt (byte-stable output).
RC = {
    "figure.dpi": 150, "savefig.dpi": 150, "font.size": 8, "axes.titlesize": 8.5,
    "axes.labelsize": 8, "legend.fontsize": 7, "legend.title_fontsize": 7, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.linewidth": 0.5, "pdf.fonttype": 42, "svg.hashsalt": "vtoken",
}


def apply() -> None:
    """Seaborn's paper context and white-grid style, ``PALETTE`` as the default cycle,
    DejaVu Sans (shipped with matplotlib, so present everywhere), then ``RC``."""
    sns.set_theme(context="paper", style="whitegrid", palette=list(PALETTE),
                  font="DejaVu Sans", rc=RC)


def log_to(path: str) -> logging.Logger:
    logging.basicConfig(filename=path, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return logging.getLogger("figure")


def read(path: str) -> pd.DataFrame:
    """A processed table (an empty one if it has no rows)."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def use_variants(variants: dict[str, str], labels: dict[str, str] | None = None) -> None:
    """Let a figure draw arm variants (name -> the arm it runs, in config order): the arm's
    colour and line style, a marker of their own, ``labels[name]`` (config's ``label``) or
    "<arm's label> (<name>)"."""
    _VARIANTS.clear()
    for i, (name, arm) in enumerate(variants.items()):
        text = (labels or {}).get(name) or f"{label(arm)} ({name})"
        _VARIANTS[name] = (arm, text, VARIANT_MARKERS[i % len(VARIANT_MARKERS)])


def _base(arm: str) -> str:
    return _VARIANTS[arm][0] if arm in _VARIANTS else arm


def label(arm: str) -> str:
    """An arm's or variant's name in figures and tables; a mix of two budgets
    (``equal_live``: "<low>~<high>") names both."""
    if equal_live.is_mix(arm):
        low, high = arm.split(equal_live.SEPARATOR, 1)
        return f"{label(low)} ~ {label(high)} (interpolated)"
    return _VARIANTS[arm][1] if arm in _VARIANTS else ARM_LABELS.get(arm, arm)


def colour(arm: str) -> str:
    return ARM_COLOURS.get(_base(arm), "black")


def arm_marker(arm: str) -> str:
    return _VARIANTS[arm][2] if arm in _VARIANTS else ARM_MARKERS.get(arm, "o")


def palette(arms) -> dict[str, str]:
    """The fixed arm colours as a seaborn palette: ``palette=fs.palette(arms)`` with
    ``hue="arm"`` and ``hue_order=arms`` maps every arm to its colour in every figure."""
    return {a: colour(a) for a in arms}


def markers(arms) -> dict[str, str]:
    """The fixed arm markers as seaborn's ``markers=`` of a ``style="arm"`` plot."""
    return {a: arm_marker(a) for a in arms}


def ordered(arms, config_arms) -> list[str]:
    """``arms`` in the config's plot order; names not in it (arm variants such as the A/A
    control ``naive_aa``, shown in the tables only) are left out."""
    arms = set(arms)
    return [a for a in config_arms if a in arms]


def ordered_with_variants(arms, config_arms, skip=()) -> list[str]:
    """``arms`` in the config's plot order, then the variants of ``use_variants`` among them
    (in config order), without ``skip``."""
    present = set(arms) - set(skip)
    return ordered(present, config_arms) + [a for a in _VARIANTS if a in present]


def yerr(df: pd.DataFrame, mean: str = "mean", low: str = "ci_low", high: str = "ci_high") -> np.ndarray:
    """Asymmetric error bars (2 x n) from computed interval columns; NaN -> no bar."""
    lo = (df[mean] - df[low]).to_numpy(dtype=float)
    hi = (df[high] - df[mean]).to_numpy(dtype=float)
    return np.nan_to_num(np.vstack([lo, hi]), nan=0.0)


def setup_title(setups: pd.DataFrame, name: str) -> str:
    """'model / workload / policy' of a setup name (the policy where the setups table has it)."""
    row = setups[setups.setup == name]
    if row.empty:
        return name
    r = row.iloc[0]
    policy = r.get("policy")
    return f"{r.model} / {r.workload}" + (f" / {policy}" if isinstance(policy, str) and policy else "")


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


# The same styles as seaborn's ``dashes=`` (on / off lengths; "" is solid), matplotlib's own patterns.
_DASH = {"-": "", "--": (3.7, 1.6), "-.": (6.4, 1.6, 1.0, 1.6), ":": (1.0, 1.65)}


def dashes(arms) -> dict:
    """The fixed arm line styles as seaborn's ``dashes=`` of a ``style="arm"`` line plot."""
    out = {}
    for a in arms:
        ls = LINESTYLES.get(_base(a), "-")
        out[a] = _DASH[ls] if isinstance(ls, str) else ls[1]
    return out


def save(fig, pdf: str, png: str) -> None:
    """PDF + PNG, byte-stable: no creation date, fixed software tag."""
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": "vtoken artifact"})
    fig.savefig(png, metadata={"Software": "vtoken artifact"})
    plt.close(fig)


def arm_lines(arms, tags: dict | None = None, marker: bool = True, dashed: bool = False, **kws) -> list:
    """Legend handles of line / marker plots: each arm's colour, marker and (``dashed``) line
    style, labelled with its name and ``tags[arm]`` (a number it reports); ``kws`` override
    (``ls="none"``: markers only)."""
    from matplotlib.lines import Line2D

    tags = tags or {}
    return [Line2D([], [], **{"color": colour(a), "marker": arm_marker(a) if marker else None,
                              "ls": LINESTYLES.get(_base(a), "-") if dashed else "-", "label": label(a) + tags.get(a, ""),
                              **kws})
            for a in arms]


def bars(ax, arms, values, **kws) -> None:
    """One bar per arm at x = 0 .. n-1 (seaborn, ``hue="arm"`` on the fixed palette at full
    saturation, so the bars keep the arms' exact colours; no interval computed): ``values``
    are the bar tops; ``kws`` go to the bars (hatch, alpha). An arm variant's bar is hatched
    (its arm's colour, so that it reads as a setting of that arm)."""
    data = pd.DataFrame({"arm": list(arms), "value": np.asarray(values, dtype=float)})
    sns.barplot(data=data, x="arm", y="value", hue="arm", order=list(arms), hue_order=list(arms),
                palette=palette(arms), saturation=1, errorbar=None, legend=False, edgecolor="black",
                linewidth=0.4, width=0.8, ax=ax, **kws)
    if "hatch" not in kws:
        for patch, arm in zip(ax.patches[-len(arms):], arms):
            if arm in _VARIANTS:
                patch.set_hatch("///")
    ax.set_xlabel("")


def whiskers(ax, x, mean, low, high, **kws) -> None:
    """Error bars from computed interval bounds (NaN bound: no whisker on that side)."""
    mean, low, high = (np.asarray(v, dtype=float) for v in (mean, low, high))
    err = np.nan_to_num(np.vstack([mean - low, high - mean]), nan=0.0)
    style = {"fmt": "none", "ecolor": "black", "capsize": 2, "lw": 0.8, "zorder": 3}
    ax.errorbar(x, mean, yerr=err, **{**style, **kws})


def arm_ticks(ax, arms) -> None:
    """Arm names under the bars, slanted so that long names do not collide."""
    ax.set_xticks(range(len(arms)), [label(a) for a in arms], rotation=30, ha="right")
