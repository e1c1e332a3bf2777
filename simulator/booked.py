"""Collectives booked whole: a ring all-reduce's every chunk written in one go, when no payload is kept.

Written as messages (``simulator.collectives``), a ring all-reduce over p devices is 2(p - 1) steps
on each device, each a send, a receive and (in its first half) a reduction: a greenlet switch and a
few Python objects per chunk. Where the run keeps no payload, nobody looks at the chunks, only at
their metadata and at the result. So the members meet instead: each one that arrives waits, and the
last one books every chunk of every step at once, with exactly the arithmetic the messages would
have done (the same link booking, ``max`` for a receive that waits, the reduction's flops over the
device speed, in the same order, so the same floats), writes the rows (``simulator.columns``) in each
device's program order, computes the result with a few whole-array NumPy operations in the ring's
summation order (bit for bit the messages' result), and wakes every member at the time its last
step ends. The trace is the one the messages would have made, event for event; the tests run both
and compare.

When: metadata only (``World(keep_payloads=False)``), eager sends, ``algorithm="ring"``, no
``name``/``partials`` (names are for the checker, which needs payloads), and every ring hop a link
no other device books (``private_links``: fully connected, or inside a node of a two-level machine)
so that booking them late changes nothing. The first member to arrive decides for the whole call.

Why it is exact: while the members wait, nothing else can book their private links or reach their
clocks; each member's events are at or after the time it arrived, so a live stepper holds back
settling events until every waiting member's arrival time (``Engine._settle_bound``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .columns import EV_OP, EV_RECV, EV_SEND, MSG, MSG_DTYPE, OP, OP_DROPPED, OP_DTYPE, RECV, RECV_DTYPE, SETTLE_EVERY
from .meta import MetaArray
from .placements import chunk_bounds

if TYPE_CHECKING:
    from .collectives import _Call
    from .engine import Engine

_pack_msg, _pack_recv, _pack_op = MSG.pack, RECV.pack, OP.pack


class Booking:
    """One ring all-reduce call being booked: who has arrived, with what, when."""

    __slots__ = ("p", "booked", "arrived", "x", "entry", "devices", "requests", "results", "ends")

    def __init__(self, p: int, booked: bool) -> None:
        self.p = p
        self.booked = booked  # False: the call goes message by message (the first member decided)
        self.arrived = 0
        self.x: list[Any] = [None] * p
        self.entry = [0.0] * p  # each member's clock when it arrived
        self.devices: list[Any] = [None] * p
        self.requests: list[Any] = [None] * p  # what each waiting member is blocked on (for deadlock reports)
        self.results: list[Any] = [None] * p
        self.ends = [0.0] * p

    def waiting_since(self) -> float:
        """The earliest arrival among the members waiting (no event of theirs can be earlier)."""
        return min((t for t, d in zip(self.entry, self.devices) if d is not None), default=float("inf"))


def ring_all_reduce(c: _Call, x: Any) -> Any | None:
    """Book the ring all-reduce ``c`` whole and return this member's result, or None to go message by message."""
    dev = c.dev
    eng: Engine | None = getattr(dev, "_engine", None)
    if eng is None or not hasattr(eng, "_bookings"):
        return None
    key = (c.group, c.number)
    b = eng._bookings.get(key)
    if b is None:
        b = eng._bookings[key] = Booking(c.p, _can_book(eng, c, x))
    b.arrived += 1
    if b.arrived == b.p:
        del eng._bookings[key]
    if not b.booked:
        return None
    me = c.me
    b.x[me], b.entry[me], b.devices[me] = x, dev.clock, dev
    if b.arrived < b.p:  # wait for the others; the last one books everything and wakes us at our end
        from .device import Request

        req = b.requests[me] = Request("recv", dev.rank, c.group[(me - 1) % c.p], c.tag, None, None)
        dev._blocked = req
        eng._give_way()
        dev._blocked = None
        return b.results[me]
    _book(eng, c, b)
    for i, other in enumerate(b.devices):
        if other is not dev:
            b.requests[i].done = b.ends[i]
            eng._push(b.ends[i], other.rank)
    dev._advance(b.ends[me])
    return b.results[me]


def _can_book(eng: Engine, c: _Call, x: Any) -> bool:
    if eng.keep_payloads or eng.rendezvous or c.name is not None or c.partials is not None:
        return False
    if not isinstance(x, (np.ndarray, MetaArray)):
        return False
    net = eng.net
    private = getattr(net, "is_private", None)
    g = c.group
    return private is not None and all(private(g[i], g[(i + 1) % c.p]) for i in range(c.p))


VECTOR_FROM = 32  # members: from here on a step is a handful of NumPy operations over all members


