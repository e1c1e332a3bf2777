"""Direct algorithms: every member sends each piece straight to the member that needs it.

One step each (two for all-reduce: reduce-scatter, then all-gather); reductions sum in member order,
((x[0] + x[1]) + ...) + x[p-1]. The rooted collectives (broadcast, reduce, scatter, gather) send
straight from or to the root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..tensors.placements import FlatSlice
from .chunks import _assemble, _flat_setup

if TYPE_CHECKING:
    from .call import _Call


# ---- reduce-scatter, all-gather, all-reduce ---------------------------------------------------
def _rs_direct(c: _Call, blocks: list, index: Callable[[int], Any]) -> np.ndarray:
    p, me = c.p, c.me
    reqs = [c.send(blocks[j], j, 0, j) for j in range(p) if j != me]
    mine = blocks[me]
    got = [mine if m == me else c.recv(m, mine.shape, mine.dtype, c.sum_name([m]), index(me)) for m in range(p)]
    for r in reqs:
        c.wait(r)
    acc = got[0]
    for m in range(1, p):  # member order
        acc = c.combine(acc, got[m], list(range(m + 1)), index(me))
    return acc


def _ag_direct(c: _Call, mine, shapes, dtype, name, index, step0: int = 0) -> list:
    p, me = c.p, c.me
    reqs = [c.send(mine, m, step0, me) for m in range(p) if m != me]
    out = [mine if m == me else c.recv(m, shapes[m], dtype, name, index(m)) for m in range(p)]
    for r in reqs:
        c.wait(r)
    return out


def _all_reduce_direct(c: _Call, x: np.ndarray) -> np.ndarray:
    blocks, b = _flat_setup(x, c.p)

    def index(j):
        return FlatSlice(b[j], b[j + 1])

    mine = c.finish_avg(_rs_direct(c, blocks, index))
    out = _ag_direct(c, mine, [blk.shape for blk in blocks], x.dtype, c.name, index, 1)
    return _assemble(c.dev, out, x.shape, x.dtype)


# ---- rooted: broadcast, reduce, scatter, gather -----------------------------------------------
def _broadcast_direct(c: _Call, x, root: int, shape, dtype):
    if c.me == root:
        for r in [c.send(x, m, 0, "all") for m in range(c.p) if m != root]:
            c.wait(r)
        return x
    return c.recv(root, shape, dtype, c.name)


def _reduce_direct(c: _Call, x, root: int):
    if c.me != root:
        c.wait(c.send(x, root, 0, "all"))
        return None
    got = [x if m == root else c.recv(m, x.shape, x.dtype, c.sum_name([m])) for m in range(c.p)]
    acc = got[0]
    for m in range(1, c.p):
        acc = c.combine(acc, got[m], list(range(m + 1)))
    return acc


def _scatter_direct(c: _Call, chunks, root: int, shape, dtype, index):
    if c.me == root:
        for r in [c.send(chunks[m], m, 0, m) for m in range(c.p) if m != root]:
            c.wait(r)
        return chunks[root]
    return c.recv(root, shape, dtype, c.name, index(c.me))


def _gather_direct(c: _Call, x, root: int, shapes, index):
    if c.me != root:
        c.wait(c.send(x, root, 0, c.me))
        return None
    return [x if m == root else c.recv(m, shapes[m], x.dtype, c.name, index(m)) for m in range(c.p)]
