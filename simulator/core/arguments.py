"""What each device is given: its own copy of every argument, or only its own part (``PerDevice``).

Real rank processes each unpickle their own copy of a program's arguments: an in-place write on one rank
is seen by no other rank, nor by the caller. A simulated device gets the same, so that nothing crosses
between devices except as a message and a program gives the same result on both backends:

- every NumPy array among the arguments (also inside lists, tuples and dicts) is copied for each device,
  writable, as a real rank's is; an array nobody can write (read-only over read-only memory, as ``hold``,
  ``compute`` and ``recv`` hand out) is shared, as copying it would change nothing;
- other objects (functions, models, schedules, numbers) are passed as they are: they are the program's
  code and settings, not its data. Keep data a program writes into in arrays.

``PerDevice(parts)`` gives each device only its own part of an input, as a launcher hands each rank its
shard: ``World(4).run(program, PerDevice([x0, x1, x2, x3]))`` calls ``program(dev, x_r)`` on device r. A
rank that a mapping leaves out gets None (it is given nothing). The torch backend resolves it the same way
on each rank (``simulator.real.worker``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class PerDevice:
    """One argument that differs by device: device r is given ``parts[r]`` (its shard, its replica's batch).

    Each device's part is its own copy, as every argument is.

    Args:
        parts: a sequence indexed by rank, a mapping rank -> part (ranks left out get None), or a function of
            the rank.

    Examples:
        >>> import numpy as np
        >>> from simulator import PerDevice, World
        >>> rows = PerDevice([np.array([1.0, 2.0]), np.array([3.0])])
        >>> World(2).run(lambda dev, x: float(x.sum()), rows).outputs
        [3.0, 3.0]
    """

    parts: Sequence[Any] | Mapping[int, Any] | Callable[[int], Any]

    def part(self, rank: int) -> Any:
        parts = self.parts
        if isinstance(parts, Mapping):
            return parts.get(rank)
        if callable(parts):
            return parts(rank)
        if rank >= len(parts):
            raise ValueError(
                f"PerDevice has {len(parts)} parts, but device {rank} needs one: give one part per device "
                "(or a mapping rank -> part, where a rank left out gets None)"
            )
        return parts[rank]

    def __repr__(self) -> str:
        return f"PerDevice({self.parts!r})"


def check_parts(args: tuple, kwargs: dict, size: int) -> None:
    """Refuse, before any device starts, a ``PerDevice`` with more or fewer parts than devices, or a mapping
    with a rank no device has: a part no device is given would be dropped without a word."""
    for value in (*args, *kwargs.values()):
        parts = value.parts if isinstance(value, PerDevice) else None
        if parts is None or callable(parts):
            continue
        if isinstance(parts, Mapping):
            stray = [
                r for r in parts if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < size
            ]
            if stray:
                raise ValueError(
                    f"PerDevice maps {stray[0]!r} to a part, but the world's ranks are 0..{size - 1}: "
                    "key each part by the rank of the device it is given to"
                )
        elif len(parts) != size:
            raise ValueError(
                f"PerDevice has {len(parts)} parts, but the world has {size} devices: give one part per device "
                "(or a mapping rank -> part, where a rank left out gets None)"
            )


def arguments_for(rank: int, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments device ``rank`` is given: its part of each ``PerDevice``, every array its own copy."""
    return tuple(own_copy(given_part(a, rank)) for a in args), {
        k: own_copy(given_part(v, rank)) for k, v in kwargs.items()
    }


def parts_for(rank: int, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Only the device's parts (no copies): a real rank's arguments are its own copies already (unpickled)."""
    return tuple(given_part(a, rank) for a in args), {k: given_part(v, rank) for k, v in kwargs.items()}


def given_part(value: Any, rank: int) -> Any:
    return value.part(rank) if isinstance(value, PerDevice) else value


def own_copy(value: Any) -> Any:
    """A device's own copy of an argument: arrays copied (unless nobody can write them), containers walked."""
    kind = type(value)
    if isinstance(value, np.ndarray):
        return value if _unwritable(value) else value.copy()
    if kind is dict:
        return {k: own_copy(v) for k, v in value.items()}
    if kind is list:
        return [own_copy(v) for v in value]
    if kind is tuple:
        return tuple(own_copy(v) for v in value)
    if isinstance(value, tuple) and hasattr(value, "_make"):  # a named tuple
        return value._make(own_copy(v) for v in value)
    return value


def _unwritable(value: np.ndarray) -> bool:
    """Read-only all the way down: no view of it can be made writable, so devices may share it."""
    while isinstance(value, np.ndarray):
        if value.flags.writeable:
            return False
        value = value.base
    return value is None or isinstance(value, bytes)
