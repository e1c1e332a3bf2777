"""The public collectives: ``all_reduce``, ``reduce_scatter``, ``all_gather``, ``broadcast``, ``reduce``,
``scatter``, ``gather``, ``all_to_all``, ``barrier``, and ``ulp_distance`` to compare their float results.

Each checks its arguments, tells the simulator what this member calls (so members that disagree get
an error naming both calls), and runs the chosen algorithm from ``ALGORITHMS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cost.meta import MetaArray
from ..tensors.placements import chunk_bounds
from .algorithms import ALGORITHMS
from .booked import ring_all_reduce
from .call import _Call
from .in_place import in_place_target, write_back

if TYPE_CHECKING:
    from ..core.device import Device


def all_reduce(
    dev: Device,
    x: Any,
    op: str = "sum",
    group: Sequence[int] | None = None,
    algorithm: str = "ring",
    *,
    name: str | None = None,
    partials: str | None = None,
    in_place: bool = False,
) -> np.ndarray:
    """Every member ends with the reduction (``op``) of all members' ``x``; returns it.

    Args:
        dev: this member's device (as a method, ``dev.all_reduce(...)``, it is the device itself).
        x: this member's array.
        op: the reduction: "sum", "avg", "max", "min" or "product".
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["all_reduce"]``.
        name: the reference value the result is (final chunks and the result are checked against it).
        partials: the reference names of the members' inputs, ``f"{partials}[m]"`` (checked on the way).
        in_place: write the result into x itself (a writable, contiguous NumPy array the program gives up), as
            torch.distributed.all_reduce does; x is then read-only and is what the call returns. On real ranks
            this spares the copy that keeps x intact (``simulator.collectives.in_place``).

    Returns:
        The reduction, the same on every member.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> World(2).run(lambda dev: dev.all_reduce(np.array([dev.rank + 1.0]))).outputs
        [array([3.]), array([3.])]
    """
    target = in_place_target(x, dev.rank) if in_place else None
    return write_back(target, _all_reduce(dev, x, op, group, algorithm, name, partials))


def _all_reduce(dev: Device, x: Any, op: str, group: Any, algorithm: str, name: Any, partials: Any) -> Any:
    c = _call(dev, "all_reduce", group, algorithm, op, name, partials)
    # A ring over several members reads x only while the call runs (the program waits inside it) and
    # returns new arrays: a real rank that records no values lends x itself instead of copying it
    ring = algorithm == "ring" and c.p > 1
    if ring and hasattr(dev, "buffer") and not getattr(dev, "keep_payloads", True):
        x = _read_only_view(x)
    else:  # a simulated ring's copy stands for none on a real rank: not the program's time, where that counts
        with getattr(dev, "simulation_work", nullcontext)() if ring else nullcontext():
            x = _freeze(x, dev)
    c.agree(op=op, shape=x.shape, dtype=x.dtype, values=_values(x))
    if c.p == 1:
        return c.result(x)
    if algorithm == "ring":  # booked whole where it can be (simulator/collectives/booked.py)
        booked = ring_all_reduce(c, x)
        if booked is not None:
            return c.result(booked)
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

    Args:
        dev: this member's device (as a method, ``dev.reduce_scatter(...)``, it is the device itself).
        x: an array, split along ``axis`` into p blocks by torch.chunk's rule, or a list of p blocks.
        op: the reduction: "sum", "avg", "max", "min" or "product".
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["reduce_scatter"]``.
        axis: the axis an array is split along.
        name: the reference value the result's blocks are parts of (each block checked against its part).
        partials: the reference names of the members' inputs, ``f"{partials}[m]"``.
        indices: the reference index of each block (default: its slice along ``axis``, when x is an array).

    Returns:
        This member's block of the reduction.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> World(2).run(lambda dev: dev.reduce_scatter(np.arange(4.0) * (dev.rank + 1))).outputs
        [array([0., 3.]), array([6., 9.])]
    """
    c = _call(dev, "reduce_scatter", group, algorithm, op, name, partials)
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
    c.agree(op=op, shapes=[b.shape for b in blocks], dtype=blocks[0].dtype, values=_values(blocks[0]))
    idx = indices if indices is not None else default

    def index(j):
        return idx[j] if idx is not None else None

    if c.p == 1:
        return c.result(blocks[0], index(0))
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

    Args:
        dev: this member's device (as a method, ``dev.all_gather(...)``, it is the device itself).
        x: this member's piece.
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["all_gather"]``.
        axis: concatenate the pieces along this axis (None: return the list of pieces).
        shapes: each member's piece shape (default: all like this member's; a member whose piece differs then
            breaks the declared contract, as with torch, which needs equal sizes).
        name: the reference value the pieces are parts of.
        indices: each piece's index into ``name`` (default, with ``axis``: its slice along the axis).
        index: the concatenation's index into ``name`` (default: the whole value).

    Returns:
        The pieces in member order, or their concatenation along ``axis``.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> World(2).run(lambda dev: dev.all_gather(np.array([10 * dev.rank]), axis=0)).outputs
        [array([ 0, 10]), array([ 0, 10])]
    """
    c = _call(dev, "all_gather", group, algorithm, None, name)
    mine = _freeze(x)
    if axis is not None and not -mine.ndim <= axis < mine.ndim:
        axes = (
            f"one of its {mine.ndim} axes (0 to {mine.ndim - 1}, or negative from the end)"
            if mine.ndim
            else ("None, for a list of the pieces: a number has no axis (or send it as shape (1,))")
        )
        raise ValueError(
            f"device {dev.rank}: all_gather(axis={axis}) on a piece of shape {mine.shape}: axis must be {axes}"
        )
    shapes = [tuple(s) for s in shapes] if shapes is not None else [mine.shape] * c.p
    c.agree(axis=axis, shapes=shapes, dtype=mine.dtype, values=_values(mine))
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
    """Every member ends with ``src``'s ``x``.

    Args:
        dev: this member's device (as a method, ``dev.broadcast(...)``, it is the device itself).
        x: the value on ``src``; None on the others.
        src: the rank that sends it.
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["broadcast"]``.
        shape: the shape the others expect (their receive's contract, checked on arrival).
        dtype: the dtype the others expect.
        name: the reference value it is (checked on every member).

    Returns:
        ``src``'s value, on every member.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> def program(dev):
        ...     x = np.array([7.0]) if dev.rank == 0 else None
        ...     return dev.broadcast(x, src=0, shape=(1,), dtype=np.float64)
        >>> World(2).run(program).outputs
        [array([7.]), array([7.])]
    """
    c = _call(dev, "broadcast", group, algorithm, None, name)
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
    """Device ``dst`` ends with the reduction of every member's ``x``; the others get None.

    Args:
        dev: this member's device (as a method, ``dev.reduce(...)``, it is the device itself).
        x: this member's array.
        dst: the rank that gets the reduction.
        op: the reduction: "sum", "avg", "max", "min" or "product".
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["reduce"]``.
        name: the reference value the result is.
        partials: the reference names of the members' inputs, ``f"{partials}[m]"``.

    Returns:
        The reduction on ``dst``; None elsewhere.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> World(2).run(lambda dev: dev.reduce(np.array([dev.rank + 1.0]), dst=0)).outputs
        [array([3.]), None]
    """
    c = _call(dev, "reduce", group, algorithm, op, name, partials)
    root = _root(c, dst, "dst")
    x = _freeze(x)
    c.agree(dst=dst, op=op, shape=x.shape, dtype=x.dtype, values=_values(x))
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
    """Member m ends with ``chunks[m]`` from ``src``.

    Args:
        dev: this member's device (as a method, ``dev.scatter(...)``, it is the device itself).
        chunks: on ``src``, one array per member in member order; None on the others.
        src: the rank that holds the chunks.
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["scatter"]``.
        shape: the shape of the chunk the others expect (their receive's contract).
        dtype: the dtype the others expect.
        name: the reference value the chunks are parts of.
        indices: each chunk's index into ``name``.

    Returns:
        This member's chunk.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> def program(dev):
        ...     chunks = [np.array([1.0]), np.array([2.0])] if dev.rank == 0 else None
        ...     return dev.scatter(chunks, src=0, shape=(1,), dtype=np.float64)
        >>> World(2).run(program).outputs
        [array([1.]), array([2.])]
    """
    c = _call(dev, "scatter", group, algorithm, None, name)
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
    """Device ``dst`` ends with every member's ``x`` in member order; the others get None.

    Args:
        dev: this member's device (as a method, ``dev.gather(...)``, it is the device itself).
        x: this member's piece.
        dst: the rank that gets the pieces.
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["gather"]``.
        shapes: each member's piece shape, as ``dst`` expects it (default: all like ``dst``'s own).
        name: the reference value the pieces are parts of.
        indices: each piece's index into ``name``.

    Returns:
        On ``dst``, the list of pieces in member order; None elsewhere.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> World(2).run(lambda dev: dev.gather(np.array([10 * dev.rank]), dst=1)).outputs
        [None, [array([0]), array([10])]]
    """
    c = _call(dev, "gather", group, algorithm, None, name)
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

    Args:
        dev: this member's device (as a method, ``dev.all_to_all(...)``, it is the device itself).
        chunks: one array per member, in member order.
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["all_to_all"]``.
        shapes: the shapes this member expects from each member (declared as contracts), if known.

    Returns:
        The chunks this member received, in member order.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> World(2).run(lambda dev: dev.all_to_all([np.array([10 * dev.rank + j]) for j in range(2)])).outputs
        [[array([0]), array([10])], [array([1]), array([11])]]
    """
    c = _call(dev, "all_to_all", group, algorithm)
    c.agree()
    if len(chunks) != c.p:
        raise ValueError(f"device {dev.rank}: all_to_all needs {c.p} chunks (one per member), got {len(chunks)}")
    chunks = [_freeze(ch) for ch in chunks]
    if c.p == 1:
        return chunks
    dtype = chunks[0].dtype
    return ALGORITHMS["all_to_all"][algorithm](c, chunks, shapes, dtype)


def barrier(dev: Device, group: Sequence[int] | None = None, algorithm: str = "dissemination") -> None:
    """No member leaves before every member has arrived.

    Args:
        dev: this member's device (as a method, ``dev.barrier(...)``, it is the device itself).
        group: the members' ranks, in member order (None: every device of the world).
        algorithm: how its messages go, one of ``ALGORITHMS["barrier"]``.

    Examples:
        >>> from simulator import World
        >>> run = World(2).run(lambda dev: dev.barrier())
        >>> run.outputs, len(run.trace.messages)
        ([None, None], 2)
    """
    c = _call(dev, "barrier", group, algorithm)
    c.agree()
    if c.p > 1:
        ALGORITHMS["barrier"][algorithm](c)


def _root(c: _Call, rank: int, arg: str) -> int:
    if rank not in c.group:
        raise ValueError(f"device {c.dev.rank}: {arg}={rank} is not in the group {c.group}")
    return c.group.index(rank)


def _read_only_view(x: Any) -> Any:
    if type(x) is MetaArray:
        return x
    view = np.asarray(x).view()
    view.setflags(write=False)
    return view


def _values(x: Any) -> str | None:
    """What a member's value holds, as its call tells the others: a MetaArray has a shape and no numbers, and a
    group mixing it with arrays would hand back shapes where numbers went in (None: numbers, said nowhere)."""
    return "shapes only (a MetaArray)" if isinstance(x, MetaArray) else None


def _freeze(x: Any, dev: Any = None) -> np.ndarray:
    """A read-only snapshot of x (the caller may change x afterwards). A real rank (``dev.buffer``) copies a
    large x into a reused buffer: fresh memory would cost more to fault in than the copy itself."""
    if type(x) is MetaArray:  # no values: immutable as it is
        return x
    arr = np.asarray(x)
    if arr.flags.writeable:
        take = getattr(dev, "buffer", None)
        if take is None:
            arr = arr.copy()
        else:
            snapshot = take(arr.shape, arr.dtype)
            np.copyto(snapshot, arr)
            arr = snapshot
        arr.setflags(write=False)
    return arr


# ---- numerics --------------------------------------------------------------------------------
def ulp_distance(a: Any, b: Any) -> np.ndarray:
    """How many representable floats lie between a and b, elementwise (0 means bit-identical).

    Args:
        a: floats.
        b: floats of the same dtype, a's shape or broadcastable to it.

    Examples:
        >>> import numpy as np
        >>> from simulator import ulp_distance
        >>> ulp_distance(np.array([1.0, 0.1 + 0.2]), np.array([1.0, 0.3]))
        array([0, 1])
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.dtype.kind != "f":
        raise TypeError(f"ulp_distance needs two float arrays of one dtype, got {a.dtype} and {b.dtype}")
    ints = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]

    def ordered(x):  # map floats to integers that count representable values in order
        i = x.view(ints).astype(np.int64)
        return np.where(i < 0, np.iinfo(ints).min - i, i)

    return np.abs(ordered(a) - ordered(b))


def _call(dev: Any, kind: str, group: Any, algorithm: str, op: str | None = None, name=None, partials=None) -> _Call:
    """A collective call on ``dev``, once its algorithm is known to be one of the collective's (``ALGORITHMS``)."""
    table = ALGORITHMS[kind]
    if algorithm not in table:
        raise ValueError(f"{kind}(algorithm={algorithm!r}): choose one of {sorted(table)}")
    return _Call(dev, kind, group, algorithm, op, name, partials)
