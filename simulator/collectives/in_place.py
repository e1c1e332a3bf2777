"""``all_reduce(x, in_place=True)``: the result goes into x's own memory, as torch.distributed.all_reduce does.

The simulator's values are read-only and a collective returns a new array, so a real rank that must
leave x intact copies it before torch reduces in place (for 64 MiB on 2 gloo ranks here, about a
fifth of the all-reduce's time). A program that has no further use for x gives it up instead, as
JAX's buffer donation does: x ends holding the result, made read-only like every value the simulator
hands back, and the call returns it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.payloads import sealed
from ..cost.meta import MetaArray


def in_place_target(x: Any, rank: int) -> np.ndarray | None:
    """x itself, checked to be an array the result can be written into; None for a MetaArray (no values)."""
    if type(x) is MetaArray:
        return None
    where = f"device {rank}: all_reduce(x, in_place=True) writes the result into x's own memory"
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{where}, so x must be a NumPy array, got {type(x).__name__}: keep np.asarray(x) in a variable"
        )
    if not x.flags.writeable:
        raise ValueError(
            f"{where}, but x is read-only (the simulator's values are, and so is an array already reduced in "
            "place): leave in_place out, or reduce an array of your own (buf = x.copy())"
        )
    if not x.flags.c_contiguous:
        raise ValueError(
            f"{where}, but x is not contiguous (a slice or a transpose): keep a contiguous copy and reduce that, "
            "buf = np.ascontiguousarray(x); dev.all_reduce(buf, in_place=True)"
        )
    return x  # (op='avg' on integers is refused by the all-reduce itself, check_avg_dtype)


def write_back(target: np.ndarray | None, result: Any) -> Any:
    """The result, copied into ``target`` (when there is one), which is sealed read-only and returned."""
    if target is None or not isinstance(result, np.ndarray):
        return result
    np.copyto(target, result)
    return sealed(target)
