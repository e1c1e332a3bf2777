"""Plot of the memory each device holds over time (from ``simulator.views.memory``).

Up to 8 devices: one step line per device, its peak marked, and the devices' capacity as a dashed
line when the cost model has one. More devices: a heat map, one row per device, colour = bytes held,
which stays readable at 64 devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from ...core.trace import Trace
from ...cost.units import size_unit
from ..activity import unpack
from ..memory import memory_timeline
from .style import (
    CAPTION_COLOR,
    PALETTE,
    TITLE_FONT,
    TITLE_LINE,
    FigureStyle,
    extra_lines,
    figure_style,
    new_figure,
    save_figure,
    time_axis,
    wrap_text,
)

if TYPE_CHECKING:
    from ...core.engine import RunResult
    from ...cost.model import CostModel

MAX_LINES = 8


def plot_memory(
    run: RunResult | Trace,
    *,
    cost: CostModel | None = None,
    title: str | None = None,
    width: float | None = None,
    style: str | FigureStyle = "paper",
    y_max: float | None = None,
    t_max: float | None = None,
) -> Figure:
    """Memory held by each device over the run; returns the figure.

    Args:
        run: a run (or its trace).
        cost: the cost model whose memory per device is drawn as a line, if it has one (default: the run's).
        title: the figure's title.
        width: the figure's width in inches (default: the style's).
        style: "paper" or "slide" (see ``simulator.views.plot.style.FigureStyle``).
        y_max: the top of the memory axis, bytes, to draw two runs on the same scales (``shared_scales``).
        t_max: the end of the time axis, seconds, likewise.

    Returns:
        The matplotlib figure.

    Examples:
        >>> import numpy as np
        >>> from simulator import World, plot_memory
        >>> fig = plot_memory(World(2).run(lambda dev: dev.hold("w", np.zeros(4))))
        >>> len(fig.axes) >= 1
        True
    """
    trace, cost = unpack(run, cost)
    mem = memory_timeline(trace)
    n = mem.world_size
    t_end = t_max or mem.end_time or max((t[-1] for t in mem.times), default=0.0) or 1e-9
    peak = max((mem.peak(r) for r in range(n)), default=0)
    top = max(y_max or 0, peak)
    unit, scale = size_unit(max(top, 1))
    lines = n <= MAX_LINES
    fig_w = width or figure_style(style).width
    title = wrap_text(title, 0.78 * fig_w, TITLE_FONT) if title else title
    extra = TITLE_LINE * extra_lines(title, 1)  # inches for a title that wraps
    fig_h = (3.6 if lines else 2.5 + min(0.12 * n, 7.0)) + extra
    cap = figure_style(style).max_height(fig_w)  # a slide stays 16:9
    fig_h = min(fig_h, cap) if cap else fig_h
    fig = new_figure(fig_w, fig_h, style)
    y0, y1 = 0.58 / fig_h, 1 - (0.5 + extra) / fig_h  # the axes, in figure fractions: room for the time axis below
    ax = fig.add_axes((0.09, y0, 0.78, y1 - y0))
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    time_axis(ax, t_end)
    ax.set_xlim(0, t_end * 1.005)
    if lines:
        for r in range(n):
            xs = mem.times[r] + [t_end]
            ys = [h * scale for h in mem.held[r]] + [mem.held[r][-1] * scale]
            color = PALETTE[r % len(PALETTE)]
            ax.step(xs, ys, where="post", color=color, linewidth=1.6, label=f"device {r}")
            ax.plot([mem.peak_time(r)], [mem.peak(r) * scale], "o", color=color, markersize=4)
        ax.set_ylabel(f"memory held ({unit})")
        ax.set_ylim(0, max(top * scale * 1.15, 1e-9))
        if cost is not None and cost.memory is not None:
            cap = cost.memory * scale
            if cap <= peak * scale * 3:
                ax.axhline(cap, color="#b2182b", linestyle="--", linewidth=1, label="capacity")
                ax.set_ylim(0, max(cap, peak * scale) * 1.15)
            else:
                ax.text(0.99, 0.97, f"capacity {cost.memory * scale:.3g} {unit} (off scale)", transform=ax.transAxes,
                        ha="right", va="top", fontsize=8, color=CAPTION_COLOR)  # fmt: skip
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
        ax.grid(axis="y", color="#e4e4e4", linewidth=0.6)
    else:
        grid = np.linspace(0, t_end, 800)
        image = np.array([_sample(mem.times[r], mem.held[r], grid) for r in range(n)]) * scale
        im = ax.imshow(image, aspect="auto", origin="upper", extent=(0, t_end, n - 0.5, -0.5), cmap="viridis",
                       interpolation="nearest", vmin=0, vmax=top * scale or None)  # fmt: skip
        ax.set_ylabel("device")
        cax = fig.add_axes((0.89, y0, 0.015, y1 - y0))
        fig.colorbar(im, cax=cax, label=f"memory held ({unit})")
    if title:
        ax.set_title(title, loc="left")
    return fig


def save_memory(
    run: RunResult | Trace, stem: str | Path, formats: Sequence[str] = ("png", "svg"), **kwargs
) -> list[Path]:
    """Plot memory over time and save it as ``stem.png`` / ``stem.svg``; returns the paths."""
    return save_figure(plot_memory(run, **kwargs), stem, formats)


def shared_scales(runs: Sequence[RunResult | Trace]) -> dict[str, float]:
    """``y_max`` and ``t_max`` that fit every run: pass them to ``plot_memory`` to compare runs on one scale."""
    mems = [memory_timeline(unpack(r)[0]) for r in runs]
    return {
        "y_max": float(max((m.peak(d) for m in mems for d in range(m.world_size)), default=0)),
        "t_max": max(m.end_time for m in mems) or 1e-9,
    }


def _sample(times: list[float], held: list[int], grid: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(np.asarray(times), grid, side="right") - 1
    return np.asarray(held, dtype=float)[np.clip(idx, 0, None)]
