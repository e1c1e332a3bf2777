"""Booking a ring all-reduce's chunks: the plan every call of one shape shares, and the two ways to run it.

A ring all-reduce over p members is 2(p - 1) ring steps (each member sends one chunk to its right,
then receives one from its left) with, after each of the first p - 1, a reduction on every member
(and, for an average, one division). What a call's rows hold apart from times (who sends which
chunk to whom, its size and signature, the ops' names and flops, the order of the events) depends
only on the group, the array's size and dtype and the op: ``RingPlan`` works it out once per engine.

Then only times are left, with the messages' own arithmetic (see ``simulator.collectives.booked``):

    send     start = max(link free, clock); done = start + n/B; link free = done; arrive = done + alpha
    receive  clock = max(clock, arrive of the left neighbour's message)
    reduce   end = clock + flops / F; clock = end

``book_small`` does it member by member in plain Python and writes the rows with a few NumPy
operations at the end (a few members: a tensor-parallel group); ``book_vector`` does each step as
a few NumPy operations over all members into a block's arrays and writes the block's rows at once,
settling a huge ring's events between blocks (hundreds of members; 64 members are one block). Both
produce the same floats as the messages would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import infinite_message, infinite_op
from ..core.rows import EV_OP, EV_RECV, EV_SEND, MSG, MSG_DTYPE, OP_DROPPED, OP_DTYPE, RECV_DTYPE, SETTLE_EVERY
from ..tensors.placements import chunk_bounds

if TYPE_CHECKING:
    from ..core.engine import Engine
    from .call import _Call

INF = float("inf")
VECTOR_FROM = 32  # members: from here on a step is a handful of NumPy operations over all members
BLOCK_SETTLES = 4  # book_vector works out times, and settles, every this many times SETTLE_EVERY events
ROWS_AT_ONCE = 1 << 16  # ... and writes rows this many bytes of messages at a time (under malloc's mmap threshold)
RING, REDUCE = 0, 1  # the two kinds of stage in a plan's program


class RingPlan:
    """What every ring all-reduce of one (group, size, dtype, op) shares (see the module docstring)."""

    def __init__(self, eng: Engine, c: _Call, x: Any) -> None:
        rec, net = eng.recorder, eng.net
        p, g = c.p, c.group
        self.p, self.group, self.alpha = p, g, eng.link_latency
        self.shape = (p, x.size, x.dtype, c.op)  # what the times depend on, besides clocks and links
        self.right = [g[(i + 1) % p] for i in range(p)]
        self.links = [net.private_links(g[i]) for i in range(p)]
        self.bounds = chunk_bounds(x.size, p)
        sizes = [self.bounds[j + 1] - self.bounds[j] for j in range(p)]
        sigs = [rec.sig((n,), x.dtype, n * x.dtype.itemsize) for n in sizes]
        wire = [s[1] * eng.link_seconds_per_byte for s in sigs]  # each chunk's seconds on the wire (n / B)
        reduce_name, divide_name = rec.names(c.reduce_name), rec.names(f"{c.reduce_name}.divide")
        # the program, in each member's order: (RING, step number, b): member i sends chunk i - b; and
        # (REDUCE, op name, b): member i reduces chunk i - b (mod p). Small: a huge ring's plan is its size.
        program: list[tuple[int, int, int]] = []
        for s in range(p - 1):  # reduce-scatter: send chunk i - s - 1, add chunk i - s - 2 arriving from the left
            program += [(RING, s, s + 1), (REDUCE, reduce_name, s + 2)]
        if c.op == "avg":
            program.append((REDUCE, divide_name, 0))
        program += [(RING, p - 1 + s, s) for s in range(p - 1)]  # all-gather: pass chunk i - s on
        self.program = program
        self.sizes, self.wire, self.sig = sizes, wire, [s[0] for s in sigs]
        self._cost, self._plain = eng.cost, eng.plain_cost
        self._flop_rate, self._op_latency = eng.flop_rate, eng.op_latency
        self.itemsize, self.divide_name = x.dtype.itemsize, divide_name
        if not max(max(wire), self.op_seconds(None, max(sizes))) < INF:  # (NaN too)
            self.refuse_infinite(eng, c, INF)
        rings = sum(1 for kind, _, _ in program if kind == RING)
        self.messages, self.ops = p * rings, p * (len(program) - rings)
        self.events = self.messages + self.ops  # what counts against the event limit
        self._small: tuple | None = None
        self._templates: tuple[bytes, bytes, bytes] | None = None
        # for book_vector: each kind of stage's event log, and each chunk offset's sizes and seconds on the wire
        # (one chunk size, the usual case: one number for every member)
        self._logs = {RING: bytes([EV_SEND]) * p + bytes([EV_RECV]) * p, REDUCE: bytes([EV_OP]) * p}
        self.uniform = len(set(sizes)) == 1
        self._sizes2 = np.asarray(sizes * 2, np.int64)
        self._wire2 = np.asarray(wire * 2)
        # what book_vector's rows take from the plan: each member's rank and its right neighbour's, and each chunk's
        # signature and size
        self.columns = (np.asarray(g, np.uint16), np.asarray(self.right, np.uint16), np.asarray(self.sig, np.int32))
        self.size_column = self._sizes2[:p]

    def op_seconds(self, what: int, n: Any) -> Any:
        """Seconds a member's reduction (or, for an average, its division) of an n-element chunk takes: what
        ``Device.compute`` gives the same op, for one chunk size or an array of them. Under a roofline the op
        reads and writes its arrays once: a reduction two chunks in and one out, a division one in, one out."""
        if self._plain:
            return self._op_latency + n / self._flop_rate
        cost = self._cost
        t = n / cost.flops
        traffic = ((2 if what == self.divide_name else 3) * n * self.itemsize + 0.0) / cost.memory_bandwidth
        if cost.roofline == "sum":
            return cost.op_latency + (t + traffic)
        return cost.op_latency + (np.maximum(t, traffic) if isinstance(n, np.ndarray) else max(t, traffic))

    def refuse_infinite(self, eng: Engine, c: _Call, end: float) -> None:
        """A step, or the call, would end at an infinite time: say whether its messages or its additions do."""
        g, largest = c.group, max(self.sizes)
        seconds = self.op_seconds(None, largest)
        if max(self.wire) < INF and not seconds < INF:
            raise infinite_op(eng.cost, g[0], c.reduce_name, float(largest), seconds, 0.0)
        raise infinite_message(eng.cost, g[0], g[1 % self.p], largest * self.shape[2].itemsize, 0.0, end)

    def stage_log(self, kind: int) -> bytes:
        """The event log of one stage of the program: p sends and p receives, or p ops."""
        return self._logs[kind]

    def wire_at(self, back: int) -> Any:
        """Each member's seconds on the wire for the chunk it sends at a stage whose offset is ``back`` (chunk
        i - back): a slice of the sizes repeated twice, or one number where every chunk is the same size."""
        if self.uniform:
            return self.wire[0]
        k = back % self.p
        return self._wire2[self.p - k : 2 * self.p - k]

    def sizes_at(self, back: int) -> np.ndarray:
        """Each member's chunk size at a stage whose offset is ``back`` (one, for all, where they are the same)."""
        if self.uniform:
            return self._sizes2[:1]
        k = back % self.p
        return self._sizes2[self.p - k : 2 * self.p - k]

    def chunks(self, back: int) -> list[int]:
        """The chunk each member sends or reduces at a stage whose offset is ``back``."""
        p = self.p
        return [(i - back) % p for i in range(p)]

    def small(self) -> tuple[list, bytes]:
        """For book_small (made on first use): each stage's kind and what it adds to each member's time, and
        the event log of the whole call."""
        if self._small is None:
            p = self.p
            stages = [
                (kind, [self.wire[j] for j in self.chunks(back)])
                if kind == RING
                else (kind, [self.op_seconds(what, self.sizes[j]) for j in self.chunks(back)])
                for kind, what, back in self.program
            ]
            log = b"".join(
                bytes([EV_SEND]) * p + bytes([EV_RECV]) * p if kind == RING else bytes([EV_OP]) * p
                for kind, _, _ in self.program
            )
            self._small = (stages, log)
        return self._small

    def templates(self) -> tuple[bytes, bytes, bytes]:
        """The rows with everything but times, tag, label and row numbers (made on first use: small rings)."""
        if self._templates is None:
            p = self.p
            rings = [(step, self.chunks(back)) for kind, step, back in self.program if kind == RING]
            reductions = [(name, self.chunks(back)) for kind, name, back in self.program if kind == REDUCE]
            n = len(rings)
            g = np.asarray(self.group, dtype=np.uint16)
            chunks = np.asarray([c for _, c in rings], dtype=np.int32)
            m = np.zeros(n * p, MSG_DTYPE)
            m["src"], m["dst"] = np.tile(g, n), np.tile(np.roll(g, -1), n)
            m["sig"], m["step"], m["chunk"] = (
                np.asarray(self.sig)[chunks].ravel(),
                np.repeat([s for s, _ in rings], p),
                chunks.ravel(),
            )
            r = np.zeros(n * p, RECV_DTYPE)
            r["row"] = (np.arange(n)[:, None] * p + (np.arange(p)[None, :] - 1) % p).ravel()  # + the first row
            o = np.zeros(len(reductions) * p, OP_DTYPE)
            o["kind"], o["rank"] = OP_DROPPED, np.tile(g, len(reductions))
            o["name"] = np.repeat([name for name, _ in reductions], p)
            o["flops"] = np.asarray(self.sizes)[np.asarray([c for _, c in reductions])].ravel()
            self._templates = (m.tobytes(), r.tobytes(), o.tobytes())  # copied as bytes (fast), viewed with dtypes
        return self._templates


