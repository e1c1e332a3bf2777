"""Grouped bar charts: one group per setting (e.g. a group size), one bar per series (e.g. a strategy).

Used for per-device numbers read off runs, such as the activation memory a device keeps under tensor
and sequence parallelism, where a timeline would hide the comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from .style import CAPTION_COLOR, PALETTE, new_figure


def plot_grouped_bars(
    groups: Sequence[str],
    series: Sequence[str],
    values: Sequence[Sequence[float]],
    *,
    ylabel: str,
    title: str | None = None,
    caption: str | None = None,
    labels: Sequence[Sequence[str]] | None = None,
    width: float = 9.0,
) -> Figure:
    """values[s][g]: the bar of series s in group g; labels (same shape), if given, are written on the bars."""
    if len(values) != len(series) or any(len(v) != len(groups) for v in values):
        raise ValueError(f"plot_grouped_bars: need {len(series)} series of {len(groups)} values each")
    fig = new_figure(width, 3.8)
    ax = fig.add_axes((0.09, 0.17, 0.68, 0.7))
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    x = np.arange(len(groups))
    w = 0.8 / len(series)
    for s, (name, vals) in enumerate(zip(series, values)):
        bars = ax.bar(x + (s - (len(series) - 1) / 2) * w, vals, w * 0.95, label=name, color=PALETTE[s % len(PALETTE)])
        if labels is not None:
            for bar, text in zip(bars, labels[s]):
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), text, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, list(groups))
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", color="#e4e4e4", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    if title:
        ax.set_title(title, loc="left")
    if caption:
        fig.text(0.01, 0.01, caption, fontsize=7.5, color=CAPTION_COLOR, ha="left", va="bottom")
    return fig
