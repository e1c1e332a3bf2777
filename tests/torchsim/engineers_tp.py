"""Tensor-parallel torch programs written as engineers write them (modelled on Megatron and PyTorch's
examples): Megatron's row-parallel bias, ``DTensor.from_local`` with ``Partial``, reduce-scatter outputs, meshes
of 2 and 3 dimensions in any dim order, a ring all-reduce by isend/irecv, AdamW after tensor parallelism,
``redistribute``; each with its classic bug. Module-level functions, so that real ranks can import them."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from simulator.torchsim.programs import MLP


class RowParallelLinear(nn.Module):
    """Megatron's row-parallel linear: a block of the input features, the partial products all-reduced, the bias
    added after (``skip_bias_add`` off)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(bias.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = nn.functional.linear(x, self.weight)
        dist.all_reduce(out)
        return out + self.bias


def megatron_mlp(state: dict, x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """fc1 column-parallel, fc2 ``RowParallelLinear`` (bias after the all-reduce). bug "bias before": the bias
    added on every rank before the all-reduce (counted p times)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    fc1 = nn.Linear(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0] // p)
    with torch.no_grad():
        fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[rank])
        fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[rank])
    w2 = state["fc2.weight"].chunk(p, dim=1)[rank]
    if bug == "bias before":
        fc2: nn.Module = nn.Linear(w2.shape[1], w2.shape[0])
        with torch.no_grad():
            fc2.weight.copy_(w2)
            fc2.bias.copy_(state["fc2.bias"])
    else:
        fc2 = RowParallelLinear(w2, state["fc2.bias"])
    model = nn.Module()
    model.fc1, model.fc2 = fc1, fc2
    h = torch.relu(model.fc1(x))
    y = model.fc2(h)
    if bug == "bias before":
        dist.all_reduce(y)
    return y


def megatron_bias_after(state: dict, x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """Megatron's MLP with fc2 an ``nn.Linear`` without bias whose partial products are all-reduced, and the bias
    added after the all-reduce (``RowParallelLinear`` with ``skip_bias_add``: the caller adds it). bug "no bias":
    the bias is never added."""
    rank, p = dist.get_rank(), dist.get_world_size()
    d, h = state["fc1.weight"].shape[1], state["fc1.weight"].shape[0]
    model = nn.Module()
    model.fc1, model.fc2 = nn.Linear(d, h // p), nn.Linear(h // p, d, bias=False)
    with torch.no_grad():
        model.fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[rank])
        model.fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[rank])
        model.fc2.weight.copy_(state["fc2.weight"].chunk(p, dim=1)[rank])
    y = model.fc2(torch.relu(model.fc1(x)))
    dist.all_reduce(y)
    return y if bug == "no bias" else y + state["fc2.bias"]


def from_local_partial(state: dict, x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """fc2's partial products wrapped by ``DTensor.from_local(local, mesh, [Partial()])`` and made whole by
    ``full_tensor()``; the bias on rank 0 only. bug "replicate": ``[Replicate()]`` said of the partial sums."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate

    rank, p = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (p,))
    d, h = state["fc1.weight"].shape[1], state["fc1.weight"].shape[0]
    model = nn.Module()
    model.fc1, model.fc2 = nn.Linear(d, h // p), nn.Linear(h // p, d)
    with torch.no_grad():
        model.fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[rank])
        model.fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[rank])
        model.fc2.weight.copy_(state["fc2.weight"].chunk(p, dim=1)[rank])
        model.fc2.bias.copy_(state["fc2.bias"] if rank == 0 else torch.zeros_like(state["fc2.bias"]))
    local = model.fc2(torch.relu(model.fc1(x)))
    placement = Replicate() if bug == "replicate" else Partial()
    return DTensor.from_local(local, mesh, [placement]).full_tensor()


def reduce_scatter_rows(state: dict, x: torch.Tensor) -> torch.Tensor:
    """fc2's partial products reduce-scattered by rows (``dist.reduce_scatter_tensor``): each rank returns its rows
    of fc2 (sequence parallelism's way out of a row-parallel layer)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    d, h = state["fc1.weight"].shape[1], state["fc1.weight"].shape[0]
    model = nn.Module()
    model.fc1, model.fc2 = nn.Linear(d, h // p), nn.Linear(h // p, d)
    with torch.no_grad():
        model.fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[rank])
        model.fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[rank])
        model.fc2.weight.copy_(state["fc2.weight"].chunk(p, dim=1)[rank])
        model.fc2.bias.copy_(state["fc2.bias"] / p)  # each rank a share of the bias: the shares add up to it
    y = model.fc2(torch.relu(model.fc1(x)))
    mine = torch.empty(y.shape[0] // p, y.shape[1])
    dist.reduce_scatter_tensor(mine, y)
    return mine


def mesh_mlp(state: dict, x: torch.Tensor, shape: tuple, names: tuple, bug: str | None = None) -> torch.Tensor:
    """The MLP tensor-parallel (``parallelize_module``) over the mesh dim "tp", data-parallel over "dp" (each "dp"
    coordinate its rows of the batch) and, where the mesh has "cp", split by tokens (dim 1 of x) over it, on a mesh
    of any dim order. bug "wrong mesh dim": the batch split by the
    "tp" coordinate (tensor-parallel partners then hold different rows)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return model(_my_tokens(mesh, names, x, bug))


