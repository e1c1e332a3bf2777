"""Torch programs written as engineers write them from PyTorch's examples, for the red team's checks (redteam4):
experts routed with ``all_to_all_single``, a column-parallel layer joined by ``all_gather_into_tensor``, a pipeline
with ``batch_isend_irecv``, parameters broadcast from rank 0 then gradients averaged by hand. Module-level, so real
ranks can import them; ``bug=`` picks a mistake."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class Experts(nn.Module):
    """A top-1 mixture of experts: a gate picks each token's expert, the expert's linear layer transforms it."""

    def __init__(self, d: int = 4, n: int = 2):
        super().__init__()
        torch.manual_seed(0)
        self.gate = nn.Linear(d, n, bias=False)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.gate(x).argmax(dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out[choice == e] = expert(x[choice == e])
        return out


def moe(state: dict, x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """Expert parallelism: rank r holds expert r and its share of the tokens; tokens go to their expert's rank with
    ``all_to_all_single`` (uneven splits), come back the same way, and every rank returns its share's outputs."""
    rank, p = dist.get_rank(), dist.get_world_size()
    model = Experts(x.shape[-1], p)
    model.load_state_dict(state)
    mine = x.chunk(p)[rank]
    with torch.no_grad():
        choice = model.gate(mine).argmax(dim=-1)
        order = torch.argsort(choice, stable=True)
        send = mine[order]
        counts = torch.bincount(choice, minlength=p)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)
        got = torch.empty(int(recv_counts.sum()), mine.shape[-1])
        dist.all_to_all_single(got, send, recv_counts.tolist(), counts.tolist())
        done = model.experts[rank](got)
        if bug == "expert twice":
            done = model.experts[rank](done)
        back = torch.empty_like(send)
        split_back = recv_counts.tolist() if bug != "swapped splits" else counts.tolist()
        dist.all_to_all_single(back, done, counts.tolist(), split_back)
        out = torch.empty_like(back)
        out[order] = back
    return out


