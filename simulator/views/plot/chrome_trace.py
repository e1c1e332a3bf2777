"""Export a run in the Chrome Trace Event format (JSON), which Perfetto and chrome://tracing open.

Layout in the viewer:

- one process per device (``pid`` = rank, named "device r", sorted by rank);
- in each, one thread track per kind of activity: ``compute`` (ops), ``send`` (bytes leaving the
  device) and ``recv`` (bytes arriving); when a device has several messages on the wire at once the
  extra ones go to ``send 2``, ``send 3``... so no two slices on one track overlap;
- a flow arrow for every message, from its send slice to its recv slice. Flow events use the legacy
  ``s``/``f`` phases with ``bp: "e"`` (bind to the enclosing slice) and carry the same ``ts``, ``cat``,
  ``pid`` and ``tid`` as the slice they bind to, which is what both Perfetto and the Chrome DevTools
  importer match on; each flow event is written right after its slice;
- a ``memory`` counter per device (bytes held, from ``simulator.views.memory``);
- given the run's check report, its verdict in ``otherData`` and, where it FAILED, the first divergent message or
  op marked ("first divergence", with the checker's explanation in its args) and an instant event at that time
  (the classroom bug's wrong input shows where it crosses, named by what it carried: "x, not A, -> 1").

Timestamps and durations are in microseconds (the format's unit), as floats. Slices come from
``simulator.views.activity``, so their times are exactly the simulated ones.

Runs too large for the viewers (they struggle above about a million events) are exported collapsed
(``simulator.views.plot.chrome_thin``): each device's tracks are thinned to a number of slices that fits
``max_events``, each slice saying what it merges, worked out on the trace's columns and streamed, so a
run of millions of messages exports in seconds. A collapsed export says so: in ``otherData``, in a
global instant event the viewer shows at time 0, and in the returned ``ExportInfo``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.files import atomic_write
from ...core.trace import Trace
from ..activity import _first_free, message_spans, unpack
from ..memory import memory_timeline
from ..memory_columns import memory_steps
from .chrome_thin import thinned_events

if TYPE_CHECKING:
    from ...checker.verdict import CheckReport
    from ...core.engine import RunResult
    from ...cost.model import CostModel

MAX_EVENTS = 1_000_000
US = 1e6  # seconds -> microseconds
TRACK_ORDER = {"compute": 0, "send": 1, "recv": 2}


@dataclass
class Slice:
    """One complete ("X") event before lanes are assigned."""

    rank: int
    track: str
    t0: float
    t1: float
    name: str
    cat: str
    args: dict[str, Any]
    flow_out: int | None = None  # flow id that starts at this slice
    flow_in: int | None = None  # flow id that ends at this slice


@dataclass
class ExportInfo:
    """What an export contains: event count, and whether (and how much) it was collapsed."""

    events: int
    run_events: int
    collapsed: bool
    note: str
    path: Path | None = None


def chrome_trace(
    run: RunResult | Trace,
    *,
    cost: CostModel | None = None,
    max_events: int = MAX_EVENTS,
    memory: bool = True,
    report: CheckReport | None = None,
) -> dict[str, Any]:
    """The run as a Chrome Trace Event JSON object (a dict with ``traceEvents``); ``report``: its check's report."""
    events, info, other = _export(run, cost, max_events, memory, report)
    listed = [json.loads(ev) if isinstance(ev, str) else ev for ev in events]  # (thinned events come as text)
    return {"traceEvents": listed, "displayTimeUnit": "ns", "otherData": other}


def write_chrome_trace(
    run: RunResult | Trace,
    path: str | Path,
    *,
    cost: CostModel | None = None,
    max_events: int = MAX_EVENTS,
    memory: bool = True,
    report: CheckReport | None = None,
) -> ExportInfo:
    """Write the run as Chrome Trace Event JSON to ``path``, one event per line (streamed).

    The file is written whole or not at all (``simulator.core.files.atomic_write``): an export that fails
    part-way leaves an existing file as it was. ``-`` writes to standard output; a device or pipe is written
    through.

    Args:
        run: a run (or its trace).
        path: the file to write; ``-`` for standard output.
        cost: the cost model to describe in the file (default: the run's).
        max_events: past this many events, each device's tracks are thinned into slices that fit (the file
            says so).
        memory: add each device's memory as a counter track.
        report: the run's check report (``check(run, reference)``): its verdict goes in the file, and where it
            FAILED its first divergence is marked.

    Returns:
        An ``ExportInfo``: how many events were written, and whether any were collapsed.

    Examples:
        >>> import json, os, tempfile
        >>> import numpy as np
        >>> from simulator import World, write_chrome_trace
        >>> path = os.path.join(tempfile.mkdtemp(), "run.json")
        >>> write_chrome_trace(World(2).run(lambda dev: dev.all_reduce(np.ones(4))), path).events
        36
        >>> len(json.load(open(path))["traceEvents"])
        36
    """
    path = Path(path)
    events, info, other = _export(run, cost, max_events, memory, report)
    count = 0
    with atomic_write(path) as f:
        f.write('{"displayTimeUnit": "ns", "otherData": ' + json.dumps(other) + ',\n"traceEvents": [\n')
        encode = json.JSONEncoder(separators=(",", ":")).encode
        for ev in events:
            f.write((",\n" if count else "") + (ev if isinstance(ev, str) else encode(ev)))
            count += 1
        f.write("\n]}\n")
    info.events = count
    info.path = path
    return info


