"""Torch programs to run on simulated ranks and on real ones: the seed split, a tensor-parallel MLP written by
hand and through ``parallelize_module``, a two-stage pipeline, and each one's classic bugs.

Each program is a plain function of its arguments, written as torch.distributed code is (``dist.get_rank()``,
``dist.all_reduce``, ``dist.send``), to run unchanged under ``simulate_torch(program, n, ...)`` and on real
ranks with ``TorchWorld(n).run(real_rank, program, ...)``. They live in a package module so that real rank
processes can import them (a notebook cell's function cannot travel to another process).

Models (the single-device run the checker compares with):
- ``TwoStage``: stage ``a`` computes 2x + 1, stage ``b`` squares it (the seed: 3 -> 7 -> 49).
- ``MLP``: ``fc1`` (d -> h), ReLU, ``fc2`` (h -> d); ``mlp(seed)`` makes one with fixed weights.
- ``Block``: a LayerNorm ``norm`` before an ``MLP`` ``mlp``; ``mlp_step(model, x)`` runs a model forward and
  backward (the single-device twin of the programs that do).

Programs (``bug=`` picks a classic mistake; ``None`` is the correct program):
- ``seed_split(x)``: rank 0 runs stage a and sends its output; rank 1 receives it and runs stage b.
  bug "raw input": rank 0 sends x itself.
- ``tp_mlp(state, x)``: Megatron's MLP by hand on every rank: fc1 split by columns (rank r keeps rows
  r of its weight), fc2 by rows, its partial sums added by ``dist.all_reduce``; fc2's bias added on rank 0
  only, so the partial sums add up to the whole. bugs "missing all-reduce", "wrong shard" (every rank takes
  the next rank's block of fc1), "bias on every rank", "read before wait" (the all-reduce called with
  ``async_op=True`` and its tensor read before ``work.wait()``), "never waited" (nor read after it); "barrier first" (a barrier between fc2 and its
  all-reduce) and "async all-reduce" (waited on before the tensor is read) are no bugs.
- ``tp_mlp_in_groups(state, x, strided)``: the same in two groups of 2 ranks, (0, 2) and (1, 3) or (0, 1) and
  (2, 3), each rank taking the block of its place in its group; bug "wrong shard".
- ``dtensor_mlp(state, x, mesh_shape)``: the same MLP through ``parallelize_module`` (``ColwiseParallel``
  for fc1, ``RowwiseParallel`` for fc2) on a 1-D mesh, or on the second dimension of a 2-D mesh, with a
  backward pass. bugs "missing all-reduce" (fc2's output left ``Partial``), "wrong shard" (every rank
  loads the next rank's block of fc1's weight).
- ``sequence_parallel_block(state, x)``: ``Block`` with its norm ``SequenceParallel`` over the tokens, then
  the MLP as above, back to tokens by a reduce-scatter; forward and backward.
- ``pipeline(x, microbatches)``: pairs of ranks (2i, 2i + 1) each run a two-stage pipeline of
  ``TwoStage`` on their share of the batch, microbatch by microbatch, with ``dist.send``/``dist.recv``.
  bugs "raw input", "wrong order" (rank 2i sends its microbatches last to first).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class StageA(nn.Module):
    """Stage A of the seed: 2x + 1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x + 1


class StageB(nn.Module):
    """Stage B of the seed: squares what it is given."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h**2


class TwoStage(nn.Module):
    """The seed model on one device: b(a(x)) = (2x + 1)^2."""

    def __init__(self) -> None:
        super().__init__()
        self.a = StageA()
        self.b = StageB()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class MLP(nn.Module):
    """fc1 (d -> h), ReLU, fc2 (h -> d): the block tensor parallelism splits."""

    def __init__(self, d: int = 8, h: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def mlp(seed: int = 0, d: int = 8, h: int = 16) -> MLP:
    """An ``MLP`` whose weights depend only on ``seed`` (every rank makes the same one)."""
    torch.manual_seed(seed)
    return MLP(d, h)


def batch(seed: int = 1, rows: int = 4, d: int = 8) -> torch.Tensor:
    """An input batch that depends only on ``seed``."""
    return torch.randn(rows, d, generator=torch.Generator().manual_seed(seed))


# ---- the seed split ------------------------------------------------------------------------------
def seed_split(x: torch.Tensor, bug: str | None = None) -> torch.Tensor | None:
    """Stage a on rank 0, stage b on rank 1; what a computes crosses the boundary."""
    model = TwoStage()
    if dist.get_rank() == 0:
        h = model.a(x)
        dist.send(x if bug == "raw input" else h, dst=1)
        return None
    h = torch.empty_like(x)
    dist.recv(h, src=0)
    return model.b(h)


# ---- tensor parallelism by hand -------------------------------------------------------------------
def tp_mlp(state: dict[str, torch.Tensor], x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """Megatron's MLP on every rank of the world: fc1 by columns, fc2 by rows, one all-reduce."""
    rank, p = dist.get_rank(), dist.get_world_size()
    d, h = state["fc1.weight"].shape[1], state["fc1.weight"].shape[0]
    model = MLP(d, h // p)
    take = (rank + 1) % p if bug == "wrong shard" else rank
    with torch.no_grad():
        model.fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[take])  # rows of W1: columns of x W1^T
        model.fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[take])
        model.fc2.weight.copy_(state["fc2.weight"].chunk(p, dim=1)[rank])  # columns of W2: its rows of the sum
        keep_bias = rank == 0 or bug == "bias on every rank"
        model.fc2.bias.copy_(state["fc2.bias"] if keep_bias else torch.zeros_like(state["fc2.bias"]))
    y = model(x)
    if bug == "barrier first":  # not a bug: fc2's output is on the device before its all-reduce says it is partial
        dist.barrier()
    if bug == "never waited":
        dist.all_reduce(y, async_op=True)
        return y
    if bug in ("async all-reduce", "read before wait"):  # the all-reduce in flight while the rank goes on
        work = dist.all_reduce(y, async_op=True)
        out = y.clone() if bug == "read before wait" else None  # read before the result has come
        work.wait()
        return y if out is None else out
    if bug != "missing all-reduce":
        dist.all_reduce(y)  # the partial sums of fc2, added up: Megatron's g
    return y


