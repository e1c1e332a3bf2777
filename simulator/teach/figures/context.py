"""Figures of context parallelism: ring attention on 4 devices, the load-balanced chunk order against the plain one.

A one-block transformer (D = 16, 2 heads, F = 32), one sequence of 64 tokens in 8 chunks of 8, under the
classroom cost model (1 µs + 8 ns per element a message, 1 ns per FLOP), so that attention's arithmetic
outweighs the key and value blocks' transfers, which run under it. Both runs are checked against one device.
"""

from __future__ import annotations

from pathlib import Path

from ...checker import check
from ...cost.presets import classroom
from ...parallel.transformer.context import chunk_pairs
from ...parallel.transformer.costs import op_region
from ...parallel.transformer.model import Transformer
from ...parallel.transformer.step import TransformerStep
from ...views.plot.style import FigureStyle
from . import figure

MODEL = Transformer(d_model=16, heads=2, d_ff=32, blocks=1)
SEQ, CP = 64, 4


@figure("timeline_context_parallel.png", "timeline_context_parallel.svg")
def context_parallel_timeline(out: Path, style: FigureStyle) -> None:
    """Ring attention on 4 devices: the balanced chunk order gives every device the same work; the plain one does not."""
    from ...views.plot.style import save_figure
    from ...views.plot.timeline import plot_timelines

    params = MODEL.init(seed=0)
    x, t = MODEL.data(1, SEQ, seed=1)
    reference = TransformerStep(MODEL).reference(params, x, t)
    runs, titles = [], []
    for order, words in (
        ("balanced", "device i holds chunks i and 7 - i"),
        ("contiguous", "device i holds 2i, 2i + 1"),
    ):
        run = TransformerStep(MODEL, context=tuple(range(CP)), order=order).run(params, x, t, cost=classroom())
        report = check(run, reference)
        assert report.ok, str(report)
        pairs = ", ".join(str(chunk_pairs(SEQ, CP, i, order)) for i in range(CP))
        titles.append(f"{order} ({words}): step {run.time * 1e6:.0f} µs, chunk pairs per device {pairs}")
        runs.append(run)
    fig = plot_timelines(
        runs,
        titles,
        suptitle="Ring attention over 4 devices: 64 tokens in 8 chunks, keys and values passed round while computing",
        color_key=op_region,
        label=lambda name: "",
        arrows=False,
        style=style,
    )
    save_figure(fig, out / "timeline_context_parallel")
