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
    """Four ranks, two ``new_group`` pairs (0, 1) and (2, 3): each pair sums its members' rows of ``x``; every rank
    returns its pair's sum. bug "world group": the sum taken over the world, not the pair."""
    rank = dist.get_rank()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = pairs[rank // 2]
    t = x[rank].clone()
    dist.all_reduce(t, group=None if bug == "world group" else mine)
    return t


def pair_sums(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([x[0] + x[1], x[0] + x[1], x[2] + x[3], x[2] + x[3]])


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
