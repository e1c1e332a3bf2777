"""Timeline diagrams (Gantt charts) of a run: what every device did, and every message between them.

One row per device (device 0 at the top). Each row has:

- a compute bar: one coloured box per op; consecutive ops with one label are one block, labelled
  where it fits (a training step's ops by pass and microbatch, ``F3``, ``B3``, as the pipeline papers
  draw them; other ops by name); ops whose names differ only in numbers share a colour;
- under it, two thin bands: dark where bytes leave the device (its link is busy sending), grey where
  bytes arrive;
- hatched grey where the device computes nothing: idle time, such as pipeline bubbles and waits;
- at the right, the fraction of the run the device spent computing.

An arrow goes from the first byte of every message leaving its source to its arrival at the
destination. The legend lists only what the figure shows. The x axis is simulated time in real
units; the caption states the cost model.
Spans come from ``simulator.views.activity`` (exact link occupation under the run's cost model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch

from ...core.trace import Message, Trace
from ...parallel.schedules.labels import blocks, op_tag
from ..activity import Activity, activity, unpack
from .legend import axes_width, draw_legend, legend_rows
from .style import (
    ARROW_COLOR,
    CAPTION_COLOR,
    CAPTION_FONT,
    CAPTION_LINE,
    IDLE_COLOR,
    IDLE_HATCH_COLOR,
    RECV_COLOR,
    SEND_COLOR,
    TITLE_FONT,
    TITLE_LINE,
    FigureStyle,
    caption_text,
    extra_lines,
    family,
    figure_style,
    new_figure,
    save_figure,
    smallest_font,
    span_colors,
    text_color,
    time_axis,
    wrap_text,
)

if TYPE_CHECKING:
    from ...core.engine import RunResult
    from ...cost.model import CostModel

# Vertical layout of a row centred on y = rank (the axis is inverted: device 0 on top).
COMPUTE = (-0.42, 0.08)
SEND_BAND = (0.11, 0.24)
RECV_BAND = (0.26, 0.39)
MAX_FANCY_ARROWS = 400  # above this, arrows are drawn as one line collection with end marks
MAX_MESSAGE_LABELS = 16  # label arrows only when there are this few messages
MAX_SPANS = 200_000  # more spans than this are drawn as an image instead (simulator.views.plot.busy)


def payload_label(m: Message) -> str:
    """The value a message carries when it is small and the run kept it (a teaching run), else nothing."""
    p = m.payload
    if isinstance(p, np.ndarray) and 0 < p.size <= 4:
        return ", ".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in p.ravel().tolist())
    return ""


def plot_timeline(
    run: RunResult | Trace,
    *,
    cost: CostModel | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    color_key: Callable[[str], str] = family,
    label: Callable[[str], str] = op_tag,
    arrows: bool = True,
    message_label: Callable[[Message], str] | None = payload_label,
    legend: bool = True,
    caption: bool | str = True,
    t_max: float | None = None,
    width: float | None = None,
    height: float | None = None,
    style: str | FigureStyle = "paper",
    row_names: Callable[[int], str] | None = None,
) -> Figure:
    """Draw the timeline of a run; returns the figure (see the module docstring).

    Args:
        color_key: op name -> colour group (default: the name without digits)
        label: op name -> text written in its block (default: pass and microbatch, ``F3``, for a training
            step's ops, else the name); consecutive ops with one label are one block
        style: "paper" or "slide" (larger text, 16:9; see ``simulator.views.plot.style.FigureStyle``)
        message_label: message -> text by its arrow (default: the value it carries, when small), shown
            when there are at most MAX_MESSAGE_LABELS messages; None for no labels
        caption: True for the cost model's description, a string for your own, False for none
        t_max: right end of the time axis (to compare several runs on one scale)
        width: the figure's width in inches (default: the style's)
        height: the figure's height in inches (default: as tall as the rows need, on a slide at most 16:9; give a
            slide's ``FigureStyle.max_height()`` for a full 16:9 slide of few devices)
        row_names: device -> its row's name (default ``device r``), e.g. its mesh coordinate

    A run of more than ``MAX_SPANS`` spans is drawn as an image instead, a pixel row per device
    (``simulator.views.plot.busy.plot_busy``), in seconds rather than minutes.

    Examples:
        >>> import numpy as np
        >>> from simulator import World, plot_timeline
        >>> fig = plot_timeline(World(2).run(lambda dev: dev.all_reduce(np.ones(4))))
        >>> len(fig.axes) >= 1
        True
    """
    trace, cost = unpack(run, cost)
    if len(trace.ops) + 2 * len(trace.messages) > MAX_SPANS:  # a box per span would be unreadable: one pixel row each
        from .busy import plot_busy

        return plot_busy(trace, cost=cost, title=title, width=width or 11.0, caption=caption)
    act = activity(run, cost)
    n = act.world_size
    st = figure_style(style)
    if ax is None:
        fig_w = width or st.width
        rows = legend_rows(act, color_key, arrows, 0.84 * fig_w) if legend else 0
        title = wrap_text(title, 0.84 * fig_w, TITLE_FONT) if title else title
        caption = wrap_text(caption_text(caption, cost), 0.98 * fig_w, CAPTION_FONT) if caption else caption
        extra = 0.3 * max(rows - 1, 0) + TITLE_LINE * extra_lines(title, 1) + CAPTION_LINE * extra_lines(caption, 1)
        cap = st.max_height(fig_w)  # a slide stays 16:9: the device rows take what the margins leave
        fig_h = height or min(figure_height(n, st) + extra, cap or np.inf)
        fig = new_figure(fig_w, fig_h, st)
        ax = fig.add_axes(_axes_box(fig, title, rows, caption))
    else:
        fig = ax.figure
        rows = legend_rows(act, color_key, arrows, axes_width(ax)) if legend else 0
    t_end = t_max if t_max is not None else (act.end_time or 1e-9)
    draw_timeline(
        ax,
        act,
        t_end,
        color_key=color_key,
        label=label,
        arrows=arrows,
        message_label=message_label,
        row_names=row_names,
    )
    if legend:
        draw_legend(ax, act, color_key, arrows)
    if title:
        ax.set_title(title, loc="left", pad=6 + 18 * rows)
    if caption:
        text = caption_text(caption, cost)
        if text:
            fig.text(0.01, 0.005, text, fontsize=CAPTION_FONT, color=CAPTION_COLOR, ha="left", va="bottom")
    return fig


def plot_timelines(
    runs: Sequence[RunResult | Trace],
    titles: Sequence[str],
    *,
    suptitle: str | None = None,
    width: float | None = None,
    caption: bool | str = True,
    style: str | FigureStyle = "paper",
    tags: Sequence[Callable[[str], str]] | None = None,
    **kwargs: Any,
) -> Figure:
    """Several runs stacked on one time scale (e.g. blocking vs overlapped), one panel each.

    One legend, above the first panel, lists what appears in any panel. Titles, the suptitle and the caption
    wrap to the figure's width.

    Args:
        runs: the runs (or traces), one panel each, top to bottom.
        titles: one title per panel.
        suptitle: a title above them all.
        width: the figure's width in inches (default: the style's).
        caption: True for the cost model's description, a string for your own, False for none.
        style: "paper" or "slide" (see ``simulator.views.plot.style.FigureStyle``).
        tags: one block-label function per run (e.g. each pipeline schedule's ``op_tag``), instead of one
            ``label`` for all.
        **kwargs: what ``plot_timeline`` takes besides (``color_key``, ``label``, ``t_max``, ...).

    Returns:
        The matplotlib figure.

    Examples:
        >>> import numpy as np
        >>> from simulator import World, plot_timelines
        >>> runs = [World(2).run(lambda dev: dev.all_reduce(np.ones(4), algorithm=a)) for a in ("ring", "direct")]
        >>> fig = plot_timelines(runs, ["ring", "direct"])
        >>> len(fig.axes) >= 2
        True
    """
    if len(runs) != len(titles):
        raise ValueError(f"plot_timelines: {len(runs)} runs but {len(titles)} titles; give one title per run")
    st = figure_style(style)
    fig_w = width or st.width
    acts = [activity(r) for r in runs]
    both = merged(acts)
    t_end = max(a.end_time for a in acts) or 1e-9
    rows = [_rows_height(a.world_size, st) for a in acts]
    color_key = kwargs.get("color_key", family)
    arrows = kwargs.get("arrows", True)
    labels = list(tags) if tags is not None else [kwargs.pop("label", op_tag)] * len(runs)
    if len(labels) != len(runs):
        raise ValueError(f"plot_timelines: {len(runs)} runs but {len(labels)} tags; give one per run")
    kwargs.pop("label", None)
    titles = [wrap_text(t, 0.84 * fig_w, TITLE_FONT) for t in titles]
    suptitle = wrap_text(suptitle, 0.98 * fig_w, 12, bold=True) if suptitle else suptitle
    text = wrap_text(caption_text(caption, unpack(runs[0])[1]), 0.98 * fig_w, CAPTION_FONT)
    legend_h = 0.3 * legend_rows(both, color_key, arrows, 0.84 * fig_w)
    above = [0.35 + TITLE_LINE * extra_lines(t, 1) + (legend_h if k == 0 else 0) for k, t in enumerate(titles)]
    below = [0.5] * len(acts)  # tick labels and axis label
    head = 0.15 + (0.4 + 0.22 * extra_lines(suptitle, 1)) * bool(suptitle)
    foot = (0.08 + CAPTION_LINE * extra_lines(text)) * bool(text)
    height = head + sum(rows) + sum(above) + sum(below) + foot
    cap = st.max_height(fig_w)
    shared = bool(cap and height > cap)  # a slide stays 16:9: one time axis, under the last panel, and lower rows
    if shared:
        below = [0.12] * (len(acts) - 1) + [0.5]
        margins = head + sum(above) + sum(below) + foot
        room = max(cap - margins, 0.3 * len(acts))
        rows = [r * room / sum(rows) for r in rows]
        height = margins + sum(rows)
    fig = new_figure(fig_w, height, st)
    y = height - head  # inches from the bottom
    for k, (run, title) in enumerate(zip(runs, titles)):
        y -= above[k] + rows[k]
        ax = fig.add_axes((0.09, y / height, 0.84, rows[k] / height))
        plot_timeline(run, ax=ax, title=title, t_max=t_end, legend=False, caption=False, label=labels[k], **kwargs)
        if shared and k < len(acts) - 1:
            ax.tick_params(axis="x", labelbottom=False)
            ax.set_xlabel("")
        if k == 0:
            draw_legend(ax, both, color_key, arrows)
            ax.set_title(title, loc="left", pad=6 + 18 * legend_rows(both, color_key, arrows, axes_width(ax)))
        y -= below[k]
    if suptitle:
        fig.text(0.01, 1 - 0.1 / height, suptitle, ha="left", va="top", fontweight="bold", fontsize=12)
    if text:
        fig.text(0.01, 0.005, text, fontsize=CAPTION_FONT, color=CAPTION_COLOR, ha="left", va="bottom")
    return fig


def save_timeline(
    run: RunResult | Trace, stem: str | Path, formats: Sequence[str] = ("png", "svg"), **kwargs
) -> list[Path]:
    """Plot a run's timeline and save it as ``stem.png`` / ``stem.svg``; returns the paths."""
    return save_figure(plot_timeline(run, **kwargs), stem, formats)


def figure_height(n: int, style: str | FigureStyle = "paper") -> float:
    """Inches for n device rows plus room for title, legend and axis: readable from 2 to 64 devices."""
    return _rows_height(n, figure_style(style)) + 1.6


def _rows_height(n: int, st: FigureStyle) -> float:
    return min(0.55 * n, max(min(5.5, st.rows_height), min(0.2 * n, st.rows_height)))


def merged(acts: Sequence[Activity]) -> Activity:
    """One Activity holding every span and message of several (for a legend shared by stacked panels)."""
    return Activity(
        max(a.world_size for a in acts),
        [s for a in acts for s in a.spans],
        [m for a in acts for m in a.messages],
        max(a.end_time for a in acts),
        {},
    )


def draw_timeline(
    ax: Axes,
    act: Activity,
    t_end: float,
    *,
    color_key: Callable[[str], str] = family,
    label: Callable[[str], str] = op_tag,
    arrows: bool = True,
    message_label: Callable[[Message], str] | None = None,
    row_names: Callable[[int], str] | None = None,
) -> None:
    """Draw an Activity into existing axes."""
    n = act.world_size
    ax.set_xlim(0, t_end * 1.005)
    ax.set_ylim(n - 0.5, -0.6)
    time_axis(ax, t_end)
    _device_ticks(ax, n, row_names or (lambda r: f"device {r}"))
    for side in ("left", "top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#e4e4e4", linewidth=0.6)
    ax.set_axisbelow(True)

    # idle background: the compute lane from 0 to the run's end, covered by ops where busy
    idle = [_box(0.0, act.end_time, r + COMPUTE[0], r + COMPUTE[1]) for r in range(n)]
    ax.add_collection(
        PolyCollection(idle, facecolors=IDLE_COLOR, edgecolors=IDLE_HATCH_COLOR, hatch="////", linewidths=0)
    )

    colors = span_colors(act.spans, color_key)
    boxes, faces, comm_boxes, comm_faces = [], [], [], []
    for s in act.spans:
        y0, y1 = _span_y(act, s)
        if s.track == "compute":
            boxes.append(_box(s.t0, s.t1, y0, y1))
            faces.append(colors[color_key(s.name)])
        else:
            comm_boxes.append(_box(s.t0, s.t1, y0, y1))
            comm_faces.append(SEND_COLOR if s.track == "send" else RECV_COLOR)
    edge = 0.6 if len(boxes) < 600 else 0.0
    ax.add_collection(PolyCollection(boxes, facecolors=faces, edgecolors="white", linewidths=edge))
    # thin white edges keep back-to-back messages on one link apart
    comm_edge = 0.6 if len(comm_boxes) < 600 else 0.0
    ax.add_collection(PolyCollection(comm_boxes, facecolors=comm_faces, edgecolors="white", linewidths=comm_edge))
    _op_labels(ax, act, colors, color_key, label)
    if arrows:
        _arrows(ax, act)
        if message_label is not None and len(act.messages) <= MAX_MESSAGE_LABELS:
            _message_labels(ax, act, message_label)
    _utilization(ax, act)


def _row_points(ax: Axes, n: int) -> float:
    """How tall one device's row is drawn, in points."""
    return ax.get_position().height * ax.figure.get_figheight() * 72 / max(n, 1)


def _label_step(ax: Axes, n: int, fontsize: float, step: int = 1) -> int:
    """Label every k-th row: k from ``step`` up, doubled until the labels do not overlap."""
    while step < n and step * _row_points(ax, n) < 1.15 * fontsize:
        step *= 2
    return step


def _device_ticks(ax: Axes, n: int, name: Callable[[int], str]) -> None:
    fontsize = max(9 if n <= 16 else 7, smallest_font(ax.figure))
    ticks = list(range(0, n, _label_step(ax, n, fontsize, 1 if n <= 16 else (2 if n <= 32 else 4))))
    ax.set_yticks(ticks)
    ax.set_yticklabels([name(r) for r in ticks], fontsize=fontsize)
    ax.set_yticks(range(n), minor=True)


def _span_y(act: Activity, s) -> tuple[float, float]:
    if s.track == "compute":
        return s.rank + COMPUTE[0], s.rank + COMPUTE[1]
    lo, hi = SEND_BAND if s.track == "send" else RECV_BAND
    lanes = act.lanes.get((s.rank, s.track), 1)
    h = (hi - lo) / lanes
    return s.rank + lo + s.lane * h, s.rank + lo + (s.lane + 1) * h


def _box(t0: float, t1: float, y0: float, y1: float) -> np.ndarray:
    return np.array([(t0, y0), (t1, y0), (t1, y1), (t0, y1)])


def _op_labels(ax: Axes, act: Activity, colors, color_key, label) -> None:
    """Write labels inside blocks (consecutive ops of one label) wide and tall enough to hold them: a
    block too narrow for its label at the usual size gets a smaller font, down to the figure's smallest_font."""
    fig = ax.figure
    bbox = ax.get_position()
    width_px = bbox.width * fig.get_figwidth() * 72  # points
    row_pt = bbox.height * fig.get_figheight() * 72 / max(act.world_size, 1)
    least = smallest_font(fig)
    fontsize = min(9.0, max(least, row_pt * 0.3))
    if row_pt * (COMPUTE[1] - COMPUTE[0]) < fontsize * 1.05:
        return
    x0, x1 = ax.get_xlim()
    pt_per_s = width_px / (x1 - x0)
    for rank in range(act.world_size):
        spans = act.of(rank, "compute")
        face = {s.t0: colors[color_key(s.name)] for s in spans}
        for t0, t1, text in blocks(spans, label):
            room = (t1 - t0) * pt_per_s - 2
            size = min(fontsize, room / max(len(text) * 0.62, 1e-9))
            if not text or size < least:
                continue
            ax.text(
                (t0 + t1) / 2,
                rank + (COMPUTE[0] + COMPUTE[1]) / 2,
                text,
                ha="center",
                va="center",
                fontsize=size,
                color=text_color(face[t0]),
                clip_on=True,
                zorder=5,  # above the arrows
            )


def _arrows(ax: Axes, act: Activity) -> None:
    ends = []
    for m in act.messages:
        y0 = m.src + (SEND_BAND[0] + SEND_BAND[1]) / 2
        y1 = m.dst + (RECV_BAND[0] + RECV_BAND[1]) / 2
        ends.append(((m.t_start, y0), (m.t_arrive, y1)))
    if not ends:
        return
    if len(ends) <= MAX_FANCY_ARROWS:
        for a, b in ends:
            ax.add_patch(
                FancyArrowPatch(
                    a, b, arrowstyle="-|>", mutation_scale=7, linewidth=0.7, color=ARROW_COLOR, alpha=0.8, zorder=4
                )
            )
        return
    # many messages: a thin line per message, a dot where it leaves and a tick where it lands
    ax.add_collection(LineCollection(ends, colors=ARROW_COLOR, linewidths=0.35, alpha=0.45, zorder=4))
    starts = np.array([a for a, _ in ends])
    arrivals = np.array([b for _, b in ends])
    ax.scatter(starts[:, 0], starts[:, 1], s=2, color=ARROW_COLOR, zorder=5, linewidths=0)
    ax.scatter(arrivals[:, 0], arrivals[:, 1], s=6, marker="v", color=ARROW_COLOR, zorder=5, linewidths=0)


def _message_labels(ax: Axes, act: Activity, message_label: Callable[[Message], str]) -> None:
    for m in act.messages:
        text = message_label(m)
        if not text:
            continue
        y0 = m.src + (SEND_BAND[0] + SEND_BAND[1]) / 2
        y1 = m.dst + (RECV_BAND[0] + RECV_BAND[1]) / 2
        ax.text(
            (m.t_start + m.t_arrive) / 2,
            (y0 + y1) / 2,
            text,
            ha="center",
            va="center",
            fontsize=9,
            fontweight="bold",
            color=ARROW_COLOR,
            zorder=6,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
        )


def _utilization(ax: Axes, act: Activity) -> None:
    if act.end_time <= 0:
        return
    n = act.world_size
    fontsize = max(8 if n <= 16 else 6, smallest_font(ax.figure))
    for r in range(0, n, _label_step(ax, n, fontsize, 1 if n <= 32 else 2)):
        frac = act.busy(r) / act.end_time
        ax.text(
            1.005,
            r,
            f"{frac:.0%}",
            transform=ax.get_yaxis_transform(),
            ha="left",
            va="center",
            fontsize=fontsize,
            color=CAPTION_COLOR,
        )
    ax.text(1.005, 1.0, "busy", transform=ax.transAxes, ha="left", va="bottom", fontsize=fontsize, color=CAPTION_COLOR)


def _axes_box(
    fig: Figure, title: str | None, legend_rows: int, caption: bool | str
) -> tuple[float, float, float, float]:
    """Axes position with fixed margins in inches: title and legend above, axis label and caption below."""
    h = fig.get_figheight()
    top = 1 - (0.15 + (0.35 + TITLE_LINE * extra_lines(title, 1)) * bool(title) + 0.3 * legend_rows) / h
    bottom = (0.55 + (0.08 + CAPTION_LINE * extra_lines(caption)) * bool(caption)) / h
    return (0.09, bottom, 0.84, top - bottom)
