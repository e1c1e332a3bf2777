"""How a collective cuts a value into chunks and bundles several blocks into one message.

A chunk's reference index is a ``FlatSlice`` (``simulator.tensors.placements``); ``_flat_setup`` cuts by
torch.chunk's rule (``placements.chunk_bounds``), each block a view made when asked (``FlatBlocks``);
``_pack``/``_unpack`` carry several blocks in one message (the halving_doubling algorithms send half a group's blocks at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ..tensors.placements import chunk_bounds


@lru_cache(maxsize=256)
def _bounds(n: int, parts: int) -> tuple[int, ...]:
    """``chunk_bounds`` as a tuple, worked out once for every member of a group (a pure function's memo)."""
    return tuple(chunk_bounds(n, parts))


@lru_cache(maxsize=256)
def _flat_shapes(n: int, parts: int) -> tuple[tuple[int], ...]:
    """The shapes of the ``parts`` flat blocks of n elements, shared by every member of a group."""
    b = _bounds(n, parts)
    return tuple((b[j + 1] - b[j],) for j in range(parts))


class FlatBlocks(Sequence):
    """A value's blocks by torch.chunk's rule, flattened: block j is a view made when asked. Over a ring of p
    members, p views each would be p² objects alive at once (a ring of 1,024 members: a million), though a
    member works on one block a step."""

    __slots__ = ("flat", "bounds")

    def __init__(self, x: Any, parts: int) -> None:
        self.flat = x.reshape(-1)
        self.bounds = _bounds(self.flat.size, parts)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, j: int) -> Any:  # (an IndexError past the last block ends iteration)
        b = self.bounds
        return self.flat[b[j] : b[j + 1]]

    def shapes(self) -> tuple[tuple[int], ...]:
        return _flat_shapes(self.flat.size, len(self))


def _flat_setup(x: np.ndarray, parts: int) -> tuple[FlatBlocks, tuple[int, ...]]:
    blocks = FlatBlocks(x, parts)
    return blocks, blocks.bounds


def _assemble(dev: Any, blocks: Sequence[Any], shape: tuple[int, ...], dtype: Any) -> Any:
    """A flat all-reduce's blocks in order as one array of ``shape``. A real rank (``dev.buffer``) writes them
    into a reused buffer: fresh memory for a large result costs more to fault in than the copy itself."""
    take = getattr(dev, "buffer", None)
    if take is None:
        return np.concatenate(blocks).reshape(shape)
    out = take(shape, dtype)
    np.concatenate([np.ravel(b) for b in blocks], out=out.reshape(-1))
    return out


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
