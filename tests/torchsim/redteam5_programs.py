"""Torch programs written as engineers write them from PyTorch's examples, for the red team's fifth pass: the root-only
collectives (``dist.reduce``, ``dist.gather``, ``dist.scatter``) with their arguments given as the docs say, a
tensor-parallel MLP over a ``new_group`` subgroup, bf16 and fp16 gradients all-reduced by hand, a pipeline whose
receiver works on the received tensor in place. Module-level, so real ranks can import them; ``bug=`` picks a mistake.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def reduce_then_read(x: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """Every rank's share of ``x`` summed onto rank 0 with ``dist.reduce``; each rank then returns the sum of its own
    tensor and what it holds after the call: on rank 0 the total, elsewhere its own share untouched (torch's docs: only
    the destination's tensor holds the result). bug "read on every rank": rank 1 returns what its tensor holds as if
    it were the total."""
    rank, p = dist.get_rank(), dist.get_world_size()
    mine = x.chunk(p)[rank].clone()
    t = mine.clone()
    dist.reduce(t, dst=0)
    if rank == 0:
        return t
    if bug == "read on every rank":
        return t  # a non-root rank reads its tensor as if it held the sum
    torch.testing.assert_close(t, mine)  # untouched on a non-root rank, as NCCL leaves it
    return None


def summed(x: torch.Tensor, p: int = 2) -> torch.Tensor:
    """The single-device twin of ``reduce_then_read``: the shares of ``x`` added up."""
    return torch.stack(x.chunk(p)).sum(dim=0)


def gather_scatter_round_trip(x: torch.Tensor, bug: str | None = None) -> Any:
    """Rank 0 scatters the rows of ``x`` (``scatter_list`` on the source only), every rank doubles its rows, and rank 0
    gathers them back (``gather_list`` on the destination only), returning the doubled ``x``."""
    rank, p = dist.get_rank(), dist.get_world_size()
    mine = torch.empty(x.shape[0] // p, *x.shape[1:], dtype=x.dtype)
    dist.scatter(mine, list(x.chunk(p)) if rank == 0 else None, src=0)
    mine = mine * 2
    if bug == "rank 1 adds one" and rank == 1:
        mine = mine + 1
    pieces = [torch.empty_like(mine) for _ in range(p)] if rank == 0 else None
    dist.gather(mine, pieces, dst=0)
    return torch.cat(pieces) if rank == 0 else None


def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def half_gradients(x: torch.Tensor, dtype: str = "bfloat16", bug: str | None = None) -> torch.Tensor:
    """Each rank's rows of ``x`` in bf16 or fp16, averaged over ranks with ``all_reduce`` (SUM then divide) under
    ``no_grad``, in place on the received buffer; returned as float32."""
    rank, p = dist.get_rank(), dist.get_world_size()
    g = x.chunk(p)[rank].to(getattr(torch, dtype)).clone()
    with torch.no_grad():
        dist.all_reduce(g)
        if bug != "not averaged":
            g.div_(p)
    return g.float()


def half_mean(x: torch.Tensor, dtype: str = "bfloat16", p: int = 2) -> torch.Tensor:
    return (torch.stack(x.to(getattr(torch, dtype)).chunk(p)).sum(dim=0) / p).float()


def subgroup_all_reduce(x: torch.Tensor, bug: str | None = None) -> Any:
    """Four ranks, two ``new_group`` pairs (0, 1) and (2, 3): each pair sums its members' rows of ``x``, then the
    world sums the pairs' sums, each counted twice (once per member), and halves it: every rank returns the sum of
    the rows. bug "world group": the first sum taken over the world, not the pair."""
    rank = dist.get_rank()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    t = x[rank].clone()
    dist.all_reduce(t, group=None if bug == "world group" else pairs[rank // 2])
    dist.all_reduce(t)
    return t / 2


def rows_summed(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)


def pipeline_in_place(x: torch.Tensor, bug: str | None = None) -> Any:
    """Rank 0 computes ``relu(x) * 3`` and sends it with ``isend``; rank 1 receives with ``irecv`` into a buffer it
    reuses for every microbatch, adds one in place and returns the microbatches stacked. bug "waits late": rank 1 reads
    the buffer before waiting on the receive."""
    rank = dist.get_rank()
    outs = []
    buf = torch.empty(x.shape[1:])
    for mb in x:
        if rank == 0:
            dist.isend(torch.relu(mb) * 3, 1).wait()
        else:
            work = dist.irecv(buf, 0)
            if bug == "waits late":
                got = buf.clone()
                work.wait()
            else:
                work.wait()
                got = buf.clone()
            got.add_(1)
            outs.append(got)
    return torch.stack(outs) if outs else None


def relu_three_plus_one(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 3 + 1


def mutated_before_wait(x: torch.Tensor) -> Any:
    """Rank 0 starts ``isend`` of its tensor, scales the tensor in place before waiting (a race on real ranks: the
    send may carry either value), then waits."""
    if dist.get_rank() == 0:
        t = x.clone()
        work = dist.isend(t, 1)
        t.mul_(2)
        work.wait()
        return None
    got = torch.empty_like(x)
    dist.recv(got, 0)
    return got


def root_lists_everywhere(x: torch.Tensor, what: str) -> Any:
    """``dist.gather`` / ``dist.scatter`` with the list given on every rank, not only the root (torch refuses a
    gather_list or scatter_list on a non-root rank: "Argument ``gather_list`` must NOT be specified on non-root")."""
    rank, p = dist.get_rank(), dist.get_world_size()
    if what == "gather":
        pieces = [torch.empty_like(x) for _ in range(p)]
        dist.gather(x * (rank + 1), pieces, dst=0)
        return torch.cat(pieces) if rank == 0 else None
    mine = torch.empty(x.shape[0] // p, *x.shape[1:])
    dist.scatter(mine, list(x.chunk(p)), src=0)
    return mine


def broadcast_in_subgroup(x: torch.Tensor, bug: str | None = None) -> Any:
    """Four ranks; the pair (2, 3) broadcasts rank 3's tensor to rank 2 (``src`` is a global rank, as torch has it);
    every rank returns what it holds. bug "group rank": src=1 (the place in the group) where torch wants the global 3."""
    rank = dist.get_rank()
    pair = dist.new_group([2, 3])
    t = x * (rank + 1)
    if rank in (2, 3):
        dist.broadcast(t, src=1 if bug == "group rank" else 3, group=pair)
    return t


def reduce_op_dtype(x: torch.Tensor, op: str, dtype: str) -> Any:
    """Each rank's tensor, ``x`` scaled by its rank plus one and cast to ``dtype``, all-reduced with ``op``."""
    rank = dist.get_rank()
    t = (x * (rank + 1) - rank).to(getattr(torch, dtype))
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    return t


class _ToParallel(torch.autograd.Function):
    """Megatron's copy to the tensor-parallel region: identity forward, the gradient all-reduced over the group
    backward (``no_backward_reduce``: the bug that leaves it out)."""

    @staticmethod
    def forward(ctx, x, group, no_backward_reduce):  # noqa: ANN001, ANN205 (torch's signature)
        ctx.group, ctx.skip = group, no_backward_reduce
        return x

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        grad = grad.clone()
        if not ctx.skip:
            dist.all_reduce(grad, group=ctx.group)
        return grad, None, None


class _FromParallel(torch.autograd.Function):
    """Megatron's reduce from the tensor-parallel region: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):  # noqa: ANN001, ANN205
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        return grad, None


def dp_tp_train(state: dict, x: torch.Tensor, y: torch.Tensor, steps: int = 2, bug: str | None = None) -> Any:
    """Four ranks as 2 data-parallel replicas x 2 tensor-parallel halves, by hand: fc1 split by rows of its weight
    (columns of its output), fc2 by columns, Megatron's two autograd functions around them; SGD steps, each gradient
    averaged over the data-parallel pair (``new_group``). Returns the loss averaged over the replicas.
    bug "no backward reduce": fc1's input gradient not all-reduced (harmless here: x needs none; a control);
    "dp over tp": the gradients averaged over the tensor-parallel pair instead of the data-parallel one."""
    rank = dist.get_rank()
    dp, tp = rank // 2, rank % 2
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp_group, dp_group = tp_groups[dp], dp_groups[tp]
    w1 = state["fc1.weight"].chunk(2)[tp].clone().requires_grad_()
    b1 = state["fc1.bias"].chunk(2)[tp].clone().requires_grad_()
    w2 = state["fc2.weight"].chunk(2, dim=1)[tp].clone().requires_grad_()
    b2 = state["fc2.bias"].clone().requires_grad_()
    params = [w1, b1, w2, b2]
    xs, ys = x.chunk(2)[dp], y.chunk(2)[dp]
    for _ in range(steps):
        h = torch.relu(_ToParallel.apply(xs, tp_group, bug == "no backward reduce") @ w1.T + b1)
        out = _FromParallel.apply(h @ w2.T, tp_group) + b2
        loss = torch.nn.functional.mse_loss(out, ys)
        for t in params:
            t.grad = None
        loss.backward()
        with torch.no_grad():
            for t in params:
                dist.all_reduce(t.grad, group=tp_group if bug == "dp over tp" else dp_group)
                t.grad /= 2
                t -= 0.1 * t.grad
    loss = loss.detach()
    dist.all_reduce(loss, group=dp_group)
    return loss / 2


def engineer_misc(x: torch.Tensor, what: str) -> Any:
    """Calls engineers make around their collectives: objects gathered, a barrier, the backend asked for."""
    rank, p = dist.get_rank(), dist.get_world_size()
    if what == "all_gather_object":
        out = [None] * p
        dist.all_gather_object(out, {"rank": rank, "rows": x.shape[0]})
        return torch.tensor([o["rank"] for o in out])
    if what == "broadcast_object_list":
        objs = [{"lr": 0.1 * (rank + 1)}] if rank == 0 else [None]
        dist.broadcast_object_list(objs, src=0)
        return torch.tensor([objs[0]["lr"]])
    if what == "barrier":
        dist.barrier()
        return x * rank
    if what == "backend":
        return torch.tensor([float(dist.is_initialized()), float(len(dist.get_backend()) > 0)])
    if what == "monitored_barrier":
        dist.monitored_barrier()
        return x
    if what == "async all_reduce":
        t = x * (rank + 1)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        return t
    if what == "all_reduce_coalesced":
        ts = [x * (rank + 1), x[:1] * rank]
        with dist._coalescing_manager():
            for t in ts:
                dist.all_reduce(t)
        return torch.cat([t.reshape(-1) for t in ts])
    raise ValueError(what)


def into_views(x: torch.Tensor, what: str) -> Any:
    """Collectives and receives into contiguous views of a larger buffer (a row of it, a flat slice), as a program that
    keeps one buffer for its activations or gradients writes them; the whole buffer returned."""
    rank = dist.get_rank()
    big = torch.zeros(3, x.numel())
    if what == "recv into a row":
        if rank == 0:
            dist.send(x.reshape(-1) * 2, 1)
            return None
        dist.recv(big[1], 0)
        return big
    if what == "all_reduce a row":
        big[rank] = x.reshape(-1) * (rank + 1)
        dist.all_reduce(big[2 - rank])
        dist.all_reduce(big[rank])
        return big
    if what == "broadcast a flat slice":
        flat = big.reshape(-1)
        if rank == 0:
            flat[2 : 2 + x.numel()] = x.reshape(-1)
        dist.broadcast(flat[2 : 2 + x.numel()], src=0)
        return big
    if what == "all_gather_into_tensor a slice":
        out = big.reshape(-1)[: 2 * x.numel()]
        dist.all_gather_into_tensor(out, x.reshape(-1) * (rank + 1))
        return big
    if what == "irecv into a row, written after":
        if rank == 0:
            dist.send(x.reshape(-1) * 2, 1)
            return None
        work = dist.irecv(big[1], 0)
        work.wait()
        big[1].add_(1)
        return big
    raise ValueError(what)


def scatter_reduce_op(x: torch.Tensor, op: str, what: str) -> Any:
    """``reduce_scatter_tensor`` / ``reduce_scatter`` (a list) / ``reduce`` with an op other than SUM."""
    rank, p = dist.get_rank(), dist.get_world_size()
    t = x * (rank + 1) - rank
    reduce_op = getattr(dist.ReduceOp, op)
    if what == "reduce_scatter_tensor":
        out = torch.empty(x.shape[0] // p, *x.shape[1:], dtype=x.dtype)
        dist.reduce_scatter_tensor(out, t, op=reduce_op)
        return out
    if what == "reduce_scatter":
        out = torch.empty(x.shape[0] // p, *x.shape[1:], dtype=x.dtype)
        dist.reduce_scatter(out, list(t.chunk(p)), op=reduce_op)
        return out
    if what == "reduce":
        dist.reduce(t, dst=1, op=reduce_op)
        return t if rank == 1 else None
    raise ValueError(what)


def single_member_groups(x: torch.Tensor) -> Any:
    """Collectives on a group of one (``new_group([rank])``, as a 1-way tensor-parallel dimension of a mesh gives) and
    on the world: each returns what a group of one leaves."""
    rank, p = dist.get_rank(), dist.get_world_size()
    alone = [dist.new_group([r]) for r in range(p)][rank]
    t = x * (rank + 1)
    dist.all_reduce(t, group=alone)
    gathered = torch.empty_like(t)
    dist.all_gather_into_tensor(gathered, t, group=alone)
    dist.broadcast(gathered, src=rank, group=alone)
    dist.all_reduce(gathered)
    return gathered
