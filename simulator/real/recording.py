"""Recording a real run: each rank notes what it did locally; the launcher merges them into one Trace.

A rank sees only its own side of each message: the sender knows when it posted the message and what
it carried, the receiver knows when it posted the receive and when the payload was in its hands. Each
side numbers its messages per channel (source, destination, tag); torch.distributed delivers the
messages of one channel in order, so the k-th send on a channel is the k-th receive on it. That is
how the two halves are joined.

Times are measured seconds from a common start (see ``TorchDevice``). The merged Trace uses the same
``Message``/``Op`` classes as a simulation, with measured times in place of simulated ones:

    t_send   the sender called send/isend
    t_start  both sides were ready (the later of t_send and the receiver posting its recv)
    t_arrive the receiver's wait returned with the payload (measured at the receiver)
    t_recv   the same moment (a real receive has no separate "arrived, not yet taken" instant)

Ids are given in time order, as the simulator gives them in simulated-time order. This module needs
only NumPy, so the merge is testable without starting processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.trace import Message, Op, Trace


@dataclass
class RecvRecord:
    """The receiving side of one message."""

    src: int
    dst: int
    tag: int
    seq: int  # position of this message on its channel (src, dst, tag)
    t_post: float
    t_recv: float
    name: str | None
    index: Any
    order: int  # position in the receiving rank's event order


@dataclass
class SendRecord:
    """The sending side of one message; ``message.id`` is filled in by ``merge``."""

    message: Message
    seq: int
    order: int


@dataclass
class OpRecord:
    """A compute op, or a hold/free, on the recording rank."""

    kind: str  # "op", "hold" or "free"
    op: Op
    order: int


@dataclass
class RankRecord:
    """Everything one rank recorded in one run."""

    rank: int
    sends: list[SendRecord] = field(default_factory=list)
    recvs: list[RecvRecord] = field(default_factory=list)
    ops: list[OpRecord] = field(default_factory=list)
    groups: set[tuple[int, ...]] = field(default_factory=set)  # the members of each collective it called
    events: int = 0  # how many events this rank recorded (the next ``order``)
    t_begin: float = 0.0  # when its program started (the merged trace's t = 0 is the earliest of these)

    def next_order(self) -> int:
        self.events += 1
        return self.events - 1


def merge(world_size: int, records: list[RankRecord], outputs: list[Any] | None = None) -> Trace:
    """One Trace from every rank's record (and what each rank returned); messages joined by channel and position.

    Times are shifted so that t = 0 is when the first program started (the ranks' clocks share an
    origin already; this removes the set-up before the programs, which is no part of the run).
    """
    trace = Trace(world_size)
    trace.outputs = outputs
    trace.groups = {g for r in records for g in r.groups}
    shift = min((r.t_begin for r in records), default=0.0)
    if shift:
        _shift(records, shift)
    sends = sorted((s for r in records for s in r.sends), key=lambda s: (s.message.t_send, s.message.src, s.order))
    by_channel: dict[tuple[int, int, int, int], Message] = {}
    for i, s in enumerate(sends):
        m = s.message
        m.id = i
        m.t_start = m.t_send
        by_channel[(m.src, m.dst, m.tag, s.seq)] = m
        trace.messages.append(m)

    timed: list[tuple[float, int, int, str, Any]] = [
        (s.message.t_send, s.message.src, s.order, "send", s.message) for s in sends
    ]
    for r in records:
        for rv in r.recvs:
            m = by_channel.get((rv.src, rv.dst, rv.tag, rv.seq))
            if m is None:  # the sender's record is missing: its process did not report
                raise ValueError(
                    f"device {rv.dst} received message {rv.seq} of channel {rv.src}->{rv.dst} tag {rv.tag}, "
                    f"but device {rv.src} recorded no such send"
                )
            m.t_start = max(m.t_send, rv.t_post)
            m.t_arrive = m.t_recv = rv.t_recv
            m.name, m.index = rv.name, rv.index
            timed.append((rv.t_recv, rv.dst, rv.order, "recv", m))
        for o in r.ops:
            timed.append((o.op.t_start, r.rank, o.order, o.kind, o.op))

    ops_in_order = sorted((t for t in timed if t[3] not in ("send", "recv")), key=lambda t: t[:3])
    for i, (*_, op) in enumerate(ops_in_order):
        op.id = i
    timed.sort(key=lambda t: t[:3])
    trace.events.extend((kind, rec) for *_, kind, rec in timed)
    trace.ops.extend(rec for kind, rec in trace.events if kind == "op")
    return trace


def _shift(records: list[RankRecord], dt: float) -> None:
    """Move every recorded time dt earlier (each record is shifted once, by the one rank that owns it)."""
    for r in records:
        r.t_begin -= dt
        for s in r.sends:
            s.message.t_send -= dt
        for rv in r.recvs:
            rv.t_post -= dt
            rv.t_recv -= dt
        for o in r.ops:
            o.op.t_start -= dt
            o.op.t_end -= dt