def colwise_gathered(state: dict, x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """fc1 split by its output features, the hidden joined by ``all_gather_into_tensor`` along dim 0 (rank blocks of
    rows), then put side by side; fc2 whole on every rank. bug "wrong axis": the blocks read as rows; "stacked": the
    output given as (p, rows, h / p), a form NCCL takes and gloo refuses."""
    rank, p = dist.get_rank(), dist.get_world_size()
    w1, b1 = state["fc1.weight"].chunk(p)[rank], state["fc1.bias"].chunk(p)[rank]
    h = torch.relu(x @ w1.T + b1)  # (rows, h / p)
    pieces = torch.empty(p, *h.shape) if bug == "stacked" else torch.empty(p * h.shape[0], h.shape[1])
    dist.all_gather_into_tensor(pieces, h.contiguous())
    pieces = pieces.reshape(p, *h.shape)
    if bug == "wrong axis":
        full = pieces.reshape(h.shape[0], -1)  # the blocks read as rows: each row mixes two ranks' rows
    else:
        full = torch.cat(list(pieces), dim=1)
    return full @ state["fc2.weight"].T + state["fc2.bias"]


def two_stage_batched(x: torch.Tensor, microbatches: int = 2, bug: str | None = None) -> Any:
    """A two-stage pipeline whose stage boundary goes through ``batch_isend_irecv``; the receiver scales what it got in
    place before stage b, as a program that reuses its buffer does."""
    from simulator.torchsim.programs import TwoStage

    model, rank = TwoStage(), dist.get_rank()
    outs = []
    for mb in x.chunk(microbatches):
        if rank == 0:
            h = model.a(mb)
            (w,) = dist.batch_isend_irecv([dist.P2POp(dist.isend, h, 1)])
            w.wait()
        else:
            h = torch.empty_like(mb)
            (w,) = dist.batch_isend_irecv([dist.P2POp(dist.irecv, h, 0)])
            w.wait()
            if bug == "in place":
                h.mul_(2)  # a stray in-place scale of the received buffer
            outs.append(model.b(h))
    return torch.cat(outs) if outs else None


def broadcast_then_dp(x: torch.Tensor, y: torch.Tensor, steps: int = 2, bug: str | None = None) -> torch.Tensor:
    """Every rank makes its model from its own seed; rank 0's parameters are broadcast; each rank steps on its rows
    with gradients averaged by ``all_reduce`` under ``no_grad``."""
    from simulator.torchsim.programs import MLP

    rank, p = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    model = MLP(x.shape[1], 16)
    if bug != "no broadcast":
        with torch.no_grad():
            for t in model.parameters():
                dist.broadcast(t, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs, ys = x.chunk(p)[rank], y.chunk(p)[rank]
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        with torch.no_grad():
            for t in model.parameters():
                dist.all_reduce(t.grad, op=dist.ReduceOp.SUM)
                if bug != "not averaged":
                    t.grad /= p
        opt.step()
    with torch.no_grad():
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss.detach()


def seeded_sgd(x: torch.Tensor, y: torch.Tensor, steps: int = 2) -> torch.Tensor:
    """The single-device twin of ``broadcast_then_dp``: rank 0's model (seed 0), SGD on the whole batch."""
    from simulator.torchsim.programs import MLP

    torch.manual_seed(0)
    model = MLP(x.shape[1], 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return loss.detach()


def rowwise_scattered(state: dict, x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """fc1 by columns, fc2 by rows; fc2's partial products reduce-scattered by rows, each rank adding the bias to its
    rows; the rows then gathered back by ``all_gather_into_tensor``. bug "bias on every term": the bias added p times;
    "stacked": the reduce-scatter's input given as (p, rows / p, d), which gloo refuses."""
    rank, p = dist.get_rank(), dist.get_world_size()
    w1, b1 = state["fc1.weight"].chunk(p)[rank], state["fc1.bias"].chunk(p)[rank]
    w2 = state["fc2.weight"].chunk(p, dim=1)[rank]
    h = torch.relu(x @ w1.T + b1)
    partial = h @ w2.T
    if bug == "stacked":
        partial = partial.reshape(p, x.shape[0] // p, -1)
    mine = torch.empty(x.shape[0] // p, state["fc2.weight"].shape[0])
    dist.reduce_scatter_tensor(mine, partial)
    mine = mine + state["fc2.bias"] * (p if bug == "bias on every term" else 1)
    out = torch.empty(x.shape[0], mine.shape[1])
    dist.all_gather_into_tensor(out, mine)
    return out


def non_contiguous(x: torch.Tensor, what: str) -> Any:
    """A collective or a send of a transposed (non-contiguous) tensor, as a hasty program writes it."""
    rank = dist.get_rank()
    t = (x * (rank + 1)).T  # non-contiguous
    if what == "all_reduce":
        dist.all_reduce(t)
        return t
    if what == "broadcast":
        dist.broadcast(t, src=0)
        return t
    if what == "send":
        if rank == 0:
            dist.send(t, dst=1)
            return None
        got = torch.empty_like(t)
        dist.recv(got, src=0)
        return got
    if what == "all_to_all_single, channels_last":
        c = (torch.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5) * (rank + 1)).to(memory_format=torch.channels_last)
        out = torch.empty(c.shape)
        dist.all_to_all_single(out, c)  # gloo sends c's bytes in memory order: the blocks arrive scrambled
        return out
    if what == "all_to_all_single":
        out = torch.empty(t.shape)
        dist.all_to_all_single(out, t)
        return out
    if what == "all_to_all_single into":  # gloo writes the output's bytes in memory order: the values scrambled
        out = torch.empty(t.shape[::-1]).T
        dist.all_to_all_single(out, t.contiguous())
        return out
    if what == "recv into":
        if rank == 0:
            dist.send(t.contiguous(), dst=1)
            return None
        dist.recv(t, src=0)
        return t
    raise ValueError(what)


def flat_bucket_dp(state: dict, x: torch.Tensor, y: torch.Tensor, steps: int = 2, bug: str | None = None) -> Any:
    """Data parallelism with the gradients flattened into one bucket, all-reduced once, averaged and copied back
    (``_flatten_dense_tensors``, as DDP's reducer does by hand). bug "stale bucket": the bucket flattened once, before
    the first step, and reused: later steps all-reduce the first step's gradients."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    from simulator.torchsim.programs import MLP

    rank, p = dist.get_rank(), dist.get_world_size()
    model = MLP(state["fc1.weight"].shape[1], state["fc1.weight"].shape[0])
    model.load_state_dict(state)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs, ys = x.chunk(p)[rank], y.chunk(p)[rank]
    bucket = None
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        grads = [t.grad for t in model.parameters()]
        if bucket is None or bug != "stale bucket":
            bucket = _flatten_dense_tensors(grads)
        dist.all_reduce(bucket)
        bucket /= p
        for g, synced in zip(grads, _unflatten_dense_tensors(bucket, grads)):
            g.copy_(synced)
        opt.step()
    loss = loss.detach()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss
