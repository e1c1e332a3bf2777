"""Data, pipeline and tensor parallelism together: one training step on a 3-D device mesh.

The mesh's dimensions are ("dp", "pp", "tp"). Device (d, s, j) is

- tensor-parallel rank j of pipeline stage s: it holds its parts of the stage's layer pairs
  (``TensorParallelLayers``) and all-reduces partial sums with the other devices of its "tp" group;
- pipeline rank s of replica d: it runs the pipeline schedule with the devices (d, *, j), sending
  whole activations to (d, s + 1, j) and input gradients to (d, s - 1, j);
- replica d: it takes rows d of the batch, and once its gradients are complete all-reduces them
  with the devices (*, s, j) of its "dp" group (``BucketedAllReduce``), then averages.

Every device ends the step with the average gradient of the parameter parts it holds, which is the
whole batch's gradient on one device, restricted to those parts. The same three pieces that run each
strategy alone are reused unchanged; only the wiring between them lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..checker import Reference
from ..core.device import Device
from ..core.engine import RunResult
from ..core.world import World
from ..tensors.mesh import DeviceMesh
from . import mlp as M
from .data import BucketedAllReduce, add_bucket_values, bucket_layout
from .mlp import MLP, split_rows
from .pipeline import ActionCosts, Pipeline
from .schedules import make_schedule
from .tensor_layers import TensorParallelLayers, tensor_parallel_values, tp_index

DIMS = ("dp", "pp", "tp")


def pair_partition(layers: int, stages: int) -> tuple[tuple[int, int], ...]:
    """Split layers 1..L into ``stages`` groups of whole column/row pairs."""
    if layers % 2 or layers // 2 < stages:
        raise ValueError(
            f"a tensor-parallel pipeline needs whole layer pairs per stage: {layers} layers cannot make "
            f"{stages} stages of pairs; use an even number of layers, at least {2 * stages}"
        )
    return tuple((2 * a + 1, 2 * b) for a, b in ((sl.start, sl.stop) for sl in split_rows(layers // 2, stages)))


@dataclass(frozen=True)
class Parallel3D:
    """One training step of ``mlp`` on ``mesh`` (dimensions dp, pp, tp); call it as the rank program.

    schedule:     the pipeline schedule's name (see ``schedules.SCHEDULES``)
    microbatches: microbatches per replica
    """

    mlp: MLP
    mesh: DeviceMesh
    schedule: str = "1f1b"
    microbatches: int = 2
    costs: ActionCosts | None = None
    overlap: bool = True

    def __post_init__(self) -> None:
        if self.mesh.ndim != 3 or self.mesh.dim_names != DIMS:
            raise ValueError(f"Parallel3D needs a 3-D mesh with dim_names {DIMS}, got {self.mesh!r}")
        pair_partition(self.mlp.layers, self.mesh.size("pp"))
        make_schedule(self.schedule, self.mesh.size("pp"), self.microbatches)  # fail now on a bad combination

    @property
    def sizes(self) -> dict[str, int]:
        return {d: self.mesh.size(d) for d in DIMS}

    def world(self, **options: Any) -> World:
        return World(self.mesh.size(), **options)

    def run(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, **world_options: Any) -> RunResult:
        return self.world(**world_options).run(self, params, x, t)

    def reference(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
        """One device: each replica's microbatches, their average, and the tensor-parallel partial sums."""
        dp, tp = self.mesh.size("dp"), self.mesh.size("tp")
        ref = M.mlp_reference(self.mlp, params, x, t, self.microbatches, dp)
        tensor_parallel_values(ref, self.mlp, tp, dp * self.microbatches)
        for first, last in pair_partition(self.mlp.layers, self.mesh.size("pp")):
            layout = bucket_layout(self.mlp, range(first, last + 1), 0)
            for j in range(tp):
                add_bucket_values(ref, layout, dp, f"tp{j}", partial(tp_index, self.mlp, tp, j))
        return ref

    def __call__(self, dev: Device, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict:
        mesh = self.mesh
        d, _, _ = mesh.coordinate(dev.rank)
        dp = mesh.size("dp")
        if x.shape[0] % dp:
            raise ValueError(f"a batch of {x.shape[0]} rows does not split evenly over {dp} replicas")
        rows = split_rows(x.shape[0], dp)[d]
        pipe = Pipeline(
            self.mlp,
            make_schedule(self.schedule, mesh.size("pp"), self.microbatches),
            partition=pair_partition(self.mlp.layers, mesh.size("pp")),
            costs=self.costs,
            devices=mesh.group("pp", dev.rank),
            first_microbatch=d * self.microbatches,
            grad_suffix=f".replica[{d}]",
            layer_ops=partial(TensorParallelLayers, group=mesh.group("tp", dev.rank)),
            sync=partial(BucketedAllReduce, group=mesh.group("dp", dev.rank), overlap=self.overlap),
        )
        return pipe(dev, params, x[rows], t[rows])
