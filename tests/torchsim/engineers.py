"""Torch programs written as engineers write them (modelled on PyTorch's examples and Megatron): DDP, data
parallelism by hand, Megatron's row-parallel bias, meshes of 2 and 3 dimensions, ``DTensor.from_local`` with
``Partial``, a hand-written pipeline with its backward, a ring all-reduce by isend/irecv; each with its
classic bug. Module-level functions, so that real ranks can import them."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from simulator.torchsim.programs import MLP


def sgd_steps(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 2, lr: float = 0.1) -> torch.Tensor:
    """The single-device twin of the data-parallel programs: ``steps`` SGD steps of the MSE on the whole batch."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return loss.detach()


def ddp(state: dict, x: torch.Tensor, y: torch.Tensor, steps: int = 2, bug: str | None = None) -> torch.Tensor:
    """``DistributedDataParallel``: each rank its rows, SGD; bug "same rows": every rank takes rank 0's rows."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, p = dist.get_rank(), dist.get_world_size()
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    ddp_model = DDP(model)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    take = 0 if bug == "same rows" else rank
    xs, ys = x.chunk(p)[take], y.chunk(p)[take]
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp_model(xs), ys)
        loss.backward()
        opt.step()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss.detach()


def manual_dp(state: dict, x: torch.Tensor, y: torch.Tensor, steps: int = 2, bug: str | None = None) -> torch.Tensor:
    """Data parallelism by hand: each rank its rows, gradients all-reduced and divided by the world size.
    bug "not averaged": no all-reduce (each rank steps with its own gradient)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs, ys = x.chunk(p)[rank], y.chunk(p)[rank]
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        if bug != "not averaged":
            for param in model.parameters():
                dist.all_reduce(param.grad)
                param.grad /= p
        opt.step()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss.detach()


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


def checkpointed_dp(state: dict, x: torch.Tensor, y: torch.Tensor, steps: int = 2) -> torch.Tensor:
    """``manual_dp`` on a ``Block`` whose MLP is wrapped for activation checkpointing (recomputed in backward)
    and compiled names (``_orig_mod.``) as real training scripts have them, under DDP."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.nn.parallel import DistributedDataParallel as DDP

    from simulator.torchsim.programs import Block

    rank, p = dist.get_rank(), dist.get_world_size()
    model = Block(state["norm.weight"].shape[0], state["mlp.fc1.weight"].shape[0])
    model.load_state_dict(state)
    model.mlp = checkpoint_wrapper(model.mlp)
    ddp_model = DDP(model)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    xs, ys = x.chunk(p)[rank], y.chunk(p)[rank]
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp_model(xs), ys)
        loss.backward()
        opt.step()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss.detach()


class Renamed(nn.Module):
    """``MLP`` with its layers under names of the program's own (``layer1``, ``layer2``)."""

    def __init__(self, d: int = 8, h: int = 16) -> None:
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(torch.relu(self.layer1(x)))


def renamed_dp(state: dict, x: torch.Tensor) -> torch.Tensor:
    """Each rank its rows through ``Renamed``: right values under names the single-device ``MLP`` does not have."""
    rank, p = dist.get_rank(), dist.get_world_size()
    model = Renamed(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict({k.replace("fc", "layer"): v for k, v in state.items()})
    return model(x.chunk(p)[rank])
