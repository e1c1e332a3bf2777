"""Human units for simulated times and sizes, and one-line renderings of small arrays, shared by
every text view (event logs, step snapshots, check reports, the text grid) and the plots."""

from __future__ import annotations

from typing import Any

import numpy as np

TIME_UNITS = (("s", 1.0), ("ms", 1e3), ("us", 1e6), ("ns", 1e9))


def time_unit(span: float) -> tuple[str, float]:
    """The unit that shows a duration of ``span`` seconds with a few digits, and its scale factor.

    E.g. 3e-5 s -> ("us", 1e6): multiply seconds by the scale to get the unit.
    """
    for unit, scale in TIME_UNITS:
        if span * scale >= 1.0:
            return unit, scale
    return TIME_UNITS[-1]


def size_unit(nbytes: float) -> tuple[str, float]:
    """("GB", 1e-9)-style unit and scale for a byte count (decimal units, as vendors quote them)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return unit, 1.0 / scale
    return "B", 1.0


def binary_size(nbytes: float) -> str:
    """A message size as programs write it, in powers of two: ``64 KiB``, ``1 MiB``, ``2 GiB``, ``8 B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def inline(value: Any, precision: int | None = None) -> str:
    """A small array on one line, e.g. ``[[0, 1], [2, 3]]``: text views stay aligned, one row each."""
    a = np.asarray(value)
    if a.ndim == 0 and a.dtype.kind == "f":  # a lone 7.0, not NumPy's "7.", which a sentence's full stop doubles
        return repr(float(a)) if precision is None else f"{float(a):.{precision}g}"
    text = np.array2string(a, separator=", ", precision=precision, max_line_width=1 << 30)
    text = " ".join(text.split())  # numpy pads columns to align them across rows: not needed on one line
    return text.replace(" ,", ",").replace("[ ", "[").replace(" ]", "]")
