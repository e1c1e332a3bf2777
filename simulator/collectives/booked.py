"""Collectives booked whole: a ring all-reduce's every chunk written in one go.

Written as messages (``simulator.collectives``), a ring all-reduce over p devices is 2(p - 1) steps
on each device, each a send, a receive and (in its first half) a reduction: a greenlet switch and a
few Python objects per chunk. The members can meet instead: each one that arrives waits, and the
last one books every chunk of every step at once, with exactly the arithmetic the messages would
have done (the same link booking, ``max`` for a receive that waits, the reduction's flops over the
device speed, in the same order, so the same floats), writes the rows (``simulator.core.rows``) in each
device's program order, computes the result with a few whole-array NumPy operations in the ring's
summation order (bit for bit the messages' result), and wakes every member at the time its last
step ends. Where the run keeps payloads (the default), every message's payload and every reduction's
inputs and output are computed whole too (``ring_payloads``): the running sums the messages carry,
the same floats, the same objects where the messages pass one object on (made when the trace's payloads are
first read). With ``name=`` the
all-gather's messages are named as its receives name them, and each member records its result under
the name (``_Call.result``); with ``partials=`` the reduce-scatter's messages and reductions are named
by the partial sums they hold, and each receiver holds them under those names (``_name_partials``);
each by its own member's call, as each receive names what it carries (members may name one call differently).
The trace is the one the messages would have made, event for event and payload for payload; the
tests run both and compare (tests/collectives/test_booked*.py).

When: not turned off (``World(book_collectives=False)`` runs every collective message by message),
eager sends, ``algorithm="ring"``, ``partials`` only where payloads are kept, no strict
contracts, isolation replay or program time, NumPy arrays of numbers where payloads are kept (a
``MetaArray`` only without payloads), and every ring hop a link no other device books
(``private_links``: fully connected, or inside a node of a two-level machine) so that booking them
late changes nothing. The first member to arrive decides for the whole call (without payloads, a call whose first
member gives no ``partials=`` is booked whole even where a later one gives them: the running sums are then computed
whole as well, so that the names go with the values that member holds; ``MetaArray`` values, which have none, go
unnamed).

Why it is exact: while the members wait, nothing else can book their private links or reach their
clocks; each member's events are at or after the time it arrived, so a live stepper holds back
settling events until every waiting member's arrival time (``Engine._settle_bound``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.hooks import engine_of, keep_named
from ..core.rows import MSG, OP, OP_DTYPE
from ..cost.meta import MetaArray
from ..tensors.placements import FlatSlice
from .ring_payloads import ring_payloads, ring_terms
from .ring_plan import VECTOR_FROM, RingPlan, book_small, book_vector

INF = float("inf")

if TYPE_CHECKING:
    from ..core.engine import Engine
    from .call import _Call


class Booking:
    """One ring all-reduce call being booked: who has arrived, with what, when."""

    __slots__ = ("p", "booked", "arrived", "x", "entry", "devices", "calls", "results", "ends")

    def __init__(self, p: int, booked: bool) -> None:
        self.p = p
        self.booked = booked  # False: the call goes message by message (the first member decided)
        self.arrived = 0
        self.x: list[Any] = [None] * p
        self.entry = [0.0] * p  # each member's clock when it arrived
        self.devices: list[Any] = [None] * p
        self.calls: list[Any] = [None] * p  # each member's own call: its name= and partials= name what it receives
        self.results: list[Any] = [None] * p
        self.ends = [0.0] * p

    def waiting_since(self) -> float:
        """The earliest arrival among the members waiting (no event of theirs can be earlier)."""
        return min((t for t, d in zip(self.entry, self.devices) if d is not None), default=float("inf"))


def ring_all_reduce(c: _Call, x: Any) -> Any | None:
    """Book the ring all-reduce ``c`` whole and return this member's result, or None to go message by message."""
    dev = c.dev
    eng: Engine | None = engine_of(dev)
    if eng is None:  # another backend's device
        return None
    key = (c.group, c.number)
    b = eng.held_calls.get(key)
    if b is None:
        b = eng.held_calls[key] = Booking(c.p, _can_book(eng, c, x))
    b.arrived += 1
    if b.arrived == b.p:
        del eng.held_calls[key]
    if not b.booked:
        return None
    me = c.me
    b.x[me], b.entry[me], b.devices[me], b.calls[me] = x, dev.clock, dev, c
    if b.arrived < b.p:  # wait for the others; the last one books everything and wakes us at our end
        eng.park(dev, c.group[(me - 1) % c.p], c.tag)
        return b.results[me]
    _book(eng, c, b)
    for i, other in enumerate(b.devices):
        if other is not dev:
            eng.wake(other.rank, b.ends[i])
    eng.advance(dev, b.ends[me])
    return b.results[me]


def _can_book(eng: Engine, c: _Call, x: Any) -> bool:
    if (
        not eng.world.book_collectives
        or eng.rendezvous
        or eng.strict
        or eng.replay is not None
        or not eng.plain_links
        or (c.partials is not None and not eng.keep_payloads)  # (the partial sums' names go with their values)
    ):
        return False
    if eng.world.program_time:  # a real rank runs the ring message by message, and pays its Python between them
        return False
    if eng.keep_payloads:  # payloads computed whole: NumPy arrays of numbers only (anything else gets the
        if type(x) is not np.ndarray or x.dtype.kind not in "biufc":  # messages' own error, or MetaArrays)
            return False
    elif not isinstance(x, (np.ndarray, MetaArray)):
        return False
    rings = eng.caches.setdefault("private rings", {})  # group -> whether every hop is a private link
    private = rings.get(c.group)
    if private is None:  # every hop of the ring on a link only its sender books (worked out once per group)
        is_private = getattr(eng.net, "is_private", None)
        g = c.group
        private = rings[g] = is_private is not None and all(is_private(g[i], g[(i + 1) % c.p]) for i in range(c.p))
    return private