def _export(run, cost, max_events: int, memory: bool, report=None) -> tuple[Iterator[dict], ExportInfo, dict]:
    first = _divergent(report) if report is not None else None
    events, info, other = _export_run(run, cost, max_events, memory, first)
    if report is None:
        return events, info, other
    other["check"] = {"verdict": report.verdict, "text": str(report)}
    mark = _divergence_mark(report.verdict, first) if first is not None else None
    if mark is None:
        return events, info, other
    info.run_events += 1
    return chain(events, [mark]), info, other


def _export_run(run, cost, max_events: int, memory: bool, first) -> tuple[Iterator[dict], ExportInfo, dict]:
    if max_events < 1:
        raise ValueError(f"max_events={max_events}: give a positive event budget (viewers handle ~1,000,000)")
    trace, cost = unpack(run, cost)
    fixed = 8 * trace.world_size  # process and track names
    other: dict[str, Any] = {"generator": "parallelism-simulator", "time_unit": "microseconds"}
    if cost is not None:
        other["cost_model"] = cost.describe()
    # an upper estimate first (ops, 2 slices + 2 flow events per message), without making a record per event
    estimate = len(trace.ops) + 4 * len(trace.messages) + fixed
    if estimate > max_events:
        counters = len(memory_steps(trace)[0]) if memory else 0
        events, note = thinned_events(trace, cost, max_events, estimate + counters, memory)
        other["collapsed"] = note
        return events, ExportInfo(0, estimate + counters, True, note), other
    msgs = [m for m in trace.messages if m.t_arrive is not None]
    waiting = _waiting_sends(trace)
    mem = memory_timeline(trace) if memory else None
    counters = sum(len(t) for t in mem.times) if mem else 0
    full = len(trace.ops) + 4 * len(msgs) + len(waiting) + counters + fixed
    if full <= max_events:
        slices = _op_slices(trace.ops) + _message_slices(msgs, cost) + waiting
        if first is not None:
            _mark_first(slices, first)
        return (
            _events(trace.world_size, slices, mem, ExportInfo(full, full, False, "")),
            ExportInfo(full, full, False, ""),
            other,
        )
    events, note = thinned_events(trace, cost, max_events, full, memory)
    other["collapsed"] = note
    return events, ExportInfo(0, full, True, note), other


@dataclass
class _FirstDivergence:
    """Where a FAILED report first diverges, when that is one event: its kind ("message" or "op"), its record, the
    report's divergence and the checker's explanation of it."""

    key: str
    record: Any
    divergence: Any
    explain: str


def _divergent(report: CheckReport) -> _FirstDivergence | None:
    first = report.first
    rec = getattr(first, "record", None)
    if rec is None or rec.id is None:
        return None
    return _FirstDivergence("message" if first.where == "message" else "op", rec, first, first.explain())


def _mark_first(slices: list[Slice], first: _FirstDivergence) -> None:
    """The first divergent message's (or op's) slices named so, with the checker's explanation in their args."""
    rec, d = first.record, first.divergence
    for s in slices:
        if s.args.get(first.key) == rec.id:
            if first.key == "message" and d.is_also:  # named by what it carried, not by what the receiver declared
                arrow = f"-> {rec.dst}" if s.track == "send" else f"<- {rec.src}"
                s.name = f"{d.is_also[0]}, not {d.name}, {arrow}"
            s.name += " (first divergence)"
            s.args = {**s.args, "check": first.explain}


