"""Figure helpers for the experiment report: line and bar panels drawn with matplotlib's Agg
backend (no display needed), saved as small PNG files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def figure(ncols: int, title: str, width_per_panel: float = 4.6, height: float = 3.6):
    """A figure with ``ncols`` panels side by side and a title; returns (figure, axes list)."""
    fig, axes = plt.subplots(1, ncols, figsize=(width_per_panel * ncols, height), squeeze=False)
    fig.suptitle(title, fontsize=11)
    return fig, list(axes[0])


def save(fig, path: Path) -> str:
    """Save ``fig`` as a small PNG (a 128-colour palette: a fraction of the size, no visible
    loss on line and bar charts), close it, and return the file name."""
    import io

    from PIL import Image

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=100, format="png")
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path.name


def _spans_orders_of_magnitude(values: Sequence[float], factor: float = 10.0) -> bool:
    positive = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return len(positive) >= 2 and max(positive) / min(positive) >= factor


def lines(ax, curves: dict[str, tuple[Sequence[float], Sequence[float]]], *, xlabel: str, ylabel: str,
          title: str = "", logx: bool = False, logy: bool | None = None, style: str = "-") -> None:
    """One line per curve label; ``logy=None`` picks a log scale when the values span more
    than an order of magnitude."""
    all_y = [y for _, ys in curves.values() for y in ys]
    for i, (label, (xs, ys)) in enumerate(curves.items()):
        ax.plot(xs, ys, style, marker=MARKERS[i % len(MARKERS)], color=COLORS[i % len(COLORS)], label=label)
    _finish(ax, xlabel, ylabel, title, logx, _spans_orders_of_magnitude(all_y) if logy is None else logy)
    if logx:
        ax.set_xticks(sorted({x for xs, _ in curves.values() for x in xs}))
        ax.xaxis.set_minor_formatter(NullFormatter())
    if curves:
        ax.legend(fontsize=8)


def bars(ax, groups: Sequence[str], series: dict[str, Sequence[float]], *, ylabel: str, title: str = "",
         logy: bool | None = None, annotate: bool = True) -> None:
    """Grouped bars: one group per entry of ``groups``, one bar per series within a group."""
    n = max(len(series), 1)
    width = 0.8 / n
    all_y = [v for vs in series.values() for v in vs]
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        drawn = ax.bar(xs, [v if v and math.isfinite(v) else 0.0 for v in values], width,
                       color=COLORS[i % len(COLORS)], label=label)
        if annotate:
            ax.bar_label(drawn, labels=[_short(v) for v in values], fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), groups)
    _finish(ax, "", ylabel, title, False, _spans_orders_of_magnitude(all_y) if logy is None else logy)
    if series:
        ax.legend(fontsize=8)


def hline(ax, y: float, label: str, color: str = "black", style: str = "--") -> None:
    ax.axhline(y, color=color, linestyle=style, linewidth=1.2, label=label)


def _finish(ax, xlabel: str, ylabel: str, title: str, logx: bool, logy: bool) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1000 else f"{v:g}")
    if logx:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(plain)
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.3)


def _short(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"
