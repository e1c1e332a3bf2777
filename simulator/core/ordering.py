"""One numbering for every run: events in canonical time order, messages and ops numbered in it.

The engine may process devices in different orders (running a whole run lets devices run ahead of
each other; stepping a live run keeps strict time order), so the order it records events in is not a
property of the program. The canonical order is: by simulated time, then by rank, then in the
device's own program order, except that a message's receive always comes after its send (which
only matters when a message takes no time at all). Messages and ops are numbered in that order, so a
run and the same program stepped event by event name the same message #k and the same first
divergence.

The engine logs one byte per event in the order events happen (``Recorder.log``), which keeps each
device's program order; ``settle`` turns the logged events into codes (``row << 2 | kind``), looks up
their times and ranks in the rows, and sorts them with one stable ``np.lexsort`` by (time, rank):
ties keep the log's order, which is program order within a device. All of it is vectorized: this
runs over every event of runs with tens of millions.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from .columns import EV_OP, EV_RECV, EV_SEND, FREE, HOLD, MSG_DTYPE, OP_DTYPE, RECV_DTYPE

CODE_SEND, CODE_RECV, CODE_OP = 0, 1, 2  # the low two bits of an event code; the row is code >> 2


WINDOW = 1 << 20  # events sorted at once: a settle of millions goes window by window in time, to bound its memory


def settle(trace: Any, before: float | None = None, instant_messages: bool = True) -> int:
    """Move the recorded events earlier than ``before`` (all, for None) into the trace, in canonical order.

    instant_messages: whether a message can arrive at the time it was sent (a cost model with zero
    latency); only then can sorting by time put a receive before its send, and that is checked.
    Returns how many events were settled.
    """
    codes, times, ranks = _pending(trace)
    trace._pending = None
    if before is not None and len(codes):
        now = times < before
        if not now.all():
            trace._pending = (codes[~now], times[~now], ranks[~now])
            codes, times, ranks = codes[now], times[now], ranks[now]
    n = len(codes)
    for lo, hi in _windows(times):
        if lo is None:
            c, t, r = codes, times, ranks
        else:  # events in [lo, hi): each device's are a run of its own, so the windows' orders join up
            at = np.flatnonzero((times >= lo) & (times < hi))
            c, t, r = codes[at], times[at], ranks[at]
            del at
        order = np.lexsort((r, t))  # stable: ties keep program order
        if instant_messages and not _sends_first(trace, c, t, order):
            order = _causal_merge(trace, c, t, r)
        del r
        _number(trace, c[order], t[order])
        del c, t, order
    return n


def _windows(times: np.ndarray) -> list[tuple[float | None, float | None]]:
    """Time windows of about WINDOW events each, covering every time; one (None, None) if few enough."""
    if len(times) <= WINDOW:
        return [(None, None)] if len(times) else []
    counts, edges = np.histogram(times, bins=max(64, 8 * len(times) // WINDOW))
    cuts = [-np.inf]
    filled = 0
    for count, edge in zip(counts.tolist(), edges[1:].tolist()):
        filled += count
        if filled >= WINDOW:
            cuts.append(edge)
            filled = 0
    cuts[-1:] = [cuts[-1], np.inf] if cuts[-1] != -np.inf else [-np.inf, np.inf]
    return list(zip(cuts[:-1], cuts[1:]))


def _pending(trace: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unsettled events, in the order they happened: codes, times and ranks."""
    rec = trace._rec
    kinds = np.frombuffer(rec.log, np.uint8).copy() if rec.log else np.empty(0, np.uint8)
    rec.log.clear()
    n = len(kinds)
    codes = np.empty(n, trace._codes.values.dtype)
    times = np.empty(n, np.float64)
    ranks = np.empty(n, np.int32)
    if n:
        for kind in (EV_SEND, EV_RECV, EV_OP):
            at = np.flatnonzero(kinds == kind)
            if not len(at):
                continue
            if kind == EV_RECV:  # the receive rows since the last settle, one per receive event
                recvs = np.frombuffer(rec.recvs, RECV_DTYPE)
                rows = recvs["row"].astype(codes.dtype)
                times[at] = recvs["t"]
                del recvs
                rec.recvs.clear()
                codes[at] = rows << 2 | CODE_RECV
                ranks[at] = _field(rec.msgs, MSG_DTYPE, "dst", rows)
            elif kind == EV_SEND:
                rows = np.arange(trace._seen_msgs, trace._seen_msgs + len(at), dtype=codes.dtype)
                trace._seen_msgs += len(at)
                codes[at] = rows << 2 | CODE_SEND
                times[at] = _field(rec.msgs, MSG_DTYPE, "t_send", rows)
                ranks[at] = _field(rec.msgs, MSG_DTYPE, "src", rows)
            else:
                rows = np.arange(trace._seen_ops, trace._seen_ops + len(at), dtype=codes.dtype)
                trace._seen_ops += len(at)
                codes[at] = rows << 2 | CODE_OP
                times[at] = _field(rec.ops, OP_DTYPE, "t_start", rows)
                ranks[at] = _field(rec.ops, OP_DTYPE, "rank", rows)
            del at, rows
    if trace._pending is not None:  # older events held back by an earlier settle come first
        old = trace._pending
        codes, times, ranks = (np.concatenate([o, c]) for o, c in zip(old, (codes, times, ranks)))
    return codes, times, ranks


