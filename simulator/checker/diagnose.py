"""Patterns in a wrong value, said in words: the classroom bugs of parallel programs.

Each function takes the value found on a device and the value expected from one device and returns a
sentence, or None when its pattern is not there. All of them compare with ``compare.same``, under the
same tolerance as the check itself, so they hold on standard-normal float data, not only on integers:

- ``scaled``          every element is k times what it should be (a sum not averaged over k replicas,
                      a reduction applied twice, a sign flipped); ``group_sizes``: the sizes of the groups
                      the device sums over (none: no sum is blamed)
- ``reordered``       the right blocks in the wrong order (shards assembled in the wrong order)
- ``rolled``          the value shifted (rotated) along an axis (a shard taken one device off)
- ``wrong_axis``      the right pieces joined along the wrong axis (shapes named)
- ``through_lower_precision``  float64 values that are float32's (or float16's) cast up: work done in lower precision
- ``block_of``        the value is one block of the expected one (an op working on a shard), along one axis or
                      on a grid of blocks (a mesh of several dims)
- ``cast_down``       a value of the model's in a float of lower precision (float32 where the model's is float64),
                      which no name of the model's matches as it is
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .compare import RTOL, close, same

MAX_PARTS = 8  # blocks tried when looking for pieces in the wrong order or joined on the wrong axis
MAX_BLOCKS = 4096  # blocks of a grid tried when a value is split along several axes


INF = float("inf")


def _floats(*arrays: np.ndarray) -> bool:
    return all(a.dtype.kind in "biuf" and a.size > 0 for a in arrays)


def explain(found: Any, expected: Any, group_sizes: Sequence[int] = ()) -> str | None:
    """The first pattern that fits, as a sentence (None if none does)."""
    a, b = np.asarray(found), np.asarray(expected)
    if not _floats(a, b):
        return None
    if a.shape != b.shape:
        return wrong_axis(a, b)
    return scaled(a, b, group_sizes) or reordered(a, b) or rolled(a, b) or through_lower_precision(a, b)


def through_lower_precision(a: np.ndarray, b: np.ndarray) -> str | None:
    """'Every element is a float32 number...' where float64 (or float32) values found are float32's or float16's cast
    up and equal the expected ones within that precision: the work was done in lower precision on the way."""
    if a.dtype != b.dtype or a.dtype not in (np.float64, np.float32) or a.size == 0:
        return None
    for low in (np.float16, np.float32)[: 2 if a.dtype == np.float64 else 1]:
        with np.errstate(over="ignore", invalid="ignore"):  # (values past float16's range become inf: not equal)
            low_a, low_b = a.astype(low), b.astype(low)
        if (
            np.array_equal(low_a.astype(a.dtype), a)
            and not np.array_equal(low_b.astype(b.dtype), b)
            and same(low_a, low_b, RTOL[np.dtype(low).itemsize])
        ):
            return (
                f"Every element is a {np.dtype(low).name} number, within {np.dtype(low).name}'s rounding of what it "
                f"should be: computed in {np.dtype(low).name} and cast back to {a.dtype} somewhere on the way? (The "
                f"model computes in {a.dtype}: a lower precision is a difference in itself.)"
            )
    return None


def scaled(a: np.ndarray, b: np.ndarray, group_sizes: Sequence[int] = ()) -> str | None:
    """'Every element is 4 times what it should be' (k fitted by least squares, then checked)."""
    bb = float(np.vdot(b, b))
    if bb == 0 or a.shape != b.shape:
        return None
    k = float(np.vdot(b, a)) / bb
    if not np.isfinite(k) or k == 0 or same(a, b) or not same(a, k * b):
        return None  # (k = 0: all zeros, where a value never arrived, not a scale)
    if abs(k - round(k)) < 1e-6 * max(1.0, abs(k)) and round(k) >= 2:
        k_int = round(k)
        text = f"Every element is {k_int} times what it should be"
        if k_int in group_sizes:
            return text + (
                f", and {k_int} is the number of devices in the group: summed over the {k_int} devices where an "
                "average was meant, or summed once too often (an all-reduce applied twice)?"
            )
        if group_sizes:  # the device sums over some group: a sum of another size, or twice
            return text + ": a sum taken once too often (a reduction applied twice?) or a value counted twice."
        return text + " (a factor applied twice, or a value counted twice?)."  # no sums here to blame
    inv = 1.0 / k
    if abs(inv - round(inv)) < 1e-6 * max(1.0, abs(inv)) and round(inv) >= 2:
        k_inv = round(inv)
        text = f"Every element is 1/{k_inv} of what it should be"
        if k_inv in group_sizes:
            return text + (
                f", and {k_inv} is the number of devices in the group: averaged over the {k_inv} devices where a "
                "sum was meant (op='avg' for op='sum'?), or averaged twice?"
            )
        return text + ": divided once too often (averaged twice?) or only one of several partial sums kept."
    if abs(k + 1) < 1e-6:
        return "Every element has the wrong sign: a subtraction the wrong way round?"
    return None  # any two numbers have some ratio: only a whole multiple or fraction says something


def reordered(a: np.ndarray, b: np.ndarray) -> str | None:
    """'The right blocks in the wrong order': split both into equal blocks along an axis and match them."""
    for axis in range(a.ndim):
        n = a.shape[axis]
        for parts in range(2, min(n, MAX_PARTS) + 1):
            if n % parts:
                continue
            found, want = np.split(a, parts, axis=axis), np.split(b, parts, axis=axis)
            order: list[int] = []
            for blk in found:
                hit = next((j for j, ref in enumerate(want) if j not in order and same(blk, ref)), None)
                if hit is None:
                    break
                order.append(hit)
            if len(order) == parts and order != list(range(parts)):
                return (
                    f"It holds the right blocks in the wrong order: split into {parts} blocks along axis {axis}, "
                    f"the blocks found are blocks {order} of the expected value (assembled in the wrong order?)."
                )
    return None


def rolled(a: np.ndarray, b: np.ndarray) -> str | None:
    """'Shifted by 1 along axis 0': the value rotated, as when every device takes its neighbour's shard."""
    for axis in range(a.ndim):
        n = a.shape[axis]
        if n < 2 or n * a.size > 10_000_000:  # every shift is one full comparison
            continue
        for shift in range(1, n):
            if np.all(close(np.roll(b, shift, axis=axis), a)):
                return (
                    f"It is the expected value rotated by {shift} position(s) along axis {axis} (position i holds "
                    f"what belongs at i - {shift}): a shard taken from the wrong device, or an index off by {shift}?"
                )
    return None


