"""Figures of expert parallelism: the load a popular expert puts on its device, and what capacity does to it.

Four devices, one expert each, 64 tokens in 4 groups; the router favours expert 3. Under the classroom cost
model (1 µs + 8 ns per element a message, 1 ns per FLOP) each device's expert work is its rows: without a
capacity limit device 3 works while the others wait; with capacity factor 1 each expert takes at most 4 rows
of a group, the rest of the tokens are dropped (they keep their residual) and the work evens out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...checker import check
from ...cost.presets import classroom
from ...parallel.experts.model import MoE
from ...parallel.experts.parallel import ExpertParallel, op_region
from ...views.plot.style import FigureStyle
from . import figure


def skewed(factor: float) -> tuple[MoE, dict, np.ndarray, np.ndarray]:
    model = MoE(d_model=8, d_ff=64, experts=4, top_k=1, capacity_factor=factor, groups=4)
    params = model.init(seed=5)
    params["Wr"][:, 3] += 0.8  # the favourite: with the inputs shifted, its logit is higher for most tokens
    x, t = model.data(64, seed=4)
    return model, params, x + 0.2, t


@figure("timeline_expert_parallel.png", "timeline_expert_parallel.svg")
def expert_parallel_timeline(out: Path, style: FigureStyle) -> None:
    """A popular expert's device works while the others wait; a capacity factor of 1 caps it and drops tokens."""
    from ...views.plot.style import save_figure
    from ...views.plot.timeline import plot_timelines

    runs, titles = [], []
    for factor in (4.0, 1.0):
        model, params, x, t = skewed(factor)
        ep = ExpertParallel(model)
        run = ep.run(params, x, t, cost=classroom())
        report = check(run, ep.reference(params, x, t))
        assert report.ok, str(report)
        routes = model.routings(params, x)
        rows = np.stack([r.counts() for r in routes]).sum(axis=0)
        dropped = int(sum((~r.kept).sum() for r in routes))
        titles.append(
            f"capacity factor {factor:g}: rows per expert {', '.join(map(str, rows))}, {dropped} tokens dropped, "
            f"step {run.time * 1e6:.0f} µs"
        )
        runs.append(run)
    fig = plot_timelines(
        runs,
        titles,
        suptitle="A mixture of 4 experts on 4 devices, expert 3 the router's favourite",
        color_key=op_region,
        label=lambda name: "",
        arrows=False,
        style=style,
    )
    save_figure(fig, out / "timeline_expert_parallel")