def _my_tokens(mesh: Any, names: tuple, x: torch.Tensor, bug: str | None) -> torch.Tensor:
    """The rank's rows of the batch (by its "dp" coordinate) and, on a mesh with "cp", its part of the sequence."""
    dp = mesh["tp"] if bug == "wrong mesh dim" else mesh["dp"]
    mine = x.chunk(dp.size())[dp.get_local_rank()]
    if "cp" in names:
        mine = mine.chunk(mesh["cp"].size(), dim=1)[mesh["cp"].get_local_rank()]
    return mine


def mesh_by_hand(state: dict, x: torch.Tensor, shape: tuple, names: tuple, bug: str | None = None) -> torch.Tensor:
    """``mesh_mlp`` by hand: fc1's columns and fc2's rows by the "tp" coordinate, the batch's rows by "dp", fc2's
    partial sums all-reduced over the "tp" group (the mesh's own process group). bug as ``mesh_mlp``'s."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    tp = mesh["tp"]
    p, r = tp.size(), tp.get_local_rank()
    d, h = state["fc1.weight"].shape[1], state["fc1.weight"].shape[0]
    model = MLP(d, h // p)
    with torch.no_grad():
        model.fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[r])
        model.fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[r])
        model.fc2.weight.copy_(state["fc2.weight"].chunk(p, dim=1)[r])
        model.fc2.bias.copy_(state["fc2.bias"] if r == 0 else torch.zeros_like(state["fc2.bias"]))
    y = model(_my_tokens(mesh, names, x, bug))
    dist.all_reduce(y, group=tp.get_group())
    return y


def adamw_steps(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 2) -> torch.Tensor:
    """The single-device twin of ``adamw_tp``: AdamW steps of the MSE, gradients clipped to norm 0.5."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, foreach=False)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=False)
        opt.step()
    return loss.detach()


def adamw_tp(state: dict, x: torch.Tensor, y: torch.Tensor, steps: int = 2, bug: str | None = None) -> torch.Tensor:
    """``MLP`` tensor-parallel through ``parallelize_module``, AdamW on its DTensor parameters, gradients clipped by
    their norm. bug "local norm": each rank clips by the norm of its own shards (``to_local()``), not the whole's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, foreach=False)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if bug == "local norm":
            grads = [p.grad.to_local() for p in model.parameters()]
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            for g in grads:
                g.mul_(min(1.0, 0.5 / (float(norm) + 1e-6)))
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=False)
        opt.step()
    return loss.detach()


def redistribute_rows(state: dict, x: torch.Tensor) -> torch.Tensor:
    """Each rank given its rows as a ``Shard(0)`` DTensor, gathered by ``redistribute(mesh, [Replicate()])``, then
    the whole MLP on the whole batch on every rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    rank, p = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (p,))
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    rows = DTensor.from_local(x.chunk(p)[rank], mesh, [Shard(0)])
    return model(rows.redistribute(mesh, [Replicate()]).to_local())


def ring_all_reduce(t: torch.Tensor, steps: int | None = None) -> None:
    """A ring all-reduce by hand, in place, with ``dist.isend`` and ``dist.irecv`` (reduce-scatter, then
    all-gather, over the tensor's p chunks, as NCCL's ring does); ``steps``: stop after that many."""
    rank, p = dist.get_rank(), dist.get_world_size()
    chunks = list(t.view(-1).chunk(p))
    right, left = (rank + 1) % p, (rank - 1) % p
    for step in range(2 * (p - 1) if steps is None else steps):
        send_at, recv_at = (rank - step) % p, (rank - step - 1) % p
        got = torch.empty_like(chunks[recv_at])
        req = dist.isend(chunks[send_at].clone(), dst=right)
        dist.irecv(got, src=left).wait()
        req.wait()
        if step < p - 1:
            chunks[recv_at] += got  # a running sum on its way round
        else:
            chunks[recv_at].copy_(got)  # the finished sum, passed on


def ring_tp_mlp(state: dict, x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """Megatron's MLP by hand (the bias on rank 0), fc2's partial sums added by ``ring_all_reduce``. bug "half a
    ring": the reduce-scatter half only (the ring stops before the all-gather)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    d, h = state["fc1.weight"].shape[1], state["fc1.weight"].shape[0]
    model = MLP(d, h // p)
    with torch.no_grad():
        model.fc1.weight.copy_(state["fc1.weight"].chunk(p, dim=0)[rank])
        model.fc1.bias.copy_(state["fc1.bias"].chunk(p, dim=0)[rank])
        model.fc2.weight.copy_(state["fc2.weight"].chunk(p, dim=1)[rank])
        model.fc2.bias.copy_(state["fc2.bias"] if rank == 0 else torch.zeros_like(state["fc2.bias"]))
    with torch.no_grad():
        y = model(x)
    ring_all_reduce(y, p - 1 if bug == "half a ring" else None)
    return y
