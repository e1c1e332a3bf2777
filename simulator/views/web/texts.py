"""The texts of the values a view document shows: on a card, in a tooltip, and as the projector's matrix.

A value is stored once however many events show it (``Values``): a string when short (its numbers), else
``[short, long]`` (its shape and dtype, and the numbers or the first of them), with the numbers as rows of
texts (``cells``) for an array of up to ``LONG_ELEMENTS``. ``wrong_cells`` says which numbers of a wrong
value the checker counts wrong, so the page can mark them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...checker.compare import close  # the checker's tolerances: a number marked red is one it counts wrong
from ...cost.units import inline

CARD_ELEMENTS = 6  # values this small show their numbers on the card (as the Stepper prints them)
LONG_ELEMENTS = 64  # larger ones show their shape and dtype there, and up to this many numbers on hover


class Values:
    """Value texts, each stored once however many events show it."""

    def __init__(self) -> None:
        self.table: list[str | list[str]] = []
        self._index: dict[Any, int] = {}

    def add(self, value: Any, sig: str) -> int:
        text = value_text(value, sig)
        key = text if isinstance(text, str) else repr(text)
        if key not in self._index:
            self._index[key] = len(self.table)
            self.table.append(text)
        return self._index[key]

    def short(self, i: int | None) -> str:
        if i is None:
            return ""
        text = self.table[i]
        return text if isinstance(text, str) else text[0]


def value_text(value: Any, sig: str = "") -> str | list[str]:
    """A value as a card shows it: the numbers when short, else its shape and dtype (and the numbers,
    or the first of them, for the tooltip)."""
    if value is None:
        return sig
    if isinstance(value, dict):
        return "{" + ", ".join(map(str, value)) + "}"
    try:
        a = np.asarray(value)
    except Exception:  # an object numpy cannot hold: show its repr
        a = None
    if a is None or a.dtype == object:
        text = repr(value)
        return text if len(text) <= 60 else [text[:57] + "...", text[:400]]
    if a.size <= CARD_ELEMENTS:
        return inline(a, precision=4)
    shape = signature(a.shape, a.dtype)
    if a.size <= LONG_ELEMENTS:
        return [shape, inline(a, precision=4), cells(a)]
    return [shape, f"{shape}, starting {inline(a.reshape(-1)[:8], precision=4)[:-1]}, ...]"]


def cells(a: np.ndarray) -> list[list[str]]:
    """An array's numbers as rows of texts, one row per index of all axes but the last (numpy's format:
    every number alike, four digits after the point at most)."""
    flat = np.array2string(a.reshape(-1), separator=",", precision=4, max_line_width=1 << 30, threshold=1 << 30)
    texts = [t.strip() for t in flat.strip("[]").split(",")]
    width = a.shape[-1] if a.ndim and a.shape[-1] else 1
    return [texts[i : i + width] for i in range(0, len(texts), width)]


def wrong_cells(found: Any, expected: Any) -> list[int] | None:
    """The flat indices where ``found`` differs from ``expected`` (same-shaped numeric arrays of up to 64
    numbers, compared as the checker does), or None when the two cannot be compared number by number."""
    try:
        f, e = np.asarray(found), np.asarray(expected)
    except Exception:  # values numpy cannot hold: no numbers to mark
        return None
    if f.dtype == object or e.dtype == object or f.shape != e.shape or f.size > LONG_ELEMENTS:
        return None
    try:
        ok = np.asarray(close(f, e)).reshape(-1)
    except (TypeError, ValueError):
        return None
    return [int(i) for i in np.flatnonzero(~ok)]


def signature(shape: Any, dtype: Any) -> str:
    return f"{tuple(shape)} {np.dtype(dtype).name}"
