"""One call to see a result: the distribution of each predicted value, or the count per class of a
predicted range (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

import json
import math
import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from ._results import range_columns, uncertainty_columns, value_columns

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Colour per kind of source, so that a reader sees at once which numbers are
# model predictions, measured values or synthetic stand-ins.
_COLOURS = {"prediction": "#1f77b4", "experimental": "#2ca02c", "synthetic": "#7f7f7f", "other": "#ff7f0e"}
_ORDER = ["prediction", "experimental", "other", "synthetic"]
_MISSING_MSG = (
    "the plot needs matplotlib: pip install 'kinflow-client[plot]' (or 'kinflow-client[notebook]' in Jupyter)"
)


def _kind(source: str) -> str:
    s = source.lower()
    if "synthetic" in s:
        return "synthetic"
    if s.startswith("prediction from"):
        return "prediction"
    if "experimental" in s or "brenda" in s or "sabio" in s or "measured" in s:
        return "experimental"
    return "other"


def _array_values(cell: object) -> list[float]:
    """The positive numbers of an array cell (``[0.12,null,3.4]``); empty for anything else."""
    if not isinstance(cell, str) or not cell.startswith("["):
        return []
    try:
        items = json.loads(cell)
    except ValueError:
        return []
    if not isinstance(items, list):
        return []
    return [float(x) for x in items if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0]


def _label(source: str, kind: str) -> str:
    if kind == "synthetic":
        return f"{source} — SYNTHETIC, not a prediction" if "synthetic" not in source.lower() else source
    return source


def _class_texts(cell: object) -> list[str]:
    """The class texts of a range cell: its text, or each text of a per-substrate list; none for a blank."""
    if isinstance(cell, list):
        return [x for x in cell if isinstance(x, str)]
    if isinstance(cell, str) and cell.startswith("["):
        try:
            items = json.loads(cell)
        except ValueError:
            return []
        return [x for x in items if isinstance(x, str)] if isinstance(items, list) else []
    return [cell] if isinstance(cell, str) and cell else []


def _range_panel(
    ax: Axes, df: pd.DataFrame, target: str, col: str, src_col: str, classes: list[str], synthetic: bool, width: float
) -> tuple[bool, dict[str, Artist]]:
    """Draw a range column's count per class on ``ax``: one bar per class in the classes' order
    (a class no row has at 0), stacked and coloured by source, the count above each bar. Returns
    whether any bar was synthetic, and each source's bars by legend label (the caller draws one
    legend below the panels, where it covers no bar)."""
    from matplotlib.ticker import MaxNLocator

    counts: dict[str, list[int]] = {}
    kinds: dict[str, str] = {}
    blank = experimental = unknown = 0
    ranges = df.attrs.get("range_classes")
    desc = ranges.get(col) if isinstance(ranges, dict) else None
    exp_col = desc.get("experimentalColumn") if isinstance(desc, dict) else None
    exp = df[exp_col] if isinstance(exp_col, str) and exp_col in df.columns else None
    for i, (cell, src) in enumerate(zip(df[col], df[src_col].astype(str), strict=True)):
        texts = _class_texts(cell)
        if not texts:
            blank += 1
            if exp is not None and not pd.isna(exp.iloc[i]):
                experimental += 1
            continue
        for text in texts:
            if text not in classes:
                unknown += 1
                continue
            counts.setdefault(src, [0] * len(classes))[classes.index(text)] += 1
            kinds[src] = "synthetic" if synthetic else _kind(src)
    order = sorted(counts, key=lambda s: (_ORDER.index(kinds[s]), s))
    xs = list(range(len(classes)))
    bottom = [0] * len(classes)
    handles: dict[str, Artist] = {}
    for s in order:
        bars = ax.bar(
            xs, counts[s], bottom=bottom, color=_COLOURS[kinds[s]], label=_label(s, kinds[s]),
            hatch="//" if kinds[s] == "synthetic" else None, edgecolor="white", linewidth=0.5,
        )  # fmt: skip
        # One bar stands for its source in the legend (colour and hatch).
        handles[_label(s, kinds[s])] = bars.patches[0]
        bottom = [b + n for b, n in zip(bottom, counts[s], strict=True)]
    for x, n in zip(xs, bottom, strict=True):
        ax.text(x, n, str(n), ha="center", va="bottom", fontsize="small")
    # Headroom for the counts above the bars; whole counts on the axis.
    ax.set_ylim(0, max(1.0, max(bottom, default=0) * 1.15))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xticks(xs, classes, rotation=40, ha="right", rotation_mode="anchor", fontsize="small")
    ax.set_xlabel(f"{col} (class)")
    ax.set_ylabel("rows")
    caption = f"{sum(bottom)} values in {len(classes)} classes (ranges, not intervals)"
    if blank:
        caption += f", {blank} rows without a class"
        if experimental:
            caption += f" ({experimental} with an experimental value)"
    if unknown:
        caption += f", {unknown} cells naming no class left out"
    ax.set_title(f"{target} range class\n{_fit(caption, width, 10)}", fontsize="medium")
    return any(k == "synthetic" for k in kinds.values()), handles


# The most rows whose ±1 SD interval the uncertainty panel draws (an even
# sample by rank of value): few enough that each stays a line of its own.
INTERVAL_ROWS = 80
# "times or divided by": an SD of s log10 units is a factor of 10**s either way.
_FOLD = "\N{MULTIPLICATION SIGN}/\N{DIVISION SIGN}"


def _uncertainty_panels(
    ax_sd: Axes, ax_iv: Axes, df: pd.DataFrame, target: str, col: str, src_col: str, total_col: str, synthetic: bool
) -> bool:
    """Draw a target's uncertainty: the distribution of the per-row total SD (log10 units) on
    ``ax_sd`` and each value's ±1 SD interval for an even sample of rows ranked by value on
    ``ax_iv``. Returns whether any of it was synthetic."""
    values = pd.to_numeric(df[col], errors="coerce")
    sd = pd.to_numeric(df[total_col], errors="coerce")
    keep = values.notna() & (values > 0) & sd.notna() & (sd >= 0)
    if not keep.any():
        for ax in (ax_sd, ax_iv):
            ax.text(0.5, 0.5, "no value with an uncertainty", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        return False
    v, u = values[keep].astype(float), sd[keep].astype(float)
    src = df.loc[keep, src_col].astype(str)
    kinds = {s: "synthetic" if synthetic else _kind(s) for s in src.unique()}
    order = sorted(kinds, key=lambda s: (_ORDER.index(kinds[s]), s))
    med = float(u.median())
    hi = max(0.1, math.ceil(float(u.max()) * 10) / 10)
    ax_sd.hist(
        [u[src == s].tolist() for s in order],
        bins=24,
        range=(0.0, hi),
        stacked=True,
        color=[_COLOURS[kinds[s]] for s in order],
        label=[_label(s, kinds[s]) for s in order],
        edgecolor="white",
        linewidth=0.5,
    )
    for patches, s in zip(ax_sd.containers, order, strict=False):
        if kinds[s] == "synthetic":
            for p in patches:
                p.set_hatch("//")
    ax_sd.axvline(med, color="black", linestyle="--", linewidth=1, label=f"median {med:.3g} ({_FOLD} {10**med:.3g})")
    # Headroom above the bars for the legend.
    ax_sd.set_ylim(0, ax_sd.get_ylim()[1] * 1.35)
    ax_sd.legend(fontsize="small", loc="upper left")
    ax_sd.set_xlim(0, hi)
    ax_sd.set_xlabel(f"total SD of log10({target}), log10 units")
    ax_sd.set_ylabel("rows")
    ax_sd.set_title(
        f"{target} uncertainty\n{len(u)} rows; median total SD {med:.2f} log10 units ({_FOLD} {10**med:.2g})",
        fontsize="medium",
    )

    ranked = sorted(zip(v.tolist(), u.tolist(), src.tolist(), strict=True))
    m = min(INTERVAL_ROWS, len(ranked))
    sample = [ranked[0]] if m == 1 else [ranked[round(j * (len(ranked) - 1) / (m - 1))] for j in range(m)]
    for s in order:
        pts = [(j, x, e) for j, (x, e, ss) in enumerate(sample) if ss == s]
        if not pts:
            continue
        ys = [j for j, _, _ in pts]
        xs = [x for _, x, _ in pts]
        lower = [x - x / 10**e for _, x, e in pts]
        upper = [x * 10**e - x for _, x, e in pts]
        bars = ax_iv.errorbar(xs, ys, xerr=[lower, upper], fmt="o", ms=2, lw=1, color=_COLOURS[kinds[s]])
        if kinds[s] == "synthetic":
            for lc in bars.lines[2]:
                lc.set_linestyle("--")
    ax_iv.set_xscale("log")
    ax_iv.set_yticks([])
    ax_iv.set_ylabel(f"rows ranked by value ({m} of {len(ranked)})" if m < len(ranked) else "rows ranked by value")
    ax_iv.set_xlabel(f"{col} (log scale), ±1 total SD")
    ax_iv.set_title(f"{target}: each value's ±1 SD interval", fontsize="medium")
    return any(k == "synthetic" for k in kinds.values())


def plot_result(
    df: pd.DataFrame, *, bins: int = 30, width: float = 5.0, height: float = 3.6, title: str | None = None
) -> Figure:
    """The distribution of each predicted value of a result, one panel per target.

    ``df`` is what :meth:`Job.result` returns. A target given as range classes
    (a range column, see ``df.attrs["range_classes"]``) gets a bar chart of
    the count per class instead: every class in ascending order, 0 for a
    class no row has, the class texts on the x axis, bars stacked by source,
    one legend below the panels. Each other panel is a histogram on a
    logarithmic axis (kinetic parameters span orders of magnitude), its bars
    stacked and coloured by the ``Source`` of each value (a method's
    prediction, an experimental value, ...). Synthetic stand-ins are grey,
    hatched and named in the legend and the title. Where the method gives an
    uncertainty, the panel states the median standard deviation, and two
    panels below it show that uncertainty: the distribution of the per-row
    total standard deviation of log10(value) (log10 units; the median as a
    fold factor: times or divided by 10**SD) and each value's ±1 SD interval for an even
    sample of at most 80 rows ranked by value. Blank and non-positive values
    are left out and counted in the panel's caption.

    Returns the matplotlib Figure (Jupyter shows it; elsewhere
    ``fig.savefig("result.png")``). Needs the ``plot`` extra.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover (the test venv has it)
        raise ImportError(_MISSING_MSG) from e
    import numpy as np

    panels = value_columns(df)
    if not panels:
        raise ValueError("this frame has no predicted values to plot (no value column before a 'Source <target>')")
    synthetic_result = bool(df.attrs.get("synthetic"))
    ranged = range_columns(df)
    uncertain = {target: uncertainty_columns(df, target) for target, _, _ in panels}
    n_rows = 3 if any(uncertain.values()) else 1
    # The constrained layout keeps the figure's title (suptitle) and the
    # two-line panel titles inside the figure: tight_layout left the title
    # above the canvas, and a plain savefig clipped it.
    fig, axes_any = plt.subplots(
        n_rows, len(panels), figsize=(width * len(panels), height * n_rows), squeeze=False, layout="constrained"
    )  # fmt: skip
    # Closed at once: pyplot does not show it a second time at the end of a
    # Jupyter cell; the returned Figure is shown (or saved) by the caller.
    plt.close(fig)
    axes: list[Axes] = list(axes_any[0])
    # Every panel drawn: the value panels, then each uncertainty pair; the
    # uncertainty axes of a target without uncertainty are removed.
    drawn: list[Axes] = list(axes)
    for k, (target, col, src_col) in enumerate(panels):
        if n_rows == 1:
            break
        ax_sd, ax_iv = axes_any[1][k], axes_any[2][k]
        unc = uncertain[target]
        if not unc:
            fig.delaxes(ax_sd)
            fig.delaxes(ax_iv)
            continue
        if _uncertainty_panels(ax_sd, ax_iv, df, target, col, src_col, unc[0], synthetic_result):
            synthetic_result = True
        drawn += [ax_sd, ax_iv]
    any_synthetic = synthetic_result
    # The range panels' sources, for one legend below the panels.
    range_handles: dict[str, Artist] = {}
    for ax, (target, col, src_col) in zip(axes, panels, strict=True):
        if col in ranged:
            synthetic_bars, handles = _range_panel(ax, df, target, col, src_col, ranged[col], synthetic_result, width)
            any_synthetic = any_synthetic or synthetic_bars
            range_handles.update(handles)
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        sources = df[src_col].astype(str)
        ok = values.notna() & (values > 0)
        groups: dict[str, list[float]] = {}
        kinds: dict[str, str] = {}
        plotted = skipped = 0
        for raw, v, src, good in zip(df[col], values, sources, ok, strict=True):
            # A per-substrate or per-candidate cell is a JSON array: each of its values counts.
            vs = [float(v)] if good else _array_values(raw)
            skipped += 0 if vs else 1
            for x in vs:
                groups.setdefault(src, []).append(x)
                kinds[src] = "synthetic" if synthetic_result else _kind(src)
                plotted += 1
        if groups:
            lo = min(min(g) for g in groups.values())
            hi = max(max(g) for g in groups.values())
            if lo == hi:
                lo, hi = lo / 10, hi * 10
            edges = [float(x) for x in np.logspace(math.log10(lo), math.log10(hi), bins + 1)]
            order = sorted(groups, key=lambda s: (_ORDER.index(kinds[s]), s))
            ax.hist(
                [groups[s] for s in order],
                bins=edges,
                stacked=True,
                color=[_COLOURS[kinds[s]] for s in order],
                hatch=None,
                label=[_label(s, kinds[s]) for s in order],
                edgecolor="white",
                linewidth=0.5,
            )
            for patches, s in zip(ax.containers, order, strict=False):
                if kinds[s] == "synthetic":
                    any_synthetic = True
                    for p in patches:
                        p.set_hatch("//")
            ax.legend(fontsize="small", loc="upper right")
        else:
            ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        ax.set_xscale("log")
        ax.set_xlabel(f"{col} (log scale)")
        ax.set_ylabel("rows")
        caption = f"{plotted} values"
        if skipped:
            caption += f", {skipped} rows blank or ≤ 0 left out"
        unc = uncertainty_columns(df, target)
        if unc:
            sd = pd.to_numeric(df[unc[0]], errors="coerce")[ok].dropna()
            if len(sd):
                caption += f"; median uncertainty ±{sd.median():.2f} (SD, log10 units)"
        ax.set_title(f"{target}\n{_fit(caption, width, 10)}", fontsize="medium")
    heading = title or (f"kinflow result {df.attrs.get('job_id')}" if df.attrs.get("job_id") else "kinflow result")
    if any_synthetic:
        heading += " — SYNTHETIC stand-ins, not predictions"
        for ax in drawn:
            ax.text(
                0.5, 0.5, "SYNTHETIC", transform=ax.transAxes, ha="center", va="center",
                fontsize=28, color="grey", alpha=0.25, rotation=20,
            )  # fmt: skip
    fig.suptitle(_fit(heading, width * len(panels), 12))
    if range_handles:
        # Outside every axes: the constrained layout makes room for it below the panels.
        fig.legend(
            list(range_handles.values()), list(range_handles), loc="outside lower center",
            ncols=min(2, len(range_handles)), fontsize="small",
        )  # fmt: skip
    return fig


def _fit(text: str, inches: float, points: float) -> str:
    """text wrapped to lines that fit ``inches`` at a font of ``points`` (about 0.6 em a character),
    so that no title runs past the figure's edge, where a saved image would cut it."""
    return textwrap.fill(text, width=max(20, int(inches * 72 / (points * 0.6))), break_long_words=False)
