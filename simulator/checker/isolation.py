"""Isolation checked, not assumed: data that reaches a device outside a message, found by differential runs.

Simulated devices share one Python process, so a program can move data the way real processes cannot: through
a module-level dict, a class attribute, another device's frame. The trace never sees it. So the check runs the
program again with some devices' own inputs changed (``differential.py``), and every *other* device is handed,
at each receive, what it received in the unchanged run (``Engine.replay``). A device that only knows what it
was given and what it received then does exactly what it did before, event for event. So on every other device:

- any event that differs (an op's inputs or output, a held value, a send, the steps it takes, the result)
  got there outside messages: FAILED, in the lesson's words ("device 1's B depends on x, which only device 0
  holds, but no message carried it ..."). A value computed in plain NumPy from smuggled data shows where it
  first touches the trace: a send, an op's input, the result.

Handing over the unchanged run's payloads is what makes it whole: a device that receives a changed message and
then reads smuggled data would otherwise be explained by the message. (Comparing without it, the first change
on a device must be a receive whose payload changed; that misses a device that first receives, then smuggles.)

Runs: one per device with data of its own (at most N), or, where fewer, two per bit of the rank (devices
whose bit b is 1 changed together, then those whose bit is 0): every ordered pair of devices is then split
by some run, in 2*ceil(log2 N) runs (10 for 32 devices). A device found in a group's run is named with the
devices of the runs that changed it, less those of the runs that did not. The check compares with the run it
is given; only when it finds something does it run the unchanged program once more (the control), so that a
program whose values change from run to run by themselves (a clock, an unseeded generator) is said to be that,
not accused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy import array_equal as _array_equal  # the grader's own, taken before any student code loads

from ..core.columnar import ColumnarTrace
from ..core.ordering import CODE_RECV, CODE_SEND
from ..core.rows import FREE, HOLD
from ..core.trace import Trace
from .differential import Differential, held_generators
from .verdict import Unchecked, Violation

WORDS_WHY = (
    "but no message carried it: the program shares it outside messages (a global, a class attribute, another "
    "device's frame?). Real processes cannot do that"
)


@dataclass
class Isolation:
    """What the isolation check found: the devices data reached outside messages, what it could not check, notes,
    and how many runs it made besides the one checked."""

    leaks: list[Violation]
    unchecked: list[Unchecked]
    notes: list[str]
    runs: int


def plan(size: int, owners: list[int]) -> list[frozenset[int]]:
    """The sets of devices whose own data each rerun changes (see the module docstring): at most ``size`` runs."""
    singles = [frozenset([r]) for r in owners]
    bits = max(1, (size - 1).bit_length())
    groups = []
    for b in range(bits):
        for value in (1, 0):
            group = frozenset(r for r in owners if (r >> b) & 1 == value)
            if group and group not in groups:
                groups.append(group)
    return groups if len(groups) < len(singles) else singles


def check_isolation(run: Any, differential: Differential) -> Isolation:
    """Run ``differential`` with each planned set of devices' own data changed; compare each with ``run``.

    The two halves apart, for a grader that must not run student code where it decides (the reruns run the
    program; the comparison only reads their traces): ``reruns(run, differential)`` and ``control_run`` in the
    program's process, ``compared(run, the reruns, differential, control)`` where the verdict is made."""
    if not differential.own:
        note = (
            "isolation not checked: no device was given data of its own (pass each device its part with "
            "PerDevice, or declare what each is given in the split), so there was nothing to change"
        )
        return Isolation([], [], [note], 0)
    with held_generators() as reset:
        return compared(run, reruns(run, differential, reset), differential, lambda: control_run(differential, reset))


def reruns(run: Any, differential: Differential, reset: Callable[[], None] = lambda: None) -> Iterator[tuple]:
    """Each planned rerun, as it ends: (the devices whose own data it changed, its ``RunResult`` or the exception
    it stopped with), every other device handed what it received in ``run``; ``reset()`` before each (the random
    generators, ``held_generators``)."""
    base = _Steps(*_trace_and_outputs(run))
    for group in plan(differential.size, sorted(differential.own)):
        reset()
        yield group, _finished(differential, group, _Replay(base, group))


def control_run(differential: Differential, reset: Callable[[], None] = lambda: None) -> Any:
    """The unchanged program run again (its ``RunResult``, or the exception it stopped with)."""
    reset()
    return _finished(differential, frozenset(), None)


def _finished(differential: Differential, group: frozenset[int], replay: Any) -> Any:
    try:
        with differential.started(group) as engine:
            engine.replay = replay
            return engine.finish()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 (a rerun that stops, SystemExit too, says so; the check goes on)
        return exc