TIMES_CACHED = 4096  # ring timings remembered per engine (data-parallel replicas repeat each other's exactly)


def book_small(eng: Engine, plan: RingPlan, c: _Call, b: Any) -> list[float]:
    """Book the call member by member in plain Python; write its rows at the end. Returns the end times.

    The times depend only on the plan's shape and the members' clocks and links' free times on arrival,
    so the same inputs (the same step of another data-parallel replica, say) reuse the times worked out
    before: the same floats, without the arithmetic.
    """
    p, right, links = plan.p, plan.right, plan.links
    free = [links[i].get(right[i], 0.0) for i in range(p)]
    key = (plan.shape, tuple(b.entry), tuple(free))
    cache = eng.caches.setdefault("ring times", {})  # a ring's timings by shape and arrival
    known = cache.get(key)
    if known is None:
        if len(cache) >= TIMES_CACHED:
            cache.clear()
        known = cache[key] = _ring_times(plan, list(b.entry), free)
    times, received, ops, clock, free = known
    for i in range(p):  # each member's link to the right stays booked until its last byte has gone
        links[i][right[i]] = free[i]
    rec = eng.recorder
    label = rec.labels(c.label)
    msgs, recvs, ops_ = (bytearray(t) for t in plan.templates())
    words = np.frombuffer(msgs, "<i4").reshape(-1, MSG.size // 4)  # a message row is 12 words: tag is word 1, label 3
    words[:, 1], words[:, 3] = c.tag, label
    np.frombuffer(msgs, "<f8").reshape(-1, MSG.size // 8)[:, 3:] = times  # its last 3 doubles are its times
    r = np.frombuffer(recvs, RECV_DTYPE)
    r["row"] += len(rec.msgs) // MSG.size
    r["t"] = received
    o = np.frombuffer(ops_, OP_DTYPE)
    o["label"] = label
    o["t_start"], o["t_end"] = ops[:, 0], ops[:, 1]
    del words, r, o  # (views of the bytearrays must go before they are copied out)
    rec.msgs.extend(msgs)
    rec.recvs.extend(recvs)
    rec.ops.extend(ops_)
    rec.log.extend(plan.small()[1])
    return list(clock)


def _ring_times(plan: RingPlan, clock: list[float], free: list[float]) -> tuple:
    """Every message's (t_send, t_start, t_arrive), every receive's time, every op's (start, end), and the
    members' clocks and links' free times at the end: the messages' arithmetic, member by member."""
    p, alpha = plan.p, plan.alpha
    times: list[float] = []  # flat: quicker to convert
    received: list[float] = []
    ops: list[float] = []
    add, got, op = times.extend, received.append, ops.extend
    members = range(p)  # (plain loops over a few members beat comprehensions and NumPy alike)
    for kind, cost in plan.small()[0]:
        if kind == RING:
            arrive = [0.0] * p
            for i in members:
                t = clock[i]
                start = free[i]
                if start < t:
                    start = t
                free[i] = done = start + cost[i]
                arrive[i] = a = done + alpha
                add((t, start, a))
            for i in members:
                t = clock[i]
                a = arrive[i - 1]
                if a > t:
                    clock[i] = t = a
                got(t)
        else:
            for i in members:
                t0 = clock[i]
                clock[i] = t1 = t0 + cost[i]  # (t0 + 0.0 is t0: a free op leaves the clock where it is)
                op((t0, t1))
    return np.array(times).reshape(-1, 3), np.array(received), np.array(ops).reshape(-1, 2), clock, free


def book_vector(eng: Engine, plan: RingPlan, c: _Call, b: Any) -> list[float]:
    """Book the call a block of stages at a time (``_book_block``), settling a huge ring's events between blocks.
    Returns the end times."""
    rec = eng.recorder
    p, program = plan.p, plan.program
    label = rec.labels(c.label)
    free = np.asarray([plan.links[i].get(plan.right[i], 0.0) for i in range(p)])
    clock = np.asarray(b.entry, dtype=np.float64)
    # members that arrive together, on links free at one time, with chunks of one size, stay together: every
    # member's times are then one number a step, worked out once (the same arithmetic, so the same floats)
    together = plan.uniform and (clock == clock[0]).all() and (free == free[0]).all()
    block = max(1, BLOCK_SETTLES * SETTLE_EVERY // (3 * p))  # stages a block (a 64-member ring is one block)
    seconds: dict[tuple, Any] = {}  # (op name, chunk offset) -> each member's seconds for that reduction
    for lo in range(0, len(program), block):
        stages = program[lo : lo + block]
        times = _times_together if together else _times
        clock, free, columns = times(plan, stages, clock, free, seconds)
        _write_rows(rec, plan, c.tag, label, stages, *columns)
        log = _canonical_log(stages, columns, p) or b"".join(plan.stage_log(kind) for kind, _, _ in stages)
        rec.log.extend(log)
        if lo + block < len(program):  # a huge ring: settle what no device can precede now
            rec.n_msgs = len(rec.msgs) // MSG.size
            rec.n_ops = len(rec.ops) // OP_DTYPE.itemsize
            for member, t in zip(b.devices, clock.tolist()):  # where each member has got to (it waits: nobody reads it)
                member.clock = t
            eng.settle_below(float(clock.min()))
    for i, t in enumerate(free.tolist()):
        plan.links[i][plan.right[i]] = t
    return clock.tolist()


def _seconds(plan: RingPlan, what: int, back: int, seconds: dict) -> Any:
    """Each member's seconds for a reduction (or division) ``what`` of chunk i - back (worked out once a call)."""
    key = (what, 0 if plan.uniform else back % plan.p)
    s = seconds.get(key)
    if s is None:
        s = seconds[key] = plan.op_seconds(what, plan.sizes_at(back))
    return s


def _times(plan: RingPlan, stages: list, clock: np.ndarray, free: np.ndarray, seconds: dict) -> tuple:
    """Some stages' times, each stage a few NumPy operations over all members (the messages' arithmetic, in their
    order: the same floats). Returns the clocks and links' free times after them, and the stages' times: each
    message's (sent, start, arrival) and receive, each op's (start, end), a row per stage."""
    p = plan.p
    rings = sum(1 for kind, _, _ in stages if kind == RING)
    t_send, t_start, received = np.empty((3, rings, p))
    arrive = np.empty((rings, p + 1))  # column 0: the last member's arrival again, what member 0 receives
    op_start, op_end = np.empty((2, len(stages) - rings, p))
    wire, alpha = plan.wire_at, plan.alpha
    r = k = 0
    for kind, what, back in stages:
        if kind == RING:  # each member sends to its right, then receives from its left
            sent = t_send[r]
            sent[:] = clock
            np.maximum(free, clock, out=t_start[r])
            np.add(t_start[r], wire(back), out=free)
            a = arrive[r]
            np.add(free, alpha, out=a[1:])
            a[0] = a[p]
            clock = received[r]
            np.maximum(sent, a[:p], out=clock)
            r += 1
        else:  # each member reduces (or divides) a chunk
            op_start[k] = clock
            clock = op_end[k]
            np.add(op_start[k], _seconds(plan, what, back, seconds), out=clock)
            k += 1
    return clock, free, (t_send, t_start, arrive[:, 1:], received, op_start, op_end)


def _times_together(plan: RingPlan, stages: list, clock: np.ndarray, free: np.ndarray, seconds: dict) -> tuple:
    """``_times`` for members whose times are all the same (see ``book_vector``): one Python float a stage, the
    same arithmetic on the same numbers; the stages' times as columns, a row per stage, that broadcast to every
    member."""
    c, f, alpha, wire = float(clock[0]), float(free[0]), plan.alpha, plan.wire[0]
    ring: list[float] = []  # (sent, start, arrival, received) per ring stage, flat
    ops: list[float] = []  # (start, end) per op stage, flat
    for kind, what, back in stages:
        if kind == RING:
            start = f if f >= c else c  # (np.maximum(free, clock): free where they are equal)
            f = start + wire
            a = f + alpha
            ring += (c, start, a, c if c >= a else a)  # (np.maximum(clock, arrival): the clock where equal)
            c = ring[-1]
        else:
            t = c
            c = t + float(_seconds(plan, what, back, seconds)[0])
            ops += (t, c)
    times = np.asarray(ring).reshape(-1, 4, 1)
    spans = np.asarray(ops).reshape(-1, 2, 1)
    p = plan.p
    columns = (times[:, 0], times[:, 1], times[:, 2], times[:, 3], spans[:, 0], spans[:, 1])
    return np.full(p, c), np.full(p, f), columns


def _canonical_log(stages: list, columns: tuple, p: int) -> bytes | None:
    """Where every member's times are the same (``_times_together``'s columns), the stages' event log in canonical
    order (by time, then rank, then program order: each time's events member by member), so that settling them
    needs no sort. None where members' times differ, or where two events of one kind share a time (the log would
    then take them member by member, where their rows go stage by stage: the k-th send logged must be the k-th
    send row, and so for receives and ops)."""
    t_send, _, _, received, op_start, _ = columns
    if t_send.shape[1] != 1:
        return None
    sent, got, began = iter(t_send[:, 0].tolist()), iter(received[:, 0].tolist()), iter(op_start[:, 0].tolist())
    events: list[tuple[float, int]] = []  # a member's (time, kind) of its events, in its program order
    for kind, _, _ in stages:
        if kind == RING:
            events += ((next(sent), EV_SEND), (next(got), EV_RECV))
        else:
            events.append((next(began), EV_OP))
    log = bytearray()
    run = bytearray()
    last = None
    for t, kind in events:
        if t != last:
            log += run * p
            run.clear()
            last = t
        elif kind in run:
            return None
        run.append(kind)
    log += run * p
    return bytes(log)


def _write_rows(
    rec: Any, plan: RingPlan, tag: int, label: int, stages: list, t_send, t_start, t_arrive, received, op_start, op_end
) -> None:
    """Write some stages' rows (their event log is the caller's), in the order the messages would write them: each
    ring stage's p messages (member i sends to i + 1) and p receives, each op stage's p ops; times a row per stage
    (or a column, the same for every member). A few stages at a time: the arrays they are made in stay small
    enough to come from memory the process holds already (fresh memory costs a page fault each 4 kB, more than the
    rows' arithmetic)."""
    p = plan.p
    rings = [(what, back) for kind, what, back in stages if kind == RING]
    reductions = [(what, back) for kind, what, back in stages if kind == REDUCE]
    pos = np.arange(p)
    left = (pos - 1) % p
    g, right, sig = plan.columns  # each member's rank, its right neighbour's, each chunk's signature
    # the fields every stage's rows share (and, with chunks of one size, their signature and FLOPs): one stage's rows,
    # copied into each stage's whole
    msg_base = np.empty(p, MSG_DTYPE)
    msg_base["src"], msg_base["dst"], msg_base["tag"], msg_base["label"], msg_base["sig"] = g, right, tag, label, sig[0]
    op_base = np.empty(p, OP_DTYPE)
    op_base["kind"], op_base["rank"], op_base["label"], op_base["nbytes"] = OP_DROPPED, g, label, 0
    op_base["flops"] = plan.size_column[0]
    per = max(1, ROWS_AT_ONCE // (MSG.size * p))  # stages at a time
    for lo in range(0, len(rings), per):
        part = rings[lo : lo + per]
        chunk = (pos - np.asarray([back for _, back in part])[:, None]) % p  # (stage, member): the chunk it sends
        m = _copies(msg_base, len(part))
        if not plan.uniform:
            m["sig"] = sig[chunk]
        m["step"], m["chunk"] = np.asarray([what for what, _ in part])[:, None], chunk
        at = slice(lo, lo + per)
        m["t_send"], m["t_start"], m["t_arrive"] = t_send[at], t_start[at], t_arrive[at]
        first = len(rec.msgs) // MSG.size
        got = np.empty((len(part), p), RECV_DTYPE)
        got["row"] = first + (np.arange(len(part)) * p)[:, None] + left  # the left neighbour's message
        got["t"] = received[at]
        rec.msgs.extend(m)  # (from its buffer: no copy in between)
        rec.recvs.extend(got)
    for lo in range(0, len(reductions), per):
        part = reductions[lo : lo + per]
        o = _copies(op_base, len(part))
        if not plan.uniform:
            o["flops"] = plan.size_column[(pos - np.asarray([back for _, back in part])[:, None]) % p]
        at = slice(lo, lo + per)
        o["name"] = np.asarray([what for what, _ in part])[:, None]
        o["t_start"], o["t_end"] = op_start[at], op_end[at]
        rec.ops.extend(o)


def _copies(base: np.ndarray, k: int) -> np.ndarray:
    """k copies of a stage's rows, one a stage (copied as bytes: NumPy copies structured rows field by field, ten
    times slower). Every field of a row is written: no padding in it."""
    rows = np.empty((k, len(base)), base.dtype)
    rows.view(np.uint8).reshape(k, -1)[:] = base.view(np.uint8)
    return rows