def _field(buf: bytearray, dtype: np.dtype, name: str, rows: np.ndarray) -> np.ndarray:
    """One field of some packed rows (a copy: no view of the growing buffer outlives the call)."""
    return np.frombuffer(buf, dtype)[name][rows]


def _number(trace: Any, codes: np.ndarray, times: np.ndarray) -> None:
    """Number the messages (in send order) and ops, holds and frees; record receive times; keep the codes."""
    rec = trace._rec
    kinds = codes & 3
    rows = codes >> 2
    sent = rows[kinds == CODE_SEND]
    if len(sent):
        trace._msg_row.extend(sent)
    got = kinds == CODE_RECV
    if got.any():
        trace._t_recv.reserve(rec.n_msgs, np.nan)
        trace._t_recv.values[rows[got]] = times[got]
    ops = rows[kinds == CODE_OP]
    if len(ops):
        trace._op_row.extend(ops)
        op_kinds = _field(rec.ops, OP_DTYPE, "kind", ops)
        trace._op_list.extend(ops[(op_kinds != HOLD) & (op_kinds != FREE)])
    trace._codes.extend(codes)


def _sends_first(trace: Any, codes: np.ndarray, times: np.ndarray, order: np.ndarray) -> bool:
    """Whether every receive comes after its send in ``order``; only zero-time messages can break it."""
    kinds = codes & 3
    rows = codes >> 2
    recv = np.flatnonzero(kinds == CODE_RECV)
    if not len(recv):
        return True
    tied = recv[_field(trace._rec.msgs, MSG_DTYPE, "t_send", rows[recv]) == times[recv]]
    if not len(tied):
        return True
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    send_at = {
        int(r): i for i, r in zip(np.flatnonzero(kinds == CODE_SEND).tolist(), rows[kinds == CODE_SEND].tolist())
    }
    for i in tied.tolist():
        j = send_at.get(int(rows[i]))
        if j is not None and position[j] > position[i]:
            return False
    return True


def _causal_merge(trace: Any, codes: np.ndarray, times: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Merge the devices' events by (time, rank), holding back a receive until its send is out."""
    lanes: dict[int, list[int]] = {}
    for i, r in enumerate(ranks.tolist()):
        lanes.setdefault(r, []).append(i)
    heads = {r: 0 for r in lanes}
    kinds = (codes & 3).tolist()
    rows = (codes >> 2).tolist()
    in_batch = {rows[i] for i in range(len(codes)) if kinds[i] == CODE_SEND}  # earlier batches' sends are out
    sent: set[int] = set()
    waiting: dict[int, int] = {}  # message row -> the rank whose next event receives it
    t = times.tolist()
    ready = [(t[lane[0]], r, lane[0]) for r, lane in lanes.items()]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        _, r, i = heapq.heappop(ready)
        if kinds[i] == CODE_RECV and rows[i] in in_batch and rows[i] not in sent:
            waiting[rows[i]] = r  # resumed when its send is emitted
            continue
        out.append(i)
        if kinds[i] == CODE_SEND:
            sent.add(rows[i])
            blocked = waiting.pop(rows[i], None)
            if blocked is not None:
                j = lanes[blocked][heads[blocked]]
                heapq.heappush(ready, (t[j], blocked, j))
        heads[r] += 1
        if heads[r] < len(lanes[r]):
            j = lanes[r][heads[r]]
            heapq.heappush(ready, (t[j], r, j))
    return np.asarray(out, dtype=np.int64)
