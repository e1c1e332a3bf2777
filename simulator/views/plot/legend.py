"""The legend of a timeline: what the figure shows, and only that.

Op colours that appear, idle time if some device idles, the sending and receiving bands if bytes move,
the message arrow if arrows are drawn; stacked panels share one legend listing what any of them shows.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..activity import Activity
from .style import ARROW_COLOR, IDLE_COLOR, IDLE_HATCH_COLOR, RECV_COLOR, SEND_COLOR, span_colors

LEGEND_COLUMNS = 7


def legend_rows(act: Activity, color_key, arrows: bool = True) -> int:
    """How many rows the legend above the axes takes (the title and layout leave room for them)."""
    return -(-len(legend_handles(act, color_key, arrows)) // LEGEND_COLUMNS)


def draw_legend(ax: Axes, act: Activity, color_key, arrows: bool = True) -> None:
    handles = legend_handles(act, color_key, arrows)
    if not handles:
        return
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=min(len(handles), LEGEND_COLUMNS),
        frameon=False,
        fontsize=8,
        handlelength=1.6,
        columnspacing=1.2,
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
