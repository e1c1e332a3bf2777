"""One run as one JSON-able document: what both front ends of the step-through view render.

The notebook widget (``simulator.views.web.widget``) and the self-contained page (``simulator.views.web.page``)
draw the same document with the same ES module (``view.js``). Python decides everything a student
reads (the words for each event, the values as text, which message diverged); the module only draws
it and replays memory. The document::

    schema    "parallelism-simulator/views/web/1"
    title, story
    devices   number of devices
    time      {"unit": "us", "end": float}: every time below is in this unit
    values    value texts, shared by the events that show them: a string, or [short, long] when the
              card shows a short form (shape and dtype) and the tooltip the numbers, or [short, long,
              cells] for an array of up to 64 numbers: cells are its rows (the last axis), each a list of
              number texts, which the projector mode draws as a matrix
    grid      null, or how the projector mode lays the cards out: {"rows", "cols", "ranks": rows of
              ranks, "coords": per rank its mesh coordinate in words ("dp0 pp1 tp0")}
    events    one object per event, in trace order (see ``_event``):
                k   kind: send / recv / op / hold / free
                r   the device it happens on (the sender for a send, the receiver for a recv)
                o   the other device of a message
                m   the message id (send and recv)
                t   its time; t1 the op's end, or the message's arrival (send)
                n   the name of the value (op, hold, free, and named messages)
                lb  the message's label ("all_reduce#0 ring step 1 chunk 2", "0SEND_F1")
                pt  the part of the value this is (a shard: Op.index / Message.index), as text
                ps  the ranks a partial sum is over
                mb  the microbatch number the name or label says
                tg  an op's pass and microbatch as the timeline labels it ("F3", "B3", "W3"), where it has one
                v   index into values
                say the event in words: a string, or [before, after] the value's short text
                mem +1: the event puts its value in device r's memory under n; -1: it drops n
                fly +1: message m leaves (in flight); -1: it is received
    base      how many of ``events`` come before the first step (context of a thinned run)
    first     the trace index of the first stepped event; steps are 0 .. len(events) - base
    total     events in the whole run
    initial   {"mem": [[[name, event], ...] per device], "fly": [event, ...]}: the state at step 0
    check     null, or {"verdict", "text", "explain", "event", "marks", "rank", "where", "cells",
              "expected"}: event is the first divergence, marks the events whose value shows it (a
              message's send and recv), cells the flat indices of the wrong numbers in that value (when
              it and the expected value are arrays of one shape, up to 64 numbers), expected the index
              in values of the value that was due
    notice    null, or why the run is thinned and what is shown

Memory is not stored per step: stepping applies the ``mem``/``fly`` effects (one rule,
``simulator.views.stepper.memory_effect``), and the module keeps a snapshot every few hundred events so
jumping anywhere replays at most that many.

Runs longer than ``max_events`` are thinned, as the Chrome export collapses large runs: the document
holds a window of consecutive events (around the first divergence when there is one), with the values
still held and the messages still in flight at its start, and says so in ``notice``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.trace import Trace
from ...core.values import part_text
from ...cost.units import time_unit
from ...parallel.schedules.labels import op_tag
from ...tensors.mesh import DeviceMesh
from ..stepper import FREED, memory_effect
from .texts import CARD_ELEMENTS, LONG_ELEMENTS, Values, cells, signature, value_text, wrong_cells

__all__ = ["CARD_ELEMENTS", "LONG_ELEMENTS", "MAX_EVENTS", "build_document", "cells", "microbatch", "value_text"]

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...checker import CheckReport
    from ...core.engine import RunResult

SCHEMA = "parallelism-simulator/views/web/1"
MAX_EVENTS = 12_000  # a 64-device run of 10,000 events stays whole, and pages stay under 5 MB


@dataclass
class Source:
    """What a view shows: a finished trace, its check report if any, and words for its heading."""

    trace: Trace
    report: CheckReport | None
    title: str
    story: str


def resolve(run: Any, check: CheckReport | None = None) -> Source:
    """A trace and report from a run, a trace, or anything that says what it shows with ``view_source()``,
    (trace, report, title, story): a scenario and a scenario's run do (``simulator.teach``)."""
    if isinstance(run, str):
        raise TypeError(
            f"cannot show {run!r} here: simulator.views knows runs, not scenario names; "
            f"use simulator.view.show({run!r}), which looks the name up"
        )
    source = getattr(run, "view_source", None)
    if source is not None:
        trace, report, title, story = source()
        return Source(trace, check if check is not None else report, title, story)
    trace = run if isinstance(run, Trace) else getattr(run, "trace", None)
    if not isinstance(trace, Trace):
        raise TypeError(
            f"cannot show a {type(run).__name__}: give a run (World(...).run(...)), its trace, a Scenario, "
            "a scenario's run, or (through simulator.view) a scenario's name such as 'split'"
        )
    return Source(trace, check, f"a run on {trace.world_size} devices", "")


