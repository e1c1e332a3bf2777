"""Figures of training steps: pipeline schedules side by side, their grids, memory over time, and the
seed's contrast (copy the model or split it) in per-device memory numbers.

Every figure comes from runs with real arithmetic; the pipeline runs use fixed action costs (forward
1 µs, backward 2 µs per stage, the backward's input and weight parts 1 µs each) and free links, so
the bubbles are exactly the closed forms printed in the titles. The bubble is stated one way
throughout: a device's idle time divided by its busy time.
"""

from __future__ import annotations

from pathlib import Path

from ...core.engine import RunResult
from ...core.files import write_text
from ...cost.units import size_unit
from ...parallel.data import DataParallel
from ...parallel.measure import bubble, peak_activation_bytes, peak_activation_microbatches
from ...parallel.mlp import MLP
from ...parallel.pipeline import ActionCosts, Pipeline
from ...parallel.schedules import SCHEDULES, make_schedule
from ...parallel.zero import ZeRO, category
from ...views.plot.style import FigureStyle
from . import figure

US = 1e-6
P, M = 4, 8  # four devices, eight microbatches
SHOWN = (("gpipe", {}), ("1f1b", {}), ("interleaved-1f1b", {"virtual": 2}), ("zb-h1", {}))  # name, options


def schedule_runs() -> list[tuple[Pipeline, RunResult]]:
    """The four schedules on the same model (8 layers), p = 4, m = 8; each device does the same work."""
    mlp = MLP((16,) * 9)
    params = mlp.init(seed=0)
    x, t = mlp.data(2 * M, seed=1)
    out = []
    for name, options in SHOWN:
        sched = make_schedule(name, P, M, **options)
        v = sched.stages // P
        costs = ActionCosts(1 * US / v, 1 * US / v, 1 * US / v)  # F = I = W: B = 2F
        pipe = Pipeline(mlp, sched, costs=costs)
        out.append((pipe, pipe.run(params, x, t)))
    return out


def _title(pipe: Pipeline, run: RunResult, formula: str) -> str:
    b = bubble(run.trace)
    peak = max(peak_activation_microbatches(run.trace))
    return f"{pipe.schedule.name}: step {run.time / US:.0f} µs, bubble {b.ratio[0]:.3f} = {formula}; {peak} microbatches held"


@figure("timeline_pipeline_schedules.png", "timeline_pipeline_schedules.svg")
def pipeline_schedules(out: Path, style: FigureStyle) -> None:
    """GPipe, 1F1B, interleaved 1F1B and ZB-H1 for the same 4 devices and 8 microbatches, on one time scale."""
    from ...views.plot.schedule_chart import plot_schedules
    from ...views.plot.style import save_figure

    runs = schedule_runs()
    panels = []
    for (pipe, run), (name, _) in zip(runs, SHOWN):
        formula = SCHEDULES[name].short_formula
        v = pipe.schedule.stages // P
        costs = {"F": 1 / v, "B": 2 / v, "I": 1 / v, "W": 1 / v}  # µs, as the run's ActionCosts
        _same_step(pipe, run, costs)
        panels.append((_title(pipe, run, formula), pipe.schedule.compute_only(), costs))
    fig = plot_schedules(
        panels,
        unit=(1.0, "µs"),
        suptitle=f"Four pipeline schedules, one training step: p = {P} devices, m = {M} microbatches",
        caption="An 8-layer MLP; F, I and W 1 µs per stage and microbatch, B = I + W (halved for the interleaved "
        "schedule's half-size stages); messages take no time. Every step checked against one device. Bubble = a "
        "device's idle time / its busy time. F3: forward of microbatch 3 (3 alone in a narrow block).",
        style=style,
    )
    save_figure(fig, out / "timeline_pipeline_schedules")


def _same_step(pipe: Pipeline, run: RunResult, costs: dict[str, float]) -> None:
    """The chart is drawn from the schedule's timing: it must be the simulated step's, to the nanosecond."""
    from ...parallel.schedules import execute

    end = max(e for rows in execute(pipe.schedule.compute_only(), costs).values() for _, e, _ in rows)
    assert abs(end * US - run.time) < 1e-12, (pipe.schedule.name, end, run.time)


@figure("pipeline_schedules_grid.txt")
def pipeline_schedules_grid(out: Path, style: FigureStyle) -> None:
    """The same four schedules as text grids (one column per time unit), from the schedule objects."""
    lines = [
        "One row per pipeline rank (rank 0 runs on device 0, rank 1 on device 1, ...), one column per time unit:",
        "a forward takes one unit, a backward two (its I and W parts one each); '.' is idle; messages take no time.",
        "",
    ]
    for name, options in SHOWN:
        sched = make_schedule(name, P, M, **options)
        lines += [f"{sched.name}, p = {P}, m = {M} (bubble {SCHEDULES[name].short_formula})", sched.grid(), ""]
    write_text(out / "pipeline_schedules_grid.txt", "\n".join(lines))


