"""Moving sharded data inside a run, all of it as messages: distribute, redistribute, assemble.

These are rank-program functions (every device of the mesh calls them, SPMD style) built on the
collectives, so each byte that moves is a message in the trace:

- ``distribute``   one device holds the whole array and sends every other device its piece
- ``assemble``     every piece goes to one device, which puts them together (reducing partial pieces)
- ``redistribute`` from one layout to another, one mesh dimension at a time, over that dimension's
                   process groups:

  ============================  ==========================================
  Shard(i) -> Replicate          all-gather
  Partial -> Replicate           all-reduce
  Partial -> Shard(j)            reduce-scatter
  Shard(i) -> Shard(j)           all-to-all
  Replicate -> Shard(j)          local slice, no message
  Replicate -> Partial           local: keep the value on the group's first device, zeros elsewhere
                                 (for sum; the value everywhere for avg/max/min)
  ============================  ==========================================

When several mesh dimensions shard one tensor dimension, the chunks are nested (see
``sharded.Layout``), so the order of the steps matters, for correctness and for the bytes moved. The
steps are planned as PyTorch's DTensor plans them (``simulator.tensors.redistribute_plan``): slices before the
gathers they make smaller, a reduce-scatter wherever the target shards, a detour through Replicate only
where the nesting would otherwise be wrong. No device sends more bytes than under DTensor, and on
uneven shapes fewer (DTensor pads its all-gathers to equal pieces; the messages here carry exact pieces).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.device import frozen
from .placements import Placement, Replicate, Shard, chunk_bounds
from .redistribute_plan import Step, plan
from .sharded import Layout

DISTRIBUTE_TAG = (1 << 30) - 2  # below the collectives' tags, above any sensible user tag
ASSEMBLE_TAG = (1 << 30) - 1


def distribute(
    dev: Any, x: Any, layout: Layout, src: int = 0, *, name: str | None = None, dtype: Any = None
) -> np.ndarray:
    """Device ``src`` holds ``x``; every device ends with its piece under ``layout`` (one message each).

    For Partial("sum") only the devices that carry the value get a message; the others start from
    zeros of their piece's shape (known from the layout) and of ``dtype``, which they must then be
    told.

    Args:
        dev: this device.
        x: the whole array on ``src``; None (or anything) on the others.
        layout: how the array is to lie over the devices.
        src: the device that holds ``x``.
        name: the reference value ``x`` is (each piece is checked against its part).
        dtype: the pieces' dtype, which devices without ``x`` must be told; when given it is also the receivers'
            declared contract.

    Returns:
        This device's piece.

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh, Layout, S, World, distribute
        >>> lay = Layout((4,), DeviceMesh([0, 1]), (S(0),))
        >>> World(2).run(lambda dev: distribute(dev, np.arange(4.0) if dev.rank == 0 else None, lay)).outputs
        [array([0., 1.]), array([2., 3.])]
    """
    ranks = layout.mesh.ranks.reshape(-1).tolist()
    if src not in ranks:
        raise ValueError(f"distribute: src={src} is not in the mesh {layout.mesh}")
    zeros_here = layout.partial_op == "sum" and not layout.holds_value(dev.rank)
    if dev.rank == src:
        x = frozen(x)  # one read-only copy at most; its pieces are then sent without copying again
        layout._check_shape(x.shape)
        reqs = [
            dev.isend(layout.piece(x, r), r, DISTRIBUTE_TAG, label=f"distribute to {r}")
            for r in ranks
            if r != src and (layout.partial_op != "sum" or layout.holds_value(r))
        ]
        for req in reqs:
            dev.wait(req)
        piece = layout.piece(x, src)
        if name is not None and not zeros_here:
            dev.hold(name, piece, index=layout.region(src))
        return piece
    shape = layout.local_shape(dev.rank)
    if zeros_here:
        if dtype is None:
            raise ValueError(
                f"device {dev.rank} starts a Partial('sum') piece from zeros without a message, so it must know "
                "the dtype: pass distribute(..., dtype=...) on every device"
            )
        return np.zeros(shape, dtype=dtype)
    return dev.recv(
        src,
        DISTRIBUTE_TAG,
        shape=shape,
        dtype=dtype,
        name=name,
        index=layout.region(dev.rank) if name is not None else None,
    )


def assemble(dev: Any, local: Any, layout: Layout, dst: int = 0, *, name: str | None = None) -> np.ndarray | None:
    """Every piece goes to ``dst``, which returns the global array (others return None).

    Only one replica of each replicated piece travels (the first along each Replicate dimension);
    partial pieces all travel and are reduced on ``dst`` (one op, named ``name`` if given).

    Args:
        dev: this device.
        local: this device's piece under ``layout``.
        layout: how the array lies over the devices.
        dst: the device that gets the whole array.
        name: the reference value the array is (the reducing op of partial pieces takes the name).

    Returns:
        The whole array on ``dst``; None on the others.

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh, Layout, S, World, assemble
        >>> lay = Layout((4,), DeviceMesh([0, 1]), (S(0),))
        >>> World(2).run(lambda dev: assemble(dev, np.arange(2.0) + 2 * dev.rank, lay)).outputs
        [array([0., 1., 2., 3.]), None]
    """
    ranks = layout.mesh.ranks.reshape(-1).tolist()
    if dst not in ranks:
        raise ValueError(f"assemble: dst={dst} is not in the mesh {layout.mesh}")
    local = np.asarray(local)
    contributors = [r for r in ranks if layout._first_replica(r)]
    label_name = name if name is not None and not layout.is_partial() else None
    if dev.rank != dst:
        if dev.rank in contributors:
            dev.wait(dev.isend(local, dst, ASSEMBLE_TAG, label=f"assemble to {dst}"))
        return None
    pieces = {}
    for r in contributors:
        if r == dst:
            pieces[r] = local
        else:
            index = layout.region(r) if label_name is not None else None
            pieces[r] = dev.recv(
                r, ASSEMBLE_TAG, shape=layout.local_shape(r), dtype=local.dtype, name=label_name, index=index
            )
    whole = layout.assemble(pieces)
    if name is not None:
        return dev.compute(name, lambda: whole, flops=_reduce_flops(layout, len(contributors)))
    return whole


def _reduce_flops(layout: Layout, contributors: int) -> float:
    if not layout.is_partial():
        return 0.0
    per = int(np.prod(layout.local_shape(layout.mesh.ranks.reshape(-1)[0]))) if layout.shape else 1
    return float(per * contributors)


def redistribute(
    dev: Any, local: Any, layout: Layout, placements: Sequence[Placement], *, name: str | None = None
) -> np.ndarray:
    """This device's piece under ``placements``, given its piece under ``layout`` (see module docstring).

    The steps are planned as DTensor plans them (``simulator.tensors.redistribute_plan``), so no device sends more
    bytes than under DTensor.

    Args:
        dev: this device.
        local: this device's piece under ``layout``.
        layout: how the array lies now.
        placements: how it is to lie: one placement per mesh dimension (``[S(0), R]``).
        name: the reference value the array is; messages that carry exact (not partial) pieces are named after
            it, so the checker compares them.

    Returns:
        This device's piece under ``placements``.

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh, Layout, R, S, World, redistribute
        >>> lay = Layout((4,), DeviceMesh([0, 1]), (S(0),))
        >>> World(2).run(lambda dev: redistribute(dev, np.arange(2.0) + 2 * dev.rank, lay, [R])).outputs
        [array([0., 1., 2., 3.]), array([0., 1., 2., 3.])]
    """
    target = layout.with_placements(placements)
    mesh = layout.mesh
    local = np.asarray(local)
    if local.shape != layout.local_shape(dev.rank):
        raise ValueError(
            f"device {dev.rank}: redistribute got a piece of shape {local.shape}, but {layout!r} gives this "
            f"device {layout.local_shape(dev.rank)}"
        )
    cur = list(layout.placements)
    for step in plan(cur, target.placements, mesh.shape):
        local = _STEPS[step.kind](dev, local, layout.with_placements(cur), step, name)
        cur[step.dim] = step.dst
    assert cur == list(target.placements), (cur, target.placements)
    return local


def _gather(dev: Any, local: np.ndarray, lay: Layout, step: Step, name: str | None) -> np.ndarray:
    """Shard(k) -> Replicate over one mesh dimension, the innermost that shards k: an all-gather along k."""
    d, k = step.dim, step.src.dim
    assert not any(isinstance(p, Shard) and p.dim == k for p in lay.placements[d + 1 :]), (lay, step)
    group = lay.mesh.group(d, dev.rank)
    exact = name is not None and not lay.is_partial()
    return dev.all_gather(
        local,
        group,
        axis=k,
        shapes=[lay.local_shape(r) for r in group],
        name=name if exact else None,
        indices=[lay.region(r) for r in group] if exact else None,
        index=lay.with_placements(_set(list(lay.placements), d, Replicate())).region(dev.rank) if exact else None,
    )


def _reduce(dev: Any, local: np.ndarray, lay: Layout, step: Step, name: str | None) -> np.ndarray:
    """Partial -> Replicate over one mesh dimension: an all-reduce."""
    return dev.all_reduce(local, step.src.op, lay.mesh.group(step.dim, dev.rank))


def _reduce_scatter(dev: Any, local: np.ndarray, lay: Layout, step: Step, name: str | None) -> np.ndarray:
    """Partial -> Shard(k): a reduce-scatter along k; this mesh dimension becomes k's innermost splitter."""
    return dev.reduce_scatter(local, step.src.op, lay.mesh.group(step.dim, dev.rank), axis=step.dst.dim)


