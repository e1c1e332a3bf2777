"""The legend of a timeline: what the figure shows, and only that.

Op colours that appear, idle time if some device idles, the sending and receiving bands if bytes move,
the message arrow if arrows are drawn; stacked panels share one legend listing what any of them shows.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.textpath import TextToPath

from ..activity import Activity
from .style import ARROW_COLOR, IDLE_COLOR, IDLE_HATCH_COLOR, RECV_COLOR, SEND_COLOR, span_colors

LEGEND_COLUMNS = 7


LEGEND_FONT = 8  # points
# the legend's spacings, in units of its font size (as matplotlib measures them)
HANDLE, HANDLE_PAD, COLUMN_GAP = 1.6, 0.8, 1.2


def legend_columns(handles: list, width_in: float | None = None) -> int:
    """How many columns the legend gets: at most LEGEND_COLUMNS, and no more than fit ``width_in`` inches
    (the axes' width; to their right is the "busy" column), the labels measured in the legend's font."""
    n = max(min(len(handles), LEGEND_COLUMNS), 1)
    if width_in is None:
        return n
    em = LEGEND_FONT / 72
    font = FontProperties(size=LEGEND_FONT)
    text = TextToPath()
    entries = [
        (HANDLE + HANDLE_PAD) * em + text.get_text_width_height_descent(h.get_label(), font, ismath=False)[0] / 72
        for h in handles
    ]
    for cols in range(n, 1, -1):
        rows = -(-len(entries) // cols)  # matplotlib fills the columns top to bottom
        widths = [max(entries[c * rows : (c + 1) * rows], default=0.0) for c in range(cols)]
        if sum(widths) + COLUMN_GAP * em * (cols - 1) <= width_in:
            return cols
    return 1


def legend_rows(act: Activity, color_key, arrows: bool = True, width_in: float | None = None) -> int:
    """How many rows the legend above the axes takes (the title and layout leave room for them)."""
    handles = legend_handles(act, color_key, arrows)
    return -(-len(handles) // legend_columns(handles, width_in))


def axes_width(ax: Axes) -> float:
    """The axes' width in inches."""
    return ax.get_position().width * ax.figure.get_figwidth()


def draw_legend(ax: Axes, act: Activity, color_key, arrows: bool = True) -> None:
    handles = legend_handles(act, color_key, arrows)
    if not handles:
        return
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=legend_columns(handles, axes_width(ax)),
        frameon=False,
        fontsize=LEGEND_FONT,
        handlelength=HANDLE,
        handletextpad=HANDLE_PAD,
        columnspacing=COLUMN_GAP,
        borderaxespad=0.2,
    )


def legend_handles(act: Activity, color_key, arrows: bool = True) -> list:
    """Legend entries for what the figure shows, and only that: the op colours of ops that take time, idle
    time if any device idles, sending and receiving bands if any bytes move, the message arrow if drawn."""
    shown = {
        color_key(s.name) for s in act.spans if s.track == "compute" and s.t1 > s.t0
    }  # an op of no time is not drawn
    colors = [(k, c) for k, c in span_colors(act.spans, color_key).items() if k in shown]  # as the timeline's
    handles = [Patch(facecolor=c, label=k) for k, c in colors[:8]]
    if len(colors) > 8:
        handles.append(Patch(facecolor="white", edgecolor="none", label=f"+{len(colors) - 8} more"))
    if any(act.idle_gaps(r, min_gap=act.end_time * 1e-9) for r in range(act.world_size)):
        handles.append(Patch(facecolor=IDLE_COLOR, edgecolor=IDLE_HATCH_COLOR, hatch="////", label="idle"))
    tracks = {s.track for s in act.spans if s.t1 > s.t0}
    if "send" in tracks:
        handles.append(Patch(facecolor=SEND_COLOR, label="sending"))
    if "recv" in tracks:
        handles.append(Patch(facecolor=RECV_COLOR, label="receiving"))
    if arrows and act.messages:
        handles.append(Line2D([], [], color=ARROW_COLOR, marker=">", markersize=4, linewidth=0.8, label="message"))
    return handles