@figure(
    "memory_pipeline_gpipe.png", "memory_pipeline_gpipe.svg", "memory_pipeline_1f1b.png", "memory_pipeline_1f1b.svg"
)
def pipeline_memory(out: Path, style: FigureStyle) -> None:
    """Memory held per device over a GPipe step and a 1F1B step: m microbatches' activations against at most p."""
    from ...views.plot.memory import save_memory, shared_scales

    runs = dict((pipe.schedule.name, run) for pipe, run in schedule_runs()[:2])
    scales = shared_scales(list(runs.values()))  # the two plots are compared: one memory axis, one time axis
    for name, run in runs.items():
        peaks = peak_activation_microbatches(run.trace)
        save_memory(
            run,
            out / f"memory_pipeline_{name.lower()}",
            title=f"{name}, 4 devices, 8 microbatches: activations of {', '.join(map(str, peaks))} microbatches "
            "at the peak (devices 0-3)",
            style=style,
            **scales,
        )


def copy_vs_split_rows() -> tuple[MLP, list[tuple[str, int, int, int, int]]]:
    """Per arrangement: (name, devices, parameter bytes on device 0, peak activation bytes on a device, messages)."""
    mlp = MLP((64,) * 5)
    params = mlp.init(seed=2)
    x, t = mlp.data(32, seed=3)
    quiet = {"keep_payloads": False}
    runs = {
        "one device": Pipeline(mlp, make_schedule("1f1b", 1, 4)).run(params, x, t, **quiet),
        "copy the model: 4 data-parallel replicas": DataParallel(mlp, 4).run(params, x, t, **quiet),
        "split it by depth: 4 stages, GPipe, m = 4": Pipeline(mlp, make_schedule("gpipe", 4, 4)).run(
            params, x, t, **quiet
        ),
        "split it by depth: 4 stages, 1F1B, m = 4": Pipeline(mlp, make_schedule("1f1b", 4, 4)).run(
            params, x, t, **quiet
        ),
        "copy, sharded with ZeRO-3: 4 replicas": ZeRO(mlp, 4, 3).run(params, x, t, **quiet),
    }
    rows = []
    for label, run in runs.items():
        held = {}
        for kind, rec in run.trace.events:  # the parameters device 0 places in memory before it computes
            if kind == "op" and rec.rank == 0:
                break
            if kind == "hold" and rec.rank == 0 and category(rec.name) == "parameters":
                held[rec.name] = rec.nbytes
        peak = max(peak_activation_bytes(run.trace))
        rows.append((label, run.trace.world_size, sum(held.values()), peak, len(run.trace.messages)))
    return mlp, rows


@figure("memory_copy_vs_split.txt")
def copy_vs_split(out: Path, style: FigureStyle) -> None:
    """The seed's contrast in numbers: per-device memory when the model is copied, split, or copied and sharded."""
    mlp, rows = copy_vs_split_rows()
    total = sum(mlp.widths[k - 1] * mlp.widths[k] + mlp.widths[k] for k in range(1, mlp.layers + 1)) * 8

    def size(n: int) -> str:
        unit, scale = size_unit(n)
        return f"{n * scale:.1f} {unit}"

    width = max(len(r[0]) for r in rows)
    lines = [
        f"A {mlp.layers}-layer MLP, {mlp.widths[1]} wide, in float64: {size(total)} of parameters. A batch of 32 rows,",
        "one training step (forward and backward; ZeRO-3 adds its Adam step). Parameters held: what device 0",
        "places in memory before it computes. Activations: the most bytes of per-microbatch values any device holds.",
        "",
        f"{'arrangement':<{width}}  devices  parameters held  peak activations  messages",
    ]
    for label, n, param_bytes, peak, messages in rows:
        lines.append(f"{label:<{width}}  {n:>7}  {size(param_bytes):>15}  {size(peak):>16}  {messages:>8}")
    lines += [
        "",
        "Copying the model keeps every parameter on every device and divides the data: each replica holds the",
        "activations of its quarter of the batch. Splitting by depth divides the parameters by the stages; each",
        "stage holds its layers' activations for the microbatches in flight (all of them in GPipe, at most p in",
        "1F1B), and waits for the others in the bubble. ZeRO-3 keeps the copy's arithmetic and divides the",
        "parameters too, at the price of gathering each layer before every use (the extra messages).",
    ]
    write_text(out / "memory_copy_vs_split.txt", "\n".join(lines) + "\n")
