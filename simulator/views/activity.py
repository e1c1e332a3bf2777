"""What each device was doing when: the spans that timelines, text grids and trace exports draw.

From a run's trace this builds, per device, three kinds of span:

- ``compute``: an op, from its start to its end (a device runs one op at a time);
- ``send``: the bytes of a message leaving the device, ``[t_start, t_start + n / B]`` (its outgoing
  link is busy);
- ``recv``: the bytes of a message arriving, ``[t_arrive - n / B, t_arrive]``.

A rendezvous send never matched (a run that deadlocked) is a ``send`` span from its post to the end: its
sender waited there.

n / B comes from the run's cost model (``CostModel.wire_time``), so the spans are exactly the link
occupation the engine booked. Without a cost model (a bare ``Trace``) a message's spans cover its
whole flight, ``[t_start, t_arrive]``, on both sides. A zero-byte message occupies no link, so its
spans also cover its flight (its latency) to stay visible.

A device can send to several peers at once, so communication spans on one device may overlap; each
span gets a ``lane`` (0, 1, ...) so that spans in one (device, track, lane) never overlap. Idle time is
what the compute track leaves uncovered between 0 and the end of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.trace import Message, Op, Trace

if TYPE_CHECKING:
    from ..core.engine import RunResult
    from ..cost.model import CostModel

TRACKS = ("compute", "send", "recv")


@dataclass(frozen=True, slots=True)
class Span:
    """One thing a device did for a while. ``record`` is the Op or Message it comes from."""

    rank: int
    track: str  # "compute", "send" or "recv"
    lane: int
    t0: float
    t1: float
    name: str
    record: Any


@dataclass
class Activity:
    """All spans of a run, grouped by device, plus the messages (for arrows) and the end time."""

    world_size: int
    spans: list[Span]
    messages: list[Message]
    end_time: float
    lanes: dict[tuple[int, str], int]  # (rank, track) -> number of lanes used

    def of(self, rank: int, track: str | None = None) -> list[Span]:
        """The spans of one device (on one track), in start order."""
        return [s for s in self.spans if s.rank == rank and (track is None or s.track == track)]

    def busy(self, rank: int) -> float:
        """Seconds device ``rank`` spent computing."""
        return sum(s.t1 - s.t0 for s in self.spans if s.rank == rank and s.track == "compute")

    def idle_gaps(self, rank: int, min_gap: float = 0.0) -> list[tuple[float, float]]:
        """Intervals in [0, end_time] where device ``rank`` computed nothing (bubbles, waits)."""
        gaps = []
        t = 0.0
        for s in self.of(rank, "compute"):
            if s.t0 - t > min_gap:
                gaps.append((t, s.t0))
            t = max(t, s.t1)
        if self.end_time - t > min_gap:
            gaps.append((t, self.end_time))
        return gaps


def unpack(run: RunResult | Trace, cost: CostModel | None = None) -> tuple[Trace, CostModel | None]:
    """Accept a RunResult (which knows its cost model) or a bare Trace (with an optional cost)."""
    if isinstance(run, Trace):
        return run, cost
    trace = getattr(run, "trace", None)
    if not isinstance(trace, Trace):
        raise TypeError(f"expected a RunResult (from World.run) or a Trace, got {type(run).__name__}{_hint(run)}")
    return trace, cost if cost is not None else run.world.cost


def _hint(run: Any) -> str:
    """Where the run is, for a scenario's outcome (``ScenarioRun``, a layer above: known by its fields)."""
    if not hasattr(run, "scenario") or not hasattr(run, "result"):
        return ""
    if run.result is None:
        if getattr(run.error, "partial", None) is not None:
            return f": the scenario stopped with {type(run.error).__name__}; pass .error.partial, the run up to there"
        return f": the scenario stopped with {type(run.error).__name__}, so there is no run to draw"
    return ": pass its .result (the RunResult)"


def message_spans(msg: Message, cost: CostModel | None) -> tuple[float, float, float, float]:
    """(send_t0, send_t1, recv_t0, recv_t1) of a message; see the module docstring."""
    t0, t1 = msg.t_start, msg.t_arrive
    if cost is None or msg.nbytes == 0:
        return t0, t1, t0, t1
    wire = cost.wire_time(msg.nbytes, msg.src, msg.dst)
    return t0, t0 + wire, t1 - wire, t1


def activity(run: RunResult | Trace, cost: CostModel | None = None) -> Activity:
    """The spans of a run (see the module docstring)."""
    trace, cost = unpack(run, cost)
    raw: list[tuple[int, str, float, float, str, Any]] = []
    for op in trace.ops:
        raw.append((op.rank, "compute", op.t_start, op.t_end, op.name, op))
    msgs = [m for m in trace.messages if m.t_arrive is not None]  # a rendezvous send never matched has none
    for m in msgs:
        s0, s1, r0, r1 = message_spans(m, cost)
        what = m.name or m.label or f"msg {m.id}"
        raw.append((m.src, "send", s0, s1, f"{what} -> {m.dst}", m))
        raw.append((m.dst, "recv", r0, r1, f"{what} <- {m.src}", m))
    for m in trace.messages:  # a rendezvous send never matched (a deadlock): its sender waits from its post on
        if m.t_arrive is None and m.t_send is not None and m.t_send <= trace.end_time:
            what = m.name or m.label or f"msg {m.id}"
            raw.append((m.src, "send", m.t_send, trace.end_time, f"{what} -> {m.dst}, never received", m))
    raw.sort(key=lambda r: (r[0], TRACKS.index(r[1]), r[2], r[3], _rid(r[5])))
    spans: list[Span] = []
    lanes: dict[tuple[int, str], int] = {}
    ends: list[float] = []
    current = None
    for rank, track, t0, t1, name, rec in raw:
        if (rank, track) != current:
            current = (rank, track)
            ends = []
        lane = _first_free(ends, t0, t1)
        lanes[current] = len(ends)
        spans.append(Span(rank, track, lane, t0, t1, name, rec))
    return Activity(trace.world_size, spans, msgs, trace.end_time, lanes)


def _first_free(ends: list[float], t0: float, t1: float) -> int:
    """First lane whose last span ended by t0 (touching is allowed); opens a new lane if none."""
    for i, end in enumerate(ends):
        if end <= t0:
            ends[i] = t1
            return i
    ends.append(t1)
    return len(ends) - 1


def _rid(rec: Op | Message) -> int:
    return rec.id
