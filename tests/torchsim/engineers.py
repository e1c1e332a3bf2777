"""Torch programs written as engineers write them (modelled on PyTorch's examples): DDP, FSDP2, data
parallelism by hand, activation checkpointing, a hand-written pipeline with its backward; each with its classic
bug. Module-level functions, so that real ranks can import them. The tensor-parallel ones (Megatron's bias,
meshes, ``from_local``, rings by hand, AdamW after tensor parallelism) are in ``engineers_tp.py``."""

from __future__ import annotations

from typing import Any

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


class Stages(nn.Module):
    """Two stages with parameters: ``a`` (a linear layer and a ReLU), then ``b`` (a linear layer)."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(d, d), nn.ReLU())
        self.b = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def stages_step(model: nn.Module, x: torch.Tensor, microbatches: int) -> torch.Tensor:
    """The single-device twin of ``pipeline_fwd_bwd``: each microbatch forward, then backward of its loss."""
    outs = []
    for mb in x.chunk(microbatches):
        y = model(mb)
        (y**2).sum().backward()
        outs.append(y.detach())
    return torch.cat(outs)


def pipeline_fwd_bwd(state: dict, x: torch.Tensor, microbatches: int = 2, bug: str | None = None) -> Any:
    """GPipe by hand on 2 ranks: rank 0 runs stage a and sends each microbatch's activation; rank 1 runs stage b,
    the loss and its backward, and sends back the gradient of each activation, which rank 0 feeds to its
    backward. bug "reversed gradients": rank 1 sends the gradients last microbatch first."""
    model = Stages(state["b.weight"].shape[0])
    model.load_state_dict(state)
    if dist.get_rank() == 0:
        outs = [model.a(mb) for mb in x.chunk(microbatches)]
        for h in outs:
            dist.send(h.detach(), dst=1)
        for h in outs:
            grad = torch.empty_like(h)
            dist.recv(grad, src=1)
            h.backward(grad)
        return None
    ins, ys = [], []
    for mb in x.chunk(microbatches):
        h = torch.empty(mb.shape[0], state["b.weight"].shape[1])
        dist.recv(h, src=0)
        h.requires_grad_()
        y = model.b(h)
        (y**2).sum().backward()
        ins.append(h)
        ys.append(y.detach())
    for h in reversed(ins) if bug == "reversed gradients" else ins:
        dist.send(h.grad, dst=0)
    return torch.cat(ys)


def fsdp2(state: dict, x: torch.Tensor, y: torch.Tensor, steps: int = 2, bug: str | None = None) -> torch.Tensor:
    """FSDP2: ``fully_shard`` on each layer and the model over all ranks, each rank its rows, SGD. bug "same rows":
    every rank takes rank 0's rows."""
    from torch.distributed.fsdp import fully_shard

    rank, p = dist.get_rank(), dist.get_world_size()
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    fully_shard(model.fc1)
    fully_shard(model.fc2)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    take = 0 if bug == "same rows" else rank
    xs, ys = x.chunk(p)[take], y.chunk(p)[take]
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        opt.step()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss.detach()