def tp_mlp_in_groups(state: dict[str, torch.Tensor], x: torch.Tensor, strided: bool, bug: str | None = None) -> Any:
    """``tp_mlp`` within tensor-parallel groups of 2 (each group runs the whole MLP on the same batch): ranks
    (0, 2) and (1, 3) when ``strided``, else (0, 1) and (2, 3); each rank takes the block of its place in its
    group. bug "wrong shard": the other place's block of fc1."""
    rank = dist.get_rank()
    pairs = [[0, 2], [1, 3]] if strided else [[0, 1], [2, 3]]
    groups = [dist.new_group(ranks) for ranks in pairs]  # every rank makes every group, as torch requires
    group = groups[0] if rank in pairs[0] else groups[1]
    at, p = dist.get_rank(group), 2
    take = 1 - at if bug == "wrong shard" else at
    d, h = state["fc1.weight"].shape[1], state["fc1.weight"].shape[0]
    model = MLP(d, h // p)
    with torch.no_grad():
        model.fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[take])
        model.fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[take])
        model.fc2.weight.copy_(state["fc2.weight"].chunk(p, dim=1)[at])
        model.fc2.bias.copy_(state["fc2.bias"] if at == 0 else torch.zeros_like(state["fc2.bias"]))
    y = model(x)
    dist.all_reduce(y, group=group)
    return y


# ---- tensor parallelism through DTensor ---------------------------------------------------------------
def dtensor_mlp(
    state: dict[str, torch.Tensor], x: torch.Tensor, mesh_shape: tuple[int, ...] | None = None, bug: str | None = None
) -> dict[str, torch.Tensor]:
    """The MLP through ``parallelize_module`` on the mesh's last dimension; forward, then backward of y.sum()."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    shape = tuple(mesh_shape) if mesh_shape is not None else (dist.get_world_size(),)
    names = ("tp",) if len(shape) == 1 else ("dp", "tp")
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    tp = mesh["tp"]
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    rowwise = RowwiseParallel(output_layouts=Partial()) if bug == "missing all-reduce" else RowwiseParallel()
    parallelize_module(model, tp, {"fc1": ColwiseParallel(), "fc2": rowwise})
    if bug == "wrong shard":  # each rank loads the next rank's block of fc1's weight, as an off-by-one loader does
        p, r = tp.size(), tp.get_local_rank()
        with torch.no_grad():
            model.fc1.weight.to_local().copy_(state["fc1.weight"].chunk(p, dim=0)[(r + 1) % p])
    y = model(x)
    y.sum().backward()
    return y


class Block(nn.Module):
    """A LayerNorm before the MLP: the part of a transformer block sequence parallelism splits by tokens."""

    def __init__(self, d: int = 8, h: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = MLP(d, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


def sequence_parallel_block(state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``Block`` with the norm ``SequenceParallel`` (each rank its tokens, dim 1 of x), fc1 ``ColwiseParallel`` from
    the gathered tokens, fc2 ``RowwiseParallel`` reduce-scattered back to tokens; forward, then backward of y.sum().
    Each rank is given its own tokens and returns its tokens of the output."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = Block(state["norm.weight"].shape[0], state["mlp.fc1.weight"].shape[0])
    model.load_state_dict(state)
    plan = {
        "norm": SequenceParallel(),
        "mlp.fc1": ColwiseParallel(input_layouts=Shard(1)),
        "mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
    }
    parallelize_module(model, mesh, plan)
    tokens = x.chunk(dist.get_world_size(), dim=1)[dist.get_rank()]
    y = model(tokens)
    y.sum().backward()
    return y


def mlp_step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The single-device twin of ``dtensor_mlp``: forward, then backward of y.sum()."""
    y = model(x)
    y.sum().backward()
    return y


# ---- a two-stage pipeline ------------------------------------------------------------------------------
def pipeline(x: torch.Tensor, microbatches: int = 2, bug: str | None = None) -> torch.Tensor | None:
    """Pairs of ranks (2i, 2i + 1) pipeline ``TwoStage`` over their share of the batch (GPipe: all forwards)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    pair, stage = divmod(rank, 2)
    mine = x.chunk(world // 2, dim=0)[pair]
    model = TwoStage()
    if stage == 0:
        outs = [model.a(mb) for mb in mine.chunk(microbatches, dim=0)]
        sent = [mb for mb in mine.chunk(microbatches, dim=0)] if bug == "raw input" else outs
        for h in reversed(sent) if bug == "wrong order" else sent:
            dist.send(h, dst=rank + 1)
        return None
    results = []
    for mb in mine.chunk(microbatches, dim=0):
        h = torch.empty_like(mb)
        dist.recv(h, src=rank - 1)
        results.append(model.b(h))
    return torch.cat(results)


def pipeline_references(x: torch.Tensor, world: int, microbatches: int = 2) -> dict[int, Any]:
    """The single-device run each rank of ``pipeline`` is compared with: its pair's share of the batch, in
    microbatches (pairs are data-parallel replicas, each fed its own rows)."""
    from ..checker.reference import Reference

    shares = x.chunk(world // 2, dim=0)
    refs = [Reference.of_torch(TwoStage(), share, microbatches=microbatches) for share in shares]
    return {rank: refs[rank // 2] for rank in range(world)}
