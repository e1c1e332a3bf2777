"""Tensors as the simulator sees them: NumPy copies, and which part of the model's value a rank's tensor is.

- ``to_numpy`` / ``write_into``: a tensor's values as a NumPy array (what a message or a trace keeps), and
  a NumPy result written back into the tensor a torch call fills in.
- ``placement_of``: a DTensor's local piece as the checker names it: ``index`` (which block of the global
  value: its ``Shard`` placements) and ``partial`` (the ranks whose terms add up to it: its ``Partial``
  placements). Exact, from the DTensor's own mesh and placements.
- ``LocalPart``: the part a plain tensor is, known by its shape alone: the model's value where the shapes
  agree, else the block a rank holds along the one axis where they differ, split the ``torch.chunk`` way
  among ``p`` ranks (p = how many such blocks make the axis), rank r holding block ``r % p`` (the rank's
  place in a tensor-parallel group whose ranks are consecutive). A p that divides the world size is
  preferred (a group of ranks is a part of the world: 3 columns on 2 ranks are blocks of 2 and 1, not 3 of
  1), then an even split (16 rows in blocks of 4 are 4 blocks, not 3 with a short last one). The whole
  shape is known only once the checker compares with the single-device run, so the index is a function of
  the whole value.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..tensors.placements import chunk_bounds

_NUMPY_DTYPES = {torch.bfloat16: "bfloat16 has no NumPy dtype", torch.float8_e4m3fn: "float8 has no NumPy dtype"}


def plain(t: torch.Tensor) -> torch.Tensor:
    """The tensor's own values: an async collective's result waited for, a DTensor's local piece."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    if isinstance(t, AsyncCollectiveTensor):
        t = t.wait()
    if isinstance(t, DTensor):
        t = t._local_tensor
        if isinstance(t, AsyncCollectiveTensor):
            t = t.wait()
    return t


def to_numpy(t: torch.Tensor, rank: int, where: str) -> np.ndarray:
    """A read-only NumPy copy of the tensor's values (a DTensor's local piece)."""
    t = plain(t)
    if t.dtype in _NUMPY_DTYPES:
        raise TypeError(
            f"rank {rank}: {where} got a {t.dtype} tensor, and {_NUMPY_DTYPES[t.dtype]}: the simulator keeps values "
            "as NumPy arrays. Use float32 (or float16) on simulated ranks"
        )
    with torch.no_grad():
        # .numpy() makes the tensor's storage unresizable, which FSDP2 frees and reallocates: read through a copy
        arr = t.detach().resolve_conj().resolve_neg().cpu().clone().numpy()
    arr.setflags(write=False)
    return arr


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype (float32 -> float32)."""
    return torch.empty(0, dtype=dtype).numpy().dtype


def write_into(t: torch.Tensor, value: Any) -> None:
    """Write a result into the tensor a torch call fills in (hidden from autograd, as every backend does)."""
    with torch.no_grad():
        src = torch.from_numpy(np.array(value, dtype=np.asarray(value).dtype, copy=True)).reshape(t.shape)
        t.detach().copy_(src.to(t.dtype))


def placement_of(spec: Any) -> tuple[Any, tuple[int, ...] | None, str | None]:
    """(index, partial group, reduce op) of this rank's piece of a DTensor with ``spec`` (its ``_spec``).

    index: the block of the global value (None: all of it); partial group: the global ranks whose pieces add up
    to that block (None: it is complete); reduce op: "sum" or "avg" for a partial, else None. A piece the checker
    cannot compare (a partial max or min) gives reduce op "max" / "min" and the caller skips it."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    mesh, placements = spec.mesh, spec.placements
    coordinate = mesh.get_coordinate()
    local, offset = compute_local_shape_and_global_offset(spec.shape, mesh, placements)
    shape = tuple(spec.shape)
    index = None
    if tuple(local) != shape:
        index = tuple(slice(None) if s == n else slice(o, o + s) for o, s, n in zip(offset, local, shape))
    partial_dims = [d for d, p in enumerate(placements) if p.is_partial()]
    if not partial_dims or coordinate is None:
        return index, None, None
    ops = {getattr(placements[d], "reduce_op", "sum") for d in partial_dims}
    op = ops.pop() if len(ops) == 1 else "mixed"
    ranks = mesh.mesh
    select = tuple(slice(None) if d in partial_dims else coordinate[d] for d in range(ranks.ndim))
    group = tuple(sorted(int(r) for r in ranks[select].flatten().tolist()))
    return index, group, op


