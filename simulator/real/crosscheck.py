"""Cross-checks against PyTorch's own implementations, run on real ranks by a ``TorchWorld``.

These rank programs ignore the simulator's device API (they take the device only for its rank) and
call PyTorch directly, in the process group the launcher set up, so the simulator's answers can be
set beside PyTorch's:

- ``pipelined_two_stage``: the seed model (stage A: 2x + 1, stage B: squaring) as two
  ``torch.distributed.pipelining.PipelineStage``s under ``ScheduleGPipe``. Input 3 gives 49; inputs
  3 and 4 as two microbatches give 49 and 81. With ``broken=True`` stage A returns a (1, 1) float32
  tensor where (1,) float64 was declared, and PyTorch raises its own ``PipeliningMetadataError``.
- ``dtensor_shards``: ``distribute_tensor`` with ``Shard``/``Replicate`` placements; each rank returns
  its ``to_local()`` piece, to compare with the simulator's placements.
- ``tensor_parallel_linear``: ``nn.Linear`` layers parallelised with ``ColwiseParallel`` and
  ``RowwiseParallel``; each rank returns its local weight shard and its output.

How the contract is declared to ``PipelineStage`` matters (PyTorch 2.13): with both ``input_args``
and ``output_args`` given the stage runs in "static" mode and does not check what it sends, so a
mismatch is not reported (the receiver reads bytes of the wrong type); giving only one of them makes
the stage infer shapes from a first forward pass and validate them against what was declared.
``declare="output"`` (the default here) gives stage A only its ``output_args`` and stage B only its
``input_args``, which is the form that catches the broken contract.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..core.device import Device


class StageA(nn.Module):
    """2x + 1; ``broken`` returns it as a (n, 1) float32 tensor instead of (n,) float64."""

    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.broken = broken

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = 2 * x + 1
        return h.reshape(-1, 1).float() if self.broken else h


class StageB(nn.Module):
    """Squares what it receives."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h**2


DECLARATIONS = {
    # rank -> which example tensors the stage is given: the contract PyTorch knows about
    "output": lambda rank, mb: {"output_args": mb} if rank == 0 else {"input_args": mb},
    "static": lambda rank, mb: {"input_args": mb, "output_args": mb},
    "none": lambda rank, mb: {},
}


def pipelined_two_stage(
    dev: Device, xs: list[float], n_microbatches: int = 1, *, broken: bool = False, declare: str = "output"
) -> np.ndarray | None:
    """Rank program (2 ranks): the seed model through PipelineStage + ScheduleGPipe; the last stage returns."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    if dev.world_size != 2:
        raise ValueError(f"pipelined_two_stage runs on 2 ranks, not {dev.world_size}")
    if len(xs) % n_microbatches:
        raise ValueError(f"{len(xs)} inputs do not split into {n_microbatches} equal microbatches")
    microbatch = torch.empty(len(xs) // n_microbatches, dtype=torch.float64)  # the declared contract
    module = StageA(broken) if dev.rank == 0 else StageB()
    stage = PipelineStage(module, dev.rank, 2, torch.device("cpu"), **DECLARATIONS[declare](dev.rank, microbatch))
    schedule = ScheduleGPipe(stage, n_microbatches=n_microbatches)
    if dev.rank == 0:
        schedule.step(torch.tensor(xs, dtype=torch.float64))
        return None
    return schedule.step().numpy()


def dtensor_shards(dev: Device, value: np.ndarray, placement: str) -> np.ndarray:
    """Rank program: this rank's ``to_local()`` piece of ``value`` distributed as ``placement``.

    placement: "S(0)", "S(1)" or "R" (Shard(0), Shard(1), Replicate() over a 1-D mesh of all ranks).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    placements = {"S(0)": Shard(0), "S(1)": Shard(1), "R": Replicate()}
    mesh = init_device_mesh("cpu", (dev.world_size,))
    d = distribute_tensor(torch.from_numpy(np.array(value)), mesh, [placements[placement]])
    return d.to_local().numpy()


def tensor_parallel_linear(dev: Device, x: np.ndarray, a: np.ndarray, style: str) -> dict[str, Any]:
    """Rank program: y = x @ a through an ``nn.Linear`` parallelised column- or row-wise.

    ``a`` is (in, out) as in the simulator (``nn.Linear`` stores its transpose, (out, in)).
    style "column": ColwiseParallel, the input replicated; returns this rank's columns of y.
    style "row": RowwiseParallel, the input split along its last dim; returns the whole y, summed
    across ranks by PyTorch's all-reduce. Both also return this rank's shard of ``a``.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (dev.world_size,))
    layer = nn.Linear(a.shape[0], a.shape[1], bias=False, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(np.array(a.T)))
    styles = {"column": ColwiseParallel, "row": RowwiseParallel}
    layer = parallelize_module(layer, mesh, styles[style]())
    xt = torch.from_numpy(np.array(x))
    if style == "row":  # the input arrives split along its last dimension, as the row split needs
        xt = distribute_tensor(xt, mesh, [Shard(-1)]).to_local()
    with torch.no_grad():
        y = layer(xt)
    return {"a_shard": layer.weight.to_local().detach().numpy().T.copy(), "y": y.detach().numpy()}


def world_rank(dev: Device) -> int:
    """Rank program: torch.distributed's own idea of this process's rank (it must equal ``dev.rank``)."""
    return dist.get_rank()