def compared(
    run: Any, runs: Iterable[tuple[frozenset[int], Any]], differential: Differential, control: Any = None
) -> Isolation:
    """What the reruns show (see ``check_isolation``), each compared with ``run`` as it comes (a large run's reruns
    are not all held at once). ``control``: the unchanged program's run again, or a function that makes it, asked
    for only when something is found (a program whose values change by themselves is then said to be that)."""
    trace, outputs = _trace_and_outputs(run)
    base = _Steps(trace, outputs)
    groups = plan(differential.size, sorted(differential.own))
    kept: list[tuple[frozenset[int], _Steps]] = []
    failed: list[Unchecked] = []
    count = 0
    for group, done in runs:
        count += 1
        if isinstance(done, BaseException):
            failed.append(_stopped(group, differential, done))
            continue
        steps = _Steps(done.trace, list(done.outputs))
        del done
        if _found(base, [(group, steps)]):
            kept.append((group, steps))
    found = _found(base, kept)
    notes = []
    if found and control is not None:
        again = control() if callable(control) else control
        count += 1
        steps = None if isinstance(again, BaseException) else _Steps(again.trace, list(again.outputs))
        moved = [j for j in range(trace.world_size) if steps is None or base.first_change(steps, j)]
        if moved:
            notes.append(
                f"device {moved[0]}'s values change from run to run with nothing changed (a clock, a generator "
                "nobody seeded?): the isolation check compared the runs with a second run of the same inputs"
            )
            if steps is not None:
                found = _found(steps, kept)
    leaks = [_leak(j, hits, groups, differential) for j, hits in sorted(found.items())]
    return Isolation(sorted(leaks, key=lambda v: v.event), failed, notes, count)


def _trace_and_outputs(run: Any) -> tuple[Trace, list]:
    trace = run if isinstance(run, Trace) else run.trace
    return trace, list(getattr(run, "outputs", None) or trace.outputs or [None] * trace.world_size)


def _found(base: _Steps, reruns: list[tuple[frozenset[int], _Steps]]) -> dict[int, list]:
    """device -> [(group, what changed first)] for each rerun that changed it outside messages."""
    found: dict[int, list] = {}
    for group, rerun in reruns:
        for j in range(len(base.events)):
            if j in group:
                continue
            change = base.first_change(rerun, j)
            if change is not None:
                found.setdefault(j, []).append((group, change))
    return found


class _Steps:
    """One run's events by device, in program order, and its results. An event is (index in the trace, kind, what
    must match: a peer and tag, or a name, its payload: what it sent or received, or an op's (inputs, output), and
    where its record is). A columnar trace is read from its columns: a record is made only for what is reported."""

    def __init__(self, trace: Trace, outputs: list) -> None:
        self.trace, self.outputs = trace, outputs
        self.events: list[list[tuple]] = [[] for _ in range(trace.world_size)]
        if isinstance(trace, ColumnarTrace):
            self._from_columns(trace)
            return
        for i, (kind, rec) in enumerate(trace.events):
            if kind == "send":
                self.events[rec.src].append((i, kind, (rec.dst, rec.tag), rec.payload, rec))
            elif kind == "recv":
                self.events[rec.dst].append((i, kind, (rec.src, rec.tag), rec.payload, rec))
            elif kind in ("op", "hold"):
                self.events[rec.rank].append((i, kind, rec.name, (rec.inputs, rec.output), rec))

    def _from_columns(self, trace: ColumnarTrace) -> None:
        cols = trace.event_columns()
        kinds, rows, ranks, op_kinds, names = (cols[k].tolist() for k in ("kind", "row", "rank", "op_kind", "name"))
        rec = trace.recorder  # the columns' payloads, as the checker's walk reads them (run_check.py)
        msgs = rec.table("msgs", copy=False)
        src, dst, tag = msgs["src"].tolist(), msgs["dst"].tolist(), msgs["tag"].tolist()
        msg_payloads, op_payloads, texts = rec.msg_payloads, rec.op_payloads, rec.names.values
        events = self.events
        for i, (kind, row, rank, op_kind, name) in enumerate(zip(kinds, rows, ranks, op_kinds, names)):
            if kind == CODE_SEND:
                events[rank].append((i, "send", (dst[row], tag[row]), msg_payloads[row], (0, row)))
            elif kind == CODE_RECV:
                events[rank].append((i, "recv", (src[row], tag[row]), msg_payloads[row], (0, row)))
            elif op_kind != FREE:
                kind_text = "hold" if op_kind == HOLD else "op"
                events[rank].append((i, kind_text, texts[name], op_payloads[row], (1, row)))

    def record(self, where: Any) -> Any:
        """The record of an event (made from the columns where the trace keeps columns)."""
        if isinstance(where, tuple):
            return self.trace.op_at_row(where[1]) if where[0] else self.trace.message_at_row(where[1])
        return where

    def received(self, rank: int) -> list:
        """What device ``rank`` received, in order."""
        return [payload for _, kind, _, payload, _ in self.events[rank] if kind == "recv"]

    def first_change(self, other: _Steps, rank: int) -> tuple[str, int, Any] | None:
        change = _first_change(self.events[rank], self.outputs[rank], other.events[rank], other.outputs[rank])
        if change is None:
            return None
        what, i, where = change
        return what, i, None if where is None else self.record(where)


