"""One numbering for every run: events in canonical time order, messages and ops numbered in it.

The engine may process devices in different orders (running a whole run lets devices run ahead of
each other; stepping a live run keeps strict time order), so the order it records events in is not a
property of the program. The canonical order is: by simulated time, then by rank, then in the
device's own program order, except that a message's receive always comes after its send (which
only matters when a message takes no time at all). Messages and ops are numbered in that order, so a
run and the same program stepped event by event name the same message #k and the same first
divergence.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

Event = tuple[str, Any]


def event_time(kind: str, rec: Any) -> float:
    if kind == "send":
        return rec.t_send
    if kind == "recv":
        return rec.t_recv
    return rec.t_start


def canonical(lanes: list[list[Event]], instant_messages: bool = True) -> list[Event]:
    """Each device's events (lane r: device r's, in its program order) merged in canonical order.

    instant_messages: whether a message can arrive at the time it was sent (a cost model with zero
    latency); only then can sorting by time put a receive before its send, and that is checked.
    """
    events = [e for lane in lanes for e in lane]
    n = len(events)
    if n < 2:
        return events
    # Inlined, one pass: this runs over every event of runs with millions of them. The lanes are
    # concatenated in rank order, so a stable sort by time breaks ties by rank, then program order.
    times = np.array([r.t_send if k == "send" else r.t_recv if k == "recv" else r.t_start for k, r in events])
    order = np.argsort(times, kind="stable")
    if instant_messages and not _sends_first(events, order, times):
        ranks = np.repeat(np.arange(len(lanes)), [len(lane) for lane in lanes])
        order = _causal_merge(events, times, ranks)
    return [events[i] for i in order.tolist()]


def _sends_first(events: list[Event], order: np.ndarray, times: np.ndarray) -> bool:
    """Whether every receive comes after its send in ``order``; only zero-time messages can break it."""
    tied = [i for i, (k, r) in enumerate(events) if k == "recv" and r.t_send == times[i]]
    if not tied:
        return True
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    send_at = {id(r): i for i, (k, r) in enumerate(events) if k == "send"}
    return all(position[send_at[id(events[i][1])]] < position[i] for i in tied if id(events[i][1]) in send_at)


def _causal_merge(events: list[Event], times: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Merge the devices' event lists by (time, rank), holding back a receive until its send is out."""
    lanes: dict[int, list[int]] = {}
    for i, r in enumerate(ranks.tolist()):
        lanes.setdefault(r, []).append(i)
    heads = {r: 0 for r in lanes}
    in_batch = {id(rec) for kind, rec in events if kind == "send"}  # sends of earlier batches are out already
    sent: set[int] = set()
    waiting: dict[int, int] = {}  # id(message) -> the rank whose next event receives it
    ready = [(times[lane[0]], r, lane[0]) for r, lane in lanes.items()]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        _, r, i = heapq.heappop(ready)
        kind, rec = events[i]
        if kind == "recv" and id(rec) in in_batch and id(rec) not in sent:
            waiting[id(rec)] = r  # resumed when its send is emitted
            continue
        out.append(i)
        if kind == "send":
            sent.add(id(rec))
            blocked = waiting.pop(id(rec), None)
            if blocked is not None:
                j = lanes[blocked][heads[blocked]]
                heapq.heappush(ready, (times[j], blocked, j))
        heads[r] += 1
        if heads[r] < len(lanes[r]):
            j = lanes[r][heads[r]]
            heapq.heappush(ready, (times[j], r, j))
    return np.asarray(out, dtype=np.int64)


def number(events: list[Event], messages: list, ops: list, first_op_id: int) -> int:
    """Number messages (in send order) and ops, holds and frees, appending them to the trace's lists.

    Returns the next op id.
    """
    next_op = first_op_id
    for kind, rec in events:
        if kind == "send":
            rec.id = len(messages)
            messages.append(rec)
        elif kind != "recv":
            rec.id = next_op
            next_op += 1
            if kind == "op":
                ops.append(rec)
    return next_op
