"""Halving-doubling algorithms (Rabenseifner): recursive halving, then recursive doubling.

Reduce-scatter halves the block range at each of log2(p) steps, swapping halves with a partner;
all-gather doubles it back. Both need a power-of-two group (``reduce_scatter_halving`` and ``all_gather_doubling``, their entry points,
check it); all-reduce takes any size:
the members beyond a power of two hand their value to a partner first (which then works as a virtual
member, ``_virtual_to_real``) and get the result back at the end. Sums are pairwise, a binary tree over members. A message that
bundles several chunks (``chunks._pack``) is not named; its chunks are checked where they end up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..tensors.placements import FlatSlice
from .chunks import _assemble, _flat_setup, _pack, _packed_shape, _unpack

if TYPE_CHECKING:
    from .call import _Call


def _pof2_below(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _need_pof2(c: _Call, kind: str) -> None:
    if c.p & (c.p - 1):
        raise ValueError(
            f"{kind}(algorithm='halving_doubling') needs a group whose size is a power of two; group {c.group} "
            f"has {c.p} devices. Use algorithm='ring' or 'direct' (all_reduce's halving_doubling folds any size)."
        )


def reduce_scatter_halving(c: _Call, blocks: list, index: Callable[[int], Any]) -> np.ndarray:
    """Reduce-scatter by recursive halving; the group's size must be a power of two."""
    _need_pof2(c, "reduce_scatter")
    return _rs_halving(c, blocks, index)


def all_gather_doubling(c: _Call, mine: Any, shapes: Any, dtype: Any, name: Any, index: Any) -> list:
    """All-gather by recursive doubling; the group's size must be a power of two."""
    _need_pof2(c, "all_gather")
    return _ag_doubling(c, mine, shapes, dtype, name, index)


def _rs_halving(c: _Call, blocks: list, index: Callable[[int], Any], members=None, v=None) -> np.ndarray:
    """Recursive halving over q = len(blocks) virtual members (q a power of two).

    Virtual member v is real member ``_virtual_to_real(p, q)[v]``; ``members[u]`` lists the real
    members whose values virtual member u holds (two after folding). At distance d the partners
    v and v ^ d swap halves of their current block range; each keeps the half its bit d points to.
    """
    q = len(blocks)
    v = c.me if v is None else v
    members = [[m] for m in range(q)] if members is None else members
    real = _virtual_to_real(c.p, q)
    acc = list(blocks)
    lo, hi, d, step = 0, q, q // 2, 0
    while d >= 1:
        partner = v ^ d
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if v & d == 0 else ((mid, hi), (lo, mid))
        # so far each side has summed the virtual members that agree with it on the bits below 2d
        low = 2 * d - 1
        theirs = [u for u in range(q) if u & low == partner & low]
        mine = [u for u in range(q) if u & low == v & low]
        shapes = [acc[j].shape for j in range(*keep)]
        one = keep[1] - keep[0] == 1
        got = c.exchange(
            _pack(acc[give[0] : give[1]]),
            real[partner],
            real[partner],
            step,
            f"{give[0]}-{give[1] - 1}" if give[1] - give[0] > 1 else give[0],
            _packed_shape(shapes),
            acc[keep[0]].dtype,
            c.sum_name(_merge_members(members, theirs)) if one and c.partials else None,
            index(keep[0]) if one else None,
        )
        total = _merge_members(members, theirs + mine) if c.partials else None
        for j, part in zip(range(*keep), _unpack(got, shapes)):
            acc[j] = c.combine(part, acc[j], total, index(j))
        lo, hi = keep
        d //= 2
        step += 1
    return acc[v]


def _merge_members(members: list[list[int]], virtual: list[int]) -> list[int]:
    return [m for u in virtual for m in members[u]]


def _virtual_to_real(p: int, q: int) -> list[int]:
    """After folding p members into q (a power of two): virtual u -> the real position doing its work.

    The first 2r members (r = p - q) pair up: odd member 2i+1 absorbs even member 2i and becomes
    virtual i; the rest shift down by r.
    """
    r = p - q
    return [2 * u + 1 if u < r else u + r for u in range(q)]


def _ag_doubling(c: _Call, mine, shapes, dtype, name, index, step0: int = 0, v=None, real=None) -> list:
    """Recursive doubling over q = len(shapes) virtual members (a power of two)."""
    q = len(shapes)
    v = c.me if v is None else v
    real = list(range(q)) if real is None else real
    out: list = [None] * q
    out[v] = mine
    lo, hi, d, step = v, v + 1, 1, step0
    while d < q:
        partner = v ^ d
        plo = lo ^ d  # my range is aligned to d, so the partner's is the same range with bit d flipped
        phi = plo + (hi - lo)
        pshapes = [shapes[j] for j in range(plo, phi)]
        one = phi - plo == 1
        got = c.exchange(
            _pack(out[lo:hi]),
            real[partner],
            real[partner],
            step,
            f"{lo}-{hi - 1}" if hi - lo > 1 else lo,
            _packed_shape(pshapes),
            dtype,
            name if one else None,
            index(plo) if one else None,
        )
        for k, blk in enumerate(_unpack(got, pshapes)):
            out[plo + k] = blk
        lo, hi = min(lo, plo), max(hi, phi)
        d *= 2
        step += 1
    return out


def _all_reduce_halving_doubling(c: _Call, x: np.ndarray) -> np.ndarray:
    p, me = c.p, c.me
    q = _pof2_below(p)
    r = p - q
    whole = [c.sum_name([m]) for m in range(p)] if c.partials else None
    # fold: among the first 2r members, even ones hand their whole value to the next (odd) one
    if me < 2 * r and me % 2 == 0:
        c.wait(c.send(x, me + 1, "fold", "all"))
        v = None
    elif me < 2 * r:
        got = c.recv(me - 1, x.shape, x.dtype, whole[me - 1] if whole else None)
        x = c.combine(got, x, [me - 1, me] if whole else None)
        v = me // 2
    else:
        v = me - r
    if v is not None:
        real = _virtual_to_real(p, q)
        members = [[real[u] - 1, real[u]] if u < r else [real[u]] for u in range(q)]
        blocks, b = _flat_setup(x, q)

        def index(j):
            return FlatSlice(b[j], b[j + 1])

        mine = c.finish_avg(_rs_halving(c, blocks, index, members, v))
        out = _ag_doubling(c, mine, [blk.shape for blk in blocks], x.dtype, c.name, index, q.bit_length() - 1, v, real)
        result = _assemble(c.dev, out, x.shape, x.dtype)
    # unfold: odd members of the first 2r hand the result back to their even partner
    if me < 2 * r and me % 2 == 1:
        c.wait(c.send(result, me - 1, "unfold", "all"))
    elif me < 2 * r:
        result = c.recv(me + 1, x.shape, x.dtype, c.name)
    return result