class _Replay:
    """``Engine.replay`` for a rerun: each device outside ``changed`` is handed, at its k-th receive, what it got at
    its k-th receive in the unchanged run (a payload of the same shape and dtype; anything else as it comes)."""

    def __init__(self, base: _Steps, changed: frozenset[int]) -> None:
        self.received = [base.received(r) for r in range(len(base.events))]
        self.changed = changed
        self.taken = [0] * len(base.events)

    def __call__(self, rank: int, payload: Any) -> Any:
        if rank in self.changed:
            return payload
        k = self.taken[rank]
        self.taken[rank] = k + 1
        got = self.received[rank]
        old = got[k] if k < len(got) else None
        alike = type(old) is type(payload) and getattr(old, "shape", None) == getattr(payload, "shape", None)
        return old if alike and getattr(old, "dtype", None) == getattr(payload, "dtype", None) else payload


def _first_change(ea: list, a_out: Any, eb: list, b_out: Any) -> tuple[str, int, Any] | None:
    """The first of a device's events that differs between two runs, (what, event index in the first run, where
    its record is), or None. A receive differs by where it came from, not by its payload: the rerun hands the
    device the unchanged run's payload (``_Replay``)."""
    for (i, kind, key, payload, where), (_, kind_b, key_b, payload_b, _) in zip(ea, eb):
        if kind != kind_b or key != key_b:
            return ("steps", i, where)
        if kind == "recv":
            continue
        if kind == "send":
            if not _same(payload, payload_b):
                return ("send", i, where)
        elif not _same(payload[0], payload_b[0]):
            return ("input", i, where)
        elif not _same(payload[1], payload_b[1]):
            return (kind, i, where)
    if len(ea) != len(eb):
        at = ea[len(eb)] if len(ea) > len(eb) else (ea[-1] if ea else (-1, None, None, None, None))
        return ("steps", at[0], at[4])
    if not _same(a_out, b_out):
        return ("result", ea[-1][0] if ea else -1, None)
    return None


def _same(a: Any, b: Any) -> bool:
    """Exactly the same value (the runs are deterministic: what nothing changed is equal to the last bit)."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "biufc":  # the same bits: equal NaNs are equal, a changed sign of zero is a change
            return a.tobytes() == b.tobytes()
        return bool(_array_equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # a value with no plain equality: compare what it shows
        return repr(a) == repr(b)


def _what(change: tuple[str, int, Any], rank: int) -> str:
    kind, _, rec = change
    if kind == "result":
        return f"device {rank}'s result"
    if kind == "send":
        return f"the message device {rank} sent to device {rec.dst} (message #{rec.id})"
    if kind == "steps":  # another op, another peer, one event more or fewer: where the paths part
        at = (
            ""
            if rec is None
            else f" (from its {rec.name} on)"
            if hasattr(rec, "rank")
            else f" (from message #{rec.id} on)"
        )
        return f"the steps device {rank} takes{at}"
    return f"device {rank}'s {rec.name}"


def _leak(rank: int, hits: list, groups: list[frozenset[int]], differential: Differential) -> Violation:
    """One device that changed outside messages, named with the devices whose data reached it: those in every run
    that changed it (or, for several, in some), less those of the runs that did not (where each run changed one
    device, exactly those)."""
    flagged = {g for g, _ in hits}
    cleared = set().union(*(g for g in groups if g not in flagged and rank not in g))
    # one source is in every run that changed the device; several, each in some
    sources = (set.intersection(*map(set, flagged)) - cleared) or (set().union(*flagged) - cleared)
    sources = sources or set().union(*flagged)
    change = min((c for _, c in hits), key=lambda c: c[1])
    own = [name for s in sorted(sources) for name in differential.own.get(s, ())]
    names = _listed(list(dict.fromkeys(own)))
    devices = sorted(sources)
    if len(devices) == 1:
        whose = f"{names}, which only device {devices[0]} holds"
    else:
        exact = all(len(g) == 1 for g in flagged)
        whose = f"{names}, which only devices {_listed([str(s) for s in devices])} hold"
        whose += "" if exact else " (some of them)"
    text = f"{_what(change, rank)} depends on {whose}, {WORDS_WHY}"
    return Violation("isolation", rank, change[1], text, change[2])


def _stopped(group: frozenset[int], differential: Differential, exc: BaseException) -> Unchecked:
    own = _listed([n for r in sorted(group) for n in differential.own.get(r, ())])
    devices = _listed([str(r) for r in sorted(group)])
    return Unchecked(
        "isolation",
        f"run again with {own} of device{'s' if len(group) > 1 else ''} {devices} changed, the program stopped "
        f"({type(exc).__name__}: {exc}), so whether data reaches other devices outside messages was not checked",
    )


def _listed(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


__all__ = ["WORDS_WHY", "Isolation", "check_isolation", "compared", "control_run", "plan", "reruns"]
