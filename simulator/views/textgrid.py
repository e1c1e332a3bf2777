"""A plain-text timeline: one row per device, one character per time slot, for terminals and tests.

    time (us) 0         10        20        30
    device 0  F0==F1==F2==F3==........B0==B1==
    device 1  >>>>F0==F1==F2==F3==B0==B1==B2==

Each op is written over the slots it covers: its label, then ``=`` to its end (an op shorter than a
slot still gets one slot if that slot is free). A training step's ops are labelled by pass and
microbatch (``F3``, ``B3``; see ``simulator.parallel.schedules.labels``), consecutive ops with one label as one block,
and a label cut to fit its block keeps its microbatch number. Where a device computes nothing the slot shows its
links: ``>`` bytes leaving it, ``<`` bytes arriving, ``x`` both, ``-`` a message on its way to it
(the latency between its first byte leaving the sender and its bytes arriving), ``.`` idle. A slot covers
``[i * dt, (i + 1) * dt)``; an op covers the slots from ``round(t0 / dt)`` to ``round(t1 / dt)``.
No matplotlib here: this module is for terminals, doctests and exact assertions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from ..core.trace import Trace
from ..cost.units import time_unit
from ..parallel.schedules.labels import blocks, fit, legend_words, op_tag
from .activity import activity, message_spans, unpack

if TYPE_CHECKING:
    from ..core.engine import RunResult
    from ..cost.model import CostModel

# A grid wider than this is no longer a picture, and each slot costs memory for every device.
MAX_SLOTS = 10_000


def text_timeline(
    run: RunResult | Trace,
    width: int = 80,
    *,
    dt: float | None = None,
    cost: CostModel | None = None,
    legend: bool = True,
    tag: Callable[[str], str] = op_tag,
    devices: Collection[int] | None = None,
    window: tuple[float | None, float | None] = (None, None),
) -> str:
    """Render a run as a text grid at most ``width`` slots wide, or with slots of ``dt`` seconds.

    Without ``dt`` the slot length is the smallest round number (1, 2, 2.5 or 5 times a power of
    ten) that fits the run (or the window) into ``width`` slots.

    Args:
        tag: op name -> the label of its block (default: pass and microbatch, ``F3``, for a training
            step's ops, else the name); consecutive ops with one label are one block
        devices: draw only these devices' rows
        window: (start, end) in seconds: draw only this part of the run (None: from the start / to the end)

    Examples:
        >>> import numpy as np
        >>> from simulator import World, text_timeline
        >>> print(text_timeline(World(2).run(lambda dev: dev.all_reduce(np.ones(1))), width=40, legend=False))
        time (us) 0         1         2
        device 0  >>>>>>>>>>all_rx<<<<<<<<<.
        device 1  x<<<<<<<<<all_r>>>>>>>>>><
    """
    act = activity(run, cost)
    cost = unpack(run, cost)[1]
    if any(t is not None and not math.isfinite(t) for t in window):
        raise ValueError(f"text_timeline(window={window}): give finite times in seconds (or None for either end)")
    t_from = window[0] or 0.0
    t_to = act.end_time if window[1] is None else window[1]
    if not t_to > t_from and act.end_time > 0:
        after = f" (the run ends at {act.end_time:g} s)" if window[1] is None else ""
        raise ValueError(f"text_timeline(window={window}): the end must come after the start{after}")
    span = t_to - t_from
    if not math.isfinite(span):  # e.g. -1e308 to 1e308: the difference overflows
        raise ValueError(f"text_timeline(window={window}): a window this long cannot be drawn; give a shorter one")
    if dt is None:
        if not 1 <= width <= MAX_SLOTS:
            raise ValueError(f"text_timeline(width={width}): give at least one column and at most {MAX_SLOTS:,}")
        dt = nice_step(span / width) if span > 0 else 1.0
    elif not (dt > 0 and math.isfinite(dt)):
        raise ValueError(f"text_timeline(dt={dt!r}): the slot length must be > 0 seconds and finite")
    slots = max(1, math.ceil(span / dt - 1e-9)) if span > 0 else 1
    if slots > MAX_SLOTS:
        raise ValueError(
            f"text_timeline(dt={dt!r}): the run lasts {span:g} s, {slots:,} slots of dt; at most {MAX_SLOTS:,} fit. "
            f"Give a longer dt, e.g. dt={nice_step(span / MAX_SLOTS):g}"
        )
    ranks = range(act.world_size) if devices is None else [r for r in devices if 0 <= r < act.world_size]
    rows, labels = [], []
    for rank in ranks:
        cells = ["."] * slots
        comm = [0] * slots  # bit 1: sending, bit 2: receiving
        for s in act.of(rank):
            if s.track == "compute":
                continue
            bit = 1 if s.track == "send" else 2
            for i in _covered(s.t0 - t_from, s.t1 - t_from, dt, slots):
                comm[i] |= bit
        for i, bits in enumerate(comm):
            if bits:
                cells[i] = ".><x"[bits]
        for m in act.messages:  # a message on its way here (its latency): not idle time unexplained
            if m.dst == rank:
                for i in _covered(m.t_start - t_from, message_spans(m, cost)[2] - t_from, dt, slots):
                    if cells[i] == ".":
                        cells[i] = "-"
        for t0, t1, label in blocks(act.of(rank, "compute"), tag):
            if t1 <= t_from or t0 >= t_to:
                continue
            c0 = max(0, min(round((t0 - t_from) / dt), slots - 1))
            c1 = max(0, min(round((t1 - t_from) / dt), slots))
            if c1 <= c0:
                if t1 <= t0 or cells[c0] not in ".<>x":
                    continue  # a zero-length op, or too short for a slot already taken
                c1 = c0 + 1
            text = fit(label, c1 - c0)
            cells[c0:c1] = list(text + "=" * (c1 - c0 - len(text)))
            labels.append(label)
        rows.append((rank, cells))
    label_w = max(len(f"device {act.world_size - 1}"), 10)
    lines = [_ruler(slots, dt, label_w, t_from)]
    lines += [f"device {r}".ljust(label_w) + "".join(cells) for r, cells in rows]
    if legend:
        unit, scale = time_unit(dt * slots)
        lines.append(
            f"one slot = {dt * scale:.4g} {unit}; label then '=': computing; '>' sending, '<' receiving, "
            "'x' both; '-' a message on its way; '.' idle"
        )
        words = legend_words(labels)
        if words:
            lines.append(words)
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


def _ruler(slots: int, dt: float, label_w: int, t_from: float = 0.0) -> str:
    unit, scale = time_unit(t_from + dt * slots)
    line = [" "] * slots
    for i in range(0, slots, 10):
        mark = f"{(t_from + i * dt) * scale:.4g}"
        if i + len(mark) <= slots:
            line[i : i + len(mark)] = list(mark)
    return (f"time ({unit})".ljust(label_w) + "".join(line)).rstrip()