def _slice(dev: Any, local: np.ndarray, lay: Layout, step: Step, name: str | None) -> np.ndarray:
    """Replicate -> Shard(k): this device's chunk of its piece along k, no message."""
    coord, p, k = lay.mesh.coordinate(dev.rank)[step.dim], lay.mesh.shape[step.dim], step.dst.dim
    bounds = chunk_bounds(local.shape[k], p)
    sl = [slice(None)] * local.ndim
    sl[k] = slice(bounds[coord], bounds[coord + 1])
    return local[tuple(sl)]


def _partition(dev: Any, local: np.ndarray, lay: Layout, step: Step, name: str | None) -> np.ndarray:
    """Replicate -> Partial: for a sum, the value stays on the group's first device, zeros elsewhere."""
    if step.dst.op == "sum" and lay.mesh.coordinate(dev.rank)[step.dim] != 0:
        return np.zeros_like(local)
    return local


def _to_shard(dev: Any, local: np.ndarray, lay: Layout, step: Step, name: str | None) -> np.ndarray:
    """Shard(i) -> Shard(j): an all-to-all over the mesh dimension's group."""
    return _all_to_all_step(dev, local, lay, lay.mesh.group(step.dim, dev.rank), step.src.dim, step.dst.dim)


_STEPS = {
    "all_gather": _gather,
    "all_reduce": _reduce,
    "reduce_scatter": _reduce_scatter,
    "slice": _slice,
    "partition": _partition,
    "all_to_all": _to_shard,
}


def _set(placements: list, d: int, value: Placement) -> list:
    out = list(placements)
    out[d] = value
    return out


def _all_to_all_step(dev: Any, local: np.ndarray, lay: Layout, group: tuple, k: int, j: int) -> np.ndarray:
    """Shard(k) -> Shard(j) along one mesh dimension: member m gets every member's chunk m along j."""
    p = len(group)
    me = group.index(dev.rank)
    bounds = chunk_bounds(local.shape[j], p)

    def along(arr_dim: int, lo: int, hi: int) -> tuple:
        sl = [slice(None)] * local.ndim
        sl[arr_dim] = slice(lo, hi)
        return tuple(sl)

    chunks = [local[along(j, bounds[m], bounds[m + 1])] for m in range(p)]
    shapes = []
    for r in group:
        s = list(local.shape)
        s[k] = lay.local_shape(r)[k]
        s[j] = bounds[me + 1] - bounds[me]
        shapes.append(tuple(s))
    got = dev.all_to_all(chunks, group, shapes=shapes)
    return np.concatenate(got, axis=k)
