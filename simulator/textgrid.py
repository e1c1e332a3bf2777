"""A plain-text timeline: one row per device, one character per time slot, for terminals and tests.

    time (us) 0         10        20        30
    device 0  F0==F1==F2==F3==........B0==B1==
    device 1  >>>>F0==F1==F2==F3==B0==B1==B2==

Each op is written over the slots it covers: its label, then ``=`` to its end (an op shorter than a
slot still gets one slot if that slot is free). Where a device computes nothing the slot shows its
links: ``>`` bytes leaving it, ``<`` bytes arriving, ``x`` both, ``.`` idle. A slot covers
``[i * dt, (i + 1) * dt)``; an op covers the slots from ``round(t0 / dt)`` to ``round(t1 / dt)``.
No matplotlib here: this module is for terminals, doctests and exact assertions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .activity import activity
from .trace import Trace
from .units import time_unit

if TYPE_CHECKING:
    from .cost import CostModel
    from .engine import RunResult

# A grid wider than this is no longer a picture, and each slot costs memory for every device.
MAX_SLOTS = 10_000


def text_timeline(
    run: RunResult | Trace,
    width: int = 80,
    *,
    dt: float | None = None,
    cost: CostModel | None = None,
    legend: bool = True,
) -> str:
    """Render a run as a text grid at most ``width`` slots wide, or with slots of ``dt`` seconds.

    Without ``dt`` the slot length is the smallest round number (1, 2, 2.5 or 5 times a power of
    ten) that fits the run into ``width`` slots.
    """
    act = activity(run, cost)
    end = act.end_time
    if dt is None:
        if not 1 <= width <= MAX_SLOTS:
            raise ValueError(f"text_timeline(width={width}): give at least one column and at most {MAX_SLOTS:,}")
        dt = nice_step(end / width) if end > 0 else 1.0
    elif not (dt > 0 and math.isfinite(dt)):
        raise ValueError(f"text_timeline(dt={dt!r}): the slot length must be > 0 seconds and finite")
    slots = max(1, math.ceil(end / dt - 1e-9)) if end > 0 else 1
    if slots > MAX_SLOTS:
        raise ValueError(
            f"text_timeline(dt={dt!r}): the run lasts {end:g} s, {slots:,} slots of dt; at most {MAX_SLOTS:,} fit. "
            f"Give a longer dt, e.g. dt={nice_step(end / MAX_SLOTS):g}"
        )
    rows = []
    for rank in range(act.world_size):
        cells = ["."] * slots
        comm = [0] * slots  # bit 1: sending, bit 2: receiving
        for span in act.of(rank):
            if span.track == "compute":
                continue
            bit = 1 if span.track == "send" else 2
            for i in _covered(span.t0, span.t1, dt, slots):
                comm[i] |= bit
        for i, bits in enumerate(comm):
            if bits:
                cells[i] = ".><x"[bits]
        for span in act.of(rank, "compute"):
            c0 = min(round(span.t0 / dt), slots - 1)
            c1 = min(round(span.t1 / dt), slots)
            if c1 <= c0:
                if span.t1 <= span.t0 or cells[c0] not in ".<>x":
                    continue  # a zero-length op, or too short for a slot already taken
                c1 = c0 + 1
            text = (span.name + "=" * (c1 - c0))[: c1 - c0]
            cells[c0:c1] = list(text)
        rows.append(cells)
    label_w = max(len(f"device {act.world_size - 1}"), 10)
    lines = [_ruler(slots, dt, label_w)]
    lines += [f"device {r}".ljust(label_w) + "".join(cells) for r, cells in enumerate(rows)]
    if legend:
        unit, scale = time_unit(dt * slots)
        lines.append(
            f"one slot = {dt * scale:.4g} {unit}; op label then '=' = computing, "
            "'>' sending, '<' receiving, 'x' both, '.' idle"
        )
    return "\n".join(lines)


def nice_step(raw: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= raw (so the ruler reads well)."""
    e = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = m * 10.0**e
        if step >= raw * (1 - 1e-12):
            return step
    return 10.0 ** (e + 1)


def _covered(t0: float, t1: float, dt: float, slots: int) -> range:
    """Slots whose interval overlaps (t0, t1) by a positive amount."""
    if t1 <= t0:
        return range(0)
    return range(max(0, math.floor(t0 / dt + 1e-9)), min(slots, math.ceil(t1 / dt - 1e-9)))


def _ruler(slots: int, dt: float, label_w: int) -> str:
    unit, scale = time_unit(dt * slots)
    line = [" "] * slots
    for i in range(0, slots, 10):
        mark = f"{i * dt * scale:.4g}"
        if i + len(mark) <= slots:
            line[i : i + len(mark)] = list(mark)
    return (f"time ({unit})".ljust(label_w) + "".join(line)).rstrip()