def _divergence_mark(verdict: str, first: _FirstDivergence) -> dict | None:
    """An instant event on the device that holds the first wrong value, when it has it."""
    t = first.record.t_arrive if first.key == "message" else first.record.t_end
    if t is None:
        return None
    return {
        "ph": "i",
        "s": "p",
        "name": f"check {verdict}: the first divergence",
        "ts": t * US,
        "pid": first.divergence.rank,
        "tid": 0,
        "args": {"explain": first.explain},
    }


def _op_slices(ops) -> list[Slice]:
    return [
        Slice(op.rank, "compute", op.t_start, op.t_end, op.name, "compute", {"op": op.id, "flops": op.flops})
        for op in ops
    ]


def _message_slices(msgs, cost) -> list[Slice]:
    out = []
    for m in msgs:
        s0, s1, r0, r1 = message_spans(m, cost)
        what = m.name or m.label or f"msg {m.id}"
        args = {
            "message": m.id,
            "src": m.src,
            "dst": m.dst,
            "tag": str(m.tag),
            "bytes": m.nbytes,
            "shape": list(m.shape),
            "dtype": str(m.dtype),
            "posted_us": m.t_send * US,
            "arrived_us": m.t_arrive * US,
        }
        out.append(Slice(m.src, "send", s0, s1, f"{what} -> {m.dst}", "comm", args, flow_out=m.id))
        out.append(Slice(m.dst, "recv", r0, r1, f"{what} <- {m.src}", "comm", args, flow_in=m.id))
    return out


def _waiting_sends(trace: Trace) -> list[Slice]:
    """Rendezvous sends never matched (a run that deadlocked): the sender waited from the post to the end, as the
    activity view draws them (``simulator.views.activity``); no flow, since nothing arrived."""
    out = []
    for m in trace.messages:
        if m.t_arrive is None and m.t_send is not None and m.t_send <= trace.end_time:
            what = m.name or m.label or f"msg {m.id}"
            args = {"message": m.id, "src": m.src, "dst": m.dst, "tag": str(m.tag), "bytes": m.nbytes}
            args["never_received"] = f"device {m.dst} never posted the matching recv"
            out.append(
                Slice(m.src, "send", m.t_send, trace.end_time, f"{what} -> {m.dst}, never received", "comm", args)
            )
    return out


def _events(world_size: int, slices: list[Slice], mem, info: ExportInfo) -> Iterator[dict]:
    """Metadata, then slices (each followed by its flow event), then memory counters."""
    slices.sort(key=lambda s: (s.rank, TRACK_ORDER[s.track], s.t0, s.t1))
    tids: dict[tuple[int, str, int], int] = {(r, "compute", 0): 0 for r in range(world_size)}  # even if idle
    placed: list[tuple[Slice, int]] = []
    ends: list[float] = []
    current = None
    for s in slices:
        if (s.rank, s.track) != current:
            current = (s.rank, s.track)
            ends = []
        lane = _first_free(ends, s.t0, s.t1)
        key = (s.rank, s.track, lane)
        if key not in tids:
            tids[key] = len([k for k in tids if k[0] == s.rank])
        placed.append((s, tids[key]))
    for r in range(world_size):
        yield {"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"device {r}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}}
    for (rank, track, lane), tid in sorted(tids.items(), key=lambda kv: (kv[0][0], kv[1])):
        name = track if lane == 0 else f"{track} {lane + 1}"
        yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": name}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}}
    if info.collapsed:
        yield {"ph": "i", "s": "g", "name": "per-chunk events collapsed (see otherData)", "ts": 0, "pid": 0, "tid": 0}
    # slices by start time, so viewers meet each slice before the flow event bound to it
    placed.sort(key=lambda st: (st[0].t0, st[0].rank, st[1]))
    for s, tid in placed:
        ts = s.t0 * US
        yield {
            "ph": "X",
            "name": s.name,
            "cat": s.cat,
            "ts": ts,
            "dur": s.t1 * US - ts,
            "pid": s.rank,
            "tid": tid,
            "args": s.args,
        }
        if s.flow_out is not None:
            yield _flow("s", s.flow_out, s, ts, tid)
        if s.flow_in is not None:
            yield _flow("f", s.flow_in, s, ts, tid)
    if mem is not None:
        for r in range(mem.world_size):
            for t, held in zip(mem.times[r], mem.held[r]):
                yield {"ph": "C", "name": "memory", "pid": r, "tid": 0, "ts": t * US, "args": {"bytes": held}}


def _flow(ph: str, flow_id: int, s: Slice, ts: float, tid: int) -> dict:
    return {"ph": ph, "id": flow_id, "name": "message", "cat": s.cat, "ts": ts, "pid": s.rank, "tid": tid, "bp": "e"}
