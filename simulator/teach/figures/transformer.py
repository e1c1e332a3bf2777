"""Figures of a transformer block split over devices: tensor parallelism by heads against Megatron sequence
parallelism, on the timeline and in the activation memory each device keeps.

A one-block transformer (D = 32, 8 heads, F = 64), one microbatch of 2 sequences of 16 tokens, on 4 devices
under the classroom cost model (1 µs + 8 ns per element a message, 1 ns per FLOP). Every run is checked
against one device before it is drawn.
"""

from __future__ import annotations

from pathlib import Path

from ...checker import check
from ...core.engine import RunResult
from ...cost.presets import classroom
from ...cost.units import size_unit
from ...parallel.transformer.costs import activation_elements, activation_volume, forward_bytes, op_region
from ...parallel.transformer.model import Transformer
from ...parallel.transformer.step import TransformerStep
from ...views.plot.style import FigureStyle
from . import figure

MODEL = Transformer(d_model=32, heads=8, d_ff=64, blocks=1, dropout=0.1)
BATCH, SEQ = 2, 16
SPLITS = (
    ("tensor parallel", False, False),
    ("+ sequence parallel", True, False),
    ("+ regather (Megatron-LM)", True, True),
)


def split_runs(t: int = 4) -> list[tuple[str, RunResult]]:
    params = MODEL.init(seed=0)
    x, y = MODEL.data(BATCH, SEQ, seed=1)
    out = []
    for label, sp, regather in SPLITS:
        step = TransformerStep(MODEL, 1, tuple(range(t)), sp, regather)
        run = step.run(params, x, y, cost=classroom())
        report = check(run, step.reference(params, x, y))
        assert report.ok, str(report)
        out.append((label, run))
    return out


def _size(n: int) -> str:
    unit, scale = size_unit(n)
    return f"{n * scale:.3g} {unit}"


@figure("timeline_sequence_parallel.png", "timeline_sequence_parallel.svg")
def sequence_parallel_timeline(out: Path, style: FigureStyle) -> None:
    """One transformer block's training step on 4 devices: tensor parallel, then sequence parallel (same bytes)."""
    from ...views.plot.style import save_figure
    from ...views.plot.timeline import plot_timelines

    runs = split_runs()[:2]
    titles = []
    for (label, sp, _), (_, run) in zip(SPLITS, runs):
        acts = activation_volume(MODEL, BATCH, SEQ, 4, 1, sp)
        sent = sum(m.nbytes for m in run.trace.messages if m.src == 0)
        extra = f" + {_size(sent - acts.bytes)} of gradients" if sent > acts.bytes else ""
        kept = forward_bytes(run.trace, 0, "loss.mb0")
        titles.append(f"{label}: device 0 sends {_size(acts.bytes)}{extra}, keeps {_size(kept)} of activations")
    fig = plot_timelines(
        [run for _, run in runs],
        titles,
        suptitle="A transformer block split by heads over 4 devices, without and with sequence parallelism",
        color_key=op_region,
        label=lambda name: "",
        arrows=False,
        style=style,
    )
    save_figure(fig, out / "timeline_sequence_parallel")


@figure("memory_sequence_parallel.png", "memory_sequence_parallel.svg")
def sequence_parallel_memory(out: Path, style: FigureStyle) -> None:
    """Activation memory a device keeps for the backward, one device to 8, with and without sequence parallelism."""
    from ...views.plot.bars import plot_grouped_bars
    from ...views.plot.style import save_figure

    sizes = (1, 2, 4, 8)
    values, labels = [], []
    for _, sp, regather in SPLITS:
        row = [activation_elements(MODEL, BATCH, SEQ, t, sp, regather) * 8 for t in sizes]
        values.append([v / 1024 for v in row])
        labels.append([f"{v / 1024:.0f}" for v in row])
    params = MODEL.init(seed=0)
    x, y = MODEL.data(BATCH, SEQ, seed=1)
    for s, (_, sp, regather) in enumerate(SPLITS):  # the bars are the closed form; the runs must agree
        for k, t in enumerate(sizes):
            run = TransformerStep(MODEL, 1, tuple(range(t)), sp, regather).run(params, x, y, keep_payloads=False)
            assert forward_bytes(run.trace, 0, "loss.mb0") == values[s][k] * 1024
    fig = plot_grouped_bars(
        [f"t = {t}" for t in sizes],
        [label for label, _, _ in SPLITS],
        values,
        ylabel="activations kept per device (KiB)",
        title="What a device keeps for the backward of one block (float64), measured = closed form",
        caption="D = 32, 8 heads, F = 64, 2 sequences of 16 tokens. Sequence parallelism divides the values outside "
        "attention and the MLP by t; regathering, the layer norms' outputs too.",
        labels=labels,
        style=style,
    )
    save_figure(fig, out / "memory_sequence_parallel")
