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
ties keep the log's order, which is program order within a device (a log in canonical order already, as a ring
booked whole writes its events, is taken as it stands). All of it is vectorized: this
runs over every event of runs with tens of millions.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from .rows import EV_OP, EV_RECV, EV_SEND, FREE, HOLD, MSG_DTYPE, OP_DTYPE, RECV_DTYPE

CODE_SEND, CODE_RECV, CODE_OP = 0, 1, 2  # the low two bits of an event code; the row is code >> 2


WINDOW = 1 << 20  # events sorted at once, at most: a settle of millions goes window by window in time
SMALLEST_WINDOW = 1 << 12  # ... and at most a 64th of the trace, so that its sort's arrays stay small beside it
WHOLE_UP_TO = 1 << 16  # ... but a trace of up to this many events is sorted whole: its arrays are small anyway
LOG_SLICE = 1 << 15  # logged events turned into codes and times at once


def settle(trace: Any, before: float | None = None, instant_messages: bool = True) -> int:
    """Move the recorded events earlier than ``before`` (all, for None) into the trace, in canonical order.

    instant_messages: whether a message can arrive at the time it was sent (a cost model with zero
    latency); only then can sorting by time put a receive before its send, and that is checked.
    Returns how many events were settled. Events held back (not earlier than ``before``) wait as a code
    and a time each (12 or 16 bytes), in the order they happened, in a few arrays (never copied into one
    large one); their ranks are looked up again when they are sorted (those settled at once have theirs from
    the rows read for their times).
    """
    parts = _pending(trace)
    trace._pending = None
    if before is not None:
        now_parts, later_parts = [], []
        parts.reverse()
        while parts:  # a part at a time, each let go of once split: the copies never double what waits
            c, t, r = parts.pop()
            now = t < before
            if now.all():
                now_parts.append((c, t, r))
            elif not now.any():
                later_parts.append((c, t))
            else:
                later = ~now
                now_parts.append((c[now], t[now], None if r is None else r[now]))
                later_parts.append((c[later], t[later]))
                del later
            del now, c, t, r
        parts = now_parts
        trace._pending = later_parts or None
        del now_parts, later_parts
    n = sum(len(c) for c, _, _ in parts)
    if not n:
        return 0
    total = len(trace._codes) + n
    # a log in canonical order already (a large ring booked whole, block by block): numbered as it stands, with no
    # windows (ranks looked up only once its times are in order: most large runs' logs are not)
    if total > WHOLE_UP_TO and _times_in_order(parts):
        ranked = [(c, t, _ranks(trace, c) if r is None else r) for c, t, r in parts]
        as_they_stand = _parts_in_order(ranked)
        if as_they_stand and instant_messages:
            as_they_stand = all(_sends_first(trace, c, t, None) for c, t, _ in ranked)
        if as_they_stand:
            for c, t, _ in ranked:
                _number(trace, c, t, None)
            return n
        del ranked
    window = n if total <= WHOLE_UP_TO else max(SMALLEST_WINDOW, min(WINDOW, total // 64))
    cuts = _windows([t for _, t, _ in parts], n, window)
    # each event's window, worked out once (a small number each): a window then picks its events by it
    wid = None if cuts is None else [np.searchsorted(cuts, t, side="right").astype(np.uint16) for _, t, _ in parts]
    for k in range(1 if cuts is None else len(cuts) + 1):
        if cuts is None:
            c, t, r = _joined(trace, parts)
        else:  # events in window k: each device's are a run of its own, so the windows' orders join up
            c, t, r = _joined(
                trace,
                [(c[at], t[at], None if r is None else r[at])
                 for (c, t, r), w in zip(parts, wid) for at in [np.flatnonzero(w == k)]],
            )  # fmt: skip
            if not len(c):
                continue
        # stable: ties keep program order (a log in that order already, as a ring booked whole writes it, as it is)
        order = None if _in_order(t, r) else np.lexsort((r, t))
        if instant_messages and not _sends_first(trace, c, t, order):
            order = _causal_merge(trace, c, t, r)
        del r
        _number(trace, c if order is None else c[order], t, order)
        del c, t, order
    return n


def _in_order(times: np.ndarray, ranks: np.ndarray) -> bool:
    """Whether events are in canonical order as they stand: by time, then rank (a few passes, where a sort is a
    few dozen)."""
    if len(times) < 2:
        return True
    later = times[1:] > times[:-1]
    if later.all():
        return True
    return bool((later | ((times[1:] == times[:-1]) & (ranks[1:] >= ranks[:-1]))).all())


def _times_in_order(parts: list[tuple]) -> bool:
    """Whether parts of (codes, times, ...), one after another, are in time order (ties in any order): what a log in
    canonical order must be, told with no ranks looked up (most logs of a large run are not)."""
    parts = [part for part in parts if len(part[1])]
    if any(t0[-1] > t1[0] for (_, t0, *_), (_, t1, *_) in zip(parts, parts[1:])):
        return False
    return all(bool((t[1:] >= t[:-1]).all()) for _, t, *_ in parts)


def _parts_in_order(parts: list[tuple]) -> bool:
    """Whether parts of (codes, times, ranks), one after another, are in canonical order as they stand: each part,
    and each part's last event against the next part's first (no part joined to another: no copy)."""
    parts = [part for part in parts if len(part[0])]
    for (_, t0, r0), (_, t1, r1) in zip(parts, parts[1:]):
        if t0[-1] > t1[0] or (t0[-1] == t1[0] and r0[-1] > r1[0]):
            return False
    return all(_in_order(t, r) for _, t, r in parts)


def _joined(trace: Any, parts: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parts of (codes, times, ranks) as one triple, in order (a single part as it is); a part held back has its
    ranks looked up again (None)."""
    parts = [(c, t, _ranks(trace, c) if r is None else r) for c, t, r in parts]
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(3))


def _windows(times: list[np.ndarray], n: int, window: int = WINDOW) -> np.ndarray | None:
    """The times that cut the arrays ``times`` (n events in all) into windows of about ``window`` events each,
    in order (window k is from cut k - 1 to cut k); None for one window."""
    if n <= window:
        return None
    times = [t for t in times if len(t)]
    lo, hi = min(t.min() for t in times), max(t.max() for t in times)
    bins = max(64, 8 * n // window)
    edges = np.linspace(lo, hi, bins + 1)
    # equal bins given as a count and a range take NumPy's arithmetic path (the counts bins=edges gives, several
    # times faster than searching the edges); a range of one time has no such bins
    counts = sum(np.histogram(t, bins=bins, range=(lo, hi))[0] if lo < hi else np.histogram(t, edges)[0] for t in times)
    cuts = []
    filled = 0
    for count, edge in zip(counts.tolist(), edges[1:-1].tolist()):
        filled += count
        if filled >= window:
            cuts.append(edge)
            filled = 0
    return np.asarray(cuts)


def _pending(trace: Any) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """The unsettled events, in the order they happened: (codes, times, ranks) parts, those held back first. Their
    ranks are read with their times while the trace is small enough to be sorted whole; otherwise, and for events
    held back, None: looked up when they are sorted, a window at a time (a large run's settles stay small)."""
    rec = trace._rec
    parts = [(c, t, None) for c, t in trace._pending or []]
    trace._pending = None
    n = len(rec.log)
    taken = 0  # receive rows used so far (one per receive event, in order)
    dtype = trace._codes.values.dtype
    small = len(trace._codes) + sum(len(c) for c, _, _ in parts) + n <= WHOLE_UP_TO
    for lo in range(0, n, LOG_SLICE):  # a slice at a time: the temporary arrays stay small
        kinds = np.frombuffer(rec.log, np.uint8, min(LOG_SLICE, n - lo), lo)
        codes = np.empty(len(kinds), dtype)
        times = np.empty(len(kinds), np.float64)
        ranks = np.empty(len(kinds), np.uint16) if small else None  # (a rank is below MAX_DEVICES, 1 << 16)
        for kind in (EV_SEND, EV_RECV, EV_OP):
            at = np.flatnonzero(kinds == kind)
            if not len(at):
                continue
            if kind == EV_RECV:  # the receive rows since the last settle, one per receive event
                recvs = np.frombuffer(rec.recvs, RECV_DTYPE, len(at), taken * RECV_DTYPE.itemsize)
                taken += len(at)
                codes[at] = recvs["row"].astype(dtype) << 2 | CODE_RECV
                times[at] = recvs["t"]
                if small:
                    ranks[at] = _field(rec.msgs, MSG_DTYPE, "dst", recvs["row"])
                del recvs
            elif kind == EV_SEND:  # (the rows since the last settle: a slice of them)
                rows = np.arange(trace._seen_msgs, trace._seen_msgs + len(at), dtype=dtype)
                codes[at] = rows << 2 | CODE_SEND
                times[at] = _slice(rec.msgs, MSG_DTYPE, "t_send", trace._seen_msgs, len(at))
                if small:
                    ranks[at] = _slice(rec.msgs, MSG_DTYPE, "src", trace._seen_msgs, len(at))
                trace._seen_msgs += len(at)
            else:
                rows = np.arange(trace._seen_ops, trace._seen_ops + len(at), dtype=dtype)
                codes[at] = rows << 2 | CODE_OP
                times[at] = _slice(rec.ops, OP_DTYPE, "t_start", trace._seen_ops, len(at))
                if small:
                    ranks[at] = _slice(rec.ops, OP_DTYPE, "rank", trace._seen_ops, len(at))
                trace._seen_ops += len(at)
            del at
        del kinds
        parts.append((codes, times, ranks))
    rec.log.clear()
    rec.recvs.clear()
    return parts


def _ranks(trace: Any, codes: np.ndarray) -> np.ndarray:
    """The device of each event: a send's source, a receive's destination, an op's device."""
    rec = trace._rec
    kinds = codes & 3
    rows = codes >> 2
    ranks = np.empty(len(codes), np.int32)
    for kind, buf, dtype, name in (
        (CODE_SEND, rec.msgs, MSG_DTYPE, "src"),
        (CODE_RECV, rec.msgs, MSG_DTYPE, "dst"),
        (CODE_OP, rec.ops, OP_DTYPE, "rank"),
    ):
        at = kinds == kind
        if at.any():
            ranks[at] = _field(buf, dtype, name, rows[at])
    return ranks


def _field(buf: bytearray, dtype: np.dtype, name: str, rows: np.ndarray) -> np.ndarray:
    """One field of some packed rows (a copy: no view of the growing buffer outlives the call)."""
    return np.frombuffer(buf, dtype)[name][rows]


def _slice(buf: bytearray, dtype: np.dtype, name: str, first: int, n: int) -> np.ndarray:
    """One field of the packed rows ``first`` to ``first + n``: a view of the growing buffer, to be copied at once."""
    return np.frombuffer(buf, dtype, n, first * dtype.itemsize)[name]


def _number(trace: Any, codes: np.ndarray, times: np.ndarray, order: np.ndarray | None) -> None:
    """Number the messages (in send order) and ops, holds and frees; record receive times; keep the codes.
    codes: in canonical order; times: in the order settled, ``times[order]`` beside the codes (only the receives'
    are read: no array of them all in canonical order); order None: the order settled is canonical."""
    rec = trace._rec
    kinds = codes & 3
    rows = codes >> 2
    made = trace._rows  # the number -> row maps someone asked for (see ColumnarTrace._number_rows)
    sent = rows[kinds == CODE_SEND] if "msgs" in made else ()
    if len(sent):
        made["msgs"].extend(sent)
    got = kinds == CODE_RECV
    if got.any():
        trace._t_recv.reserve(rec.n_msgs, np.nan)
        trace._t_recv.values[rows[got]] = times[got] if order is None else times[order[got]]
    ops = rows[kinds == CODE_OP] if "ops" in made or "list" in made else ()
    if len(ops):
        if "ops" in made:
            made["ops"].extend(ops)
        if "list" in made:
            op_kinds = _field(rec.ops, OP_DTYPE, "kind", ops)
            made["list"].extend(ops[(op_kinds != HOLD) & (op_kinds != FREE)])
    trace._codes.extend(codes)


def _sends_first(trace: Any, codes: np.ndarray, times: np.ndarray, order: np.ndarray | None) -> bool:
    """Whether every receive comes after its send in ``order`` (None: as they stand); only zero-time messages can
    break it."""
    kinds = codes & 3
    rows = codes >> 2
    recv = np.flatnonzero(kinds == CODE_RECV)
    if not len(recv):
        return True
    tied = recv[_field(trace._rec.msgs, MSG_DTYPE, "t_send", rows[recv]) == times[recv]]
    if not len(tied):
        return True
    position = np.arange(len(codes))
    if order is not None:
        position[order] = position.copy()
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
