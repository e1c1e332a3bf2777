"""Sharded arrays: a global shape, a mesh, one placement per mesh dimension, and a piece per device.

``Layout`` is the description every rank program shares (as with DTensor's spec): from it any device
can say which block of the global array any rank holds (``region``), its piece's shape, and whether
that piece is a partial value still waiting for a reduction. ``ShardedArray`` adds the pieces
themselves, one per device, e.g. collected from a run's outputs; it is what the sharding table and
picture show.

Splitting follows ``placements.chunk_bounds`` (torch.chunk's rule: trailing chunks may be smaller or
empty). When several mesh dimensions shard one tensor dimension, the first splits it and each next
one splits the chunk again (DTensor's default order).

``Layout.piece`` and ``Layout.assemble`` compute pieces and wholes directly, without messages: they are
the single-device answers that runs are checked against. Inside a run, data moves only by messages
(``simulator.tensors.redistribute``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .mesh import DeviceMesh
from .placements import Partial, Placement, Replicate, Shard, chunk_bounds


@dataclass(frozen=True)
class Layout:
    """How an array of ``shape`` lies over ``mesh``: one placement per mesh dimension.

    Args:
        shape: the whole array's shape.
        mesh: the devices it lies over.
        placements: one placement per mesh dimension: ``S(dim)``, ``R`` or ``P``.

    Examples:
        >>> from simulator import DeviceMesh, Layout, R, S
        >>> lay = Layout((4, 6), DeviceMesh([[0, 1], [2, 3]]), (S(0), S(1)))
        >>> lay.local_shape(3), lay.region(3)
        ((2, 3), (slice(2, 4, None), slice(3, 6, None)))
    """

    shape: tuple[int, ...]
    mesh: DeviceMesh
    placements: tuple[Placement, ...]

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        placements = tuple(self.placements)
        if len(placements) != self.mesh.ndim:
            raise ValueError(
                f"a {self.mesh.ndim}-D mesh needs {self.mesh.ndim} placements (one per mesh dimension), "
                f"got {len(placements)}: {placements}"
            )
        fixed = []
        for d, pl in enumerate(placements):
            if not isinstance(pl, (Shard, Replicate, Partial)):
                raise TypeError(f"placement {pl!r} for mesh dim {d} is not Shard, Replicate or Partial")
            if isinstance(pl, Shard):
                if not -len(shape) <= pl.dim < len(shape):
                    raise ValueError(
                        f"Shard({pl.dim}) on mesh dim {d}: an array of shape {shape} has no dimension {pl.dim}"
                    )
                pl = Shard(pl.dim % len(shape))
            fixed.append(pl)
        ops = {pl.op for pl in fixed if isinstance(pl, Partial)}
        if len(ops) > 1:
            raise ValueError(
                f"placements {tuple(fixed)} mix partial reductions {sorted(ops)}; the order of reductions would be "
                "ambiguous. Reduce one of them first (redistribute it to Replicate)."
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "placements", tuple(fixed))

    # ---- where each piece lies --------------------------------------------------------------
    def region(self, rank: int) -> tuple[slice, ...]:
        """The block of the global array that ``rank``'s piece covers (a partial piece covers it partially)."""
        coord = self.mesh.coordinate(rank)
        bounds = [[0, n] for n in self.shape]
        for d, pl in enumerate(self.placements):
            if isinstance(pl, Shard):
                lo, hi = bounds[pl.dim]
                b = chunk_bounds(hi - lo, self.mesh.shape[d])
                bounds[pl.dim] = [lo + b[coord[d]], lo + b[coord[d] + 1]]
        return tuple(slice(lo, hi) for lo, hi in bounds)

    def local_shape(self, rank: int) -> tuple[int, ...]:
        return tuple(s.stop - s.start for s in self.region(rank))

    @property
    def partial_op(self) -> str | None:
        """The pending reduction ("sum", ...) or None when no mesh dimension is Partial."""
        for pl in self.placements:
            if isinstance(pl, Partial):
                return pl.op
        return None

    def is_partial(self) -> bool:
        return self.partial_op is not None

    def holds_value(self, rank: int) -> bool:
        """For Partial("sum"): whether this rank carries the value (others carry zeros)."""
        coord = self.mesh.coordinate(rank)
        return all(coord[d] == 0 for d, pl in enumerate(self.placements) if isinstance(pl, Partial))

    def with_placements(self, placements: Sequence[Placement]) -> Layout:
        return Layout(self.shape, self.mesh, tuple(placements))

    def describe(self, rank: int) -> str:
        """In words: e.g. 'rows 0:2, cols 4:8 (partial sum)'."""
        names = ("rows", "cols") if len(self.shape) == 2 else tuple(f"dim {i}" for i in range(len(self.shape)))
        parts = [
            f"{names[i] if i < len(names) else f'dim {i}'} {s.start}:{s.stop}" for i, s in enumerate(self.region(rank))
        ]
        text = ", ".join(parts) if parts else "the scalar"
        if self.is_partial():
            text += f" (partial {self.partial_op}, reduction pending)"
        return text

    def __repr__(self) -> str:
        return f"Layout(shape={self.shape}, placements={list(self.placements)}, mesh={self.mesh.shape})"

    # ---- single-device answers --------------------------------------------------------------
    def piece(self, x: Any, rank: int) -> np.ndarray:
        """What ``rank`` holds when the array ``x`` is laid out like this (see Partial for the rule)."""
        x = np.asarray(x)
        self._check_shape(x.shape)
        block = x[self.region(rank)]
        if self.partial_op == "sum" and not self.holds_value(rank):
            return np.zeros_like(block)
        return block

    def assemble(self, pieces: Sequence[Any] | Mapping[int, Any]) -> np.ndarray:
        """The global array from every device's piece (partial pieces reduced, replicas read once)."""
        get = pieces.__getitem__
        ranks = self.mesh.ranks.reshape(-1).tolist()
        contributors = [r for r in ranks if self._first_replica(r)]
        first = np.asarray(get(contributors[0]))
        out = np.zeros(self.shape, dtype=first.dtype)
        done: dict[tuple, np.ndarray] = {}
        count: dict[tuple, int] = {}
        op = self.partial_op
        for r in contributors:
            reg = self.region(r)
            key = tuple((s.start, s.stop) for s in reg)
            piece = np.asarray(get(r))
            if piece.shape != self.local_shape(r):
                raise ValueError(
                    f"device {r}'s piece has shape {piece.shape}, but {self!r} gives it {self.local_shape(r)}"
                )
            if key not in done or op is None:  # (without a reduction a region recurs only when empty)
                done[key], count[key] = piece, 1
            else:
                done[key] = _REDUCE[op](done[key], piece)
                count[key] += 1
        for key, value in done.items():
            if op == "avg":
                value = value / count[key]
            if out.dtype != value.dtype:
                out = out.astype(np.result_type(out, value))
            out[tuple(slice(a, b) for a, b in key)] = value
        return out

    def _first_replica(self, rank: int) -> bool:
        coord = self.mesh.coordinate(rank)
        return all(coord[d] == 0 for d, pl in enumerate(self.placements) if isinstance(pl, Replicate))

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        if tuple(shape) != self.shape:
            raise ValueError(f"this layout is for arrays of shape {self.shape}, got one of shape {tuple(shape)}")


