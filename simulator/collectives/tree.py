"""Binomial-tree algorithms: broadcast, reduce, scatter, gather, and all-reduce as reduce then broadcast.

Relative member v (counted from the root) talks to v plus or minus a power of two, so a group of p
members is done in ceil(log2 p) steps; reductions sum pairwise, a binary tree over members. Scatter
and gather forward a subtree's pieces in one message, so they need pieces of one shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .call import _Call


def _all_reduce_tree(c: _Call, x: np.ndarray) -> np.ndarray:
    reduced = _reduce_tree(c, x, 0)
    if c.me == 0:
        reduced = c.finish_avg(reduced)
    return _broadcast_tree(c, reduced, 0, x.shape, x.dtype, step0=c.p.bit_length())


# ---- broadcast and reduce ------------------------------------------------------------------------
def _broadcast_tree(c: _Call, x, root: int, shape, dtype, step0: int = 0):
    """Binomial tree: relative member v receives from v minus its lowest set bit, then forwards."""
    p = c.p
    v = (c.me - root) % p
    mask = 1
    while mask < p:
        if v & mask:
            x = c.recv((v - mask + root) % p, shape, dtype, c.name)
            break
        mask <<= 1
    mask >>= 1
    reqs = []
    while mask > 0:
        if v + mask < p:
            reqs.append(c.send(x, (v + mask + root) % p, step0 + mask.bit_length() - 1, "all"))
        mask >>= 1
    for r in reqs:
        c.wait(r)
    return x


def _reduce_tree(c: _Call, x, root: int):
    """Binomial tree: relative member v gathers v+1, v+2, v+4, ... then sends to v minus its lowest bit."""
    p = c.p
    v = (c.me - root) % p
    acc = x
    mask = 1
    while mask < p:
        if v & mask:
            c.wait(c.send(acc, (v - mask + root) % p, mask.bit_length() - 1, "all"))
            return None
        if v + mask < p:
            sub = [(root + u) % p for u in range(v + mask, min(v + 2 * mask, p))]
            got = c.recv((v + mask + root) % p, x.shape, x.dtype, c.sum_name(sub) if c.partials else None)
            mine = [(root + u) % p for u in range(v, v + mask)]
            acc = c.combine(acc, got, mine + sub if c.partials else None)
        mask <<= 1
    return acc


# ---- scatter and gather ------------------------------------------------------------------------
def _scatter_tree(c: _Call, chunks, root: int, shape, dtype, index):
    """Binomial tree: each member receives the pieces of its whole subtree, keeps its own, forwards the rest."""
    p = c.p
    v = (c.me - root) % p
    if v == 0:
        shapes = {np.shape(ch) for ch in chunks}
        if len(shapes) > 1:
            raise ValueError(
                f"scatter(algorithm='tree') forwards pieces in bundles and needs them all of one shape; got shapes "
                f"{[np.shape(ch) for ch in chunks]}. Use algorithm='direct' for pieces of different shapes."
            )
        bundle = np.stack([chunks[(root + u) % p] for u in range(p)])  # relative order
        have = p
    mask = 1
    while mask < p:
        if v & mask:
            have = min(mask, p - v)
            bshape = (have, *shape) if shape is not None else None
            bundle = c.recv((v - mask + root) % p, bshape, dtype, None)
            break
        mask <<= 1
    mask >>= 1
    reqs = []
    while mask > 0:
        if v + mask < p:
            reqs.append(c.send(bundle[mask : min(2 * mask, have)], (v + mask + root) % p, mask.bit_length() - 1, v))
        mask >>= 1
    for r in reqs:
        c.wait(r)
    piece = bundle[0]
    if c.name is not None:
        return c.dev.compute(c.name, lambda: piece, seconds=0.0, index=index(c.me))
    return piece


def _gather_tree(c: _Call, x, root: int, shapes, index):
    """Binomial tree: each member collects its subtree's pieces (stacked) and sends them up in one message."""
    p = c.p
    v = (c.me - root) % p
    parts = [x]
    mask = 1
    while mask < p:
        if v & mask:
            c.wait(c.send(np.stack(parts), (v - mask + root) % p, mask.bit_length() - 1, v))
            return None
        if v + mask < p:
            n = min(mask, p - v - mask)
            got = c.recv((v + mask + root) % p, (n, *x.shape), x.dtype, None)
            parts.extend(got[k] for k in range(n))
        mask <<= 1
    return [parts[(m - root) % p] for m in range(p)]