def _book(eng: Engine, c: _Call, b: Booking) -> None:
    """Write every chunk's rows and compute the result (see the module docstring)."""
    rec = eng._rec
    p, x = c.p, b.x[c.me]
    avg = c.op == "avg"
    total = p * 2 * (p - 1) + p * (p - 1) + (p if avg else 0)
    if rec.n_msgs + rec.n_ops + total > eng.max_events:
        eng._too_many_events(c.dev.rank)
    ring = (_VectorRing if p >= VECTOR_FROM else _Ring)(eng, c, b, x)
    settle_every = max(1, SETTLE_EVERY // (3 * p))  # steps: the events of a huge ring are settled as it goes

    def written(s: int) -> None:
        if s % settle_every == settle_every - 1:
            rec.n_msgs = len(rec.msgs) // MSG.size
            rec.n_ops = len(rec.ops) // OP.size
            for member, t in zip(b.devices, ring.clocks()):  # where each member has got to (it waits: nobody reads it)
                member.clock = t
            eng.settle_below()

    reduce_name = rec.names(c.reduce_name)
    for s in range(p - 1):  # reduce-scatter: send chunk i - s - 1, add chunk i - s - 2 arriving from the left
        ring.step(s, s, 1)
        ring.reductions(s + 2, reduce_name)
        written(s)
    if avg:
        ring.reductions(0, rec.names(f"{c.reduce_name}.divide"))
    for s in range(p - 1):  # all-gather: pass chunk i - s on, receive chunk i - s - 1
        ring.step(s, p - 1 + s, 0)
        written(p - 1 + s)
    ring.close()
    rec.n_msgs = len(rec.msgs) // MSG.size
    rec.n_ops = len(rec.ops) // OP.size
    b.ends[:] = ring.clocks()
    b.results[:] = _results(c, b.x, ring.bounds)


class _Ring:
    """The ring's state while it is booked, member by member in plain Python (a few members).

    ``step(s, step, first)``: every member i sends chunk (i - first - s) to the right, then receives
    from the left; ``reductions(back, name)``: every member reduces chunk (i - back), taking its flops
    in time. Rows go straight into the run's buffers (a copy of millions would double their memory).
    """

    def __init__(self, eng: Engine, c: _Call, b: Booking, x: Any) -> None:
        rec = self.rec = eng._rec
        net = eng.net
        p, g = self.p, self.g = c.p, c.group
        self.tag = c.tag
        self.alpha, self.inv_bw, self.flop_rate = net._alpha, net._inv_bw, eng._flop_rate
        self.right = [g[(i + 1) % p] for i in range(p)]
        self.links = [net.private_links(g[i]) for i in range(p)]
        self.free = [self.links[i].get(self.right[i], 0.0) for i in range(p)]
        self.clock = list(b.entry)
        self.bounds = chunk_bounds(x.size, p)
        self.sizes = [self.bounds[j + 1] - self.bounds[j] for j in range(p)]
        sigs = [rec.sig((n,), x.dtype, n * x.dtype.itemsize) for n in self.sizes]
        self.nbytes = [s[1] for s in sigs]
        self.sig = [s[0] for s in sigs]
        self.label = rec.labels(c.label)
        self.arrive = [0.0] * p
        self.events = {k: bytes([k]) * p for k in (EV_SEND, EV_RECV, EV_OP)}

    def clocks(self) -> list[float]:
        return list(self.clock)

    def step(self, s: int, step: int, first: int) -> None:
        p, g, right, clock, free, arrive, nbytes, sig = (
            self.p, self.g, self.right, self.clock, self.free, self.arrive, self.nbytes, self.sig
        )  # fmt: skip
        msgs, inv_bw, alpha, tag, label = self.rec.msgs, self.inv_bw, self.alpha, self.tag, self.label
        for i in range(p):
            j = (i - first - s) % p
            t = clock[i]
            start = free[i]
            if start < t:
                start = t
            done = start + nbytes[j] * inv_bw
            free[i] = done
            arrive[i] = done + alpha
            msgs.extend(_pack_msg(g[i], right[i], tag, sig[j], label, step, j, t, start, arrive[i]))
        self.rec.log.extend(self.events[EV_SEND])
        sent = len(msgs) // MSG.size - p  # this step's first row (a row is its place in rec.msgs)
        recvs = self.rec.recvs
        for i in range(p):
            t = clock[i]
            a = arrive[i - 1]
            if a > t:
                t = a
            clock[i] = t
            recvs.extend(_pack_recv(sent + (i - 1) % p, t))
        self.rec.log.extend(self.events[EV_RECV])

    def reductions(self, back: int, name: int) -> None:
        p, g, clock, sizes, flop_rate, ops, label = (
            self.p, self.g, self.clock, self.sizes, self.flop_rate, self.rec.ops, self.label
        )  # fmt: skip
        for i in range(p):
            flops = sizes[(i - back) % p]
            t0 = clock[i]
            seconds = flops / flop_rate
            ops.extend(_pack_op(OP_DROPPED, g[i], name, label, t0, t0 + seconds, flops, 0))
            if seconds > 0:
                clock[i] = t0 + seconds
        self.rec.log.extend(self.events[EV_OP])

    def close(self) -> None:
        """Leave each member's link to the right booked until its last byte has gone."""
        for i in range(self.p):
            self.links[i][self.right[i]] = self.free[i]


class _VectorRing(_Ring):
    """The same, each step a few NumPy operations over all members (the same operations, so the same floats)."""

    def __init__(self, eng: Engine, c: _Call, b: Booking, x: Any) -> None:
        super().__init__(eng, c, b, x)
        p = self.p
        self.pos = np.arange(p)
        self.g_arr = np.asarray(self.g, dtype=np.uint16)
        self.right_arr = np.asarray(self.right, dtype=np.uint16)
        self.free = np.asarray(self.free, dtype=np.float64)
        self.clock = np.asarray(self.clock, dtype=np.float64)
        self.sizes_arr = np.asarray(self.sizes, dtype=np.int64)
        self.nbytes_arr = np.asarray(self.nbytes, dtype=np.int64)
        self.sig_arr = np.asarray(self.sig, dtype=np.int32)
        self.msg = np.zeros(p, MSG_DTYPE)
        self.msg["src"], self.msg["dst"], self.msg["tag"], self.msg["label"] = (
            self.g_arr,
            self.right_arr,
            self.tag,
            self.label,
        )
        self.recv = np.zeros(p, RECV_DTYPE)
        self.op = np.zeros(p, OP_DTYPE)
        self.op["kind"], self.op["rank"], self.op["label"] = OP_DROPPED, self.g_arr, self.label

    def clocks(self) -> list[float]:
        return self.clock.tolist()

    def step(self, s: int, step: int, first: int) -> None:
        j = (self.pos - first - s) % self.p
        t = self.clock
        start = np.maximum(self.free, t)
        done = start + self.nbytes_arr[j] * self.inv_bw
        self.free = done
        arrive = done + self.alpha
        m = self.msg
        m["sig"], m["step"], m["chunk"], m["t_send"], m["t_start"], m["t_arrive"] = (
            self.sig_arr[j],
            step,
            j,
            t,
            start,
            arrive,
        )
        rec = self.rec
        sent = len(rec.msgs) // MSG.size
        rec.msgs.extend(m.tobytes())
        rec.log.extend(self.events[EV_SEND])
        self.clock = np.maximum(t, np.roll(arrive, 1))
        r = self.recv
        r["row"], r["t"] = sent + (self.pos - 1) % self.p, self.clock
        rec.recvs.extend(r.tobytes())
        rec.log.extend(self.events[EV_RECV])

    def reductions(self, back: int, name: int) -> None:
        flops = self.sizes_arr[(self.pos - back) % self.p]
        t0 = self.clock
        seconds = flops / self.flop_rate
        o = self.op
        o["name"], o["t_start"], o["t_end"], o["flops"] = name, t0, t0 + seconds, flops
        self.rec.ops.extend(o.tobytes())
        self.rec.log.extend(self.events[EV_OP])
        self.clock = np.where(seconds > 0, t0 + seconds, t0)

    def close(self) -> None:
        for i, t in enumerate(self.free.tolist()):
            self.links[i][self.right[i]] = t


def _results(c: _Call, xs: list[Any], bounds: list[int]) -> list[Any]:
    """Each member's result: chunk j summed in ring order from member j + 1 round to member j (as the
    messages sum it), ``fn(received, own)``, then divided by p for an average; one copy per member."""
    x, p = xs[0], c.p
    if isinstance(x, MetaArray):
        return [MetaArray(x.shape, x.dtype) for _ in range(p)]
    stacked = np.stack([v.reshape(-1) for v in xs])
    chunk = np.repeat(np.arange(p), np.diff(bounds))  # each element's chunk
    cols = np.arange(x.size)
    acc = stacked[(chunk + 1) % p, cols]
    for k in range(2, p + 1):
        acc = c.fn(acc, stacked[(chunk + k) % p, cols])
    if c.op == "avg":
        acc = acc / p
    whole = acc.reshape(x.shape)
    return [whole.copy() for _ in range(p - 1)] + [whole]
