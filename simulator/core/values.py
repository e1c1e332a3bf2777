"""How a value reads in every text view: small arrays in full, larger ones as a summary, parts in words.

One policy for the stepper, the event log and the command line, so a student sees the same value the
same way everywhere:

- an array of at most ``max_elements`` numbers is shown in full: on one line when it fits the width,
  else as a matrix over several lines, its columns aligned;
- a larger one as its shape and dtype, its first few values, and its norm
  (``(64, 64) float64 [0.12, -0.5, 0.33, ...] norm 41.2``), so two large values can still be told apart;
- which part of a whole value a shard is, in words: ``[0:2, 2:4]`` for slices, and ``elements 6-11
  (flattened)`` for a chunk of a flattened array (an all-reduce chunk), not an internal repr.

``ValueStyle()`` shows every array of the named scenarios in full (the largest has 64 elements).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cost.units import inline


@dataclass(frozen=True)
class ValueStyle:
    """How much of a value to show.

    max_elements: arrays with at most this many elements are shown in full
    precision:    significant digits after the point
    preview:      how many leading values a summary of a larger array shows
    """

    max_elements: int = 64
    precision: int = 4
    preview: int = 4

    def __post_init__(self) -> None:
        if self.max_elements < 0 or self.preview < 0 or self.precision < 0:
            raise ValueError(f"{self}: max_elements, precision and preview must be >= 0")


SHOW_ALL = ValueStyle()  # the default: every array of the named scenarios in full


def value_lines(value: Any, width: int = 120, style: ValueStyle = SHOW_ALL, *, matrix: bool = False) -> list[str]:
    """``value`` as lines of at most ``width`` characters: in full when small, else a summary.

    A small array that does not fit one line is drawn as a matrix (one row per line), and so is every
    small array of two or more dimensions with ``matrix=True``; a summary that does not fit is cut
    with ``...``.
    """
    if value is None:
        return [""]
    a = _array(value)
    if a is None:
        return [clip(_other(value), width)]
    if a.size > style.max_elements:
        return [clip(summary(a, style), width)]
    one = inline(a, precision=style.precision)
    if len(one) <= width and not (matrix and a.ndim >= 2 and a.shape[0] > 1):
        return [one]
    text = np.array2string(a, separator=", ", precision=style.precision, max_line_width=max(width, 20))
    return [clip(line, width) for line in text.splitlines()]


def value_text(value: Any, width: int = 120, style: ValueStyle = SHOW_ALL) -> str:
    """``value`` on one line of at most ``width`` characters (a summary when it is large or does not fit)."""
    lines = value_lines(value, width, style)
    if len(lines) == 1:
        return lines[0]
    a = _array(value)
    return clip(summary(a, style) if a is not None else lines[0], width)


def summary(a: np.ndarray, style: ValueStyle = SHOW_ALL) -> str:
    """Shape, dtype, the first few values and the norm: ``(64, 64) float64 [0.12, -0.5, ...] norm 41.2``."""
    head = f"{tuple(a.shape)} {a.dtype.name}"
    if a.size == 0:
        return head + " (empty)"
    flat = a.reshape(-1)
    first = inline(flat[: style.preview], precision=style.precision)
    more = ", ...]" if a.size > style.preview else "]"
    text = f"{head} {first[:-1]}{more}"
    if np.issubdtype(a.dtype, np.number) or a.dtype == bool:
        text += f" norm {float(np.linalg.norm(flat.astype(np.float64))):.{max(style.precision, 1)}g}"
    return text


def part_text(index: Any) -> str | None:
    """Which part of a whole value a shard is, in words (None for the whole value).

    Slices as a student writes them (``[0:2, 2:4]``, ``[:, 0:3]``); a chunk of a flattened array (an
    all-reduce or ZeRO chunk) as ``elements 6-11 (flattened)``.
    """
    if index is None:
        return None
    if hasattr(index, "describe"):  # a chunk of a flattened array (``tensors.placements.FlatSlice``) says itself
        return index.describe()
    if isinstance(index, tuple):
        return "[" + ", ".join(_slice_text(i) for i in index) + "]"
    if isinstance(index, slice):
        return "[" + _slice_text(index) + "]"
    return repr(index)


def clip(line: str, width: int) -> str:
    """``line`` cut to ``width`` characters, ending in ``...`` when cut."""
    if width <= 0 or len(line) <= width:
        return line
    return line[: max(width - 3, 0)] + "..."


# Kept on one line when text wraps: a call as a message writes it, ``recv(..., name="A")``, or an aside in
# parentheses, ``(all_reduce#0 ring step 0 chunk 1)``; up to 40 characters, so that it still fits a line
_KEPT = re.compile(r"[\w.]*\((?:[^()\n]|\([^()\n]*\))*\)")
_KEEP = "\0"  # stands for a space inside a kept span while the line wraps
_UNIT = re.compile(r"\d (?:ns|us|ms|s|B|KiB|MiB|GiB|KB|MB|GB|bytes|FLOPs|GB/s|GFLOP/s|TFLOP/s)(?![\w/])")  # 0.5 us


def fill_line(line: str, width: int, indent: str) -> list[str]:
    """One line of text wrapped to ``width`` (later lines start with ``indent``): short calls and asides, and a
    number with its unit, are never split."""
    kept = _UNIT.sub(lambda m: m[0].replace(" ", _KEEP), line)  # a number with its unit
    kept = _KEPT.sub(lambda m: m[0].replace(" ", _KEEP) if len(m[0]) <= 40 else m[0], kept)
    lines = textwrap.wrap(kept, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)
    return [piece.replace(_KEEP, " ") for piece in lines] or [line]


def fit_lines(text: str, width: int = 110) -> str:
    """``text`` with every line wrapped to ``width`` (continuations indented two past the line's own indent),
    so that what is printed stays within 120 columns in a terminal and a notebook (see ``fill_line``)."""
    out = []
    for line in text.split("\n"):
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out.extend(fill_line(line, width, indent) if line.strip() else [line])
    return "\n".join(out)


def wrap(items: list[str], width: int, sep: str = "  ") -> list[str]:
    """Items joined by ``sep`` into lines of at most ``width`` characters (an item longer than that is cut)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + len(sep) + len(item) <= width:
            lines[-1] += sep + item
        else:
            lines.append(clip(item, width))
    return lines


def _slice_text(s: Any) -> str:
    if isinstance(s, slice):
        text = f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
        return text if s.step in (None, 1) else f"{text}:{s.step}"
    if isinstance(s, np.ndarray):  # chosen positions (a balanced ring's token order): the list, not NumPy's repr
        return inline(s)
    return "..." if s is Ellipsis else repr(s)


def _array(value: Any) -> np.ndarray | None:
    """``value`` as a numeric array, or None when it is not one (a dict of gradients, an object)."""
    if isinstance(value, (dict, str)):
        return None
    try:
        a = np.asarray(value)
    except Exception:  # noqa: BLE001 (anything numpy cannot hold is shown by its repr)
        return None
    return None if a.dtype == object else a


def _other(value: Any) -> str:
    if isinstance(value, dict):  # a training step returns its gradients by name
        return "{" + ", ".join(map(str, value)) + "}"
    return repr(value)
