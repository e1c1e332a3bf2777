"""A timeline for runs of thousands of devices and millions of events: one pixel row per device.

``plot_timeline`` draws a box per op and an arrow per message: right for a classroom run, unreadable
(and minutes long) for a 4,096-device training step. ``plot_busy`` draws the same run as an image,
one row per device (device 0 at the top) and one column per slice of time, coloured by what share
of that slice the device spent computing (blue) and moving bytes in or out (orange; both: dark), on
white where it idles: pipeline bubbles, waits and stragglers show as shapes. ``busy_fractions`` gives
the numbers; every span counts exactly, however short (a device computes one op at a time, so its
compute share is exact; sends and receives can overlap, so its communication share adds them up,
capped at the whole bin). Spans come as arrays (``simulator.views.plot.thin``), binned with ``np.bincount``:
a few seconds for tens of millions of events.
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
from .thin import Spans, track_spans

if TYPE_CHECKING:
    from ...core.engine import RunResult
    from ...core.trace import Trace
    from ...cost.model import CostModel

COMPUTE_RGB = np.array(matplotlib.colors.to_rgb(PALETTE[0]))
COMM_RGB = np.array(matplotlib.colors.to_rgb(PALETTE[1]))


def busy_fractions(
    run: RunResult | Trace, cost: CostModel | None = None, bins: int = 800, t_end: float | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """(compute, comm, t_end): per device and time bin, the share of the bin it computed, and it sent or
    received (each 0 to 1, see the module docstring); bins split [0, t_end] evenly."""
    trace, cost = unpack(run, cost)
    spans, _ = track_spans(trace, cost, numbered=False)
    p = trace.world_size
    ends = [s.t1.max() for s in spans.values() if len(s)]
    t_end = float(t_end if t_end is not None else max(ends, default=0.0)) or 1e-12
    compute = _coverage(spans["compute"], p, bins, t_end)
    comm = _coverage(spans["send"], p, bins, t_end) + _coverage(spans["recv"], p, bins, t_end)
    return np.minimum(compute, 1.0), np.minimum(comm, 1.0), t_end


def _coverage(spans: Spans, p: int, bins: int, t_end: float) -> np.ndarray:
    """Per device and bin, the share of the bin its spans cover (overlapping spans add up)."""
    n = p * bins + 1
    if not len(spans):
        return np.zeros((p, bins))
    width = t_end / bins
    a = np.clip(spans.t0 / width, 0, bins)
    b = np.clip(spans.t1 / width, 0, bins)
    fa = np.minimum(a.astype(np.int64), bins - 1)
    fb = np.minimum(b.astype(np.int64), bins - 1)
    row = spans.rank.astype(np.int64) * bins
    same = fa == fb
    # (float even when no span stays within one bin: bincount of nothing gives ints)
    out = np.bincount(row[same] + fa[same], weights=b[same] - a[same], minlength=n).astype(np.float64, copy=False)
    apart = ~same
    if apart.any():  # a span over several bins: its part of the first and last, the ones between whole
        ra, fa, fb, a, b = row[apart], fa[apart], fb[apart], a[apart], b[apart]
        out += np.bincount(ra + fa, weights=fa + 1 - a, minlength=n)
        out += np.bincount(ra + fb, weights=b - fb, minlength=n)
        between = np.bincount(ra + fa + 1, minlength=n) - np.bincount(ra + fb, minlength=n)  # a difference array
        out += np.cumsum(between)
    return out[:-1].reshape(p, bins)


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
    devices: Sequence[int] | None = None,
    labels: Sequence[str] | None = None,
) -> Figure:
    """The run as an image: a row per device, a column per time bin (see the module docstring).

    groups: (label, first row) pairs marking blocks of rows on the left (e.g. pipeline stages).
    devices: the devices to draw, a row each in this order (default: all); labels: a name per row, in place of
    the device numbers (a large run whose replicas do the same work reads best as one device per stage).
    """
    trace, cost = unpack(run, cost)
    compute, comm, t_end = busy_fractions(trace, cost, bins)
    if devices is not None:
        rows = np.asarray(devices, dtype=np.int64)
        compute, comm = compute[rows], comm[rows]
    image = 1.0 - compute[..., None] * (1.0 - COMPUTE_RGB)  # multiply blend on white
    image *= 1.0 - comm[..., None] * (1.0 - COMM_RGB)
    p = len(compute)
    fig = new_figure(width, height if height is not None else min(9.0, 2.0 + 0.25 * p))
    ax = fig.add_axes((0.08, 0.16, 0.9, 0.74 if title else 0.8))
    ax.imshow(image, aspect="auto", interpolation="nearest", extent=(0.0, t_end, p - 0.5, -0.5))
    time_axis(ax, t_end)
    ax.set_ylabel("device")
    if labels is not None:
        ax.set_yticks(range(p), list(labels), fontsize=8)
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
