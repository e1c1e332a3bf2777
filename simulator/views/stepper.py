"""Step through a run event by event, forward and back, seeing what each device holds.

``Stepper`` wraps a finished ``Trace`` or a live ``Engine``. With a live engine, stepping forward
advances the simulation itself, one event at a time; with either, stepping back replays the log.
At each position the snapshot shows every device's memory (names, shapes, and the values of small
arrays) and the messages in flight: sent, not yet received.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..core.engine import Engine
from ..core.trace import Message, Trace, format_event
from ..core.values import SHOW_ALL, ValueStyle, clip, part_text, value_lines, value_text, wrap


@dataclass
class Snapshot:
    """The state after ``position`` events: memory per device and messages in flight.

    ``records[r][name]`` is the event record that placed ``memory[r][name]`` (an Op or a Message: it
    says which part of the whole value a shard is, and whether it is a partial sum); ``changed`` is the
    (rank, name) the last event placed or dropped, if any.
    """

    position: int
    total: int | None  # None while a live run may still produce events
    last_event: tuple[str, Any] | None
    memory: list[dict[str, Any]]
    in_flight: list[Message]
    records: list[dict[str, Any]] = field(default_factory=list)
    changed: tuple[int, str] | None = None

    def render(
        self,
        width: int = 120,
        *,
        style: ValueStyle = SHOW_ALL,
        values: str = "all",
        devices: Collection[int] | None = None,
    ) -> str:
        """The snapshot as text, every line within ``width`` characters.

        values:  "all": every value held, small arrays in full (matrices over several lines);
                 "new": what changed: on more than two devices only the devices of the last event (and their
                 messages in flight), with the value the event placed in full and the others by name;
                 "names": names only
        devices: show only these devices (and the messages to or from them)
        """
        if values not in VALUE_MODES:
            raise ValueError(f"render(values={values!r}): choose one of {VALUE_MODES}")
        total = "?" if self.total is None else self.total
        head = f"step {self.position}/{total}  "
        if self.last_event:
            kind, rec = self.last_event
            shown_below = kind == "send" or (self.changed is not None and values != "names")
            event = format_event(kind, rec, width - len(head), style, value=not shown_below)
            below = self._event_value_line(event, width, style, shown_below)
            if below:  # the numbers go below, so the line says no summary of them
                event = format_event(kind, rec, width - len(head), style, value=False)
            head += event
        else:
            head += "(start: nothing has happened yet)"
            below = []
        lines = [head] + below
        n = len(self.memory)
        if devices is None and values == "new" and self.last_event and n > 2:
            devices = _involved(*self.last_event)  # what changed: the devices of this event (the rest said below)
            others = n - len(devices)
        else:
            others = 0
        shown = range(n) if devices is None else [r for r in devices if 0 <= r < n]
        label_w = len(f"device {n - 1}")
        for rank in shown:
            lines += self._device_lines(rank, f"  {f'device {rank}':<{label_w}} | ", width, style, values)
        if others:
            lines.append(f"  ({others} other devices: unchanged)")
        flying = [m for m in self.in_flight if devices is None or m.src in shown or m.dst in shown]
        lines += _flight_lines(flying, width, style)
        return "\n".join(lines)

    def _device_lines(self, rank: int, prefix: str, width: int, style: ValueStyle, values: str) -> list[str]:
        mem = self.memory[rank]
        if not mem:
            return [prefix + "(empty)"]
        recs = self.records[rank] if self.records else {}
        pad = " " * (len(prefix) - 2) + "| "
        room = width - len(prefix)
        items = []
        for name, value in mem.items():
            label = _held_name(name, recs.get(name))
            full = values == "all" or (values == "new" and self.changed == (rank, name))
            items.append((label, value_lines(value, room - len(label) - 1, style, matrix=True) if full else None))
        one_line = "  ".join(label + ("" if v is None else "=" + v[0]) for label, v in items)
        if len(one_line) <= room and all(v is None or len(v) == 1 for _, v in items):
            return [prefix + one_line]
        out = wrap([label for label, v in items if v is None], room)
        for label, v in items:
            if v is not None:
                out.append(f"{label}={v[0]}")
                out += [" " * (len(label) + 1) + line for line in v[1:]]
        return [clip((prefix if i == 0 else pad) + line, width) for i, line in enumerate(out)]

    def _event_value_line(self, head: str, width: int, style: ValueStyle, shown_below: bool) -> list[str]:
        """The event's value on a line of its own, when its own line had no room for the numbers that fit
        on one: a class reads the numbers, not "(6,) float64 [..."."""
        if not self.last_event or shown_below:
            return []
        kind, rec = self.last_event
        value = rec.payload if kind == "recv" else getattr(rec, "output", None)
        if value is None or isinstance(value, dict):
            return []
        numbers = value_text(value, 1 << 30, style)  # as many as the style shows, on one line
        if numbers in head or len(numbers) > width - 6:
            return []  # shown already, or too many for a line: the summary stands
        return [f"    = {numbers}"]

    __str__ = render

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.render())


VALUE_MODES = ("all", "new", "names")


def _involved(kind: str, rec: Any) -> list[int]:
    """The devices an event happens on: both ends of a message, else the device of the op."""
    return sorted({rec.src, rec.dst}) if kind in ("send", "recv") else [rec.rank]


def _held_name(name: str, rec: Any) -> str:
    """A held value's name, with the part it is and whether it is a partial sum."""
    if rec is None:
        return name
    part = part_text(rec.index)
    partial = getattr(rec, "partial", None)
    return name + (f" {part}" if part else "") + (f" (partial over {', '.join(map(str, partial))})" if partial else "")


