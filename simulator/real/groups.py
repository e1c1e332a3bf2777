"""Process groups for subgroups, created by their members alone and without any chance of deadlock.

``dist.new_group(ranks, use_local_synchronization=True)`` lets only the members create a group, which
is what a collective on a subgroup needs (the other ranks are busy elsewhere in the program). But torch
names such a group by hashing its ranks *and the number of groups this process has created so far*;
members rendezvous on that name in the store. Two members that have created different numbers of
groups (on 3 ranks: rank 0 uses (0, 1) then (0, 2); rank 2 only (0, 2)) compute different names and
wait for each other forever; torch documents the hazard ("can lead to deadlocks when each rank creates
multiple overlapping process groups"), and the group's timeout does not end that wait.

So a subgroup here is named by its ranks alone ("simulator-0-2"): members rendezvous on the same name
whatever else each has created, each group is created once per rank process (``RankResources`` keeps
it), and every store wait is bounded by ``timeout``. This uses torch's group factory
(``_new_process_group_helper``), the one ``new_group`` itself calls, and registers the rank mapping as
``new_group`` does, so ``dist.all_reduce(..., group=pg)`` and its siblings take the group as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d


def group_name(ranks: Sequence[int]) -> str:
    """The store name of the subgroup of these ranks: the same on every member, whatever it created before."""
    return "simulator-" + "-".join(str(r) for r in sorted(ranks))


def new_subgroup(ranks: Sequence[int], timeout: timedelta) -> Any:
    """Create the process group of ``ranks`` (call on every member, on first use; non-members never call).

    Returns once every member has joined it, or raises torch's error after ``timeout``.
    """
    members = sorted(int(r) for r in ranks)
    me = dist.get_rank()
    if me not in members:
        raise ValueError(f"device {me} cannot create the group {tuple(members)}: it is not a member")
    default = c10d._get_default_group()
    backend, store = c10d._world.pg_map[default]
    pg, _ = c10d._new_process_group_helper(
        len(members), members.index(me), members, backend, store, group_name(members), timeout=timeout
    )
    c10d._world.pg_group_ranks[pg] = {rank: i for i, rank in enumerate(members)}
    return pg
