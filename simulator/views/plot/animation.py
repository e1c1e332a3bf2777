"""An animation of a run's messages, for classroom slides (a GIF, each frame drawn by Agg and written by Pillow).

Devices sit on a circle (two devices side by side), in a 16:9 frame at least 1600 px wide whose text
grows with it, so it reads on a projector. In each frame, at simulated time t:

- a device is filled with the colour of the op it is running (the op name under it), white when idle,
  and says the value its last op made (when the run kept values);
- every message in flight is a dot on the line from its source to its destination, at the fraction
  of its flight time elapsed (from its first byte leaving to its arrival), with the value it carries
  (or its name) beside the line, clear of the devices, when few messages are in flight;
- under them, the timeline so far: each device's ops, its idle time hatched (the bubble), a cursor at t,
  and each device's idle time up to t.

Frames are evenly spaced in time, plus one at the middle of every message's flight (up to a cap),
so even a short message shows up in at least one frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.patches import Circle, Rectangle
from PIL import Image

from ...core.files import atomic_path
from ...core.trace import Trace
from ...cost.units import time_unit
from ...parallel.schedules.labels import blocks, op_tag
from ..activity import activity, unpack
from .style import (
    ARROW_COLOR,
    CAPTION_COLOR,
    IDLE_COLOR,
    IDLE_HATCH_COLOR,
    FigureStyle,
    family,
    figure_style,
    new_figure,
    span_colors,
    text_color,
)

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
    timeline: bool = True,
) -> Path:
    """Write a GIF of the run's messages to ``path``; returns the path.

    style: "slide" (the default: 16:9, 1600 px wide, text sized for a projector) or "paper";
    size:  the width in inches (default: the style's); text keeps its size, so a wider GIF has
           relatively smaller text
    timeline: draw the timeline so far under the devices, with the idle time (the bubble)
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
    colors = span_colors(act.spans, family)
    ops = [[s for s in act.of(r, "compute") if s.t1 > s.t0] for r in range(n)]

    made = _values_made(run, n)
    fig = new_figure(width, width * 9 / 16, st)
    FigureCanvasAgg(fig)
    fig._shown = True  # the GIF is the picture; the still frame need not show in a notebook
    ax = fig.add_axes((0.02, 0.35, 0.96, 0.52) if timeline else (0.02, 0.02, 0.96, 0.84))
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
        outside = pos[r] / (np.hypot(*pos[r]) or 1.0) if n > 2 else np.array([0.0, -1.0])  # away from the middle
        side = "left" if outside[0] > 0.5 else "right" if outside[0] < -0.5 else "center"  # text grows outwards
        where = pos[r] + outside * radius * (1.25 if side == "center" else 1.15)
        op_texts.append(ax.text(*where, "", ha=side, va="top" if outside[1] < -0.5 else "bottom" if outside[1] > 0.5
                                else "center", fontsize=font - 1, zorder=4, linespacing=1.1))  # fmt: skip
    paths = LineCollection([], colors=ARROW_COLOR, linewidths=0.8, alpha=0.35, zorder=1)
    ax.add_collection(paths)
    dots = ax.scatter([], [], s=(60 if n <= 8 else 14) * k * k, color="#D55E00", zorder=5, edgecolors="white",
                      linewidths=0.8)  # fmt: skip
    labels = [
        ax.text(0, 0, "", fontsize=8 * k, color="#A33F00", zorder=6, fontweight="bold", ha="center", va="center",
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
        for _ in range(6)
    ]  # fmt: skip
    heading = fig.text(0.02, 0.97, title or "", ha="left", va="top", fontsize=12 * k, fontweight="bold")
    clock = fig.text(0.98, 0.9, "", ha="right", va="top", fontsize=11 * k, color=CAPTION_COLOR)  # under the title
    strip = _TimelineStrip(fig, act, colors, scale, unit, k) if timeline else None

    def draw(i: int):
        t = times[i]
        for r in range(n):
            running = next((s for s in ops[r] if s.t0 <= t < s.t1), None)
            face = colors[family(running.name)] if running else "white"
            circles[r].set_facecolor(face)
            numbers[r].set_color(text_color(face))
            last = next((text for t_end, text in reversed(made[r]) if t_end <= t), "")
            op_texts[r].set_text("\n".join(x for x in (running.name if running else "", last) if x))
        flying = [m for m in act.messages if m.t_start <= t <= m.t_arrive]
        segs, pts, fracs = [], [], []
        for m in flying:
            a, b = _lane(pos[m.src], pos[m.dst], radius)
            span = m.t_arrive - m.t_start
            f = (t - m.t_start) / span if span > 0 else 1.0
            segs.append((a, b))
            pts.append(a + (b - a) * f)
            fracs.append(f)
        paths.set_segments(segs)
        dots.set_offsets(np.array(pts) if pts else np.empty((0, 2)))
        centre = pos.mean(axis=0)
        for j, lab in enumerate(labels):
            m = flying[j] if j < len(flying) and len(flying) <= len(labels) else None
            if m is None or not 0.15 <= fracs[j] <= 0.85:  # near a device the label would cover it
                lab.set_text("")
                continue
            a, b = segs[j]
            d = (b - a) / (np.hypot(*(b - a)) or 1.0)
            away = pts[j] - centre  # outside the ring, where no other lane runs; beside the lane if at the middle
            away = away / np.hypot(*away) if np.hypot(*away) > 1e-9 else np.array([d[1], -d[0]])
            lab.set_position(pts[j] + away * radius * 0.9)
            lab.set_horizontalalignment(
                "left" if away[0] > 0.3 else "right" if away[0] < -0.3 else "center"
            )  # grows outwards
            lab.set_text(_carried(m))
        label_layout(fig, labels)
        clock.set_text(f"t = {t * scale:.4g} {unit}")
        moved = strip.draw(t) if strip else []
        return [*circles, *op_texts, paths, dots, *labels, heading, clock, *moved]

    with atomic_path(path) as tmp:  # a failed save leaves the previous animation intact
        write_gif(fig, draw, len(times), tmp, fps=fps, dpi=dpi)
    return path


def write_gif(fig, draw, frames: int, path: str | Path, *, fps: int, dpi: float) -> None:
    """Draw ``frames`` frames (``draw(i)`` updates the figure) and write them as a looping GIF.

    Each frame is drawn once (matplotlib's Pillow writer draws it twice) and cut to 256 colours by maximum
    coverage, which on these frames is within 4 levels of every pixel where median cut, GIF's default, is
    slower and misses by up to 66, and the fast octree loses the faint hatching of idle time to come."""
    fig.set_dpi(dpi)
    images = []
    for i in range(frames):
        draw(i)
        fig.canvas.draw()
        rgba = Image.frombuffer("RGBA", fig.canvas.get_width_height(physical=True), fig.canvas.buffer_rgba())
        images.append(rgba.convert("RGB").quantize(method=Image.Quantize.MAXCOVERAGE))
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


def label_layout(fig, labels) -> list:
    """Hide each message label that would overlap one shown before it (a GIF's labels never overlap: a dot
    without its label is still counted by the timeline); returns the shown labels' boxes, in pixels."""
    renderer = fig.canvas.get_renderer()
    shown = []
    for lab in labels:
        if not lab.get_text():
            continue
        box = lab.get_window_extent(renderer).padded(2)
        if any(box.overlaps(other) for other in shown):
            lab.set_text("")
            continue
        shown.append(box)
    return shown


class _TimelineStrip:
    """The timeline so far, under the devices: each device's ops, idle time hatched, the future faded."""

    def __init__(self, fig, act, colors, scale: float, unit: str, k: float) -> None:
        n, end = act.world_size, act.end_time or 1e-9
        self.act, self.end, self.scale, self.unit = act, end, scale, unit
        ax = fig.add_axes((0.1, 0.1, 0.78, 0.19))
        ax.set_xlim(0, end)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_yticks(range(n))
        ax.set_yticklabels([f"device {r}" for r in range(n)], fontsize=7 * k)
        ax.tick_params(axis="both", length=0, labelsize=7 * k)
        ax.xaxis.set_major_formatter(lambda x, _pos: f"{x * scale:.3g}")
        ax.set_xlabel(f"time ({unit})", fontsize=7 * k, labelpad=1)
        for side in ("left", "top", "right"):
            ax.spines[side].set_visible(False)
        idle = [_box(0, end, r - 0.35, r + 0.35) for r in range(n)]
        ax.add_collection(PolyCollection(idle, facecolors=IDLE_COLOR, edgecolors=IDLE_HATCH_COLOR, hatch="////",
                                         linewidths=0))  # fmt: skip
        spans = [s for s in act.spans if s.track == "compute" and s.t1 > s.t0]
        ax.add_collection(PolyCollection([_box(s.t0, s.t1, s.rank - 0.35, s.rank + 0.35) for s in spans],
                                         facecolors=[colors[family(s.name)] for s in spans], edgecolors="white",
                                         linewidths=0.4))  # fmt: skip
        room = 0.78 * fig.get_figwidth() * 72 / end  # points per second of the axis
        for r in range(n):
            for t0, t1, text in blocks([s for s in spans if s.rank == r], op_tag):
                if text and (t1 - t0) * room > 0.62 * 7 * k * len(text) + 2:
                    face = colors[family(next(s.name for s in spans if s.rank == r and s.t0 == t0))]
                    ax.text((t0 + t1) / 2, r, text, ha="center", va="center", fontsize=7 * k, color=text_color(face),
                            zorder=2)  # fmt: skip
        self.future = ax.add_patch(
            Rectangle((0, -0.5), end, n, facecolor="white", alpha=0.8, edgecolor="none", zorder=3)
        )
        self.cursor = ax.axvline(0, color="#D55E00", linewidth=1.5, zorder=4)
        self.idle = [ax.text(1.01, r, "", transform=ax.get_yaxis_transform(), fontsize=6.5 * k, va="center",
                             color=CAPTION_COLOR) for r in range(n)]  # fmt: skip
        ax.text(1.01, 1.02, "idle so far\n(the bubble)", transform=ax.transAxes, fontsize=6.5 * k, va="bottom",
                color=CAPTION_COLOR)  # fmt: skip

    def draw(self, t: float) -> list:
        self.future.set_x(t)
        self.future.set_width(max(self.end - t, 0))
        self.cursor.set_xdata([t, t])
        for r, text in enumerate(self.idle):
            busy = sum(min(s.t1, t) - s.t0 for s in self.act.of(r, "compute") if s.t0 < t)
            text.set_text(f"{(t - busy) * self.scale:.3g} {self.unit}")
        return [self.future, self.cursor, *self.idle]


def _box(t0: float, t1: float, y0: float, y1: float) -> np.ndarray:
    return np.array([(t0, y0), (t1, y0), (t1, y1), (t0, y1)])


def _short(value) -> str:
    """A value in a few characters: up to three numbers, then ..."""
    a = np.asarray(value) if value is not None else None
    if a is None or a.dtype == object or a.size == 0:
        return ""
    flat = a.reshape(-1)
    head = ", ".join(f"{x:.3g}" for x in flat[:3])
    return f"[{head}{', ...' if flat.size > 3 else ''}]"


def _carried(m) -> str:
    """What a message carries, for the label by its dot: its name and value where the run kept it."""
    value = _short(getattr(m, "payload", None))
    name = m.name or m.label or f"#{m.id}"
    return f"{name} = {value}" if value and m.name else value or name


def _values_made(run, n: int) -> list[list[tuple[float, str]]]:
    """Per device, (when, "name = value") for each op that kept its value, in time order."""
    trace, _ = unpack(run, None)
    made: list[list[tuple[float, str]]] = [[] for _ in range(n)]
    for op in trace.ops:
        value = _short(op.output)
        if value and op.keep:
            made[op.rank].append((op.t_end, f"{op.name} = {value}"))
    return made


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
