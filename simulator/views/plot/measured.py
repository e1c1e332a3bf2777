"""Simulated against measured: the same rank program's timeline from the simulator and from real processes.

A run on the torch backend (``simulator.real``) records the same messages and ops as a
simulation, with measured times, so both timelines draw with the same code. The figure stacks them:
the simulation above, the real run below.

``same_scale=True`` puts both on one time axis, which is meaningful when the simulation used a cost
model calibrated on the same machine (``python -m simulator calibrate``); otherwise each panel gets
its own axis, since a simulation of a fast accelerator and a measurement of CPU processes differ by
orders of magnitude, and what is worth comparing is the shape: who waits for whom, what overlaps.
A measured run has no cost model, so its messages are drawn over their whole measured flight.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from ...cost.units import time_unit
from ..activity import unpack
from .style import CAPTION_COLOR, FigureStyle, new_figure
from .timeline import figure_height, plot_timeline


def plot_simulated_vs_measured(
    simulated: Any,
    measured: Any,
    *,
    titles: tuple[str, str] | None = None,
    suptitle: str | None = None,
    same_scale: bool = False,
    width: float | None = None,
    caption: str | None = None,
    style: str | FigureStyle = "paper",
    **kwargs: Any,
) -> Figure:
    """Two panels: ``simulated`` (a RunResult) above, ``measured`` (a torch-backend result or Trace) below.

    style: "paper" or "slide" (see ``simulator.views.plot.style.FigureStyle``)."""
    sim_trace, cost = unpack(simulated)
    real_trace = getattr(measured, "trace", measured)
    if titles is None:
        titles = (
            f"simulated: {_fmt(sim_trace.end_time)} under the cost model",
            f"measured on real processes: {_fmt(real_trace.end_time)}",
        )
    n = max(sim_trace.world_size, real_trace.world_size)
    panel = figure_height(n, style)
    head = 0.45 if suptitle else 0.1
    foot = 0.3 if (caption or cost is not None) else 0.0
    height = head + 2 * panel + foot
    fig = new_figure(width, height, style)
    t_max = max(sim_trace.end_time, real_trace.end_time) if same_scale else None
    for k, (run, title) in enumerate(((simulated, titles[0]), (real_trace, titles[1]))):
        bottom = foot + (1 - k) * panel + 0.55
        ax = fig.add_axes((0.09, bottom / height, 0.84, (panel - 1.25) / height))
        plot_timeline(run, ax=ax, title=title, t_max=t_max, legend=k == 0, caption=False, **kwargs)
    if suptitle:
        fig.text(0.01, 1 - 0.1 / height, suptitle, ha="left", va="top", fontweight="bold", fontsize=12)
    text = caption if caption is not None else (f"simulation: {cost.describe()}" if cost is not None else "")
    if text:
        fig.text(0.01, 0.005, text, fontsize=7.5, color=CAPTION_COLOR, ha="left", va="bottom", wrap=True)
    return fig


def _fmt(seconds: float) -> str:
    unit, scale = time_unit(seconds)
    return f"{seconds * scale:.3g} {unit}"
