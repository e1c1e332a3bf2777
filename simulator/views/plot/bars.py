"""Grouped bar charts: one group per setting (e.g. a group size), one bar per series (e.g. a strategy).

Used for per-device numbers read off runs, such as the activation memory a device keeps under tensor
and sequence parallelism, where a timeline would hide the comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from .style import CAPTION_COLOR, CAPTION_FONT, PALETTE, TITLE_FONT, FigureStyle, figure_style, new_figure, wrap_text


def plot_grouped_bars(
    groups: Sequence[str],
    series: Sequence[str],
    values: Sequence[Sequence[float]],
    *,
    ylabel: str,
    title: str | None = None,
    caption: str | None = None,
    labels: Sequence[Sequence[str]] | None = None,
    width: float | None = None,
    style: str | FigureStyle = "paper",
) -> Figure:
    """values[s][g]: the bar of series s in group g; labels (same shape), if given, are written on the bars.

    style: "paper" or "slide" (see ``simulator.views.plot.style.FigureStyle``)."""
    if len(values) != len(series) or any(len(v) != len(groups) for v in values):
        raise ValueError(f"plot_grouped_bars: need {len(series)} series of {len(groups)} values each")
    st = figure_style(style)
    fig_w = width or st.width
    fig = new_figure(fig_w, 4.2, st)
    ax = fig.add_axes((0.1, 0.2, 0.86, 0.62))
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
    ax.legend(loc="upper right", frameon=False, fontsize=8)
    if title:
        ax.set_title(wrap_text(title, 0.86 * fig_w, TITLE_FONT), loc="left")
    if caption:
        text = wrap_text(caption, 0.98 * fig_w, CAPTION_FONT)
        fig.text(0.01, 0.01, text, fontsize=CAPTION_FONT, color=CAPTION_COLOR, ha="left", va="bottom")
    return fig
