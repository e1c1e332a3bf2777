"""Collectives written as point-to-point messages, over any group of devices.

Every collective here is a plain function of a device and a group that uses only the device's public
point-to-point API (``isend``/``irecv``/``recv``/``wait``/``compute``), so the same code runs on the
simulator and on the torch.distributed backend, and every chunk of every step is a message in the
trace. Reductions are compute ops (they take simulated time under the cost model).

Algorithms (a dict from name to function per collective; ``ALGORITHMS`` lists them):

=================  =====================================================================
all_reduce         ring (reduce-scatter ring, then all-gather ring), halving_doubling
                   (Rabenseifner: recursive halving, then recursive doubling; extra
                   members of a group that is not a power of two fold into a partner
                   first), tree (binomial reduce to the first member, then binomial
                   broadcast), direct (every member sends chunk j straight to member j,
                   then every owner sends its reduced chunk straight to everyone)
reduce_scatter     ring, halving_doubling (power-of-two groups), direct
all_gather         ring, halving_doubling (recursive doubling; power-of-two groups), direct
broadcast, reduce  tree (binomial), direct
scatter, gather    tree (binomial; pieces of equal shape), direct
all_to_all         direct, pairwise (step s: send to member +s, receive from member -s)
barrier            dissemination (round k: signal member +2^k, wait for member -2^k)
=================  =====================================================================

Summation order (it differs between algorithms, so float results can differ in the last bits; see
``ulp_distance``): ring sums chunk c in ring order starting after its owner, ((x[c+1] + x[c+2]) +
...) + x[c]; direct sums in member order, ((x[0] + x[1]) + ...) + x[p-1]; tree and
halving_doubling sum pairwise, as a binary tree over members.

Chunks: all_reduce splits the flattened array into p chunks by torch.chunk's rule (see
``placements.chunk_bounds``). Tags: each device counts its collective calls per group; a call's tag
is ``TAG_BASE + count * 65536 + a 16-bit checksum of the group``, so it cannot collide with user
tags (keep those below ``TAG_BASE``) and two groups' concurrent calls do not share a tag (unless
their checksums collide, which the counts make harmless for all practical runs). Every message is
labelled ``"<kind>#<count> <algorithm> step <s> chunk <c>"`` for traces and summaries.

Naming for the checker: ``name=`` says which reference value the result is (messages carrying final
chunks are named after it, with the chunk as index, and the result is recorded as an op of that
name); ``partials=`` names the members' inputs in the reference as ``f"{partials}[m]"`` (member m's
partial sum), so the messages of a sum's reduction phase are named like ``"Z.partial[0]+Z.partial[1]"``
and the checker can compare them with the reference's own partial sums. (A halving_doubling message
that bundles several chunks is not named; its chunks are checked where they end up.)

Eager sends: where the device says its sends complete at once (``dev.eager_sends``), the ring loops
use a plain ``send`` and skip the request; elsewhere (rendezvous mode, the torch backend) they post
``isend`` and wait on it after the matching receive, which cannot deadlock.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..booked import ring_all_reduce
from ..meta import MetaArray
from ..placements import chunk_bounds
from ..tags import TAG_BASE, CollectiveTag

if TYPE_CHECKING:
    from ..device import Device, Request


REDUCE_FNS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": np.add,
    "avg": np.add,  # summed, then divided by the group size once
    "max": np.maximum,
    "min": np.minimum,
}


@dataclass(frozen=True)
class FlatSlice:
    """An index into the flattened value: ``value.reshape(-1)[start:stop]`` (a chunk of an all-reduce)."""

    start: int
    stop: int

    def __call__(self, value: Any) -> np.ndarray:
        return np.asarray(value).reshape(-1)[self.start : self.stop]

    def __repr__(self) -> str:
        return f"flat[{self.start}:{self.stop}]"


def describe_call(call: tuple) -> str:
    """A collective call as the member wrote it, e.g. ``all_reduce(op='sum', shape=(4,), dtype='float64', ...)``."""
    kind, details, algorithm, group = call
    args = [f"{k}={_plain(v)!r}" for k, v in details if v is not None]
    return f"{kind}({', '.join([*args, f'algorithm={algorithm!r}', f'group={group}'])})"


def _plain(v: Any) -> Any:
    return v.name if isinstance(v, np.dtype) else v


def resolve_group(dev: Any, group: Sequence[int] | None) -> tuple[int, ...]:
    """The group as a tuple of ranks (None: every device); checks that ``dev`` belongs to it."""
    if group is None:
        return tuple(range(dev.world_size))
    g = tuple(int(r) for r in group)
    if len(set(g)) != len(g) or any(not 0 <= r < dev.world_size for r in g):
        raise ValueError(f"device {dev.rank}: group {g} must list distinct ranks in 0..{dev.world_size - 1}")
    if dev.rank not in g:
        raise ValueError(f"device {dev.rank} called a collective on group {g}, which it is not part of")
    return g


class _Call:
    """One collective call on one device: its group, its position in it, its tag and labels."""

    __slots__ = (
        "dev", "group", "p", "me", "tag", "fn", "op", "name", "partials", "kind", "algorithm", "number", "members",
    )  # fmt: skip

    def __init__(self, dev: Any, kind: str, group, algorithm: str, op: str | None = None, name=None, partials=None):
        table = ALGORITHMS[kind]
        if algorithm not in table:
            raise ValueError(f"{kind}(algorithm={algorithm!r}): choose one of {sorted(table)}")
        if op is not None and op not in REDUCE_FNS:
            raise ValueError(f"{kind}(op={op!r}): choose one of {sorted(REDUCE_FNS)}")
        self.dev = dev
        # a group's checks and checksum are worked out once per device (big runs make millions of calls)
        known = dev.__dict__.setdefault("_known_groups", {})
        key = None if group is None else tuple(group)
        info = known.get(key)
        if info is None:
            g = resolve_group(dev, group)
            info = known[key] = (g, g.index(dev.rank), tuple(sorted(g)), zlib.crc32(repr(g).encode()) & 0xFFFF)
        g, self.me, members, checksum = info
        self.group, self.members = g, members
        self.p = len(g)
        counts = dev.__dict__.setdefault("_collective_calls", {})
        n = counts.get(members, 0)  # counted per set of members, so a group listed in another order is caught
        counts[members] = n + 1
        self.tag = CollectiveTag(TAG_BASE + (n % 16384) * 65536 + checksum)
        self.kind, self.algorithm, self.number = kind, algorithm, n
        self.op = op
        self.fn = REDUCE_FNS[op] if op is not None else None
        self.name = name
        # partial-sum names only mean something for sums
        self.partials = [f"{partials}[{m}]" for m in range(self.p)] if partials and op in ("sum", "avg") else None

    @property
    def label(self) -> str:
        """This call's label, e.g. ``all_reduce#3 ring`` (made when asked: a booked call needs it once)."""
        return f"{self.kind}#{self.number} {self.algorithm}"

    @property
    def reduce_name(self) -> str:
        """The name of its reductions' ops, e.g. ``all_reduce.sum``."""
        return f"{self.kind}.{self.op}"

    def agree(self, **details: Any) -> None:
        """Tell the simulator what this member calls, so that members of one group calling different
        collectives (or with other arguments) get an error naming both calls, never a result."""
        if self.op == "avg" and np.dtype(details["dtype"]).kind not in "fc":
            raise TypeError(
                f"device {self.dev.rank}: {self.kind}(op='avg') needs floating-point values (an average of integers "
                f"is not an integer), got {details['dtype']}: pass x.astype(float), or use op='sum'"
            )
        hook = getattr(self.dev, "_agree_collective", None)
        if hook is None or self.p == 1:
            return
        # compared as data; written out (``describe_call``) only for the error when two members differ
        hook(self.members, self.number, (self.kind, tuple(details.items()), self.algorithm, self.group))

    def send(self, value: Any, pos: int, step: Any, what: Any) -> Request:
        return self.dev.isend(value, self.group[pos], self.tag, label=f"{self.label} step {step} chunk {what}")

    def recv(self, pos: int, shape=None, dtype=None, name=None, index=None) -> np.ndarray:
        return self.dev.recv(self.group[pos], self.tag, shape=shape, dtype=dtype, name=name, index=index)

    def exchange(self, value, to: int, frm: int, step: int, what, shape=None, dtype=None, name=None, index=None):
        """Send to one member and receive from another (safe in eager and rendezvous modes)."""
        sreq = self.send(value, to, step, what)
        got = self.recv(frm, shape, dtype, name, index)
        self.dev.wait(sreq)
        return got

    def sum_name(self, members: Sequence[int]) -> str | None:
        """The reference name of the sum of these members' partials, e.g. 'Z.partial[0]+Z.partial[1]'."""
        return "+".join(self.partials[m] for m in members) if self.partials else None

    def combine(self, received: Any, local: Any, members: Sequence[int] | None = None, index: Any = None):
        """Reduce a received chunk into a local one (received first: it holds the earlier members)."""
        name = self.sum_name(members) if members is not None and self.partials else None
        if name is None:
            return self.dev.compute(self.reduce_name, self.fn, received, local, keep=False, label=self.label)
        return self.dev.compute(name, self.fn, received, local, index=index, keep=False, label=self.label)

    def finish_avg(self, value: Any, index: Any = None):
        """For op='avg': divide the summed chunk by the group size (one op)."""
        if self.op != "avg":
            return value
        p = self.p
        return self.dev.compute(f"{self.reduce_name}.divide", lambda v: v / p, value, keep=False, label=self.label)

    def result(self, value: Any, index: Any = None):
        """Record the collective's result as the op ``name`` (free: no arithmetic), if named."""
        if self.name is None:
            return value
        return self.dev.compute(self.name, lambda: value, seconds=0.0, index=index)


