"""A rank program made of data: a list of steps that every rank interprets, for comparing backends.

    steps = [("p2p", 0, 2, 5, (3,), "int64", "right", False), ("all_reduce", (0, 2), (4,), "int64", "sum")]
    World(3).run(scripted, steps)  and  TorchWorld(3).run(scripted, steps)  must agree

Every rank walks the same steps in the same order; a step names who takes part, and the others skip
it. So a script is deadlock-free by construction (each step's participants reach it after finishing
every earlier step), and a property test can draw scripts at random. Values are integers (in int64
or float64), so every sum is exact whatever order a backend adds in, and a real run must equal the
simulation bit for bit. Each rank returns the list of its steps' results (None where it only sends
or skips).

Steps (``group``: None for every rank, or a tuple of distinct ranks in any order):

    ("p2p", src, dst, tag, shape, dtype, declare, nonblocking)   declare: "none", "right" or "wrong"
                                                                 (a wrong contract: ContractError)
    ("raise", rank)                                              that rank raises ValueError
    ("all_reduce", group, shape, dtype, op)                      op: "sum", "max", "min", "avg"
    ("all_gather", group, shape, dtype)
    ("broadcast", group, src, shape, dtype)
    ("reduce_scatter", group, rows, dtype, op)                   an array of ``rows`` x 2, split by rows
    ("all_to_all", group, shape, dtype)
    ("barrier", group)

Kept in the package (not in a test) because real rank processes import the program by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def scripted(dev: Any, steps: Sequence[tuple]) -> list[Any]:
    """Run the ``steps`` on this rank (see the module docstring); returns one result per step."""
    return [STEPS[step[0]](dev, i, *step[1:]) for i, step in enumerate(steps)]


def value(step: int, who: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The integer-valued array a rank contributes to a step: distinct per step and per contributor."""
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n) + 100 * step + 10 * who).reshape(shape).astype(dtype)


def _members(dev: Any, group: Sequence[int] | None) -> Sequence[int]:
    return range(dev.world_size) if group is None else group


def _p2p(dev, i, src, dst, tag, shape, dtype, declare, nonblocking) -> Any:
    if dev.rank == src:
        x = value(i, src, shape, dtype)
        if nonblocking:
            dev.wait(dev.isend(x, dst, tag))
        else:
            dev.send(x, dst, tag)
        return None
    if dev.rank != dst:
        return None
    contract = {}
    if declare != "none":
        contract = {"shape": shape if declare == "right" else (*shape, 1), "dtype": dtype}
    if nonblocking:
        return dev.wait(dev.irecv(src, tag, **contract))
    return dev.recv(src, tag, **contract)


def _raise(dev, i, rank) -> None:
    if dev.rank == rank:
        raise ValueError(f"step {i}: device {rank} gives up")


def _all_reduce(dev, i, group, shape, dtype, op) -> Any:
    if dev.rank not in _members(dev, group):
        return None
    return dev.all_reduce(value(i, dev.rank, shape, dtype), op=op, group=group)


def _all_gather(dev, i, group, shape, dtype) -> Any:
    if dev.rank not in _members(dev, group):
        return None
    return dev.all_gather(value(i, dev.rank, shape, dtype), group=group)


def _broadcast(dev, i, group, src, shape, dtype) -> Any:
    if dev.rank not in _members(dev, group):
        return None
    return dev.broadcast(value(i, src, shape, dtype) if dev.rank == src else None, src, group=group)


def _reduce_scatter(dev, i, group, rows, dtype, op) -> Any:
    if dev.rank not in _members(dev, group):
        return None
    return dev.reduce_scatter(value(i, dev.rank, (rows, 2), dtype), op=op, group=group)


def _all_to_all(dev, i, group, shape, dtype) -> Any:
    members = _members(dev, group)
    if dev.rank not in members:
        return None
    return dev.all_to_all([value(i, 10 * dev.rank + j, shape, dtype) for j in members], group=group)


def _barrier(dev, i, group) -> None:
    if dev.rank in _members(dev, group):
        dev.barrier(group=group)


STEPS = {
    "p2p": _p2p,
    "raise": _raise,
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "broadcast": _broadcast,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "barrier": _barrier,
}
