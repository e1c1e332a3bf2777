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
NumPy operations over all members and writes each step's rows as it goes, settling a huge ring's
events as it proceeds (hundreds of members). Both produce the same floats as the messages would.
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
    """Book the call step by step, each a few NumPy operations over all members, writing rows as it goes."""
    rec = eng.recorder
    p = plan.p
    pos = np.arange(p)
    left = (pos - 1) % p  # each member's left neighbour (an index: np.roll costs ten times more per step)
    g = np.asarray(plan.group, dtype=np.uint16)
    sig, wire, sizes = np.asarray(plan.sig, np.int32), np.asarray(plan.wire), np.asarray(plan.sizes, np.int64)
    label = rec.labels(c.label)
    free = np.asarray([plan.links[i].get(plan.right[i], 0.0) for i in range(p)])
    clock = np.asarray(b.entry, dtype=np.float64)
    m = np.zeros(p, MSG_DTYPE)
    m["src"], m["dst"], m["tag"], m["label"] = g, np.roll(g, -1), c.tag, label
    r = np.zeros(p, RECV_DTYPE)
    o = np.zeros(p, OP_DTYPE)
    o["kind"], o["rank"], o["label"] = OP_DROPPED, g, label
    events = {k: bytes([k]) * p for k in (EV_SEND, EV_RECV, EV_OP)}
    settle_every = max(1, SETTLE_EVERY // (3 * p))  # stages: a huge ring's events are settled as it goes
    for k, (kind, what, back) in enumerate(plan.program):
        j = (pos - back) % p
        if kind == RING:
            start = np.maximum(free, clock)
            free = start + wire[j]
            arrive = free + plan.alpha
            m["sig"], m["step"], m["chunk"], m["t_send"], m["t_start"], m["t_arrive"] = (
                sig[j],
                what,
                j,
                clock,
                start,
                arrive,
            )
            first = len(rec.msgs) // MSG.size
            rec.msgs.extend(m.tobytes())
            rec.log.extend(events[EV_SEND])
            clock = np.maximum(clock, arrive[left])
            r["row"], r["t"] = first + (pos - 1) % p, clock
            rec.recvs.extend(r.tobytes())
            rec.log.extend(events[EV_RECV])
        else:
            flops = sizes[j]
            seconds = plan.op_seconds(what, flops)
            o["name"], o["t_start"], o["t_end"], o["flops"] = what, clock, clock + seconds, flops
            rec.ops.extend(o.tobytes())
            rec.log.extend(events[EV_OP])
            clock = clock + seconds
        if k % settle_every == settle_every - 1:
            rec.n_msgs = len(rec.msgs) // MSG.size
            rec.n_ops = len(rec.ops) // OP_DTYPE.itemsize
            for member, t in zip(b.devices, clock.tolist()):  # where each member has got to (it waits: nobody reads it)
                member.clock = t
            eng.settle_below(float(clock.min()))
    for i, t in enumerate(free.tolist()):
        plan.links[i][plan.right[i]] = t
    return clock.tolist()
