"""A picture of which device holds which block of an array (the drawing twin of ``sharding_table``).

The left panel is the whole array cut into blocks; each block is striped in the colours of the
devices holding it. Solid stripes are whole values (a shard, or a replica); hatched stripes are
partial values whose reduction is still pending, labelled like ``0+1 (sum)``. Then one small panel
per device shows where its piece lies in the array (and its numbers, for small pieces), and for a
partial layout a last panel shows what the pending reduction would give.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ...core.files import atomic_write
from ...tensors.sharded import Layout, ShardedArray
from ..sharding_table import blocks, cell_holders
from .style import FigureStyle, figure_style, new_figure

MAX_ANNOTATED = 64  # pieces with more elements are drawn without their numbers


def _as_2d(shape: tuple[int, ...]) -> tuple[int, int]:
    return (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])


def _rect(reg_rows, reg_cols, one_d):
    """(x, y, width, height) of a block, with rows going down."""
    if one_d:
        (c, e), (a, b) = reg_rows, (0, 1)
    else:
        (a, b), (c, e) = reg_rows, reg_cols
    return c, a, e - c, b - a


def _frame(ax, shape2, title):
    rows, cols = shape2
    ax.set_xlim(0, max(cols, 1))
    ax.set_ylim(max(rows, 1), 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.add_patch(Rectangle((0, 0), cols, rows, fill=False, lw=1.2, ec="black"))
    ax.set_title(title, fontsize=9)


def _annotate(ax, values, x0, y0, one_d):
    vals = np.atleast_2d(values) if not one_d else np.asarray(values).reshape(1, -1)
    if vals.size == 0 or vals.size > MAX_ANNOTATED:
        return
    for (i, j), v in np.ndenumerate(vals):
        ax.text(x0 + j + 0.5, y0 + i + 0.5, f"{v:g}", ha="center", va="center", fontsize=7)


def plot_sharding(x: Layout | ShardedArray, *, title: str | None = None, style: str | FigureStyle = "paper") -> Figure:
    """Draw the layout (and the pieces' numbers when given a ShardedArray); returns the figure.

    Args:
        x: a layout, or a sharded array (its pieces' numbers are written in).
        title: the figure's title.
        style: "paper" or "slide" (see ``simulator.views.plot.style.FigureStyle``).

    Returns:
        The matplotlib figure.

    Examples:
        >>> from simulator import DeviceMesh, Layout, S, plot_sharding
        >>> fig = plot_sharding(Layout((4, 4), DeviceMesh([0, 1]), (S(0),)))
        >>> len(fig.axes) >= 1
        True
    """
    lay = x.layout if isinstance(x, ShardedArray) else x
    pieces = x.pieces if isinstance(x, ShardedArray) else None
    if len(lay.shape) not in (1, 2):
        raise ValueError(f"plot_sharding draws 1-D and 2-D arrays; this one has shape {lay.shape}")
    one_d = len(lay.shape) == 1
    shape2 = _as_2d(lay.shape)
    ranks = lay.mesh.ranks.reshape(-1).tolist()
    partial = lay.is_partial()
    colours = matplotlib.colormaps["tab10"]
    panels = 1 + len(ranks) + (1 if partial and pieces is not None else 0)
    ncols = min(panels, 5)
    nrows = -(-panels // ncols)
    st = figure_style(style)
    scale = min(1.0, st.width / (2.6 * ncols))  # the style's width, or less for a few panels
    fig = new_figure(2.6 * ncols * scale, 2.4 * nrows * scale, st)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = axes.reshape(-1)
    for ax in flat[panels:]:
        ax.axis("off")

    # the whole array, block by block, striped by holder
    ax = flat[0]
    _frame(ax, shape2, title or f"{list(lay.placements)} on mesh {lay.mesh.shape}")
    for rr, cc, holders in blocks(lay):
        if not holders:
            continue
        x0, y0, w, h = _rect(rr, cc, one_d)
        for k, r in enumerate(holders):
            ax.add_patch(
                Rectangle(
                    (x0 + k * w / len(holders), y0),
                    w / len(holders),
                    h,
                    fc=colours(r % 10),
                    alpha=0.45 if partial else 0.75,
                    hatch="///" if partial else None,
                    ec="white",
                    lw=0.5,
                )
            )
        ax.add_patch(Rectangle((x0, y0), w, h, fill=False, ec="black", lw=0.8))
        ax.text(
            x0 + w / 2,
            y0 + h / 2,
            cell_holders(lay, holders),
            ha="center",
            va="center",
            fontsize=8,
            bbox={"fc": "white", "alpha": 0.8, "lw": 0},
        )

    # one panel per device: where its piece lies, and its numbers
    for i, r in enumerate(ranks):
        ax = flat[1 + i]
        reg = lay.region(r)
        kind = "partial, reduction pending" if partial else "piece"
        _frame(ax, shape2, f"device {r}: {kind}")
        rr = (reg[0].start, reg[0].stop)
        cc = (reg[1].start, reg[1].stop) if not one_d else (0, 1)
        x0, y0, w, h = _rect(rr, cc, one_d)
        ax.add_patch(
            Rectangle(
                (x0, y0),
                w,
                h,
                fc=colours(r % 10),
                alpha=0.35 if partial else 0.6,
                hatch="///" if partial else None,
                ec="black",
                lw=0.8,
            )
        )
        if pieces is not None:
            _annotate(ax, pieces[r], x0, y0, one_d)

    # what the pending reduction gives
    if partial and pieces is not None:
        ax = flat[1 + len(ranks)]
        _frame(ax, shape2, f"after the {lay.partial_op} (pending)")
        full = lay.assemble(pieces)
        ax.add_patch(Rectangle((0, 0), shape2[1], shape2[0], fc="0.85", ec="black"))
        _annotate(ax, full, 0, 0, one_d)
    fig.tight_layout()
    return fig


def save_sharding(x: Layout | ShardedArray, path: str, **kw) -> str:
    """Draw and save to ``path`` (format from the suffix); returns the path."""
    fig = plot_sharding(x, **kw)
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with atomic_write(path, "wb") as f:  # a failed save leaves the previous figure intact
        fig.savefig(f, format=fmt, dpi=fig.style.dpi)
    return path
