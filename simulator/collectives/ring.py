"""Ring algorithms: reduce-scatter, all-gather, and all-reduce as the one followed by the other.

Over p members each takes p - 1 steps; at step s every member sends one block to its right neighbour
and receives one from its left. Chunk c is summed in ring order starting after its owner, ((x[c+1] +
x[c+2]) + ...) + x[c]. These loops are the hot path of large simulations (see ``_rs_ring``); a ring
all-reduce is booked whole where it can be (simulator/collectives/booked.py), payloads and all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from ..tensors.placements import FlatSlice
from .chunks import FlatBlocks, _assemble, _flat_setup

if TYPE_CHECKING:
    from .call import _Call


def _rs_ring(c: _Call, blocks: Sequence, index: Callable[[int], Any]) -> np.ndarray:
    """Step s: send chunk (me - s - 1) to the right, add the block (me - s - 2) arriving from the left.

    The chunk sent at a step is the one summed at the step before (at step 0, this member's own block):
    only that chunk is held, never all p. The hot loop of large simulations: the call's sends and reductions
    are bound once (``_Call.poster``, ``reducer``: its tag, label and op name with them), and names and
    indices for the checker are built only when the call is named.
    """
    p, me, dev, tag = c.p, c.me, c.dev, c.tag
    right, left = c.group[(me + 1) % p], c.group[(me - 1) % p]
    post, recv, wait = c.poster(), dev.recv, dev.wait
    reduce = c.reducer()
    named = c.partials is not None
    # a flat value's blocks sliced here (a method call less a step); else blocks[j]
    flat, b = (blocks.flat, blocks.bounds) if type(blocks) is FlatBlocks else (None, None)
    # One value cut the same way on every member, and the members' calls compared (shape, dtype) before any
    # chunk moved: no chunk can break its receive's contract, so it is not declared again chunk by chunk.
    # (Blocks given one by one, or a device that cannot compare calls, a real rank's, declare each.)
    contract = flat is None or not c.agreed or dev.needs_contract  # (strict mode: every receive declares one)
    out_j = (me - 1) % p
    acc = blocks[out_j]
    lane = None if named or contract else c.lane(right, left)
    if lane is not None:  # a simulated member's steps in one loop (simulator/core/lanes.py): the same trace
        return lane.pass_along(acc, out_j, p - 1, 0, (flat, b), c.reduce_name, c.fn)
    for s in range(p - 1):
        in_j = (out_j - 1) % p
        blk = blocks[in_j] if flat is None else flat[b[in_j] : b[in_j + 1]]
        sreq = post(acc, right, s, out_j)
        if named:
            members = [(in_j + 1 + k) % p for k in range(s + 1)]
            got = recv(left, tag, shape=blk.shape, dtype=blk.dtype, name=c.sum_name(members), index=index(in_j))
            acc = c.combine(got, blk, members + [me], index(in_j))
        else:
            got = recv(left, tag, shape=blk.shape, dtype=blk.dtype) if contract else recv(left, tag)
            acc = reduce(got, blk, blk.size)
        if sreq is not None:  # (an eager send is complete already)
            wait(sreq)
        out_j = in_j
    return acc


def _ag_ring(c: _Call, mine, shapes, dtype, name, index, step0: int = 0, into: list | None = None) -> list:
    """Step s: pass block (me - s) to the right, receive block (me - s - 1) from the left.

    into: where each block is received (``dev.recv_into``, a real rank's: slots of the result), or None."""
    p, me, dev, tag = c.p, c.me, c.dev, c.tag
    right, left = c.group[(me + 1) % p], c.group[(me - 1) % p]
    post, recv, wait = c.poster(), dev.recv, dev.wait
    out: list = [None] * p
    out[me] = mine
    lane = c.lane(right, left) if into is None and name is None and c.agreed else None
    if lane is not None:  # (as in _rs_ring) each block received lands in out at its number
        lane.pass_along(mine, me, p - 1, step0, chunks=out)
        return out
    for s in range(p - 1):
        out_j = (me - s) % p
        in_j = (out_j - 1) % p
        sreq = post(out[out_j], right, step0 + s, out_j)
        if into is not None:
            out[in_j] = dev.recv_into(left, tag, into[in_j], name=name, index=None if name is None else index(in_j))
        elif name is None:  # (contracts as in _rs_ring: every member declared the same shapes and dtype)
            bare = c.agreed and not dev.needs_contract
            out[in_j] = recv(left, tag) if bare else recv(left, tag, shape=shapes[in_j], dtype=dtype)
        else:
            out[in_j] = recv(left, tag, shape=shapes[in_j], dtype=dtype, name=name, index=index(in_j))
        if sreq is not None:
            wait(sreq)
    return out


def _all_reduce_ring(c: _Call, x: np.ndarray) -> np.ndarray:
    blocks, b = _flat_setup(x, c.p)

    def index(j):
        return FlatSlice(b[j], b[j + 1])

    mine = c.finish_avg(_rs_ring(c, blocks, index))
    shapes = blocks.shapes()
    step0 = c.p - 1  # the all-gather's steps continue after the reduce-scatter's
    if getattr(c.dev, "recv_into", None) is None:
        out = _ag_ring(c, mine, shapes, x.dtype, c.name, index, step0)
        # a real rank (below) copies only its own block: the rest of this copy is not the program's time
        with getattr(c.dev, "simulation_work", nullcontext)((c.p - 1) / c.p):
            return _assemble(c.dev, out, x.shape, x.dtype)
    # a real rank receives each block straight into its place in the result: no copy to assemble it
    result = c.dev.buffer(x.shape, x.dtype)
    flat = result.reshape(-1)
    slots = [flat[b[j] : b[j + 1]] for j in range(c.p)]
    slots[c.me][...] = mine
    _ag_ring(c, slots[c.me], shapes, x.dtype, c.name, index, step0, into=slots)
    return result
