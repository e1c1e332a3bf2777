"""A timeline for runs of thousands of devices and millions of events: one pixel row per device.

``plot_timeline`` draws a box per op and an arrow per message: right for a classroom run, unreadable
(and minutes long) for a 4,096-device training step. ``plot_busy`` draws the same run as an image,
one row per device (device 0 at the top) and one column per slice of time, coloured by what share
of that slice the device spent computing (blue) and moving bytes in or out (orange; both: dark), on
white where it idles: pipeline bubbles, waits and stragglers show as shapes. ``busy_fractions`` gives
the numbers; every span counts exactly (``simulator.plot.thin``), however short. It takes a second or
two for millions of events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.colors
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..activity import unpack
from .style import CAPTION_COLOR, PALETTE, new_figure, time_axis
from .thin import Spans, thin, track_spans

if TYPE_CHECKING:
    from ..cost import CostModel
    from ..engine import RunResult
    from ..trace import Trace

COMPUTE_RGB = np.array(matplotlib.colors.to_rgb(PALETTE[0]))
COMM_RGB = np.array(matplotlib.colors.to_rgb(PALETTE[1]))


def busy_fractions(
    run: RunResult | Trace, cost: CostModel | None = None, bins: int = 800, t_end: float | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """(compute, comm, t_end): per device and time bin, the share of the bin it computed, and it sent or
    received (each 0 to 1; overlapping spans count once); bins split [0, t_end] evenly."""
    trace, cost = unpack(run, cost)
    spans, _ = track_spans(trace, cost)
    p = trace.world_size
    comm = Spans(
        *(np.concatenate([getattr(spans["send"], f), getattr(spans["recv"], f)]) for f in Spans.__dataclass_fields__)
    )
    ends = [s.t1.max() for s in (spans["compute"], comm) if len(s)]
    t_end = float(t_end if t_end is not None else max(ends, default=0.0)) or 1e-12
    return _coverage(spans["compute"], p, bins, t_end), _coverage(comm, p, bins, t_end), t_end


def _coverage(spans: Spans, p: int, bins: int, t_end: float) -> np.ndarray:
    """Per device and bin, the share of the bin its spans (merged where they overlap) cover."""
    out = np.zeros(p * bins + 1)
    if len(spans):
        union = thin(spans, per_device=len(spans))  # only overlapping or touching spans merge: a union
        width = t_end / bins
        a = np.clip(union.t0 / width, 0, bins)
        b = np.clip(union.t1 / width, 0, bins)
        fa = np.minimum(a.astype(np.int64), bins - 1)
        fb = np.minimum(b.astype(np.int64), bins - 1)
        row = union.rank.astype(np.int64) * bins
        same = fa == fb
        np.add.at(out, row[same] + fa[same], b[same] - a[same])
        apart = ~same
        np.add.at(out, row[apart] + fa[apart], fa[apart] + 1 - a[apart])  # the first bin's part
        np.add.at(out, row[apart] + fb[apart], b[apart] - fb[apart])  # the last bin's part
        full = np.zeros(p * bins + 1)  # and the bins in between, whole: a difference array
        np.add.at(full, row[apart] + fa[apart] + 1, 1.0)
        np.add.at(full, row[apart] + fb[apart], -1.0)
        out += np.cumsum(full)
    return np.clip(out[:-1].reshape(p, bins), 0.0, 1.0)


def plot_busy(
    run: RunResult | Trace,
    *,
    cost: CostModel | None = None,
    title: str | None = None,
    bins: int = 800,
    width: float = 11.0,
    height: float | None = None,
    groups: Sequence[tuple[str, int]] = (),
    caption: bool | str = True,
) -> Figure:
    """The run as an image: a row per device, a column per time bin (see the module docstring).

    groups: (label, first rank) pairs marking blocks of devices on the left (e.g. pipeline stages).
    """
    trace, cost = unpack(run, cost)
    compute, comm, t_end = busy_fractions(trace, cost, bins)
    image = 1.0 - compute[..., None] * (1.0 - COMPUTE_RGB)  # multiply blend on white
    image *= 1.0 - comm[..., None] * (1.0 - COMM_RGB)
    p = trace.world_size
    fig = new_figure(width, height if height is not None else min(9.0, 2.0 + 0.25 * p))
    ax = fig.add_axes((0.08, 0.16, 0.9, 0.74 if title else 0.8))
    ax.imshow(image, aspect="auto", interpolation="nearest", extent=(0.0, t_end, p - 0.5, -0.5))
    time_axis(ax, t_end)
    ax.set_ylabel("device")
    if groups:  # the groups' names replace the device numbers
        ax.set_yticks([first - 0.5 for _, first in groups], [label for label, _ in groups], fontsize=7, va="top")
        for _, first in groups:
            ax.axhline(first - 0.5, color="#555555", lw=0.4)
    busy = compute.mean(axis=1)
    ax.legend(
        handles=[Patch(color=COMPUTE_RGB, label="computing"), Patch(color=COMM_RGB, label="sending or receiving"),
                 Patch(facecolor="white", edgecolor="#999999", label="idle")],
        loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, frameon=False, fontsize=8,
    )  # fmt: skip
    if title:
        ax.set_title(title, loc="left", pad=22)
    text = caption if isinstance(caption, str) else (cost.describe() if caption and cost is not None else "")
    text += f"{'; ' if text else ''}devices compute {100 * busy.mean():.0f}% of the time on average"
    fig.text(0.01, 0.01, text, fontsize=7.5, color=CAPTION_COLOR, ha="left", va="bottom", wrap=True)
    return fig
