"""Figures of the schedules torch.distributed.pipelining ships beyond the classic four: looped BFS,
interleaved zero bubble, ZB-V and DualPipeV, each a real training step on the same model.

The model has 8 layers; on p = 4 devices each schedule's stages split it evenly (two stages per device),
so every device does the same work. F = I = W = 1 µs for a whole device's share of a microbatch
(0.5 µs per stage), messages take no time: the idle time per device is the closed form of
``simulator.parallel.schedules.bubbles`` printed in each title.
"""

from __future__ import annotations

from pathlib import Path

from ...core.engine import RunResult
from ...core.files import write_text
from ...parallel.measure import bubble
from ...parallel.mlp import MLP
from ...parallel.pipeline import ActionCosts, Pipeline
from ...parallel.schedules import SCHEDULES, bubble_ratio, make_schedule
from ...views.plot.style import FigureStyle
from . import figure

US = 1e-6
P, M = 4, 8
SHOWN = (("looped-bfs", {"virtual": 2}), ("interleaved-zb", {"virtual": 2}), ("zbv", {}), ("dualpipe-v", {}))


def v_schedule_runs() -> list[tuple[Pipeline, RunResult]]:
    """The four schedules on one 8-layer model, p = 4, m = 8, two stages per device."""
    mlp = MLP((8,) * 9)
    params = mlp.init(seed=0)
    x, t = mlp.data(2 * M, seed=1)
    costs = ActionCosts(0.5 * US, 0.5 * US, 0.5 * US)
    out = []
    for name, options in SHOWN:
        pipe = Pipeline(mlp, make_schedule(name, P, M, **options), costs=costs)
        out.append((pipe, pipe.run(params, x, t, keep_payloads=False)))
    return out


def _title(name: str, pipe: Pipeline, run: RunResult) -> str:
    formula = SCHEDULES[name].short_formula
    ratio = bubble(run.trace).ratio[0]
    assert abs(ratio - float(bubble_ratio(name, P, M, 2))) < 1e-9, (name, ratio)
    return f"{pipe.schedule.name}: step {run.time / US:.1f} µs, bubble {ratio:.4f} = {formula}"


@figure("timeline_pipeline_schedules_v.png", "timeline_pipeline_schedules_v.svg")
def pipeline_schedules_v(out: Path, style: FigureStyle) -> None:
    """Looped BFS, interleaved zero bubble, ZB-V and DualPipeV on 4 devices and 8 microbatches, one time scale."""
    from ...parallel.schedules import execute
    from ...views.plot.schedule_chart import plot_schedules
    from ...views.plot.style import save_figure

    costs = {"F": 0.5, "B": 1.0, "I": 0.5, "W": 0.5}  # µs, as the runs' ActionCosts
    panels = []
    for (pipe, run), (name, _) in zip(v_schedule_runs(), SHOWN):
        schedule = pipe.schedule.compute_only()
        end = max(e for rows in execute(schedule, costs).values() for _, e, _ in rows)
        assert abs(end * US - run.time) < 1e-12, (name, end, run.time)  # the chart's timing is the simulated step's
        panels.append((_title(name, pipe, run), schedule, costs))
    fig = plot_schedules(
        panels,
        unit=(1.0, "µs"),
        suptitle=f"Schedules past 1F1B in torch.distributed.pipelining, p = {P}, m = {M}",
        caption="Two stages per device; F, I and W 0.5 µs per stage and microbatch, B = I + W; messages take no time. Stages on devices: "
        "s % 4 (looped BFS, interleaved ZB), a V 0 1 2 3 3 2 1 0 (ZB-V, DualPipeV). F3: forward of microbatch 3 (3 alone in a narrow block).",
        style=style,
    )
    save_figure(fig, out / "timeline_pipeline_schedules_v")


@figure("pipeline_schedules_v_grid.txt")
def pipeline_schedules_v_grid(out: Path, style: FigureStyle) -> None:
    """The same four schedules as text grids, from the schedule objects (one column per stage-sized time unit)."""
    lines = [
        "One row per pipeline rank (rank 0 runs on device 0, ...), one column per time unit: a forward, an input-",
        "gradient or a weight-gradient pass of one stage takes one unit (a full backward B two); '.' is idle;",
        "messages take no time.",
        "",
    ]
    for name, options in SHOWN:
        sched = make_schedule(name, P, M, **options)
        formula = SCHEDULES[name].short_formula
        lines += [f"{sched.name}, p = {P}, m = {M}, placement {sched.placement} (bubble {formula})", sched.grid(), ""]
    write_text(out / "pipeline_schedules_v_grid.txt", "\n".join(lines))