def wrong_axis(a: np.ndarray, b: np.ndarray) -> str | None:
    """'Pieces joined along axis 0 instead of axis 1', naming both shapes."""
    if a.ndim != b.ndim or a.size != b.size:
        return None
    for axis in range(b.ndim):
        for parts in range(2, min(b.shape[axis], MAX_PARTS) + 1):
            if b.shape[axis] % parts:
                continue
            pieces = np.split(b, parts, axis=axis)
            for other in range(b.ndim):
                if other == axis:
                    continue
                joined = np.concatenate(pieces, axis=other)
                if joined.shape == a.shape and same(a, joined):
                    return (
                        f"It has shape {a.shape} where one device has {b.shape}: the right {parts} pieces, joined "
                        f"along axis {other} instead of axis {axis} (concatenate along axis {axis})."
                    )
    return None


def block_of(a: np.ndarray, b: np.ndarray) -> tuple | None:
    """The slices of ``b`` that equal ``a``, if any: along the one axis where the sizes differ, or on a grid of
    blocks of ``a``'s shape where several differ."""
    if a.ndim != b.ndim or a.shape == b.shape or a.size == 0:
        return None
    differing = [d for d in range(a.ndim) if a.shape[d] != b.shape[d]]
    if any(a.shape[d] > b.shape[d] for d in differing):
        return None
    if len(differing) > 1:  # a block of a mesh of several dims: the grid of equal blocks, each tried
        starts = [range(0, b.shape[d] - a.shape[d] + 1, a.shape[d]) for d in differing]
        if np.prod([len(r) for r in starts]) > MAX_BLOCKS:
            return None
        for corner in itertools.product(*starts):
            index = [slice(None)] * b.ndim
            for d, s in zip(differing, corner):
                index[d] = slice(s, s + a.shape[d])
            if same(a, b[tuple(index)]):
                return tuple(index)
        return None
    axis, n = differing[0], a.shape[differing[0]]
    for start in _could_start(a, b, axis, n):
        index = tuple(slice(start, start + n) if d == axis else slice(None) for d in range(b.ndim))
        if same(a, b[index]):
            return index
    return None