def _book(eng: Engine, c: _Call, b: Booking) -> None:
    """Write every chunk's rows (and payloads, where kept) and compute the result (see the module docstring)."""
    rec = eng.recorder
    p, x = c.p, b.x[c.me]
    key = (c.group, x.size, x.dtype, c.op)
    plans = eng.caches.setdefault("ring plans", {})  # (group, size, dtype, op) -> its RingPlan
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = RingPlan(eng, c, x)
    if rec.n_msgs + rec.n_ops + plan.events > eng.max_events:
        eng.refuse_more_events(c.dev.rank)
    # (computed without payloads kept too where a member's partials= name them: it holds what it receives by name)
    named = any(call.partials is not None for call in b.calls) and all(type(v) is np.ndarray for v in b.x)
    payloads = ring_payloads(c, b.x, b.devices, plan.bounds) if eng.keep_payloads or named else None
    first, first_op = len(rec.msgs) // MSG.size, len(rec.ops) // OP.size  # the call's first rows
    if p >= VECTOR_FROM:
        ends = book_vector(eng, plan, c, b)
    else:
        ends = book_small(eng, plan, c, b)
    rec.n_msgs = len(rec.msgs) // MSG.size
    rec.n_ops = len(rec.ops) // OP.size
    end = float(np.max(ends))
    if not end < INF:  # (NaN too) a bandwidth of 1e-308, or FLOP/s of 1e-300: times no view can show
        plan.refuse_infinite(eng, c, end)
    b.ends[:] = ends
    if payloads is not None:
        if eng.keep_payloads:  # (their objects made when the trace's payloads are first read)
            rec.keep_later(plan.messages, plan.ops, payloads.made)
        b.results[:] = payloads.results(x.shape)
    else:
        b.results[:] = _results(c, b.x, plan.bounds)
    if all(call.name is None and call.partials is None for call in b.calls):  # (each member names by its own call)
        return
    index = [FlatSlice(plan.bounds[j], plan.bounds[j + 1]) for j in range(p)]  # each chunk's part of the value
    names = [call.name for call in b.calls]  # (each receive names what it carries by its own member's call)
    if any(n is not None for n in names):  # the all-gather's messages carry the result's chunks: named so
        at = first + (p - 1) * p
        for s in range(p - 1):
            for i in range(p):
                name = names[(i + 1) % p]
                if name is not None:
                    rec.msg_extra[at + s * p + i] = (name, index[(i - s) % p])
    if named:
        _name_partials(eng, c, b, payloads.msgs, first, first_op, index)


def _name_partials(eng: Engine, c: _Call, b: Booking, msgs: list, first: int, first_op: int, index: list) -> None:
    """With ``partials=``, the reduce-scatter's running sums are named as the messages name them: each message by
    its receiver's names of the members' partials it adds up (``'Z[1]+Z[2]'``, held under that name by the
    receiver), each reduction of a member that gave ``partials=`` by the sum it makes, with the chunk's index
    (``_Call.sum_name``, ``combine``). A member that gave none names nothing it receives or makes; members that
    gave other prefixes name by their own."""
    rec, p = eng.recorder, c.p
    parts = [call.partials for call in b.calls]  # each member's names of the members' partials, or None
    keys = [None if q is None else q[0] for q in parts]  # (one running list of sums per prefix)
    prefixes = {k: q for k, q in zip(keys, parts) if k is not None}
    sums = {k: [q[(j + 1) % p] for j in range(p)] for k, q in prefixes.items()}
    rows = np.frombuffer(rec.ops, OP_DTYPE, count=(p - 1) * p, offset=first_op * OP.size)
    names = rows["name"].copy()  # (the plan wrote the op's one name, ``all_reduce.sum``: kept where none is given)
    for s in range(p - 1):
        for i in range(p):  # step s: member i sends chunk i - s - 1 to member i + 1, which holds it under its name
            m, j = (i + 1) % p, (i - s - 1) % p
            if keys[m] is not None:
                rec.msg_extra[first + s * p + i] = (sums[keys[m]][j], index[j])
                keep_named(b.devices[m], sums[keys[m]][j], msgs[s * p + i])
        for k, q in prefixes.items():
            sums[k] = [sums[k][j] + "+" + q[(j + s + 2) % p] for j in range(p)]
        for i in range(p):  # ... and adds its own block of chunk i - s - 2 into what it received
            if keys[i] is not None:
                j = (i - s - 2) % p
                names[s * p + i] = rec.names(sums[keys[i]][j])
                rec.op_extra[first_op + s * p + i] = (index[j], None, None)
    rows["name"] = names
    del rows  # (a view of the rows must go before they grow again)


def _results(c: _Call, xs: list[Any], bounds: list[int]) -> list[Any]:
    """Each member's result: chunk j summed in ring order from member j + 1 round to member j (as the
    messages sum it), ``fn(received, own)``, then divided by p for an average; one copy per member."""
    x, p = xs[0], c.p
    if isinstance(x, MetaArray):
        return [x] * p  # immutable: one will do for everyone
    terms = ring_terms([v.reshape(-1) for v in xs], bounds)
    acc = terms[0].copy()
    for row in terms[1:]:  # (in place: the same ufunc on the same operands, the same floats)
        c.fn(acc, row, out=acc)
    if c.op == "avg":
        acc = acc / p
    whole = acc.reshape(x.shape)
    return [whole.copy() for _ in range(p - 1)] + [whole]
