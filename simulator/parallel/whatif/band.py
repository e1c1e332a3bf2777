"""How sure an answer is: a band from the out-of-sample error, and the unpublished knobs that move it most.

``OUT_OF_SAMPLE`` is what ``validate`` found on the out-of-sample rows (``outside.py``): the lowest, median and
highest speed ratio (predicted throughput over published). A published run's throughput has so far fallen
between the prediction divided by the highest ratio and the prediction divided by the lowest: that is an
answer's ``band``. The figures are recorded here so that an answer does not re-run the rows;
tests/parallel/test_whatif_band.py re-runs them and fails when a change to the what-if moves them.

``knobs`` re-asks the same layout with what papers often leave out turned to its other plausible values: the
interleaving depth (model chunks per pipeline rank), the microbatch size, the recomputation, and, for a
pipeline whose gradients are sharded (ZeRO-1 or -2), when they are reduced: summed whole over the microbatches
and reduce-scattered once (Megatron-LM's distributed optimizer, ``zero=1``), or reduce-scattered every
microbatch into the shard (FSDP beside a pipeline, ``zero=2``), which a paper saying "shards gradients" leaves
open (Llama 3). Each knob
says the throughput range it spans and whether every value fits in memory, so a reader can tell which
unpublished setting the answer hangs on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...cost.systems import System
from .model import Transformer
from .report import Report, tflops_text
from .run import whatif
from .training_setup import SetupError, TrainingSetup

OUT_OF_SAMPLE = (0.90, 1.04, 1.26)  # speed ratios: lowest, median, highest (validate's out-of-sample summary)


def band(tflops: float) -> tuple[float, float]:
    """(low, high) TFLOP/s a published run of a predicted ``tflops`` has fallen within, out of sample."""
    low, _, high = OUT_OF_SAMPLE
    return tflops / high, tflops / low


@dataclass(frozen=True)
class Knob:
    """One unpublished setting re-asked: each value tried, its model TFLOP/s per GPU and whether it fits."""

    name: str
    values: tuple[tuple[str, float, bool], ...]  # (value, TFLOP/s per GPU, fits)

    def swing(self, base: float) -> tuple[float, float]:
        """The lowest and highest throughput over the values, as shares of ``base`` minus one."""
        rates = [t for _, t, _ in self.values]
        return min(rates) / base - 1, max(rates) / base - 1

    def text(self, base: float) -> str:
        low, high = self.swing(base)
        tried = ", ".join(f"{v} {tflops_text(t)}{'' if fits else ' (does not fit)'}" for v, t, fits in self.values)
        return f"{self.name}: {low:+.0%} to {high:+.0%} ({tried})"

    def to_json(self) -> dict[str, Any]:
        return {"knob": self.name, "values": [{"value": v, "tflops_per_gpu": t, "fits": f} for v, t, f in self.values]}


def _depths(model: Transformer, layout: TrainingSetup) -> list[tuple[str, dict[str, Any]]]:
    """The layout at 1, 2 and 4 model chunks per rank (and its own), keeping any first / last stage's
    difference from the others' layer count, and a looped schedule's own loop (interleaved zero bubble stays
    itself; until 2026-12-06 every depth was asked of interleaved 1F1B, so the layout's own depth could show
    another schedule's answer)."""
    if layout.pp < 2 or not (layout.schedule == "1f1b" or layout.record.looped):
        return []
    counts = layout.chunk_layers(model)
    middle = counts[len(counts) // 2]
    d_first = (layout.first_stage_layers - middle) if layout.first_stage_layers is not None else None
    d_last = (layout.last_stage_layers - middle) if layout.last_stage_layers is not None else None
    out = []
    for v in sorted({1, 2, 4, layout.stages_per_rank}):
        chunks = layout.pp * v
        ends = (d_first or 0) + (d_last or 0)
        if layout.stage_layers is not None or (model.layers - ends) % chunks:
            continue
        even = (model.layers - ends) // chunks
        first = None if d_first is None else even + d_first
        last = None if d_last is None else even + d_last
        looped = layout.schedule if layout.record.looped else "interleaved-1f1b"  # the layout's own loop kept
        schedule = dict(schedule=looped, virtual_stages=v) if v > 1 else dict(schedule="1f1b", virtual_stages=1)
        out.append((f"v={v}", dict(first_stage_layers=first, last_stage_layers=last, **schedule)))
    return out


def knobs(model: Transformer, layout: TrainingSetup, on: System | str, asked: Report | None = None) -> list[Knob]:
    """Each unpublished knob re-asked (see the module docstring), those that could not run left out; ``asked``,
    the layout's own report if it was made, stands for the knob values the layout already has."""
    variants = {
        "interleaving depth": _depths(model, layout),
        "microbatch": [
            (f"{b}", dict(microbatch=b))
            for b in sorted({max(1, layout.microbatch // 2), layout.microbatch, layout.microbatch * 2})
        ],  # fmt: skip
        "recompute": [(r, dict(recompute=r)) for r in ("none", "selective", "full")],
        "gradient reduction": [("once", dict(zero=1)), ("every microbatch", dict(zero=2))]
        if layout.zero in (1, 2) and layout.pp > 1 and layout.microbatches > 1
        else [],
    }
    out = []
    for name, tries in variants.items():
        values = []
        for label, changes in tries:
            try:
                variant = replace(layout, **changes)  # the global batch kept: a microbatch that does not split it
                variant.check(model)  # is not tried
                report: Report = asked if asked is not None and variant == layout else whatif(model, variant, on)
            except SetupError:
                continue
            values.append((label, report.tflops_per_gpu, report.fits))
        if len(values) > 1:
            out.append(Knob(name, tuple(values)))
    return out