def _could_start(a: np.ndarray, b: np.ndarray, axis: int, n: int) -> list[int]:
    """Where along ``axis`` a block of ``b`` equal to ``a`` may start: every place, less those whose first or last
    element differs from ``a``'s by more than any comparison allows (compare.py's tolerances are all far tighter than
    2% of the element plus 2% of ``b``'s largest finite magnitude). A look at two elements per place: the full
    comparisons are then made only where a block may match."""
    starts = b.shape[axis] - n + 1
    if a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return list(range(starts))
    whole = b if b.dtype == np.float64 else b.astype(np.float64)  # (integers as floats: abs(-128) is int8's -128)
    scale = float(np.abs(whole).max()) if whole.size else 0.0  # the largest magnitude, of the finite ones if need be
    if scale != scale or scale == INF:
        finite = np.abs(whole[np.isfinite(whole)])
        scale = float(finite.max()) if finite.size else 0.0
    # a's first element against the first of each place, its last against the last; in Python's floats, where a
    # comparison with NaN is False as in NumPy: a NaN or an infinity is never apart, compared in full
    firsts = whole[tuple(slice(0, starts) if d == axis else 0 for d in range(b.ndim))].tolist()
    lasts = whole[tuple(slice(n - 1, n - 1 + starts) if d == axis else -1 for d in range(b.ndim))].tolist()
    x0, x1 = float(a.flat[0]), float(a.flat[-1])
    return [
        s
        for s, (y0, y1) in enumerate(zip(firsts, lasts))
        if not (abs(x0 - y0) > 0.02 * (abs(y0) + scale) or abs(x1 - y1) > 0.02 * (abs(y1) + scale))
    ]


def show_index(index: Any) -> str:
    """An index as a student writes it: ``[:, 0:3]``; a chunk of a flattened value in words."""
    from ..core.values import part_text

    if hasattr(index, "describe"):  # a FlatSlice
        return part_text(index)
    if isinstance(index, tuple):
        return "[" + ", ".join(_show_slice(i) for i in index) + "]"
    if isinstance(index, slice):
        return "[" + _show_slice(index) + "]"
    return repr(index)


def _show_slice(s: Any) -> str:
    if isinstance(s, slice):
        return f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
    if s is Ellipsis:
        return "..."
    return repr(s)


def cast_down(ref: Any, found: Any) -> str | None:
    """'A cast down to float32, where the model's A is float64' where ``found`` is a model value in lower precision, within
    that precision's tolerance; None otherwise. (A value of lower precision is never the same as the model's: this
    says why a value that prints alike is none of them.)"""
    a = np.asarray(found)
    if a.dtype.kind != "f" or a.dtype.itemsize >= 8 or a.size == 0:
        return None
    wide = a.astype(np.float64)
    for name in ref.identify(wide, rtol=RTOL[a.dtype.itemsize]):
        model = np.asarray(ref.values[name])
        if model.dtype.kind == "f" and model.dtype.itemsize > a.dtype.itemsize:
            return f"{name} cast down to {a.dtype}, where the model's {name} is {model.dtype}"
    return None
