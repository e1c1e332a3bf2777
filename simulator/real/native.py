"""torch.distributed's own collectives behind the simulator's collective signatures.

A ``TorchDevice`` with ``collectives="native"`` sends ``dev.all_reduce(x, ...)`` and its siblings
here: one torch.distributed call each (gloo or NCCL picks the algorithm; the ``algorithm`` argument
is accepted and ignored). A native collective is opaque: the trace records it as one op on each
rank, named ``name`` when given (so the checker compares the result with the reference value of
that name) or ``"<kind> (native)"`` otherwise, with the measured duration; with ``partials=``, each
member's input is held under its term's name first (``_hold_term``), as a simulated member's messages name it.
The same calls with ``collectives="messages"`` run ``simulator.collectives``' algorithms message by message
instead, for a one-to-one comparison with a simulation.

Where torch needs equal sizes on every rank (gloo's all_gather, gather, scatter, all_to_all) and
the pieces differ (torch.chunk's rule makes trailing chunks smaller), pieces travel as bytes padded
to the largest and are cut back after. Metadata the receivers lack (a broadcast's shape and dtype,
a gather's shapes) travels first as small int64 headers, as point-to-point messages do.
Subgroups become torch process groups, created on first use by their members only, under a name
made of their ranks alone (see ``groups``: overlapping subgroups cannot deadlock), and kept for the
life of the rank process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch.distributed as dist

from ..collectives.call import check_avg_dtype, term_names
from ..collectives.in_place import in_place_target
from ..core.device import freeze
from ..core.payloads import sealed
from .wire import HEADER_LEN, decode_header, encode_header, nbytes_of

if TYPE_CHECKING:
    from .device import TorchDevice

REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
}


# A large all-reduce goes in pieces, so that copying the input into the result buffer (the price of a
# functional API over torch's in-place one) overlaps with the reduction of the pieces before. The
# first piece is small (its copy cannot overlap anything) and each next one doubles, up to the last:
# a few collectives, not one per fixed-size piece.
FIRST_PIECE_BYTES = 1 << 20
MAX_PIECE_BYTES = 32 << 20


def piece_bounds(n: int, itemsize: int, first: int = FIRST_PIECE_BYTES, largest: int = MAX_PIECE_BYTES) -> list[int]:
    """Element offsets of the pieces of an n-element all-reduce: doubling from ``first`` bytes to ``largest``."""
    bounds, at, size = [0], 0, max(1, first // max(1, itemsize))
    cap = max(1, largest // max(1, itemsize))
    while at < n:
        at = min(n, at + size)
        bounds.append(at)
        size = min(2 * size, cap)
    return bounds


def chunk_bounds(n: int, parts: int) -> list[int]:
    """torch.chunk's split of n elements into ``parts`` (as DTensor and ``simulator.tensors.placements`` split)."""
    c = -(-n // parts)
    return [min(i * c, n) for i in range(parts + 1)]


class Group:
    """A collective's members as seen by one rank: the ranks, this rank's position, the torch group.

    A group lists its ranks in any order, and a member's position in that list is its place in the
    collective (the simulator's rule: member j gets block j of a reduce_scatter, piece j of an
    all_gather is member j's). A torch group holds its ranks sorted, so lists that torch orders by
    position go through ``to_torch`` and come back through ``from_torch``.
    """

    def __init__(self, dev: TorchDevice, group: Sequence[int] | None) -> None:
        ranks = tuple(range(dev.world_size)) if group is None else tuple(int(r) for r in group)
        if len(set(ranks)) != len(ranks) or any(not 0 <= r < dev.world_size for r in ranks):
            raise ValueError(f"device {dev.rank}: group {ranks} must list distinct ranks in 0..{dev.world_size - 1}")
        if dev.rank not in ranks:
            raise ValueError(f"device {dev.rank} called a collective on group {ranks}, which it is not part of")
        self.ranks = ranks
        self.p = len(ranks)
        self.me = ranks.index(dev.rank)
        self.pg = None if len(ranks) == dev.world_size else dev.process_group(ranks)
        self._torch_order = [ranks.index(r) for r in sorted(ranks)]  # group position of torch position k

    def to_torch(self, items: Sequence[Any]) -> list[Any]:
        """A list in group order (item j for member j), reordered as torch lists members (sorted ranks)."""
        return [items[j] for j in self._torch_order]

    def from_torch(self, items: Sequence[Any]) -> list[Any]:
        """A list torch returned (sorted ranks), reordered to group order."""
        out: list[Any] = [None] * len(items)
        for k, j in enumerate(self._torch_order):
            out[j] = items[k]
        return out

    def root(self, rank: int, arg: str) -> int:
        if rank not in self.ranks:
            raise ValueError(f"{arg}={rank} is not in the group {self.ranks}")
        return rank


def all_reduce(
    dev, x, op="sum", group=None, algorithm="ring", *, name=None, partials=None, in_place=False
) -> np.ndarray:
    g, t0 = Group(dev, group), dev.clock
    _hold_term(dev, partials, op, g, x)
    if in_place:  # x given up: torch reduces in its memory, as it would a tensor (simulator.collectives.in_place)
        out = in_place_target(x, dev.rank)
        inputs = (freeze(out),) if dev.keep_payloads else ()  # a copy, taken before the result overwrites x
        bounds = [0, out.size] if out.size else [0]
    else:  # torch reduces in place: into a copy, the caller's array stays intact
        x = np.asarray(x)
        inputs = (freeze(x),) if dev.keep_payloads else ()
        out = dev.buffer(x.shape, x.dtype)
        bounds = piece_bounds(out.size, x.itemsize, FIRST_PIECE_BYTES, MAX_PIECE_BYTES)
    check_avg_dtype(dev.rank, "all_reduce", op, out.dtype)
    flat, src = out.reshape(-1), np.asarray(x).reshape(-1)
    pieces, works = [], []
    for lo, hi in zip(bounds, bounds[1:]):  # copy piece k + 1 while torch reduces piece k
        if not in_place:
            np.copyto(flat[lo:hi], src[lo:hi])
        pieces.append(dev.tensor(flat[lo:hi]))
        works.append(
            dev.native(lambda p=pieces[-1]: dist.all_reduce(p, op=_op(op), group=g.pg, async_op=True), "all_reduce")
        )
    for (lo, hi), piece, work in zip(zip(bounds, bounds[1:]), pieces, works):
        dev.native(lambda w=work: w.wait(dev.wait_timeout), "all_reduce")
        if dev.device.type != "cpu":  # on a GPU the piece is a copy on the device: bring its result back
            flat[lo:hi] = dev.array(piece)
    if in_place and op == "avg":  # x is float (check_avg_dtype above): divided where it is
        np.divide(out, g.p, out=out)
    result = sealed(out) if in_place else _finish_avg(out, op, g.p)
    return dev.record_collective("all_reduce", name, inputs, result, t0, group=g.ranks)


def reduce_scatter(
    dev, x, op="sum", group=None, algorithm="ring", *, axis=0, name=None, partials=None, indices=None
) -> np.ndarray:
    g, t0 = Group(dev, group), dev.clock
    _hold_term(dev, partials, op, g, x)
    if isinstance(x, (list, tuple)):
        blocks, idx = [freeze(b) for b in x], indices
        if len(blocks) != g.p:
            raise ValueError(f"device {dev.rank}: reduce_scatter got {len(blocks)} blocks for a group of {g.p}")
    else:
        arr = freeze(x)
        b = chunk_bounds(arr.shape[axis], g.p)
        pre = (slice(None),) * (axis % arr.ndim)
        default = [(*pre, slice(b[j], b[j + 1])) for j in range(g.p)]
        blocks, idx = [arr[s] for s in default], indices if indices is not None else default
    check_avg_dtype(dev.rank, "reduce_scatter", op, blocks[0].dtype)
    width = max(b.size for b in blocks)
    flat = [np.pad(b.reshape(-1), (0, width - b.size)) for b in blocks]
    out = dev.tensor(np.empty(width, dtype=blocks[0].dtype))
    ins = g.to_torch([dev.tensor(f) for f in flat])
    dev.native(lambda: dist.reduce_scatter(out, ins, op=_op(op), group=g.pg), "reduce_scatter")
    mine = blocks[g.me]
    result = _finish_avg(dev.array(out)[: mine.size].reshape(mine.shape), op, g.p)
    return dev.record_collective(
        "reduce_scatter", name, (x,), result, t0, idx[g.me] if idx is not None else None, group=g.ranks
    )


def all_gather(dev, x, group=None, algorithm="ring", *, axis=None, shapes=None, name=None, indices=None, index=None):
    g, t0 = Group(dev, group), dev.clock
    mine = freeze(x)
    shapes = [tuple(s) for s in shapes] if shapes is not None else [mine.shape] * g.p
    if len(shapes) != g.p or shapes[g.me] != mine.shape:
        raise ValueError(
            f"device {dev.rank}: all_gather shapes={shapes} must list {g.p} shapes, this member's being {mine.shape}"
        )
    width = max(nbytes_of(s, mine.dtype) for s in shapes)
    bufs = [dev.tensor(np.empty(width, dtype=np.uint8)) for _ in range(g.p)]
    dev.native(lambda: dist.all_gather(bufs, dev.tensor(_padded_bytes(mine, width)), group=g.pg), "all_gather")
    pieces = [_unpad(dev.array(b), s, mine.dtype) for b, s in zip(g.from_torch(bufs), shapes)]
    if axis is None:
        dev.record_collective("all_gather", None, (mine,), None, t0, group=g.ranks)
        return pieces
    return dev.record_collective(
        "all_gather", name, (mine,), np.concatenate(pieces, axis=axis), t0, index, group=g.ranks
    )


def broadcast(dev, x, src, group=None, algorithm="tree", *, shape=None, dtype=None, name=None) -> np.ndarray:
    g, t0 = Group(dev, group), dev.clock
    src = g.root(src, "src")
    head = dev.tensor(encode_header(freeze(x), dev.rank) if dev.rank == src else np.zeros(HEADER_LEN, np.int64))
    dev.native(lambda: dist.broadcast(head, src, group=g.pg), "broadcast")
    got_shape, got_dtype = decode_header(dev.array(head))
    if dev.rank != src:
        dev.check_collective_contract("broadcast", src, shape, dtype, got_shape, got_dtype)
    payload = _padded_bytes(freeze(x), nbytes_of(got_shape, got_dtype)) if dev.rank == src else None
    buf = dev.tensor(payload if payload is not None else np.empty(nbytes_of(got_shape, got_dtype), np.uint8))
    if buf.numel():
        dev.native(lambda: dist.broadcast(buf, src, group=g.pg), "broadcast")
    out = _unpad(dev.array(buf), got_shape, got_dtype)
    return dev.record_collective("broadcast", name, (x,) if dev.rank == src else (), out, t0, group=g.ranks)


def reduce(dev, x, dst, op="sum", group=None, algorithm="tree", *, name=None, partials=None) -> np.ndarray | None:
    g, t0 = Group(dev, group), dev.clock
    dst = g.root(dst, "dst")
    _hold_term(dev, partials, op, g, x)
    x = freeze(x)
    check_avg_dtype(dev.rank, "reduce", op, x.dtype)
    t = dev.tensor(np.array(x))
    dev.native(lambda: dist.reduce(t, dst, op=_op(op), group=g.pg), "reduce")
    if dev.rank != dst:
        dev.record_collective("reduce", None, (x,), None, t0, group=g.ranks)
        return None
    return dev.record_collective(
        "reduce", name, (x,), _finish_avg(dev.array(t).reshape(x.shape), op, g.p), t0, group=g.ranks
    )


def scatter(dev, chunks, src, group=None, algorithm="direct", *, shape=None, dtype=None, name=None, indices=None):
    g, t0 = Group(dev, group), dev.clock
    src = g.root(src, "src")
    heads = [dev.tensor(np.zeros(HEADER_LEN, np.int64)) for _ in range(g.p)]
    if dev.rank == src:
        if chunks is None or len(chunks) != g.p:
            raise ValueError(f"device {dev.rank}: scatter from it needs a list of {g.p} chunks, one per member")
        chunks = [freeze(c) for c in chunks]
        heads = [dev.tensor(encode_header(c, dev.rank)) for c in chunks]
    # every member learns every chunk's shape (the widest sets the padded size)
    head = dev.tensor(np.concatenate([dev.array(h) for h in heads]))
    dev.native(lambda: dist.broadcast(head, src, group=g.pg), "scatter")
    metas = [decode_header(m) for m in dev.array(head).reshape(g.p, HEADER_LEN)]
    width = max(nbytes_of(s, d) for s, d in metas)
    got_shape, got_dtype = metas[g.me]
    if dev.rank != src:
        dev.check_collective_contract("scatter", src, shape, dtype, got_shape, got_dtype)
    out = dev.tensor(np.empty(width, dtype=np.uint8))
    send = g.to_torch([dev.tensor(_padded_bytes(c, width)) for c in chunks]) if dev.rank == src else None
    dev.native(lambda: dist.scatter(out, send, src=src, group=g.pg), "scatter")
    result = _unpad(dev.array(out), got_shape, got_dtype)
    return dev.record_collective(
        "scatter", name, (), result, t0, indices[g.me] if indices is not None else None, group=g.ranks
    )


def gather(dev, x, dst, group=None, algorithm="direct", *, shapes=None, name=None, indices=None):
    g, t0 = Group(dev, group), dev.clock
    dst = g.root(dst, "dst")
    x = freeze(x)
    heads = [dev.tensor(np.zeros(HEADER_LEN, np.int64)) for _ in range(g.p)]
    dev.native(lambda: dist.all_gather(heads, dev.tensor(encode_header(x, dev.rank)), group=g.pg), "gather")
    metas = [decode_header(dev.array(h)) for h in g.from_torch(heads)]
    width = max(nbytes_of(s, d) for s, d in metas)
    bufs = [dev.tensor(np.empty(width, dtype=np.uint8)) for _ in range(g.p)] if dev.rank == dst else None
    dev.native(lambda: dist.gather(dev.tensor(_padded_bytes(x, width)), bufs, dst=dst, group=g.pg), "gather")
    if dev.rank != dst:
        dev.record_collective("gather", None, (x,), None, t0, group=g.ranks)
        return None
    pieces = [_unpad(dev.array(b), s, d) for b, (s, d) in zip(g.from_torch(bufs), metas)]
    dev.record_collective("gather", None, (x,), None, t0, group=g.ranks)
    return pieces


def all_to_all(dev, chunks, group=None, algorithm="direct", *, shapes=None) -> list[np.ndarray]:
    g, t0 = Group(dev, group), dev.clock
    if len(chunks) != g.p:
        raise ValueError(f"device {dev.rank}: all_to_all needs {g.p} chunks (one per member), got {len(chunks)}")
    chunks = [freeze(c) for c in chunks]
    heads_out = [dev.tensor(encode_header(c, dev.rank)) for c in chunks]
    heads_in = [dev.tensor(np.zeros(HEADER_LEN, np.int64)) for _ in range(g.p)]
    dev.native(lambda: dist.all_to_all(g.to_torch(heads_in), g.to_torch(heads_out), group=g.pg), "all_to_all")
    metas = [decode_header(dev.array(h)) for h in heads_in]
    width = max([nbytes_of(s, d) for s, d in metas] + [c.nbytes for c in chunks])
    widths = [dev.tensor(np.array([width], np.int64))]
    dev.native(lambda: dist.all_reduce(widths[0], op=dist.ReduceOp.MAX, group=g.pg), "all_to_all")
    width = int(dev.array(widths[0])[0])
    bufs = [dev.tensor(np.empty(width, dtype=np.uint8)) for _ in range(g.p)]
    ins = [dev.tensor(_padded_bytes(c, width)) for c in chunks]
    dev.native(lambda: dist.all_to_all(g.to_torch(bufs), g.to_torch(ins), group=g.pg), "all_to_all")
    if shapes is not None:
        for j, (s, d) in enumerate(metas):
            if j != g.me:
                dev.check_collective_contract("all_to_all", g.ranks[j], tuple(shapes[j]), None, s, d)
    out = [_unpad(dev.array(b), s, d) for b, (s, d) in zip(bufs, metas)]
    dev.record_collective("all_to_all", None, tuple(chunks), None, t0, group=g.ranks)
    return out


def barrier(dev, group=None, algorithm="dissemination") -> None:
    g, t0 = Group(dev, group), dev.clock
    dev.native(lambda: dist.barrier(group=g.pg), "barrier")
    dev.record_collective("barrier", None, (), None, t0, group=g.ranks)


def _hold_term(dev: TorchDevice, partials: str | None, op: str, g: Group, x: Any) -> None:
    """With ``partials=`` on a sum or an average, this member's input is its term of the sum, ``partials[m]``: held
    under that name, so that the checker compares it with the model's term, or says the name is none of the model's,
    as it does a simulated member's (whose messages carry the terms under those names). A native collective's own
    running sums stay out of sight."""
    names = term_names(partials, op, g.p)
    if names is not None and not isinstance(x, (list, tuple)):
        dev.hold(names[g.me], x)


def _op(op: str) -> Any:
    if op not in REDUCE_OPS:
        raise ValueError(f"op={op!r}: choose one of {sorted(REDUCE_OPS)}")
    return REDUCE_OPS[op]


def _finish_avg(value: np.ndarray, op: str, p: int) -> np.ndarray:
    """op='avg': summed by torch (gloo has no average), divided once here, as the simulator does."""
    return value / p if op == "avg" else value


def _padded_bytes(arr: np.ndarray, width: int) -> np.ndarray:
    raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return np.pad(raw, (0, width - raw.size))


def _unpad(buf: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return freeze(buf[: nbytes_of(shape, dtype)].view(dtype).reshape(shape))