def _chunk(n: int, p: int, at: int) -> tuple[int, bool]:
    """The size of chunk ``at`` of n elements split into p the torch.chunk way, and whether p splits them evenly."""
    bounds = chunk_bounds(n, p)
    return bounds[at + 1] - bounds[at], n % p == 0


# Which axis of a tensor a mesh dim of each name splits, where several axes are split by groups of one size:
# the batch by data-parallel dims, the sequence by context- and sequence-parallel ones, features by tensor-parallel.
_AXIS_OF_DIM = {
    **dict.fromkeys(("dp", "ddp", "fsdp", "hsdp", "dp_replicate", "dp_shard", "dp_shard_cp", "batch", "data"), 0),
    **dict.fromkeys(("cp", "sp", "seq", "context", "sequence"), 1),
    **dict.fromkeys(("tp", "model", "tensor", "mp"), -1),
}
# A pipeline dim splits the model's layers, never a tensor: its stages hold different modules.
_STAGE_DIMS = frozenset(("pp", "pipeline", "stage"))


@dataclass(frozen=True)
class LocalPart:
    """The part of the model's value a plain tensor of ``shape`` on ``rank`` holds (see the module docstring)."""

    shape: tuple[int, ...]
    rank: int
    world: int = 0  # ranks in the run (0: not known)
    # (group size, the rank's place in it) for each size of which the rank is in exactly one group (its own
    # new_group): a block of p is the rank's place in its group of p, e.g. groups (0, 2) and (1, 3); else rank % p
    places: tuple[tuple[int, int], ...] = ()
    # (size, place, mesh dim name or "") of every group the rank is in, in the order they were made: a tensor
    # split along several axes (a 2-D or 3-D mesh) has each axis split by a group of its own
    groups: tuple[tuple[int, int, str], ...] = ()

    def resolve(self, whole: tuple[int, ...]) -> tuple[slice, ...] | None:
        """The block as an index into a value of shape ``whole`` (None: the whole value, or no block fits)."""
        whole = tuple(whole)
        if whole == self.shape or len(whole) != len(self.shape):
            return None
        differ = [a for a, (w, s) in enumerate(zip(whole, self.shape)) if w != s]
        if len(differ) > 1:
            return self._mesh_block(whole, differ)
        axis = differ[0]
        n, m = whole[axis], self.shape[axis]
        fits: list[int] = []
        place = dict(self.places)
        for p in {g[0] for g in self.groups}:  # a size of several groups (a mesh's dims): the one named for this axis
            named = [g[1] for g in self.groups if g[0] == p and _AXIS_OF_DIM.get(g[2]) in (axis, axis - len(whole))]
            if p not in place and len(named) == 1:
                place[p] = named[0]
        for allowed in ([p for p in range(2, n + 1) if self.world % p == 0], range(2, n + 1)):
            fits = [p for p in allowed if m > 0 and _chunk(n, p, place.get(p, self.rank % p)) == (m, True)]
            fits = fits or [p for p in allowed if m > 0 and _chunk(n, p, place.get(p, self.rank % p))[0] == m]
            if fits:
                break
        if not fits:
            return None
        bounds, at = chunk_bounds(n, fits[0]), place.get(fits[0], self.rank % fits[0])
        return (slice(None),) * axis + (slice(bounds[at], bounds[at + 1]),)

    def _mesh_block(self, whole: tuple[int, ...], axes: list[int]) -> tuple[slice, ...] | None:
        """A block split along several axes, each by one of the rank's groups (mesh dims): the groups whose sizes
        split the axes evenly, matched one to one, by the axis a dim's name says it splits, then in mesh order."""
        sizes = []
        for a in axes:
            n, m = whole[a], self.shape[a]
            if m == 0 or n % m:
                return None
            sizes.append(n // m)
        best: tuple[int, tuple[int, ...]] | None = None
        splitting = [g for g, group in enumerate(self.groups) if group[2] not in _STAGE_DIMS]
        for choice in itertools.permutations(splitting, len(axes)):
            if any(self.groups[g][0] != p for g, p in zip(choice, sizes)):
                continue
            named = sum(_AXIS_OF_DIM.get(self.groups[g][2]) in (a, a - len(whole)) for g, a in zip(choice, axes))
            if best is None or named > best[0]:  # ties: the first in mesh order (outer dims on lower axes)
                best = (named, choice)
        if best is None:
            return None
        index = [slice(None)] * len(whole)
        for g, a in zip(best[1], axes):
            m = self.shape[a]
            index[a] = slice(self.groups[g][1] * m, (self.groups[g][1] + 1) * m)
        return tuple(index)

    def __call__(self, value: Any) -> Any:
        index = self.resolve(np.shape(value))
        return value if index is None else np.asarray(value)[index]

    def describe(self) -> str:
        return f"rank {self.rank}'s block, by its shape {self.shape}"

    def mesh_dims(self) -> tuple[str, ...]:
        """The names of the mesh dims the rank is on (for words about a block picked by the wrong one)."""
        return tuple(g[2] for g in self.groups if g[2])


@dataclass(frozen=True)
class Nested:
    """A DTensor's local piece whose DTensor is itself a block of the model's value (a tensor-parallel layer on
    one dim of a 2-D mesh, fed its data-parallel rows): ``inner`` (the piece's block of the DTensor's global
    shape ``shape``, None: all of it) within ``outer``, the block of the model's value that DTensor is."""

    inner: tuple[slice, ...] | None
    shape: tuple[int, ...]
    outer: LocalPart
    mesh: tuple[str, ...] = ()  # the names of the DTensor's mesh dims

    def resolve(self, whole: tuple[int, ...]) -> tuple[slice, ...] | None:
        whole = tuple(whole)
        if whole == self.shape:
            return self.inner
        outer = self.outer.resolve(whole)
        if outer is None:
            return None
        if self.inner is None:
            return outer
        outer = tuple(outer) + (slice(None),) * (len(whole) - len(outer))
        inner = tuple(self.inner) + (slice(None),) * (len(whole) - len(self.inner))
        return tuple(_within(o, i, n) for o, i, n in zip(outer, inner, self.shape))

    def __call__(self, value: Any) -> Any:
        index = self.resolve(np.shape(value))
        if index is None and tuple(np.shape(value)) != self.shape:
            return value  # no block fits: compared whole, and found to differ in shape
        return value if index is None else np.asarray(value)[index]

    def __repr__(self) -> str:  # one block, whichever member of a partial sum holds it: the rank left out
        return f"Nested({self.inner!r}, {self.shape}, {self.outer.shape}, {self.outer.groups})"

    def describe(self) -> str:
        return f"rank {self.outer.rank}'s block, by its DTensor's placements and its mesh"

    def mesh_dims(self) -> tuple[str, ...]:
        return self.mesh + self.outer.mesh_dims()


def _within(outer: slice, inner: slice, n: int) -> slice:
    """The slice ``inner`` of a block ``outer`` of length n, as a slice of the whole."""
    start = outer.start or 0
    a, b, _ = inner.indices(n)
    return slice(start + a, start + b)
