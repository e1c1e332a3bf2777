"""Step through a run event by event, forward and back, seeing what each device holds.

``Stepper`` wraps a finished ``Trace`` or a live ``Engine``. With a live engine, stepping forward
advances the simulation itself, one event at a time; with either, stepping back replays the log.
At each position the snapshot shows every device's memory (names, shapes, and the values of small
arrays) and the messages in flight: sent, not yet received.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine import Engine
from .trace import Message, Trace, format_event
from .units import inline


@dataclass
class Snapshot:
    """The state after ``position`` events: memory per device and messages in flight."""

    position: int
    total: int | None  # None while a live run may still produce events
    last_event: tuple[str, Any] | None
    memory: list[dict[str, Any]]
    in_flight: list[Message]

    def render(self) -> str:
        total = "?" if self.total is None else self.total
        head = f"step {self.position}/{total}"
        head += f"  {format_event(*self.last_event)}" if self.last_event else "  (start: nothing has happened yet)"
        lines = [head]
        width = len(f"device {len(self.memory) - 1}")
        for rank, mem in enumerate(self.memory):
            held = "  ".join(f"{name}{_brief(v)}" for name, v in mem.items()) or "(empty)"
            lines.append(f"  {f'device {rank}':<{width}} | {held}")
        if self.in_flight:
            lines.append(
                "  in flight: " + "; ".join(f"#{m.id} {m.src}->{m.dst}{_brief(m.payload)}" for m in self.in_flight)
            )
        else:
            lines.append("  in flight: none")
        return "\n".join(lines)

    __str__ = render

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.render())


class Stepper:
    """A cursor over a run's events: ``forward()``, ``back()``, ``goto(i)``, ``snapshot()``."""

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
        if self._engine is not None and self._engine._heap:
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
        flying: dict[int, Message] = {}
        events = self.trace.events[: self.position]
        for kind, rec in events:
            if kind == "send":
                flying[rec.id] = rec
            elif kind == "recv":
                flying.pop(rec.id, None)
            effect = memory_effect(kind, rec)
            if effect is None:
                continue
            rank, name, value = effect
            if value is FREED:
                memory[rank].pop(name, None)
            else:
                memory[rank][name] = value
        last = events[-1] if events else None
        return Snapshot(self.position, self.total, last, memory, list(flying.values()))

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
    replay of a trace uses (this stepper, ``simulator.view``), so they cannot disagree.
    """
    if kind == "recv":
        return None if rec.name is None else (rec.dst, rec.name, rec.payload)
    if kind == "free":
        return rec.rank, rec.name, FREED
    if kind == "hold" or (kind == "op" and rec.keep):
        return rec.rank, rec.name, rec.output
    return None


def _brief(v: Any) -> str:
    if v is None:
        return ""
    a = np.asarray(v)
    if a.size <= 6:
        return "=" + inline(a, precision=4)
    return f":{a.shape} {a.dtype.name}"