def build_document(
    run: RunResult | Trace | Any,
    check: CheckReport | None = None,
    *,
    title: str | None = None,
    story: str | None = None,
    max_events: int = MAX_EVENTS,
    first_event: int | None = None,
    mesh: DeviceMesh | None = None,
    tag: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """The view document of a run (see the module docstring); ``run`` as for ``resolve``.

    check: a ``CheckReport`` to highlight (a scenario brings its own). max_events: thin longer runs to
    a window of this many events, starting at ``first_event`` (default: the start, or shortly before
    the first divergence when it lies further on). mesh: the devices' mesh, on whose grid the projector
    mode lays out the cards (default: one row of up to four, else two rows). tag: how the timeline
    labels an op (default ``simulator.parallel.schedules.labels.op_tag``: ``F3``, ``I3``, ``W3``).
    """
    if max_events < 1:
        raise ValueError(f"max_events={max_events}: give a positive number of events to show")
    src = resolve(run, check)
    trace, report = src.trace, src.report
    total = len(trace.events)
    diverged = _divergence_event(report)
    first = _window_start(total, max_events, first_event, diverged)
    stop = min(total, first + max_events)
    memory, flying = _replay(trace, first)
    context = sorted({i for mem in memory for i in mem.values()} | set(flying.values()))
    position = {i: n for n, i in enumerate(context)}
    base = len(context)
    position.update({i: base + i - first for i in range(first, stop)})

    unit, scale = time_unit(trace.end_time or 1e-6)
    values = Values()
    tag = tag or op_tag
    events = [_event(kind, rec, scale, unit, values, tag) for kind, rec in (trace.events[i] for i in context)]
    events += [_event(kind, rec, scale, unit, values, tag) for kind, rec in trace.events[first:stop]]
    return {
        "schema": SCHEMA,
        "title": title if title is not None else src.title,
        "story": story if story is not None else src.story,
        "devices": trace.world_size,
        "time": {"unit": unit, "end": _num(trace.end_time * scale)},
        "values": values.table,
        "events": events,
        "base": base,
        "first": first,
        "total": total,
        "initial": {
            "mem": [[[name, position[i]] for name, i in mem.items()] for mem in memory],
            "fly": [position[i] for i in flying.values()],
        },
        "check": _check(report, trace, position, values),
        "grid": _grid(mesh, trace.world_size),
        "notice": _notice(total, first, stop, max_events, diverged) if stop - first < total else None,
    }


def _divergence_event(report: CheckReport | None) -> int | None:
    first = getattr(report, "first", None)
    return None if first is None else first.event


def _window_start(total: int, max_events: int, first_event: int | None, diverged: int | None) -> int:
    if first_event is not None:
        if not 0 <= first_event < max(total, 1):
            raise ValueError(f"first_event={first_event}: the run has events 0 to {total - 1}")
        return first_event
    if total <= max_events or diverged is None or diverged < max_events:
        return 0
    return max(0, min(diverged - max_events // 4, total - max_events))  # the divergence a quarter in


def _replay(trace: Trace, stop: int) -> tuple[list[dict[str, int]], dict[int, int]]:
    """Which event set each value held, and which send each message in flight is, before event ``stop``."""
    memory: list[dict[str, int]] = [{} for _ in range(trace.world_size)]
    flying: dict[int, int] = {}
    for i, (kind, rec) in enumerate(trace.events[:stop]):
        if kind == "send":
            flying[rec.id] = i
        elif kind == "recv":
            flying.pop(rec.id, None)
        effect = memory_effect(kind, rec)
        if effect is not None:
            rank, name, value = effect
            if value is FREED:
                memory[rank].pop(name, None)
            else:
                memory[rank][name] = i
    return memory, flying


def _event(kind: str, rec: Any, scale: float, unit: str, values: Values, tag: Callable[[str], str]) -> dict[str, Any]:
    e: dict[str, Any] = {"k": kind}
    if kind in ("send", "recv"):
        e["r"], e["o"] = (rec.src, rec.dst) if kind == "send" else (rec.dst, rec.src)
        e["m"] = rec.id
        e["t"] = _num((rec.t_send if kind == "send" else rec.t_recv) * scale)
        if kind == "send" and rec.t_arrive is not None:
            e["t1"] = _num(rec.t_arrive * scale)
        value, sig = rec.payload, signature(rec.shape, rec.dtype)
        e["fly"] = 1 if kind == "send" else -1
    else:
        e["r"] = rec.rank
        e["t"] = _num(rec.t_start * scale)
        if kind == "op":
            e["t1"] = _num(rec.t_end * scale)
        value, sig = (None, "") if kind == "free" else (rec.output, "")
    if rec.name is not None:
        e["n"] = rec.name
    label = getattr(rec, "label", None)
    if label:
        e["lb"] = label
    part = part_text(rec.index)
    if part:
        e["pt"] = part
    partial = getattr(rec, "partial", None)  # a tuple of ranks, on records that say they are partial sums
    if partial:
        e["ps"] = [int(r) for r in partial]
    mb = microbatch(rec.name, label)
    if mb is not None:
        e["mb"] = mb
    if kind == "op" and rec.name:
        passed = tag(rec.name)
        if _PASS.fullmatch(passed):
            e["tg"] = passed
    if kind != "free":
        e["v"] = values.add(value, sig)
    effect = memory_effect(kind, rec)
    if effect is not None:
        e["mem"] = -1 if effect[2] is FREED else 1
    said = _say(kind, rec, e, _VALUE if values.short(e.get("v")) else "", unit)
    e["say"] = said.split(_VALUE) if _VALUE in said else said  # [before, after] the value's text
    return e


_PASS = re.compile(r"[FBIW]\d+")  # a pass and its microbatch, as the pipeline papers label them
_VALUE = "\x00"  # where the value's text goes in an event's words: stored once, in values, not in every sentence


def _say(kind: str, rec: Any, e: dict[str, Any], value: str, unit: str) -> str:
    """The event in words, for the line under the controls."""
    what = _what(e, value)
    mb = f" (microbatch {e['mb']})" if "mb" in e else ""
    if kind == "send":
        label = f" ({e['lb']})" if "lb" in e else ""
        arrive = f"; it arrives at t={e['t1']:.4g} {unit}" if "t1" in e else ""
        return (
            f"device {rec.src} sends message #{rec.id} to device {rec.dst}{label}: {what}{mb}, "
            f"{rec.nbytes:,} bytes{arrive}"
        )
    if kind == "recv":
        label = f" ({e['lb']})" if "lb" in e else ""
        return f"device {rec.dst} receives message #{rec.id} from device {rec.src}{label}: {what}{mb}"
    if kind == "op":
        span = e["t1"] - e["t"]  # an op the cost model does not price takes no time: say so, not "taking 0 us"
        took = f", taking {span:.4g} {unit}" if span > 0 else " (no time in the cost model)"
        kept = "" if rec.keep else " (a temporary: not kept in memory)"
        return f"device {rec.rank} computes {what}{mb}{took}{kept}"
    if kind == "hold":
        doc = f" ({rec.doc})" if getattr(rec, "doc", None) else ""
        return f"device {rec.rank} holds {what}{mb}{doc}"
    return f"device {rec.rank} frees {rec.name}{mb}"


def _what(e: dict[str, Any], value: str) -> str:
    name = e.get("n")
    part = f" part {e['pt']}" if "pt" in e else ""
    partial = f" (a partial sum over devices {', '.join(map(str, e['ps']))})" if "ps" in e else ""
    head = f"{name}{part}{partial}" if name else "a value"
    return f"{head} = {value}" if value else head


def _grid(mesh: DeviceMesh | None, devices: int) -> dict[str, Any] | None:
    """The cards' grid for a mesh: its first axis down, the others across (a 2 x 2 x 2 mesh of dp, pp and tp:
    two rows, one per replica, of four cards)."""
    if mesh is None:
        return None
    if mesh.ranks.size != devices or sorted(mesh.ranks.reshape(-1).tolist()) != list(range(devices)):
        raise ValueError(f"the mesh {mesh} does not hold each of the run's {devices} devices once")
    ranks = mesh.ranks.reshape(mesh.shape[0], -1) if mesh.ndim > 1 else mesh.ranks.reshape(1, -1)
    coords = [""] * devices
    for r in range(devices):
        coords[r] = " ".join(f"{name}{c}" for name, c in zip(mesh.dim_names, mesh.coordinate(r)))
    return {"rows": int(ranks.shape[0]), "cols": int(ranks.shape[1]), "ranks": ranks.tolist(), "coords": coords}


_MB_NAME = re.compile(r"\.mb(\d+)$")  # simulator.parallel.mlp.mb: "h2.mb3"
_MB_ACTION = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W)(\d+)$")  # a schedule action: "1F0", "0SEND_F1"
_MB_SHORT = re.compile(r"^(F|B)(\d+)$")  # "F0" in a label (not in a name: "W1" is a weight, not microbatch 1)


def microbatch(name: str | None, label: str | None = None) -> int | None:
    """The microbatch a pipeline value belongs to, as its name ("h1.mb0") or label ("0SEND_F1") says."""
    if name and "+" not in name:  # "dW3.mb0+dW3.mb1" is a sum over microbatches: no one number
        m = _MB_NAME.search(name) or _MB_ACTION.match(name)
        if m:
            return int(m[m.lastindex])
    if label:
        m = _MB_ACTION.match(label) or _MB_SHORT.match(label)
        if m:
            return int(m[m.lastindex])
    return None


def _check(report: CheckReport | None, trace: Trace, position: dict[int, int], values: Values) -> dict[str, Any] | None:
    if report is None:
        return None
    first = report.first
    verdict = getattr(report, "verdict", None) or ("passed" if report.ok else "FAILED")
    out: dict[str, Any] = {
        "verdict": verdict,
        "text": str(report),
        "explain": None,
        "event": None,
        "marks": [],
        "cells": None,
        "expected": None,
    }
    if first is None:
        return out
    marks = [first.event]
    if first.where == "message":  # the wrong value travels: mark where it lands too
        marks += [i for i, (k, rec) in enumerate(trace.events) if k == "recv" and rec.id == first.record.id]
    out.update(
        explain=first.explain(),
        event=position.get(first.event),
        marks=[position[i] for i in marks if i in position],
        rank=first.rank,
        where=first.where,
        cells=wrong_cells(first.found, first.expected),
        expected=values.add(first.expected, "") if first.expected is not None else None,
    )
    return out


def _notice(total: int, first: int, stop: int, max_events: int, diverged: int | None) -> str:
    around = " (around the first divergence)" if first > 0 and diverged is not None and first <= diverged < stop else ""
    context = ", starting from the values held and the messages in flight before them" if first > 0 else ""
    return (
        f"thinned: this run has {total:,} events, more than the {max_events:,} a page steps through, so it shows "
        f"events {first:,} to {stop - 1:,}{around}{context}; pass max_events= (or --max-events) to show more, "
        "or first_event= (--first-event) to move the window"
    )


def _num(x: float) -> float:
    return float(f"{x:.9g}")  # nine digits tell every event apart and keep the document small
