"""The split a pipeline teaches, declared for the checker: each stage's layers on its device, and only the
activations (forward) and their gradients (backward) at stage boundaries crossing.

``pipeline_split(pipe)`` reads the pipeline's partition (layers per stage) and the schedule's placement (stage
-> device), so interleaved and V placements declare theirs too; ``stage_split(partition, devices, layers)``
is the same from plain data (an exercise that builds no pipeline of its own).

Names follow ``simulator.parallel.mlp``: layer k's weights ``Wk``/``bk``, its output ``hk.mb<i>``, the
gradients ``dzk.*``, ``dWk*``, ``dbk*``; ``dh(k-1).*`` (the gradient of layer k's input) is computed where
layer k is; the loss and the targets on the last stage, the inputs on the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..checker.split import Split
from .pipeline import Pipeline


def stage_split(partition: Sequence[tuple[int, int]], devices: Sequence[int], layers: int) -> Split:
    """Stage s holds layers partition[s] (first, last; 1-based, inclusive) on device devices[s]."""
    compute: dict[str, Any] = {}
    given: dict[str, Any] = {"x.*": devices[0], "t.*": devices[-1]}
    crosses: dict[str, Any] = {}
    for s, ((first, last), dev) in enumerate(zip(partition, devices)):
        for k in range(first, last + 1):
            for pre in ("h", "dz", "dW", "db"):
                compute[f"{pre}{k}"] = compute[f"{pre}{k}.*"] = dev
            given[f"W{k}"] = given[f"b{k}"] = dev
            if k > 1:  # the gradient of layer k's input is computed where layer k is
                compute[f"dh{k - 1}.*"] = dev
        if s + 1 < len(partition) and devices[s + 1] != dev:
            crosses[f"h{last}.*"] = (dev, devices[s + 1])
            crosses[f"dh{last}.*"] = (devices[s + 1], dev)
    compute[f"dh{layers}.*"] = compute["loss*"] = devices[-1]
    return Split(compute=compute, given=given, crosses=crosses, collectives=())


def pipeline_split(pipe: Pipeline) -> Split:
    """The split of a plain pipeline (no data or tensor parallelism inside it): see the module docstring."""
    devices = [pipe.devices[pipe.schedule.placement[s]] for s in range(pipe.schedule.stages)]
    return stage_split(pipe.partition, devices, pipe.mlp.layers)
