"""Pipeline schedules as slides draw them: one panel per schedule, a row per device, every block labelled with
its pass and microbatch (``F3``, ``B3``, ``I3``, ``W3``; a block too narrow for that at a legible size, by its
microbatch alone, ``3``), idle time hatched, one time axis, 16:9.

Drawn from the schedule's own timing (``simulator.parallel.schedules.execute``: each action starts when its
device is free and its inputs are done; messages take no time), so a block is exactly one action. Passes
have the colours of the step-through page and the schedule explorer (forward blue, backward vermilion, its
input-gradient part orange, weight gradients green); where a device holds several stages, its later stages are
lighter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.colors as mcolors
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ...parallel.schedules import Schedule, execute
from .style import (
    CAPTION_COLOR,
    CAPTION_FONT,
    IDLE_COLOR,
    IDLE_HATCH_COLOR,
    FigureStyle,
    figure_style,
    new_figure,
    smallest_font,
    text_color,
    wrap_text,
)

PASS_COLORS = {"F": "#0072B2", "B": "#D55E00", "I": "#E69F00", "W": "#009E73"}  # Okabe-Ito, as style.PALETTE
PASS_WORDS = {"F": "forward", "B": "backward", "I": "input gradients", "W": "weight gradients"}


def plot_schedules(
    panels: Sequence[tuple[str, Schedule] | tuple[str, Schedule, Mapping[str, float]]],
    *,
    unit: tuple[float, str] = (1.0, "time units"),
    suptitle: str | None = None,
    caption: str | None = None,
    style: str | FigureStyle = "slide",
) -> Figure:
    """Draw each (title, schedule[, costs]) in its own panel, one under the other on one time axis.

    costs: each pass's time in time units (``schedules.UNIT_COSTS`` by default, as ``execute`` takes them);
    unit: (how many of the axis's unit one time unit is, its name), e.g. ``(1.0, "µs")``.
    """
    st = figure_style(style)
    timings = [execute(panel[1], panel[2] if len(panel) > 2 else None) for panel in panels]
    t_end = max(e for spans in timings for rows in spans.values() for _, e, _ in rows) * unit[0]
    width = st.width
    devices = sum(panel[1].ranks for panel in panels)
    height = st.max_height(width) or 1.5 + 0.25 * len(panels) + 0.22 * devices
    fig = new_figure(width, height, st)
    suptitle = wrap_text(suptitle, 0.98 * width, 11, bold=True) if suptitle else None
    caption = wrap_text(caption, 0.98 * width, CAPTION_FONT) if caption else None
    head = (0.12 + 0.2 * (suptitle.count("\n") + 1) if suptitle else 0.05) + 0.28  # the legend's row
    foot = 0.42 + (0.05 + 0.13 * (caption.count("\n") + 1) if caption else 0.0)  # the time axis, the caption
    title_h = 0.2
    row_h = (height - head - foot - title_h * len(panels)) / devices
    kinds: set[str] = set()
    layered = False
    top = height - head
    for k, ((title, schedule, *_), spans) in enumerate(zip(panels, timings)):
        top -= title_h
        h = row_h * schedule.ranks
        ax = fig.add_axes((0.1, (top - h) / height, 0.86, h / height))
        top -= h
        kinds |= _draw_panel(ax, schedule, spans, unit[0], t_end)
        layered |= schedule.stages > schedule.ranks
        ax.set_title(title, loc="left", fontsize=8.5, fontweight="bold", pad=2)
        if k < len(panels) - 1:
            ax.tick_params(axis="x", labelbottom=False, length=0)
        else:
            ax.set_xlabel(f"time ({unit[1]})", fontsize=8, labelpad=1)
    handles = [Patch(facecolor=PASS_COLORS[k], label=f"{k} {PASS_WORDS[k]}") for k in "FBIW" if k in kinds]
    handles.append(Patch(facecolor=IDLE_COLOR, edgecolor=IDLE_HATCH_COLOR, hatch="////", label="idle: the bubble"))
    if layered:
        handles.append(Patch(facecolor=_lighter(PASS_COLORS["F"], 1), label="lighter: a later stage"))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.005, 1 - (head - 0.3) / height), ncol=len(handles),
               frameon=False, fontsize=8, handlelength=1.3, columnspacing=0.9, handletextpad=0.4)  # fmt: skip
    if suptitle:
        fig.text(0.01, 1 - 0.08 / height, suptitle, ha="left", va="top", fontweight="bold", fontsize=11)
    if caption:
        fig.text(0.01, 0.01, caption, fontsize=CAPTION_FONT, color=CAPTION_COLOR, ha="left", va="bottom")
    return fig


def _draw_panel(ax: Axes, schedule: Schedule, spans, scale: float, t_end: float) -> set[str]:
    """One schedule's rows; returns the passes it shows."""
    p = schedule.ranks
    row_pt = ax.get_position().height * ax.figure.get_figheight() * 72 / p
    ax.set_xlim(0, t_end * 1.01)
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"device {r}" for r in range(p)], fontsize=min(8, 0.8 * row_pt))
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=8)
    for side in ("left", "top", "right"):
        ax.spines[side].set_visible(False)
    step = max(e for rows in spans.values() for _, e, _ in rows) * scale
    idle = [_box(0, step, r - 0.45, r + 0.45) for r in range(p)]
    ax.add_collection(
        PolyCollection(idle, facecolors=IDLE_COLOR, edgecolors=IDLE_HATCH_COLOR, hatch="////", linewidths=0)
    )
    boxes, faces, kinds = [], [], set()
    pt_per_unit = ax.get_position().width * ax.figure.get_figwidth() * 72 / (t_end * 1.01)
    fontsize, least = min(8.5, 0.66 * row_pt), smallest_font(ax.figure)
    for r, rows in spans.items():
        stages = sorted({a.stage for _, _, a in rows})
        for start, end, a in rows:
            t0, t1 = start * scale, end * scale
            face = _lighter(PASS_COLORS[a.kind], stages.index(a.stage))
            boxes.append(_box(t0, t1, r - 0.45, r + 0.45))
            faces.append(face)
            kinds.add(a.kind)
            label, size = _label(a.kind, a.microbatch, (t1 - t0) * pt_per_unit, fontsize, least)
            if label:
                ax.text((t0 + t1) / 2, r, label, ha="center", va="center", fontsize=size, color=text_color(face),
                        fontweight="bold", clip_on=True)  # fmt: skip
    ax.add_collection(PolyCollection(boxes, facecolors=faces, edgecolors="white", linewidths=0.5))
    return kinds


def _label(kind: str, microbatch: int, room: float, fontsize: float, least: float) -> tuple[str, float]:
    """The label a block ``room`` points wide can hold legibly, with its size: ``F3``, or where that needs a font
    under ``least`` its microbatch alone (``3``: the colour says the pass), or nothing."""
    for label in (f"{kind}{microbatch}", f"{microbatch}"):
        size = min(fontsize, (room - 0.6) / (0.7 * len(label)))  # a bold character is about 0.7 em wide
        if size >= least:
            return label, size
    return "", 0.0


def _lighter(color: str, k: int) -> str:
    """``color`` mixed with white, more for a device's later stages (k = 0: the colour itself)."""
    rgb = np.array(mcolors.to_rgb(color))
    return mcolors.to_hex(rgb + (1 - rgb) * min(0.42 * k, 0.7))


def _box(t0: float, t1: float, y0: float, y1: float) -> np.ndarray:
    return np.array([(t0, y0), (t1, y0), (t1, y1), (t0, y1)])
