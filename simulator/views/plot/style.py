"""Shared look of every figure: colours, fonts, time axes, and saving with stable file contents.

Figures are made with ``matplotlib.figure.Figure`` directly (never pyplot), so nothing is kept in
matplotlib's global figure list and any backend works; in Jupyter they show themselves
(``simulator.views.plot.jupyter``). Every figure takes a style: ``"paper"`` or ``"slide"`` (``FigureStyle``). ``save_figure`` strips dates and fixes SVG
ids, so regenerating an unchanged figure gives the same bytes (clean diffs for committed figures).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ...core.files import atomic_write
from ...cost.units import time_unit
from .jupyter import _png, remember

# Okabe-Ito colours (distinguishable with the common forms of colour blindness), then extras.
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#8C6D31",
    "#6B6ECF",
    "#9C9EDE",
    "#B5CF6B",
    "#E7969C",
)
SEND_COLOR = "#3b3b3b"
RECV_COLOR = "#9a9a9a"
ARROW_COLOR = "#222222"
IDLE_COLOR = "#efefef"
IDLE_HATCH_COLOR = "#c8c8c8"
CAPTION_COLOR = "#555555"

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "parallelism-simulator",  # stable ids inside SVG files
    "svg.fonttype": "none",  # text stays text in SVG (smaller, searchable, editable)
    "hatch.linewidth": 0.6,
}

_METADATA = {
    "svg": {"Date": None, "Creator": "parallelism-simulator"},
    "png": {"Software": "parallelism-simulator"},
    "pdf": {"CreationDate": None, "Creator": "parallelism-simulator", "Producer": None},
}


SHOWN_WIDTH, LEGIBLE_PX = 1280, 14  # a projector 1280 pixels wide, and the least text height a room reads on it
PRINT_FONT = 5.5  # points


@dataclass(frozen=True)
class FigureStyle:
    """Where a figure will be seen, and so how it is drawn.

    Fonts are in points and layouts in inches, so a figure drawn narrower has relatively larger text;
    saved at more dots per inch it is as many pixels wide. Both styles give images at least 1600 px wide.

    name:        "paper" (documents, READMEs) or "slide" (projected in a room)
    width:       the default figure width, inches
    dpi:         dots per inch of saved PNGs and GIFs
    rows_height: at most this many inches of device rows in a timeline (a slide is 16:9)
    aspect:      the least width over height of a figure (16/9: a slide's; None: as tall as it needs)
    projected:   shown on a screen in a room: no text under LEGIBLE_PX pixels when the image is SHOWN_WIDTH wide
    """

    name: str
    width: float
    dpi: int
    rows_height: float
    aspect: float | None = None
    projected: bool = False

    @property
    def pixels(self) -> int:
        """Width of a saved image of the default width, in pixels."""
        return round(self.width * self.dpi)

    def max_height(self, width: float | None = None) -> float | None:
        """The tallest a figure ``width`` inches wide may be (None: no limit)."""
        return None if self.aspect is None else (width or self.width) / self.aspect

    def smallest_font(self, width: float | None = None) -> float:
        """The smallest text, in points, a figure ``width`` inches wide may carry: on a projected figure
        LEGIBLE_PX pixels when the image is shown SHOWN_WIDTH pixels wide (6.3 pt on an 8-inch slide), on paper
        PRINT_FONT (printed, it can be read up close)."""
        if not self.projected:
            return PRINT_FONT
        return LEGIBLE_PX * 72 * (width or self.width) / SHOWN_WIDTH


PAPER = FigureStyle("paper", width=11.0, dpi=150, rows_height=14.0)  # 1650 px wide
SLIDE = FigureStyle("slide", width=8.0, dpi=240, rows_height=4.4, aspect=16 / 9, projected=True)  # 1920 x 1080 at most
STYLES = {"paper": PAPER, "slide": SLIDE}


def figure_style(style: str | FigureStyle) -> FigureStyle:
    """``"paper"``, ``"slide"`` or a ``FigureStyle`` as a ``FigureStyle``."""
    if isinstance(style, FigureStyle):
        return style
    try:
        return STYLES[style]
    except (KeyError, TypeError):
        raise ValueError(f"style={style!r}: choose one of {', '.join(STYLES)} (or give a FigureStyle)") from None


class SimFigure(Figure):
    """A matplotlib Figure that knows its style and shows itself in Jupyter (see ``simulator.views.plot.jupyter``)."""

    style: FigureStyle = PAPER
    display_dpi = 100  # notebooks show figures at screen resolution; saved files use the style's dpi
    _shown = False

    def _repr_png_(self) -> bytes:
        return _png(self)


def smallest_font(fig: Figure) -> float:
    """The smallest text, in points, ``fig`` may carry (``FigureStyle.smallest_font`` of its style and width)."""
    return getattr(fig, "style", PAPER).smallest_font(fig.get_figwidth())


def new_figure(width: float | None, height: float, style: str | FigureStyle = PAPER) -> SimFigure:
    """A fresh figure under the shared style (not registered with pyplot; shown at the end of a
    Jupyter cell unless shown before). ``width`` None: the style's width."""
    st = figure_style(style)
    with matplotlib.rc_context(RC):
        fig = SimFigure(figsize=(width or st.width, height), dpi=100)
    fig.style = st
    return remember(fig)


def save_figure(
    fig: Figure, stem: str | Path, formats: Iterable[str] = ("png", "svg"), dpi: int | None = None
) -> list[Path]:
    """Save ``fig`` as ``stem.png``, ``stem.svg``, ... with stable contents; returns the paths.

    dpi: dots per inch of a PNG (default: the figure's style's, so that it is at least 1600 px wide).
    """
    dpi = dpi or getattr(fig, "style", PAPER).dpi
    stem = Path(stem)  # (atomic_write makes missing folders)
    paths = []
    with matplotlib.rc_context(RC):
        for fmt in formats:
            path = stem.with_suffix(f".{fmt}")
            with atomic_write(path, "wb") as f:  # a failed save leaves the previous figure intact
                fig.savefig(f, format=fmt, dpi=dpi, metadata=_METADATA.get(fmt), facecolor="white")
            paths.append(path)
    return paths


def wrap_text(text: str, width_in: float, fontsize: float, bold: bool = False) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize`` points (its own line breaks
    kept), so a title written for a wide paper figure still fits a narrower slide."""
    per_char = fontsize * (0.6 if bold else 0.55) / 72  # DejaVu Sans, an average character, in inches
    chars = max(int(width_in / per_char), 20)
    return "\n".join(textwrap.fill(line, chars) or line for line in text.split("\n"))


TITLE_FONT, CAPTION_FONT = 11.0, 7.5  # points (axes.titlesize in style.RC; captions)
TITLE_LINE, CAPTION_LINE = 0.2, 0.14  # inches each further line of a wrapped title or caption takes


def caption_text(caption: bool | str, cost: Any) -> str:
    """The caption's text: the one given, or the cost model's description."""
    if isinstance(caption, str):
        return caption
    return cost.describe() if caption and cost is not None else ""


def extra_lines(text: str | bool | None, beyond: int = 0) -> int:
    """How many lines ``text`` has beyond the first ``beyond``."""
    return max((text.count("\n") + 1 if isinstance(text, str) and text else 0) - beyond, 0)


def family(name: str) -> str:
    """The colour group of an op: its name without numbers, so F0, F1, F2 share a colour (an index in
    brackets reads as ``[i]``: x[0]+x[1] and x[2]+x[3] are both ``x[i]+x[i]``)."""
    key = re.sub(r"\d+", "", re.sub(r"\[\d+\]", "[i]", name)).strip(" _-:#.(){}=")
    return key or name


def assign_colors(keys: Sequence[str]) -> dict[str, str]:
    """A palette colour per distinct key, in first-appearance order (deterministic)."""
    colors: dict[str, str] = {}
    for key in keys:
        if key not in colors:
            colors[key] = PALETTE[len(colors) % len(PALETTE)]
    return colors


def span_colors(spans: Iterable[Any], color_key: Callable[[str], str]) -> dict[str, str]:
    """A colour per colour group of the compute spans, the groups of ops that take time first: an op of no
    time is not drawn, and giving it a palette colour first could make two drawn groups share one."""
    compute = [s for s in spans if s.track == "compute"]
    return assign_colors([color_key(s.name) for s in compute if s.t1 > s.t0] + [color_key(s.name) for s in compute])


def text_color(background: str) -> str:
    """Black or white, whichever reads better on ``background``."""
    r, g, b = matplotlib.colors.to_rgb(background)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def time_axis(ax: Axes, t_max: float) -> str:
    """Label the x axis in the unit that suits ``t_max`` seconds; returns the unit."""
    unit, scale = time_unit(t_max)
    unit = unit.replace("us", "µs")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x * scale:.4g}"))
    ax.set_xlabel(f"time ({unit})")
    return unit