def _freeze(x: Any) -> np.ndarray:
    if type(x) is MetaArray:  # no values: immutable as it is
        return x
    arr = np.asarray(x)
    if arr.flags.writeable:
        arr = arr.copy()
        arr.setflags(write=False)
    return arr


def _pack(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Several blocks in one message: their flattened values, one after another (one block: as it is)."""
    return blocks[0] if len(blocks) == 1 else np.concatenate([b.reshape(-1) for b in blocks])


def _packed_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(shapes[0]) if len(shapes) == 1 else (sum(_size(s) for s in shapes),)


def _unpack(buf: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    if len(shapes) == 1:
        return [buf]
    out, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        out.append(buf[at : at + n].reshape(s))
        at += n
    return out


def _size(shape) -> int:
    return int(np.prod(shape))


def _pof2_below(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _need_pof2(c: _Call, kind: str) -> None:
    if c.p & (c.p - 1):
        raise ValueError(
            f"{kind}(algorithm='halving_doubling') needs a group whose size is a power of two; group {c.group} "
            f"has {c.p} devices. Use algorithm='ring' or 'direct' (all_reduce's halving_doubling folds any size)."
        )


# ---- reduce-scatter over blocks ---------------------------------------------------------------
# Each takes the member's p blocks (block j goes to member j) and returns member me's reduced block.
# `index(j)` is the reference index of block j (or None).


def _rs_ring(c: _Call, blocks: list, index: Callable[[int], Any]) -> np.ndarray:
    """Step s: send block (me - s - 1) to the right, add the block (me - s - 2) arriving from the left.

    The hot loop of large simulations: device methods are bound once, and names and indices for the
    checker are built only when the call is named.
    """
    p, me, dev, tag, label = c.p, c.me, c.dev, c.tag, c.label
    right, left = c.group[(me + 1) % p], c.group[(me - 1) % p]
    isend, send, recv, wait, compute = dev.isend, dev.send, dev.recv, dev.wait, dev.compute
    eager = getattr(dev, "eager_sends", False)  # then a plain send cannot block: no request to wait on
    fn, reduce_name = c.fn, c.reduce_name
    acc = list(blocks)
    named = c.partials is not None
    for s in range(p - 1):
        out_j = (me - s - 1) % p
        in_j = (out_j - 1) % p
        blk = acc[in_j]
        if eager:
            send(acc[out_j], right, tag, label=f"{label} step {s} chunk {out_j}")
        else:
            sreq = isend(acc[out_j], right, tag, label=f"{label} step {s} chunk {out_j}")
        if named:
            members = [(in_j + 1 + k) % p for k in range(s + 1)]
            got = recv(left, tag, shape=blk.shape, dtype=blk.dtype, name=c.sum_name(members), index=index(in_j))
            acc[in_j] = c.combine(got, blk, members + [me], index(in_j))
        else:
            got = recv(left, tag, shape=blk.shape, dtype=blk.dtype)
            acc[in_j] = compute(reduce_name, fn, got, blk, flops=blk.size, keep=False, label=label)
        if not eager:
            wait(sreq)
    return acc[me]


def _rs_direct(c: _Call, blocks: list, index: Callable[[int], Any]) -> np.ndarray:
    p, me = c.p, c.me
    reqs = [c.send(blocks[j], j, 0, j) for j in range(p) if j != me]
    mine = blocks[me]
    got = [mine if m == me else c.recv(m, mine.shape, mine.dtype, c.sum_name([m]), index(me)) for m in range(p)]
    for r in reqs:
        c.dev.wait(r)
    acc = got[0]
    for m in range(1, p):  # member order
        acc = c.combine(acc, got[m], list(range(m + 1)), index(me))
    return acc


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


# ---- all-gather over blocks -------------------------------------------------------------------
# Each takes member me's block and every member's block shape; returns all p blocks in member order.


def _ag_ring(c: _Call, mine, shapes, dtype, name, index, step0: int = 0) -> list:
    """Step s: pass block (me - s) to the right, receive block (me - s - 1) from the left."""
    p, me, dev, tag, label = c.p, c.me, c.dev, c.tag, c.label
    right, left = c.group[(me + 1) % p], c.group[(me - 1) % p]
    isend, send, recv, wait = dev.isend, dev.send, dev.recv, dev.wait
    eager = getattr(dev, "eager_sends", False)
    out: list = [None] * p
    out[me] = mine
    for s in range(p - 1):
        out_j = (me - s) % p
        in_j = (out_j - 1) % p
        if eager:
            send(out[out_j], right, tag, label=f"{label} step {step0 + s} chunk {out_j}")
        else:
            sreq = isend(out[out_j], right, tag, label=f"{label} step {step0 + s} chunk {out_j}")
        if name is None:
            out[in_j] = recv(left, tag, shape=shapes[in_j], dtype=dtype)
        else:
            out[in_j] = recv(left, tag, shape=shapes[in_j], dtype=dtype, name=name, index=index(in_j))
        if not eager:
            wait(sreq)
    return out


def _ag_direct(c: _Call, mine, shapes, dtype, name, index, step0: int = 0) -> list:
    p, me = c.p, c.me
    reqs = [c.send(mine, m, step0, me) for m in range(p) if m != me]
    out = [mine if m == me else c.recv(m, shapes[m], dtype, name, index(m)) for m in range(p)]
    for r in reqs:
        c.dev.wait(r)
    return out


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


# ---- all-reduce ------------------------------------------------------------------------------
def _flat_setup(x: np.ndarray, parts: int):
    flat = x.reshape(-1)
    b = chunk_bounds(flat.size, parts)
    blocks = [flat[b[j] : b[j + 1]] for j in range(parts)]
    return blocks, b


def _all_reduce_ring(c: _Call, x: np.ndarray) -> np.ndarray:
    blocks, b = _flat_setup(x, c.p)

    def index(j):
        return FlatSlice(b[j], b[j + 1])

    mine = c.finish_avg(_rs_ring(c, blocks, index))
    shapes = [blk.shape for blk in blocks]
    out = _ag_ring(c, mine, shapes, x.dtype, c.name, index, c.p - 1)  # steps continue after the reduce-scatter's
    return np.concatenate(out).reshape(x.shape)


def _all_reduce_direct(c: _Call, x: np.ndarray) -> np.ndarray:
    blocks, b = _flat_setup(x, c.p)

    def index(j):
        return FlatSlice(b[j], b[j + 1])

    mine = c.finish_avg(_rs_direct(c, blocks, index))
    out = _ag_direct(c, mine, [blk.shape for blk in blocks], x.dtype, c.name, index, 1)
    return np.concatenate(out).reshape(x.shape)


def _all_reduce_halving_doubling(c: _Call, x: np.ndarray) -> np.ndarray:
    p, me = c.p, c.me
    q = _pof2_below(p)
    r = p - q
    whole = [c.sum_name([m]) for m in range(p)] if c.partials else None
    # fold: among the first 2r members, even ones hand their whole value to the next (odd) one
    if me < 2 * r and me % 2 == 0:
        c.dev.wait(c.send(x, me + 1, "fold", "all"))
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
        result = np.concatenate(out).reshape(x.shape)
    # unfold: odd members of the first 2r hand the result back to their even partner
    if me < 2 * r and me % 2 == 1:
        c.dev.wait(c.send(result, me - 1, "unfold", "all"))
    elif me < 2 * r:
        result = c.recv(me + 1, x.shape, x.dtype, c.name)
    return result


def _all_reduce_tree(c: _Call, x: np.ndarray) -> np.ndarray:
    reduced = _reduce_tree(c, x, 0)
    if c.me == 0:
        reduced = c.finish_avg(reduced)
    return _broadcast_tree(c, reduced, 0, x.shape, x.dtype, step0=c.p.bit_length())


# ---- broadcast and reduce (rooted) -----------------------------------------------------------
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
        c.dev.wait(r)
    return x


def _broadcast_direct(c: _Call, x, root: int, shape, dtype):
    if c.me == root:
        for r in [c.send(x, m, 0, "all") for m in range(c.p) if m != root]:
            c.dev.wait(r)
        return x
    return c.recv(root, shape, dtype, c.name)


def _reduce_tree(c: _Call, x, root: int):
    """Binomial tree: relative member v gathers v+1, v+2, v+4, ... then sends to v minus its lowest bit."""
    p = c.p
    v = (c.me - root) % p
    acc = x
    mask = 1
    while mask < p:
        if v & mask:
            c.dev.wait(c.send(acc, (v - mask + root) % p, mask.bit_length() - 1, "all"))
            return None
        if v + mask < p:
            sub = [(root + u) % p for u in range(v + mask, min(v + 2 * mask, p))]
            got = c.recv((v + mask + root) % p, x.shape, x.dtype, c.sum_name(sub) if c.partials else None)
            mine = [(root + u) % p for u in range(v, v + mask)]
            acc = c.combine(acc, got, mine + sub if c.partials else None)
        mask <<= 1
    return acc


def _reduce_direct(c: _Call, x, root: int):
    if c.me != root:
        c.dev.wait(c.send(x, root, 0, "all"))
        return None
    got = [x if m == root else c.recv(m, x.shape, x.dtype, c.sum_name([m])) for m in range(c.p)]
    acc = got[0]
    for m in range(1, c.p):
        acc = c.combine(acc, got[m], list(range(m + 1)))
    return acc


# ---- scatter and gather (rooted) -------------------------------------------------------------
def _scatter_direct(c: _Call, chunks, root: int, shape, dtype, index):
    if c.me == root:
        for r in [c.send(chunks[m], m, 0, m) for m in range(c.p) if m != root]:
            c.dev.wait(r)
        return chunks[root]
    return c.recv(root, shape, dtype, c.name, index(c.me))


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
        c.dev.wait(r)
    piece = bundle[0]
    if c.name is not None:
        return c.dev.compute(c.name, lambda: piece, seconds=0.0, index=index(c.me))
    return piece


def _gather_direct(c: _Call, x, root: int, shapes, index):
    if c.me != root:
        c.dev.wait(c.send(x, root, 0, c.me))
        return None
    return [x if m == root else c.recv(m, shapes[m], x.dtype, c.name, index(m)) for m in range(c.p)]


def _gather_tree(c: _Call, x, root: int, shapes, index):
    """Binomial tree: each member collects its subtree's pieces (stacked) and sends them up in one message."""
    p = c.p
    v = (c.me - root) % p
    parts = [x]
    mask = 1
    while mask < p:
        if v & mask:
            c.dev.wait(c.send(np.stack(parts), (v - mask + root) % p, mask.bit_length() - 1, v))
            return None
        if v + mask < p:
            n = min(mask, p - v - mask)
            got = c.recv((v + mask + root) % p, (n, *x.shape), x.dtype, None)
            parts.extend(got[k] for k in range(n))
        mask <<= 1
    return [parts[(m - root) % p] for m in range(p)]


# ---- all-to-all and barrier ------------------------------------------------------------------
def _all_to_all_direct(c: _Call, chunks, shapes, dtype):
    p, me = c.p, c.me
    reqs = [c.send(chunks[m], m, 0, m) for m in range(p) if m != me]
    out = [chunks[me] if m == me else c.recv(m, shapes[m] if shapes else None, dtype) for m in range(p)]
    for r in reqs:
        c.dev.wait(r)
    return out


def _all_to_all_pairwise(c: _Call, chunks, shapes, dtype):
    p, me = c.p, c.me
    out: list = [None] * p
    out[me] = chunks[me]
    for s in range(1, p):
        to, frm = (me + s) % p, (me - s) % p
        out[frm] = c.exchange(chunks[to], to, frm, s - 1, to, shapes[frm] if shapes else None, dtype)
    return out


def _barrier_dissemination(c: _Call) -> None:
    p, me = c.p, c.me
    token = np.zeros(0, dtype=np.uint8)
    d, step = 1, 0
    while d < p:
        c.exchange(token, (me + d) % p, (me - d) % p, step, "token", (0,), np.uint8)
        d *= 2
        step += 1


ALGORITHMS: dict[str, dict[str, Callable]] = {
    "all_reduce": {
        "ring": _all_reduce_ring,
        "halving_doubling": _all_reduce_halving_doubling,
        "tree": _all_reduce_tree,
        "direct": _all_reduce_direct,
    },
    "reduce_scatter": {"ring": _rs_ring, "halving_doubling": _rs_halving, "direct": _rs_direct},
    "all_gather": {"ring": _ag_ring, "halving_doubling": _ag_doubling, "direct": _ag_direct},
    "broadcast": {"tree": _broadcast_tree, "direct": _broadcast_direct},
    "reduce": {"tree": _reduce_tree, "direct": _reduce_direct},
    "scatter": {"tree": _scatter_tree, "direct": _scatter_direct},
    "gather": {"tree": _gather_tree, "direct": _gather_direct},
    "all_to_all": {"direct": _all_to_all_direct, "pairwise": _all_to_all_pairwise},
    "barrier": {"dissemination": _barrier_dissemination},
}


# ---- the public functions --------------------------------------------------------------------
def all_reduce(
    dev: Device,
    x: Any,
    op: str = "sum",
    group: Sequence[int] | None = None,
    algorithm: str = "ring",
    *,
    name: str | None = None,
    partials: str | None = None,
) -> np.ndarray:
    """Every member ends with the reduction (``op``) of all members' ``x``; returns it.

    name:     the reference value the result is (final chunks and the result are checked against it)
    partials: the reference names of the members' inputs, ``f"{partials}[m]"`` (checked on the way)
    """
    c = _Call(dev, "all_reduce", group, algorithm, op, name, partials)
    x = _freeze(x)
    c.agree(op=op, shape=x.shape, dtype=x.dtype)
    if c.p == 1:
        return c.result(x)
    if algorithm == "ring":  # without payloads, booked whole where it can be (simulator/booked.py)
        booked = ring_all_reduce(c, x)
        if booked is not None:
            return booked
    return c.result(ALGORITHMS["all_reduce"][algorithm](c, x))


def reduce_scatter(
    dev: Device,
    x: Any,
    op: str = "sum",
    group: Sequence[int] | None = None,
    algorithm: str = "ring",
    *,
    axis: int = 0,
    name: str | None = None,
    partials: str | None = None,
    indices: Sequence[Any] | None = None,
) -> np.ndarray:
    """Member j ends with the reduction of every member's block j; returns it.

    x: an array, split along ``axis`` into p blocks by torch.chunk's rule, or a list of p blocks.
    indices: the reference index of each block (default: its slice along ``axis``, when x is an array).
    """
    c = _Call(dev, "reduce_scatter", group, algorithm, op, name, partials)
    if isinstance(x, (list, tuple)):
        blocks = [_freeze(b) for b in x]
        if len(blocks) != c.p:
            raise ValueError(f"device {dev.rank}: reduce_scatter got {len(blocks)} blocks for a group of {c.p}")
        default = None
    else:
        arr = _freeze(x)
        b = chunk_bounds(arr.shape[axis], c.p)
        pre = (slice(None),) * (axis % arr.ndim)
        default = [(*pre, slice(b[j], b[j + 1])) for j in range(c.p)]
        blocks = [arr[default[j]] for j in range(c.p)]
    c.agree(op=op, shapes=[b.shape for b in blocks], dtype=blocks[0].dtype)
    idx = indices if indices is not None else default

    def index(j):
        return idx[j] if idx is not None else None

    if c.p == 1:
        return c.result(blocks[0], index(0))
    if algorithm == "halving_doubling":
        _need_pof2(c, "reduce_scatter")
    mine = c.finish_avg(ALGORITHMS["reduce_scatter"][algorithm](c, blocks, index))
    return c.result(mine, index(c.me))


def all_gather(
    dev: Device,
    x: Any,
    group: Sequence[int] | None = None,
    algorithm: str = "ring",
    *,
    axis: int | None = None,
    shapes: Sequence[tuple[int, ...]] | None = None,
    name: str | None = None,
    indices: Sequence[Any] | None = None,
    index: Any = None,
) -> list[np.ndarray] | np.ndarray:
    """Every member ends with every member's ``x``: a list in member order, or concatenated along ``axis``.

    shapes:  each member's piece shape (default: all like this member's; a member whose piece differs
             then breaks the declared contract, as with torch, which needs equal sizes)
    name:    the reference value the pieces are parts of; indices: each piece's index into it (default,
             with ``axis``: its slice along the axis); index: the concatenation's index into it (default:
             the whole value)
    """
    c = _Call(dev, "all_gather", group, algorithm, None, name)
    mine = _freeze(x)
    shapes = [tuple(s) for s in shapes] if shapes is not None else [mine.shape] * c.p
    c.agree(axis=axis, shapes=shapes, dtype=mine.dtype)
    if len(shapes) != c.p or shapes[c.me] != mine.shape:
        raise ValueError(
            f"device {dev.rank}: all_gather shapes={shapes} must list {c.p} shapes, this member's being {mine.shape}"
        )
    if indices is None and name is not None:
        if axis is None:
            raise ValueError("all_gather(name=...) without axis needs indices= (which part of the value each piece is)")
        at = np.cumsum([0] + [s[axis] for s in shapes]).tolist()
        pre = (slice(None),) * (axis % mine.ndim)
        indices = [(*pre, slice(at[j], at[j + 1])) for j in range(c.p)]

    def index_of(j):
        return indices[j] if indices is not None else None

    if c.p == 1:
        pieces = [mine]
    else:
        if algorithm == "halving_doubling":
            _need_pof2(c, "all_gather")
        pieces = ALGORITHMS["all_gather"][algorithm](c, mine, shapes, mine.dtype, name, index_of)
    if axis is None:
        return pieces
    whole = np.concatenate(pieces, axis=axis)
    return c.result(whole, index)


def broadcast(
    dev: Device,
    x: Any,
    src: int,
    group: Sequence[int] | None = None,
    algorithm: str = "tree",
    *,
    shape: tuple[int, ...] | None = None,
    dtype: Any = None,
    name: str | None = None,
) -> np.ndarray:
    """Every member ends with ``src``'s ``x`` (others pass None; shape/dtype declare the contract)."""
    c = _Call(dev, "broadcast", group, algorithm, None, name)
    root = _root(c, src, "src")
    c.agree(src=src)
    if c.me == root:
        x = _freeze(x)
    if c.p == 1:
        return x
    return ALGORITHMS["broadcast"][algorithm](c, x, root, shape, dtype)


def reduce(
    dev: Device,
    x: Any,
    dst: int,
    op: str = "sum",
    group: Sequence[int] | None = None,
    algorithm: str = "tree",
    *,
    name: str | None = None,
    partials: str | None = None,
) -> np.ndarray | None:
    """Device ``dst`` ends with the reduction of every member's ``x`` (others get None)."""
    c = _Call(dev, "reduce", group, algorithm, op, name, partials)
    root = _root(c, dst, "dst")
    x = _freeze(x)
    c.agree(dst=dst, op=op, shape=x.shape, dtype=x.dtype)
    out = x if c.p == 1 else ALGORITHMS["reduce"][algorithm](c, x, root)
    if c.me != root:
        return None
    return c.result(c.finish_avg(out))


def scatter(
    dev: Device,
    chunks: Sequence[Any] | None,
    src: int,
    group: Sequence[int] | None = None,
    algorithm: str = "direct",
    *,
    shape: tuple[int, ...] | None = None,
    dtype: Any = None,
    name: str | None = None,
    indices: Sequence[Any] | None = None,
) -> np.ndarray:
    """Member m ends with ``chunks[m]`` from ``src`` (others pass None; shape/dtype declare the contract)."""
    c = _Call(dev, "scatter", group, algorithm, None, name)
    root = _root(c, src, "src")
    c.agree(src=src)
    if c.me == root:
        if chunks is None or len(chunks) != c.p:
            raise ValueError(f"device {dev.rank}: scatter from it needs a list of {c.p} chunks, one per member")
        chunks = [_freeze(ch) for ch in chunks]
    if c.p == 1:
        return chunks[0]

    def index(j):
        return indices[j] if indices is not None else None

    return ALGORITHMS["scatter"][algorithm](c, chunks, root, shape, dtype, index)


def gather(
    dev: Device,
    x: Any,
    dst: int,
    group: Sequence[int] | None = None,
    algorithm: str = "direct",
    *,
    shapes: Sequence[tuple[int, ...]] | None = None,
    name: str | None = None,
    indices: Sequence[Any] | None = None,
) -> list[np.ndarray] | None:
    """Device ``dst`` ends with every member's ``x`` in member order (others get None)."""
    c = _Call(dev, "gather", group, algorithm, None, name)
    root = _root(c, dst, "dst")
    c.agree(dst=dst)
    x = _freeze(x)
    shapes = [tuple(s) for s in shapes] if shapes is not None else [x.shape] * c.p
    if c.p == 1:
        return [x]

    def index(j):
        return indices[j] if indices is not None else None

    return ALGORITHMS["gather"][algorithm](c, x, root, shapes, index)


def all_to_all(
    dev: Device,
    chunks: Sequence[Any],
    group: Sequence[int] | None = None,
    algorithm: str = "direct",
    *,
    shapes: Sequence[tuple[int, ...]] | None = None,
) -> list[np.ndarray]:
    """Member m sends ``chunks[j]`` to member j and ends with what every member sent it, in member order.

    shapes: the shapes this member expects from each member (declared as contracts), if known.
    """
    c = _Call(dev, "all_to_all", group, algorithm)
    c.agree()
    if len(chunks) != c.p:
        raise ValueError(f"device {dev.rank}: all_to_all needs {c.p} chunks (one per member), got {len(chunks)}")
    chunks = [_freeze(ch) for ch in chunks]
    if c.p == 1:
        return chunks
    dtype = chunks[0].dtype
    return ALGORITHMS["all_to_all"][algorithm](c, chunks, shapes, dtype)


def barrier(dev: Device, group: Sequence[int] | None = None, algorithm: str = "dissemination") -> None:
    """No member leaves before every member has arrived."""
    c = _Call(dev, "barrier", group, algorithm)
    c.agree()
    if c.p > 1:
        ALGORITHMS["barrier"][algorithm](c)


def _root(c: _Call, rank: int, arg: str) -> int:
    if rank not in c.group:
        raise ValueError(f"device {c.dev.rank}: {arg}={rank} is not in the group {c.group}")
    return c.group.index(rank)


# ---- numerics --------------------------------------------------------------------------------
def ulp_distance(a: Any, b: Any) -> np.ndarray:
    """How many representable floats lie between a and b, elementwise (0 means bit-identical)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.dtype.kind != "f":
        raise TypeError(f"ulp_distance needs two float arrays of one dtype, got {a.dtype} and {b.dtype}")
    ints = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]

    def ordered(x):  # map floats to integers that count representable values in order
        i = x.view(ints).astype(np.int64)
        return np.where(i < 0, np.iinfo(ints).min - i, i)

    return np.abs(ordered(a) - ordered(b))


class CollectiveMethods:
    """The collectives as device methods, with torch.distributed's names (mixed into ``Device``)."""

    def all_reduce(self, x, op="sum", group=None, algorithm="ring", *, name=None, partials=None):
        """See ``simulator.collectives.all_reduce``."""
        return all_reduce(self, x, op, group, algorithm, name=name, partials=partials)

    def reduce_scatter(
        self, x, op="sum", group=None, algorithm="ring", *, axis=0, name=None, partials=None, indices=None
    ):
        """See ``simulator.collectives.reduce_scatter``."""
        return reduce_scatter(self, x, op, group, algorithm, axis=axis, name=name, partials=partials, indices=indices)

    def all_gather(
        self, x, group=None, algorithm="ring", *, axis=None, shapes=None, name=None, indices=None, index=None
    ):
        """See ``simulator.collectives.all_gather``."""
        return all_gather(self, x, group, algorithm, axis=axis, shapes=shapes, name=name, indices=indices, index=index)

    def broadcast(self, x, src, group=None, algorithm="tree", *, shape=None, dtype=None, name=None):
        """See ``simulator.collectives.broadcast``."""
        return broadcast(self, x, src, group, algorithm, shape=shape, dtype=dtype, name=name)

    def reduce(self, x, dst, op="sum", group=None, algorithm="tree", *, name=None, partials=None):
        """See ``simulator.collectives.reduce``."""
        return reduce(self, x, dst, op, group, algorithm, name=name, partials=partials)

    def scatter(self, chunks, src, group=None, algorithm="direct", *, shape=None, dtype=None, name=None, indices=None):
        """See ``simulator.collectives.scatter``."""
        return scatter(self, chunks, src, group, algorithm, shape=shape, dtype=dtype, name=name, indices=indices)

    def gather(self, x, dst, group=None, algorithm="direct", *, shapes=None, name=None, indices=None):
        """See ``simulator.collectives.gather``."""
        return gather(self, x, dst, group, algorithm, shapes=shapes, name=name, indices=indices)

    def all_to_all(self, chunks, group=None, algorithm="direct", *, shapes=None):
        """See ``simulator.collectives.all_to_all``."""
        return all_to_all(self, chunks, group, algorithm, shapes=shapes)

    def barrier(self, group=None, algorithm="dissemination"):
        """See ``simulator.collectives.barrier``."""
        return barrier(self, group, algorithm)