_REDUCE = {"sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum}


@dataclass
class ShardedArray:
    """A layout plus the piece each device holds (``pieces[rank]``).

    Args:
        layout: how the array lies over the devices.
        pieces: each device's piece, by rank.

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh, Layout, S, ShardedArray
        >>> lay = Layout((4,), DeviceMesh([0, 1]), (S(0),))
        >>> x = ShardedArray.from_pieces(lay, [np.arange(2.0), np.arange(2.0) + 2])
        >>> x.local(1), x.full()
        (array([2., 3.]), array([0., 1., 2., 3.]))
    """

    layout: Layout
    pieces: dict[int, np.ndarray]

    @classmethod
    def distribute(cls, x: Any, mesh: DeviceMesh, placements: Sequence[Placement]) -> ShardedArray:
        """The pieces of ``x`` under the given placements, computed directly (no run, no messages)."""
        x = np.asarray(x)
        layout = Layout(x.shape, mesh, tuple(placements))
        return cls(layout, {int(r): layout.piece(x, int(r)) for r in mesh.ranks.reshape(-1)})

    @classmethod
    def from_pieces(cls, layout: Layout, pieces: Sequence[Any] | Mapping[int, Any]) -> ShardedArray:
        """Wrap pieces collected from a run (e.g. ``result.outputs``), checking each one's shape."""
        got = {}
        for r in layout.mesh.ranks.reshape(-1).tolist():
            piece = np.asarray(pieces[r])
            if piece.shape != layout.local_shape(r):
                raise ValueError(
                    f"device {r}'s piece has shape {piece.shape}; {layout!r} gives it {layout.local_shape(r)}"
                )
            got[r] = piece
        return cls(layout, got)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    @property
    def mesh(self) -> DeviceMesh:
        return self.layout.mesh

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self.layout.placements

    def local(self, rank: int) -> np.ndarray:
        """The piece device ``rank`` holds (DTensor's ``to_local`` on that rank)."""
        return self.pieces[rank]

    def full(self) -> np.ndarray:
        """The global array: pieces placed, partial pieces reduced (DTensor's ``full_tensor``)."""
        return self.layout.assemble(self.pieces)

    def __repr__(self) -> str:
        return f"ShardedArray(shape={self.shape}, placements={list(self.placements)}, mesh={self.mesh.shape})"
