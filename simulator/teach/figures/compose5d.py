"""Figures of the 5-D composition: one training step over dp x ep x pp x cp x tp = 2 x 2 x 2 x 2 x 2 devices.

A stack of four layers (transformer block, mixture of 2 experts, block, mixture) on two pipeline stages, 1F1B
with 2 microbatches per replica, under the classroom cost model (1 µs + 8 ns per element a message, 1 ns per
FLOP). Device r sits at mesh coordinate (dp, ep, pp, cp, tp) = the binary digits of r: devices 0-3, 8-11, 16-19
and 24-27 run stage 0, the others stage 1. The run is checked against one device before it is drawn.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...checker import check
from ...cost.presets import classroom
from ...parallel.compose5d import DIMS, Parallel5D, stack_params
from ...parallel.experts.model import MoE
from ...parallel.experts.parallel import op_region as expert_region
from ...parallel.transformer.costs import op_region as block_region
from ...parallel.transformer.model import Transformer
from ...tensors.mesh import DeviceMesh
from ...views.plot.style import FigureStyle
from . import figure

TRANSFORMER = Transformer(d_model=16, heads=2, d_ff=32)
MOE = MoE(d_model=16, d_ff=32, experts=2, top_k=1, capacity_factor=2.0)
_LAYER = re.compile(r"^L(\d+)\.(.*)$")


def region(name: str) -> str:
    """Colour key: the part of a block, or of a mixture of experts, an op belongs to."""
    m = _LAYER.match(name)
    if not m:
        return "loss, sums"
    if int(m[1]) % 2 == 0:
        return "block backward" if block_region(name).startswith("bwd") else "block forward"
    what = m[2].split(".mb")[0].removesuffix(".ep")
    return (
        "experts"
        if what.startswith(("E", "dE"))
        else "router, combine"
        if expert_region(what) == "router"
        else "loss, sums"
    )


_MB = re.compile(r"\.mb(\d+)")


def pass_label(name: str) -> str:
    """``F0`` or ``B0``: the pass and microbatch of an op (a backward op's own name starts with d: dy, dE0.W1,
    E0.dout, ring_dq); "" for the gradients' sums, which belong to no microbatch."""
    m = _MB.search(name)
    if not m or not _LAYER.match(name):
        return ""
    parts = _LAYER.match(name)[2].split(".mb")[0].split(".")
    backward = region(name) == "block backward" or any(p.startswith(("d", "ring_d")) for p in parts)
    return f"{'B' if backward else 'F'}{m[1]}"


def coordinate(rank: int) -> str:
    """A device's row name: its rank and pipeline stage (its pp coordinate, the third binary digit)."""
    return f"{rank}: stage {(rank >> (len(DIMS) - 1 - DIMS.index('pp'))) & 1}"


def five_d_run():
    mesh = DeviceMesh.grid((2, 2, 2, 2, 2), DIMS)
    step = Parallel5D(TRANSFORMER, MOE, mesh, microbatches=2)
    params = stack_params(TRANSFORMER, MOE, 2, seed=0)
    x, t = TRANSFORMER.data(8, 32, seed=1)
    run = step.run(params, x, t, cost=classroom())
    report = check(run, step.reference(params, x, t))
    assert report.ok, str(report)
    return step, run


@figure("timeline_5d_step.png", "timeline_5d_step.svg", "memory_5d_step.png", "memory_5d_step.svg")
def five_d_step(out: Path, style: FigureStyle) -> None:
    """One training step on 32 devices (dp, ep, pp, cp, tp all 2): the timeline and the memory each device holds."""
    from ...views.plot.memory import save_memory
    from ...views.plot.style import save_figure
    from ...views.plot.timeline import plot_timeline

    step, run = five_d_run()
    title = (
        f"dp x ep x pp x cp x tp = 2 x 2 x 2 x 2 x 2: one 1F1B step, {len(run.trace.messages):,} messages, "
        f"{run.time * 1e6:.0f} µs (the last third: the gradients' all-reduces); every gradient equal to one device's"
    )
    fig = plot_timeline(
        run, title=title, color_key=region, label=pass_label, arrows=False, style=style, row_names=coordinate
    )
    save_figure(fig, out / "timeline_5d_step")
    save_memory(run, out / "memory_5d_step", title="The same step: memory held by each of the 32 devices", style=style)
