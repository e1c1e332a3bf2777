"""DeviceMesh: an n-D grid of ranks, and the process groups along each of its dimensions.

``DeviceMesh(np.arange(8).reshape(2, 2, 2), ("dp", "pp", "tp"))`` arranges 8 devices as a cube. A
process group along a dimension is the ranks that differ only in that coordinate: with the cube
above, rank 5 sits at (1, 0, 1) and its "tp" group is (4, 5), its "dp" group (1, 5). A group is a
plain tuple of ranks in mesh order; collectives take it as ``group=`` (None means every device).

The mesh is an immutable description shared by all rank programs (as in SPMD code every rank knows
the whole mesh); it holds no state of any run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Group = tuple[int, ...]


class DeviceMesh:
    """An n-D grid of distinct ranks with optional dimension names (torch's ``DeviceMesh`` vocabulary).

    Args:
        ranks: the ranks in their grid: a nested list or an array (``np.arange(8).reshape(2, 2, 2)``).
        dim_names: a name per dimension (``("dp", "tp")``), to ask by name (``mesh.size("tp")``) and for the views.

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh
        >>> mesh = DeviceMesh(np.arange(4).reshape(2, 2), dim_names=("dp", "tp"))
        >>> mesh.shape, mesh.size()
        ((2, 2), 4)
    """

    def __init__(self, ranks: Any, dim_names: Sequence[str] | None = None) -> None:
        arr = np.array(ranks)
        if arr.ndim == 0 or arr.size == 0:
            raise ValueError(f"DeviceMesh needs a non-empty array of ranks, got {ranks!r}")
        if arr.dtype.kind not in "iu":
            raise TypeError(f"DeviceMesh ranks must be integers, got dtype {arr.dtype}")
        flat = arr.reshape(-1).tolist()
        if len(set(flat)) != len(flat) or min(flat) < 0:
            raise ValueError(f"DeviceMesh ranks must be distinct and >= 0, got {flat}")
        if dim_names is not None:
            dim_names = tuple(dim_names)
            if len(dim_names) != arr.ndim or len(set(dim_names)) != arr.ndim:
                raise ValueError(f"DeviceMesh of {arr.ndim} dims needs {arr.ndim} distinct dim_names, got {dim_names}")
        arr.setflags(write=False)
        self._ranks = arr
        self.dim_names: tuple[str, ...] | None = dim_names
        self._coords = {r: tuple(int(i) for i in c) for c, r in np.ndenumerate(arr)}

    @classmethod
    def grid(cls, shape: int | Sequence[int], dim_names: Sequence[str] | None = None) -> DeviceMesh:
        """Ranks 0..n-1 in row-major order over ``shape`` (like torch's ``init_device_mesh``)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return cls(np.arange(int(np.prod(shape))).reshape(shape), dim_names)

    # ---- shape ------------------------------------------------------------------------------
    @property
    def ranks(self) -> np.ndarray:
        """The grid of ranks (read-only)."""
        return self._ranks

    @property
    def shape(self) -> tuple[int, ...]:
        return self._ranks.shape

    @property
    def ndim(self) -> int:
        return self._ranks.ndim

    def size(self, dim: int | str | None = None) -> int:
        """Number of devices in the mesh, or along one dimension."""
        return self._ranks.size if dim is None else self.shape[self.dim_index(dim)]

    def dim_index(self, dim: int | str) -> int:
        """The position of a dimension given by index or name."""
        if isinstance(dim, str):
            if self.dim_names is None or dim not in self.dim_names:
                raise KeyError(f"this mesh has no dimension named {dim!r}; its names are {self.dim_names}")
            return self.dim_names.index(dim)
        if not -self.ndim <= dim < self.ndim:
            raise IndexError(f"mesh dimension {dim} out of range for a {self.ndim}-D mesh")
        return dim % self.ndim

    # ---- ranks and groups -------------------------------------------------------------------
    def __contains__(self, rank: object) -> bool:
        return rank in self._coords

    def coordinate(self, rank: int) -> tuple[int, ...]:
        """Where ``rank`` sits in the grid."""
        if rank not in self._coords:
            raise ValueError(f"rank {rank} is not in this mesh; its ranks are {sorted(self._coords)}")
        return self._coords[rank]

    def rank_at(self, coordinate: Sequence[int]) -> int:
        return int(self._ranks[tuple(coordinate)])

    def group(self, dim: int | str, rank: int) -> Group:
        """The process group of ``rank`` along ``dim``: the ranks that differ from it only there."""
        d = self.dim_index(dim)
        c = list(self.coordinate(rank))
        c[d] = slice(None)
        return tuple(int(r) for r in self._ranks[tuple(c)])

    get_group = group  # torch's name

    def groups(self, dim: int | str) -> list[Group]:
        """Every process group along ``dim``, in order of their first rank's position."""
        d = self.dim_index(dim)
        moved = np.moveaxis(self._ranks, d, -1).reshape(-1, self.shape[d])
        return [tuple(int(r) for r in row) for row in moved]

    # ---- identity ---------------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.shape, tuple(self._ranks.reshape(-1).tolist()), self.dim_names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceMesh) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        names = f", dim_names={self.dim_names}" if self.dim_names else ""
        return f"DeviceMesh({self._ranks.tolist()}{names})"
