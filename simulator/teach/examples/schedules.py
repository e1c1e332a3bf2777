"""Scenarios of the schedules with two stages per device: ZB-V and DualPipeV (V placement), looped BFS.

Each runs one training step of an 8-layer MLP on 4 devices with real arithmetic and is checked against
the same step on one device. In the V placement device 3 holds stages 3 and 4, which are adjacent:
stage 3's output goes to stage 4 in memory, not as a message, and is freed only after both its uses.
"""

from __future__ import annotations

from ...core.world import World
from ...parallel.mlp import MLP
from ...parallel.pipeline import FREE_LINKS, ActionCosts, Pipeline
from ...parallel.pipeline_split import pipeline_split
from ...parallel.schedules import make_schedule
from ..scenario import Scenario

MODEL = MLP((3,) + (4,) * 7 + (2,))  # eight layers: one per stage on four devices with two stages each
PARAMS = MODEL.init(seed=10)
X, T = MODEL.data(8, seed=11)
COSTS = ActionCosts(1e-6, 1e-6, 1e-6)  # F = I = W = 1 µs per stage: the zero-bubble papers' assumption


def pipeline(name: str, microbatches: int = 8, **options: int) -> Pipeline:
    return Pipeline(MODEL, make_schedule(name, 4, microbatches, **options), costs=COSTS)


def _scenario(name: str, title: str, story: str, pipe: Pipeline) -> Scenario:
    return Scenario(
        name=name,
        title=title,
        story=story,
        world=World(4, cost=FREE_LINKS),
        program=pipe,
        args=(PARAMS, X, T),
        reference=lambda: pipe.reference(PARAMS, X, T),
        tags=("pipeline", "training"),
        split=pipeline_split(pipe),
    )


SCENARIOS = [
    _scenario(
        "pipeline-zbv",
        "ZB-V: two stages per device in a V, the backward split into I and W",
        "Stage s sits on device s for the first half and on device 7 - s for the second: device 0 holds the first "
        "and the last stage, device 3 the two middle ones. The weight-gradient passes fill the ramps, so each "
        "device idles only (p - 1) F = 3 µs, 1/16 of its work.",
        pipeline("zbv"),
    ),
    _scenario(
        "pipeline-dualpipe-v",
        "DualPipeV: forward and backward of two microbatches paired, in a V",
        "DeepSeek-V3's schedule cut in half: after the warm-up each device runs a forward of one microbatch next to "
        "the backward of another (torch lists them as one overlapped action; here the forward runs, then the "
        "backward). The idle time equals ZB-V's; the gradients equal one device's.",
        pipeline("dualpipe-v"),
    ),
    _scenario(
        "pipeline-looped-bfs",
        "Looped BFS: every microbatch through a device's first stage, then through its second",
        "Breadth first: device r runs stage r for all eight microbatches, then stage r + 4, then the backwards in "
        "reverse. Its bubble equals interleaved 1F1B's, (p - 1) / (v m); it holds all eight microbatches at its peak.",
        pipeline("looped-bfs", virtual=2),
    ),
]
