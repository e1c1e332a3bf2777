"""Comparing a value found on a device with the value expected from one device, and saying how they differ.

One tolerance serves the comparison and every diagnosis built on it (simulator/checker/diagnose.py), so a
hint ("the blocks are in the wrong order") holds exactly when the comparison says "different".

The tolerance: integers and booleans compare exactly. Floats compare element by element with
``|found - expected| <= atol + rtol * |expected|``, where ``rtol`` defaults by the dtype (float64
1e-7, float32 1e-4, float16 1e-2: parallel runs add in another order, which moves the last bits)
and ``atol`` is raised to ``rtol * 1e-2 * (the median of the array's nonzero |expected|)``: an element
that should be 1e-17 after cancellation is compared on the scale of the array's typical values, not on
its own, and one huge element (a -1e9 attention mask) does not loosen the others. Under the dtype's own
rtol (or a looser one) that floor is at least ``ULP_FLOOR`` units in the last place of the median
(``floor_share``): float16's 1e-2 is only ten of them, and a sum of four added in another order moves an
element near zero by one or two.

A float value of lower precision than expected (float32 where one device has float64) is never the same:
its rounding would hide under float64's tolerance, but the cast is itself a difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy import abs as _abs  # the grader's own NumPy, taken before any student code loads
from numpy import all as _all
from numpy import array_equal as _array_equal
from numpy import asarray as _asarray
from numpy import errstate as _errstate
from numpy import isclose as _isclose
from numpy import isfinite as _isfinite
from numpy import median as _median

from ..cost.units import inline

RTOL = {8: 1e-7, 4: 1e-4, 2: 1e-2}  # float itemsize -> default relative tolerance
ULP_FLOOR = 8  # under the default rtol (or a looser one), atol is at least this many ulps of the median magnitude
SHOW_UP_TO = 16  # arrays with at most this many elements are printed whole in explanations
EXACT_BY_BYTES = (
    1 << 14
)  # arrays up to this many elements are compared by their bytes (a copy of each), larger ones in place


def _numeric(a: np.ndarray) -> bool:
    return a.dtype.kind in "biufc"


def floor_share(dtype: np.dtype, rtol: float | None = None) -> float:
    """The share of an array's median nonzero magnitude its absolute tolerance is raised to: ``rtol * 1e-2``, and
    at least ``ULP_FLOOR`` units in the last place unless the caller asked for less than the dtype's default rtol
    (see the module docstring; a looser rtol never makes the floor tighter). 0 for integers and booleans."""
    if dtype.kind not in "fc":
        return 0.0
    default = RTOL.get(dtype.itemsize, 1e-7)
    if rtol is not None and rtol < default:
        return rtol * 1e-2
    return max((default if rtol is None else rtol) * 1e-2, ULP_FLOOR * float(np.finfo(dtype).eps))


def tolerances(expected: Any, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """The (rtol, atol) a comparison with ``expected`` uses (see the module docstring)."""
    b = _asarray(expected)
    share = floor_share(b.dtype, rtol)
    if rtol is None:
        rtol = RTOL.get(b.dtype.itemsize, 1e-7) if b.dtype.kind in "fc" else 0.0
    floor = 0.0
    if b.dtype.kind in "fc" and b.size:
        typical = _abs(b[_isfinite(b) & (b != 0)])
        floor = share * float(_median(typical)) if typical.size else 0.0
    return rtol, max(atol or 0.0, floor)


def downcast(found: Any, expected: Any) -> bool:
    """Whether ``found`` holds floats of lower precision than ``expected`` (float32 for float64, say)."""
    a, b = _asarray(found), _asarray(expected)
    return a.dtype.kind in "fc" and b.dtype.kind in "fc" and a.dtype.itemsize < b.dtype.itemsize


def close(
    found: Any, expected: Any, rtol: float | None = None, atol: float | None = None, *, tol: tuple | None = None
) -> np.ndarray:
    """Element-wise: does each element of ``found`` equal the one of ``expected``? (shapes must agree).

    tol: ``tolerances(expected, rtol, atol)`` if already worked out (a checker keeps them per name)."""
    a, b = _asarray(found), _asarray(expected)
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        return a == b
    r, t = tol if tol is not None else tolerances(b, rtol, atol)
    with _errstate(invalid="ignore", over="ignore"):
        return _isclose(a, b, rtol=r, atol=t, equal_nan=True)


def structured(x: Any) -> bool:
    """A tuple, list or dict of values (what an op returning several arrays gives), not one array."""
    return type(x) is not np.ndarray and isinstance(
        x, (tuple, list, Mapping)
    )  # (an array first: Mapping's check is slow)


def same(
    found: Any, expected: Any, rtol: float | None = None, atol: float | None = None, *, tol: tuple | None = None
) -> bool:
    """Equal shape and value under the tolerance above; values that are not numbers compare with ==.

    Tuples, lists and dicts (an op that returns several arrays) compare part by part. The same bytes are equal
    at once; the tolerance is worked out only when they differ (``tol``: already worked out for this
    ``expected``, a plain array).
    """
    if isinstance(expected, Mapping) or isinstance(found, Mapping):
        return (
            isinstance(expected, Mapping)
            and isinstance(found, Mapping)
            and found.keys() == expected.keys()
            and all(same(found[k], expected[k], rtol, atol) for k in expected)
        )
    if isinstance(expected, (tuple, list)) and isinstance(found, (tuple, list)):
        return len(found) == len(expected) and all(same(f, e, rtol, atol) for f, e in zip(found, expected))
    try:
        a, b = _asarray(found), _asarray(expected)
    except ValueError:  # a ragged structure (a list holding None and an array) against an array: not the same
        return False
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and a.dtype.kind in "biufc" and identical(a, b):
        return True  # the same bytes: equal under any tolerance (a NaN equals a NaN here, as below)
    if not (_numeric(a) and _numeric(b)):
        if _numeric(b) and a.dtype == object:  # numbers are matched by numbers (an object's == could say anything)
            return False
        return bool(_array_equal(a, b)) if a.dtype != object and b.dtype != object else _same_objects(found, expected)
    return not downcast(a, b) and _all_close(a, b, rtol, atol, tol)


def lower_tolerance(expected: Any, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """``tolerances(expected, rtol, atol)`` less the floor from the median of ``expected`` (no median taken): a
    value within it is within the tolerance, which is never smaller."""
    if rtol is None:
        b = _asarray(expected)
        rtol = RTOL.get(b.dtype.itemsize, 1e-7) if b.dtype.kind in "fc" else 0.0
    return rtol, atol or 0.0


def bounded(found: np.ndarray, expected: np.ndarray, rtol: float | None, atol: float | None) -> bool | None:
    """Whether two float arrays of one shape are the same without taking the median the tolerance needs: True
    within ``lower_tolerance``, False past the tolerance the largest magnitude would give (the median's never
    exceeds it), None between the two (then only ``tolerances`` can say)."""
    y = expected if expected.dtype.kind in "fc" else expected.astype(np.result_type(expected, 1.0))
    r, t = lower_tolerance(expected, rtol, atol)
    within = _within(found, y, (r, t))
    if within is not False:
        return within or None
    # every difference is finite, so every expected element is: the floor is at most its share of the largest
    top = floor_share(expected.dtype, rtol) * float(_abs(y).max())
    return False if _within(found, y, (r, max(t, top))) is False else None


def plainly_close(found: Any, expected: Any, rtol: float | None, atol: float | None) -> bool:
    """True when two float arrays of one shape and dtype are within ``lower_tolerance`` of each other: then ``same``
    says True under the tolerance it would work out (never smaller), and no call of it is needed. False says nothing
    (``same`` decides)."""
    if not (
        type(found) is np.ndarray
        and type(expected) is np.ndarray
        and found.shape == expected.shape
        and found.dtype == expected.dtype
        and expected.dtype.kind == "f"
    ):
        return False
    return _within(found, expected, lower_tolerance(expected, rtol, atol)) is True


def _all_close(a: np.ndarray, b: np.ndarray, rtol: float | None, atol: float | None, tol: tuple | None) -> bool:
    """``_all(close(a, b))``. Without ``tol``, first ``bounded`` (most values that differ in their last bits are
    within the lower bound, most that differ plainly past the upper: the median is then never taken), then under
    the full tolerance."""
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        return bool(_all(a == b))
    if tol is None:
        verdict = bounded(a, b, rtol, atol)
        if verdict is not None:
            return verdict
        tol = tolerances(b, rtol, atol)
    y = b if b.dtype.kind in "fc" else b.astype(np.result_type(b, 1.0))  # as isclose casts the expected value
    within = _within(a, y, tol)
    return bool(_all(close(a, b, tol=tol))) if within is None else within


def _within(a: np.ndarray, y: np.ndarray, tol: tuple[float, float]) -> bool | None:
    """np.isclose's own test, written out (a few NumPy calls, where isclose makes a dozen): where every difference
    is finite, its answer is isclose's element for element; None where one is not (an infinity, a NaN: isclose's
    own rules decide those)."""
    r, t = tol
    if a.size <= _WITHIN_BY_ELEMENT and _double(a) and _double(y):
        return _within_by_element(a.reshape(-1).tolist(), y.reshape(-1).tolist(), r, t)
    with _errstate(all="ignore"):
        diff = _abs(a - y)
        ok = diff <= t + r * _abs(y)
        if not _isfinite(diff).all():
            return None
        return bool(ok.all() or (ok | (a == y)).all())


_WITHIN_BY_ELEMENT = 32  # float64 arrays up to this many elements are compared as Python floats (fewer calls)


def _double(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" and a.dtype.itemsize == 8


def _within_by_element(found: list[float], expected: list[float], r: float, t: float) -> bool | None:
    """``_within`` of two small float64 arrays, element by element in Python floats: the same IEEE double arithmetic
    in the same order (|a - y|, then t + r * |y|), so the same answer, without NumPy's dozen calls per comparison."""
    ok = True
    for u, v in zip(found, expected):
        d = abs(u - v)
        if d - d != 0.0:  # an infinity or a NaN: isclose's own rules decide (None)
            return None
        if not (d <= t + r * abs(v) or u == v):
            ok = False
    return ok


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one shape and dtype hold the same bytes: the cheap test every comparison tries first
    (most values a checked run holds are exactly the model's), before any tolerance is worked out."""
    if a.size <= EXACT_BY_BYTES:
        return a.tobytes() == b.tobytes()
    return bool(_array_equal(a, b))  # no copies of large arrays (a NaN makes it False: the tolerance decides)


def same_bytes(output: Any, expected: Any) -> bool:
    """Whether a value and the model's are arrays of one shape and numeric dtype with the same bytes: equal under any
    tolerance, as a comparison would say, with no tolerance worked out."""
    return (
        type(output) is np.ndarray
        and type(expected) is np.ndarray
        and output.shape == expected.shape
        and output.dtype == expected.dtype
        and output.dtype.kind in "biuf"
        and identical(output, expected)
    )


def _same_objects(found: Any, expected: Any) -> bool:
    try:
        return bool(found == expected)
    except (TypeError, ValueError):
        return False


def show(x: Any) -> str:
    """A value for an explanation: small arrays in full, larger ones by shape and dtype."""
    if isinstance(x, Mapping):
        return "{" + ", ".join(f"{k!r}: {show(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(show(v) for v in x) + ")"
    a = _asarray(x)
    if a.size <= SHOW_UP_TO:
        return inline(a)
    return f"an array of shape {a.shape} ({a.dtype.name})"


def show_pair(found: Any, expected: Any) -> tuple[str, str]:
    """``show`` of a found and an expected value, small float arrays in one number format: left alone,
    NumPy would write ``[1.e-09, 2.e+00]`` beside ``[0., 2.]``, and a reader compares digits, not styles."""
    if structured(found) or structured(expected):
        return show(found), show(expected)
    a, b = _asarray(found), _asarray(expected)
    if not a.dtype.kind == b.dtype.kind == "f" or max(a.size, b.size) > SHOW_UP_TO:
        return show(found), show(expected)
    both = _abs(np.concatenate([a.ravel(), b.ravel()]).astype(np.float64))
    both = both[_isfinite(both) & (both != 0)]
    # NumPy's own rule for when an array prints in scientific notation, applied to both arrays at once
    sci = both.size and (both.max() >= 1e8 or both.min() < 1e-4 or both.max() / both.min() > 1e3)
    fmt = np.format_float_scientific if sci else np.format_float_positional
    return _formatted(a, fmt), _formatted(b, fmt)


def _formatted(a: np.ndarray, fmt: Any) -> str:
    if a.ndim == 0:  # a lone number reads 7.0, not "7.": a sentence's full stop would double the point
        return fmt(a.item(), precision=8, trim="0")
    text = np.array2string(
        a, separator=", ", formatter={"float_kind": lambda x: fmt(x, precision=8, trim=".")}, max_line_width=1 << 30
    )
    text = " ".join(text.split())
    return text.replace(" ,", ",").replace("[ ", "[").replace(" ]", "]")


def difference(found: Any, expected: Any, rtol: float | None = None, atol: float | None = None) -> str | None:
    """How two large arrays of the same shape differ, in one sentence (None for small ones: shown whole).

    Both shapes, how many elements differ, the largest absolute and relative difference, the first
    index that differs, and a few values around it, found against expected.
    """
    a, b = _asarray(found), _asarray(expected)
    if a.shape != b.shape:
        return f"It has shape {a.shape} where one device has {b.shape}."
    cast = f"It is {a.dtype} where one device has {b.dtype}: a cast lost precision." if downcast(a, b) else ""
    if a.size <= SHOW_UP_TO or not (_numeric(a) and _numeric(b)):
        return cast or None
    bad = ~close(a, b, rtol, atol)
    count = int(bad.sum())
    if not count:
        return cast or None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    fa, fb = a.astype(np.float64)[bad], b.astype(np.float64)[bad]
    with _errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = _abs(fa - fb)  # inf where one side is infinite (a masked score, say), nan where one is nan
        rel = np.where((fb != 0) & _isfinite(fb), diff / _abs(fb), np.inf)
    big = float(np.max(np.where(np.isnan(diff), np.inf, diff)))
    worst_rel = float(np.max(np.where(np.isnan(rel), np.inf, rel)))
    lo = max(first[-1] - 2, 0) if a.ndim else 0
    hi = min(lo + 6, a.shape[-1]) if a.ndim else 0
    at = first[:-1]
    where = "[" + ", ".join([*map(str, at), f"{lo}:{hi}"]) + "]" if a.ndim else "[]"
    window = (a[(*at, slice(lo, hi))], b[(*at, slice(lo, hi))]) if a.ndim else (a, b)
    rel_text = "inf (expected 0, infinite or nan)" if np.isinf(worst_rel) else f"{worst_rel:.3g}"
    low = {a.dtype, b.dtype} & {np.dtype(np.float32), np.dtype(np.float16)}
    looser = -int(np.ceil(np.log10(worst_rel))) if 0 < worst_rel < 1e-2 else 0  # (the power of ten that allows them)
    rounding = (
        f" Differences this small are what {'float16' if np.dtype(np.float16) in low else 'float32'} gives when a "
        "long sum is added in another order: if "
        f"that is all, allow them with a looser tolerance, check(..., rtol=1e-{looser})."
        if low and not cast and looser
        else ""
    )
    return (
        cast
        + (" " if cast else "")
        + (
            f"Both have shape {a.shape}; {count:,} of {a.size:,} elements differ (largest difference {big:.4g}, "
            f"largest relative difference {rel_text}); the first is at {list(first)}. "
            f"At {where}: found {inline(window[0], precision=4)}, expected {inline(window[1], precision=4)}."
        )
        + rounding
    )