def _flight_lines(flying: list[Message], width: int, style: ValueStyle) -> list[str]:
    """One line per message in flight when they do not fit on one: ``#3 0->1 (all_reduce#0 ring step 0
    chunk 1)=[1., 2.]``."""
    if not flying:
        return ["  in flight: none"]
    items = []
    for m in flying:
        head = f"#{m.id} {m.src}->{m.dst}" + (f" ({m.label})" if m.label else "")
        items.append((head, m.payload))
    brief = ValueStyle(min(style.max_elements, 8), style.precision, style.preview)
    one = "  in flight: " + "; ".join(h + ("" if v is None else "=" + value_text(v, 60, brief)) for h, v in items)
    if len(one) <= width:
        return [one]
    lines = ["  in flight:"]
    for head, v in items:
        line = f"    {head}"
        if v is not None:
            line += "=" + value_text(v, max(width - len(line) - 1, 12), style)
        lines.append(clip(line, width))
    return lines


class Stepper:
    """A cursor over a run's events: ``forward()``, ``back()``, ``goto(i)``, ``snapshot()``.

    Args:
        run: a finished run, its trace, or a live ``Engine`` (``World.start``) to run as far as asked.

    Examples:
        >>> import numpy as np
        >>> from simulator import Stepper, World
        >>> stepper = Stepper(World(2).run(lambda dev: dev.all_reduce(np.ones(1))))
        >>> stepper.forward(2).position, stepper.total
        (2, 10)
    """

    def __init__(self, run: Trace | Engine | Any) -> None:
        if isinstance(run, Engine):
            self._engine: Engine | None = run
            self.trace = run.trace
        else:
            self._engine = None
            self.trace = run if isinstance(run, Trace) else run.trace
        self.position = 0

    @property
    def total(self) -> int | None:
        if self._engine is not None and self._engine.pending:
            return None
        return len(self.trace.events)

    def forward(self, n: int = 1) -> Snapshot:
        """Advance n events (running a live simulation as far as needed)."""
        for _ in range(n):
            if self.position >= len(self.trace.events) and not (self._engine and self._engine.step()):
                break
            self.position += 1
        return self.snapshot()

    def back(self, n: int = 1) -> Snapshot:
        self.position = max(0, self.position - n)
        return self.snapshot()

    def goto(self, position: int) -> Snapshot:
        if position < 0:
            raise ValueError(f"goto({position}): positions start at 0 (before the first event)")
        self.position = 0
        return self.forward(position)

    def snapshot(self) -> Snapshot:
        """Replay events[0:position] into per-device memory and the set of messages in flight."""
        memory: list[dict[str, Any]] = [{} for _ in range(self.trace.world_size)]
        records: list[dict[str, Any]] = [{} for _ in range(self.trace.world_size)]
        flying: dict[int, Message] = {}
        events = self.trace.events[: self.position]
        changed = None
        for kind, rec in events:
            changed = None
            if kind == "send":
                flying[rec.id] = rec
            elif kind == "recv":
                flying.pop(rec.id, None)
            effect = memory_effect(kind, rec)
            if effect is None:
                continue
            rank, name, value = effect
            changed = (rank, name)
            if value is FREED:
                memory[rank].pop(name, None)
                records[rank].pop(name, None)
            else:
                memory[rank][name] = value
                records[rank][name] = rec
        last = events[-1] if events else None
        return Snapshot(self.position, self.total, last, memory, list(flying.values()), records, changed)

    def __iter__(self):
        """Every snapshot from the first event to the last."""
        while True:
            before = self.position
            snap = self.forward()
            if self.position == before:
                return
            yield snap


FREED = object()  # the value of a memory effect that drops the name


def memory_effect(kind: str, rec: Any) -> tuple[int, str, Any] | None:
    """What one event does to a device's memory: ``(rank, name, value)``, value ``FREED`` for a free.

    A named receive places its payload under its name; a hold, and an op whose output is kept, place
    the output; a free drops the name; anything else leaves memory alone (None). The one rule every
    replay of a trace uses (this stepper, ``simulator.views.web``), so they cannot disagree.
    """
    if kind == "recv":
        return None if rec.name is None else (rec.dst, rec.name, rec.payload)
    if kind == "free":
        return rec.rank, rec.name, FREED
    if kind == "hold" or (kind == "op" and rec.keep):
        return rec.rank, rec.name, rec.output
    return None
