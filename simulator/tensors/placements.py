"""Placements: how one mesh dimension lays an array out, in PyTorch DTensor's words.

For each dimension of a device mesh, a sharded array has one placement:

- ``Shard(dim)``    the devices along this mesh dimension each hold one chunk of tensor dimension ``dim``
- ``Replicate()``   they all hold the same whole value
- ``Partial(op)``   they each hold a partial value; the array is their reduction (sum, max, min, avg),
                    still pending

Short forms: ``S(0)`` is ``Shard(0)``, ``R`` is ``Replicate()``, ``P`` is ``Partial("sum")``.

The splitting rule (``chunk_bounds``) is torch.chunk's, the one DTensor uses: n elements over p
devices give chunks of c = ceil(n / p) elements; device i holds [min(i c, n), min((i + 1) c, n)).
So every chunk has c elements except the trailing ones, which may be smaller or empty. Example:
5 rows over 4 devices -> 2, 2, 1, 0 rows. Nothing is refused for sizes that do not divide evenly.

``FlatSlice`` names a chunk of the flattened array (an all-reduce's or ZeRO's chunk), as ``index=`` does
for the checker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

REDUCE_OPS = ("sum", "avg", "max", "min")


@dataclass(frozen=True)
class Shard:
    """The devices along a mesh dimension each hold one chunk of tensor dimension ``dim``.

    Chunk i of p covers [min(i c, n), min((i + 1) c, n)) with c = ceil(n / p) (torch.chunk's rule;
    trailing chunks may be smaller or empty). A tensor dimension sharded by several mesh dimensions is
    split by the first of them, then each chunk is split again by the next, in mesh-dimension order.

    Args:
        dim: the array's dimension that is split.

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh, Layout, S, Shard
        >>> S is Shard
        True
        >>> Layout((4, 2), DeviceMesh([0, 1]), (S(0),)).piece(np.arange(8).reshape(4, 2), 1)
        array([[4, 5],
               [6, 7]])
    """

    dim: int

    def __post_init__(self) -> None:
        if not isinstance(self.dim, int) or isinstance(self.dim, bool):
            raise TypeError(f"Shard(dim={self.dim!r}): dim must be an int (the tensor dimension to split)")

    def __repr__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True)
class Replicate:
    """The devices along a mesh dimension each hold the same, whole value.

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh, Layout, R, Replicate
        >>> R == Replicate()
        True
        >>> Layout((2,), DeviceMesh([0, 1]), (R,)).piece(np.arange(2.0), 1)
        array([0., 1.])
    """

    def __repr__(self) -> str:
        return "R"


@dataclass(frozen=True)
class Partial:
    """The devices along a mesh dimension each hold a partial value; the array is their reduction.

    Turning a replicated value into a partial one keeps it whole on the first device of each group and puts
    zeros on the others for "sum" (exact, also for integers; DTensor divides by p instead), and
    keeps the value everywhere for "avg", "max" and "min".

    Args:
        op: "sum" (the array is the sum of the pieces), "avg" (their mean), "max" or "min".

    Examples:
        >>> import numpy as np
        >>> from simulator import DeviceMesh, Layout, P, Partial
        >>> P == Partial("sum")
        True
        >>> lay = Layout((2,), DeviceMesh([0, 1]), (P,))
        >>> lay.piece(np.arange(2.0), 0), lay.piece(np.arange(2.0), 1)
        (array([0., 1.]), array([0., 0.]))
    """

    op: str = "sum"

    def __post_init__(self) -> None:
        if self.op not in REDUCE_OPS:
            raise ValueError(f"Partial(op={self.op!r}): choose one of {REDUCE_OPS}")

    def __repr__(self) -> str:
        return "P" if self.op == "sum" else f"P({self.op})"


Placement = Shard | Replicate | Partial

S = Shard
"""Short for ``Shard``, as DTensor's tables write it: ``S(0)`` is ``Shard(0)``."""
R = Replicate()
"""Short for ``Replicate()``."""
P = Partial()
"""Short for ``Partial("sum")``."""


def chunk_bounds(n: int, parts: int) -> list[int]:
    """The ``parts + 1`` boundaries that split n elements the torch.chunk way (see module docstring)."""
    if parts < 1:
        raise ValueError(f"cannot split {n} elements into {parts} parts; parts must be >= 1")
    c = -(-n // parts)  # ceil(n / parts)
    return [min(i * c, n) for i in range(parts + 1)]


def chunk_sizes(n: int, parts: int) -> list[int]:
    """How many elements each of ``parts`` chunks of n elements gets (torch.chunk's rule)."""
    b = chunk_bounds(n, parts)
    return [b[i + 1] - b[i] for i in range(parts)]


@dataclass(frozen=True)
class FlatSlice:
    """An index into the flattened value: ``value.reshape(-1)[start:stop]`` (a chunk of an all-reduce).

    Args:
        start: the first element, in the flattened array.
        stop: one past the last.

    Examples:
        >>> import numpy as np
        >>> from simulator import FlatSlice
        >>> x = np.arange(6).reshape(2, 3)
        >>> chunk = FlatSlice(1, 4)
        >>> chunk(x), chunk.describe()
        (array([1, 2, 3]), 'elements 1-3 (flattened)')
    """

    start: int
    stop: int

    def __call__(self, value: Any) -> np.ndarray:
        return np.asarray(value).reshape(-1)[self.start : self.stop]

    def __repr__(self) -> str:
        return f"flat[{self.start}:{self.stop}]"

    def describe(self) -> str:
        """In words, as the text views show it: ``elements 6-11 (flattened)``."""
        if self.stop - self.start == 1:
            return f"element {self.start} (flattened)"
        if self.stop <= self.start:
            return f"no elements (an empty chunk at {self.start}, flattened)"
        return f"elements {self.start}-{self.stop - 1} (flattened)"
