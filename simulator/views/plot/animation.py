"""An animation of a run's messages, for classroom slides (a GIF, through matplotlib's Pillow writer).

Devices sit on a circle (two devices side by side), in a 16:9 frame at least 1600 px wide whose text
grows with it, so it reads on a projector. In each frame, at simulated time t:

- a device is filled with the colour of the op it is running (the op name under it), white when idle;
- every message in flight is a dot on the line from its source to its destination, at the fraction
  of its flight time elapsed (from its first byte leaving to its arrival), with its name beside it
  when few messages are in flight.

Frames are evenly spaced in time, plus one at the middle of every message's flight (up to a cap),
so even a short message shows up in at least one frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.animation import FuncAnimation, PillowWriter
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.patches import Circle

from ...core.files import atomic_path
from ...core.trace import Trace
from ...cost.units import time_unit
from ..activity import activity
from .style import ARROW_COLOR, CAPTION_COLOR, FigureStyle, assign_colors, family, figure_style, new_figure, text_color

if TYPE_CHECKING:
    from ...core.engine import RunResult
    from ...cost.model import CostModel

MAX_FRAMES = 240
GIF_MIN_PIXELS = 1600  # every GIF is at least this wide: slides are projected at 1600 to 1920 px


def frame_times(run: RunResult | Trace, frames: int = 60, cost: CostModel | None = None) -> np.ndarray:
    """The simulated times the animation shows (see the module docstring)."""
    act = activity(run, cost)
    end = act.end_time
    uniform = np.linspace(0.0, end, max(frames, 2))
    mids = np.array([(m.t_start + m.t_arrive) / 2 for m in act.messages])
    if len(mids) > MAX_FRAMES - len(uniform):
        mids = mids[np.linspace(0, len(mids) - 1, max(MAX_FRAMES - len(uniform), 0)).astype(int)]
    return np.unique(np.concatenate([uniform, mids]))


def animate_messages(
    run: RunResult | Trace,
    path: str | Path,
    *,
    cost: CostModel | None = None,
    frames: int = 60,
    fps: int = 8,
    title: str | None = None,
    size: float | None = None,
    style: str | FigureStyle = "slide",
) -> Path:
    """Write a GIF of the run's messages to ``path``; returns the path.

    style: "slide" (the default: 16:9, 1600 px wide, text sized for a projector) or "paper";
    size:  the width in inches (default: the style's); text keeps its size, so a wider GIF has
           relatively smaller text
    """
    st = figure_style(style)
    width = size or st.width
    k = width / 6.0  # text grows with the frame: as readable at every width
    dpi = max(GIF_MIN_PIXELS / width, 1.0)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    act = activity(run, cost)
    n = act.world_size
    times = frame_times(run, frames, cost)
    pos = _positions(n)
    unit, scale = time_unit(act.end_time or 1e-9)
    unit = unit.replace("us", "µs")
    colors = assign_colors([family(s.name) for s in act.spans if s.track == "compute"])
    ops = [[s for s in act.of(r, "compute") if s.t1 > s.t0] for r in range(n)]

    fig = new_figure(width, width * 9 / 16, st)
    FigureCanvasAgg(fig)
    fig._shown = True  # the GIF is the picture; the still frame need not show in a notebook
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.84))
    ax.set_aspect("equal")
    ax.axis("off")
    pad = 0.45
    ax.set_xlim(pos[:, 0].min() - pad, pos[:, 0].max() + pad)
    ax.set_ylim(pos[:, 1].min() - pad, pos[:, 1].max() + pad)
    radius = min(0.2, 1.2 / max(n, 1)) if n > 2 else 0.22
    font = (10 if n <= 8 else (7 if n <= 16 else 5)) * k
    circles, op_texts, numbers = [], [], []
    for r in range(n):
        c = Circle(pos[r], radius, facecolor="white", edgecolor="#333333", linewidth=1.2, zorder=3)
        ax.add_patch(c)
        circles.append(c)
        numbers.append(ax.text(*pos[r], str(r), ha="center", va="center", fontsize=font, zorder=4, fontweight="bold"))
        op_texts.append(
            ax.text(pos[r][0], pos[r][1] - radius * 1.25, "", ha="center", va="top", fontsize=font - 1, zorder=4)
        )
    paths = LineCollection([], colors=ARROW_COLOR, linewidths=0.8, alpha=0.35, zorder=1)
    ax.add_collection(paths)
    dots = ax.scatter([], [], s=(60 if n <= 8 else 14) * k * k, color="#D55E00", zorder=5, edgecolors="white",
                      linewidths=0.8)  # fmt: skip
    labels = [ax.text(0, 0, "", fontsize=9 * k, color="#A33F00", zorder=6, fontweight="bold") for _ in range(6)]
    heading = fig.text(0.02, 0.97, title or "", ha="left", va="top", fontsize=12 * k, fontweight="bold")
    clock = fig.text(0.98, 0.97, "", ha="right", va="top", fontsize=11 * k, color=CAPTION_COLOR)

    def draw(i: int):
        t = times[i]
        for r in range(n):
            running = next((s for s in ops[r] if s.t0 <= t < s.t1), None)
            face = colors[family(running.name)] if running else "white"
            circles[r].set_facecolor(face)
            numbers[r].set_color(text_color(face))
            op_texts[r].set_text(running.name if running else "")
        flying = [m for m in act.messages if m.t_start <= t <= m.t_arrive]
        segs, pts = [], []
        for m in flying:
            a, b = _lane(pos[m.src], pos[m.dst], radius)
            span = m.t_arrive - m.t_start
            f = (t - m.t_start) / span if span > 0 else 1.0
            segs.append((a, b))
            pts.append(a + (b - a) * f)
        paths.set_segments(segs)
        dots.set_offsets(np.array(pts) if pts else np.empty((0, 2)))
        for k, lab in enumerate(labels):
            if k < len(flying) and len(flying) <= len(labels):
                m = flying[k]
                lab.set_position(pts[k] + np.array([0.05, 0.05]))
                lab.set_text(m.name or m.label or f"#{m.id}")
            else:
                lab.set_text("")
        clock.set_text(f"t = {t * scale:.4g} {unit}")
        return [*circles, *op_texts, paths, dots, *labels, heading, clock]

    anim = FuncAnimation(fig, draw, frames=len(times), blit=False)
    with atomic_path(path) as tmp:  # a failed save leaves the previous animation intact
        anim.save(tmp, writer=PillowWriter(fps=fps, metadata={"software": "parallelism-simulator"}), dpi=dpi)
    return path


def _positions(n: int) -> np.ndarray:
    """Device centres: side by side for two, else on a unit circle with device 0 at the top, clockwise."""
    if n == 1:
        return np.zeros((1, 2))
    if n == 2:
        return np.array([[-1.0, 0.0], [1.0, 0.0]])
    angles = np.pi / 2 - 2 * np.pi * np.arange(n) / n
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)


def _lane(a: np.ndarray, b: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """The path of a message from circle a to circle b: rim to rim, shifted to its right-hand side so
    that messages in the two directions between one pair travel on separate lanes."""
    d = b - a
    length = float(np.hypot(*d)) or 1.0
    u = d / length
    side = np.array([u[1], -u[0]]) * radius * 0.45
    return a + u * radius * 1.05 + side, b - u * radius * 1.05 + side
