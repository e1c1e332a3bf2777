"""The engine: runs one rank program per device, deterministically, on a simulated clock.

Each device runs its program as a greenlet (a cooperative coroutine), so programs are written in the
blocking style of torch.distributed. The scheduler is a heap of (time, sequence, rank): it resumes
the device with the earliest pending event; a running device keeps going until it blocks or its clock
passes another device's next event. So every link is booked, and every event recorded, in simulated
time order, and the same program with the same inputs gives the same trace, event for event.

One exception makes large runs fast without changing any result: with eager sends and no link
shared by two senders (the defaults: a fully connected network), a device books only its own links,
in its own time order, and a receive waits for its own message whatever order devices run in. A run
to the end then lets each device run ahead until it blocks, and puts the event log in time order
when it finishes.
Stepping a live run always keeps strict time order.

When the heap is empty but some devices have not finished, they are all blocked: a deadlock, reported
with what each waits for and the cycle of waiting devices (simulator/core/run_errors.py, with the messages
left unreceived). Nothing here is global: each ``World.run`` builds its own engine, so two simulations
can run side by side in one process.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any

import numpy as np
from greenlet import GreenletExit, getcurrent, greenlet

from .arguments import arguments_for
from .columnar import ColumnarTrace
from .device import Channel, Device, Request
from .errors import (
    CollectiveMismatchError,
    EventLimitError,
    RankError,
    SimulationError,
    infinite_message,
)
from .ordering import settle
from .payloads import returned
from .program_time import ProgramTimedDevice
from .rows import SETTLE_EVERY, Recorder
from .run_errors import not_a_plain_function, raise_deadlock, raise_over_budget, report_leftovers
from .threads import BlasThreads
from .trace import Trace

INF = float("inf")


@dataclass
class RunResult:
    """What a finished run returns: each device's return value, and the trace; and how to run it again (the
    program and its arguments: the isolation check, ``simulator.checker.isolation``, reruns it with one device's
    own inputs changed).

    Examples:
        >>> from simulator import World
        >>> run = World(2).run(lambda dev: dev.rank * 10)
        >>> run.outputs, run.time
        ([0, 10], 0.0)
    """

    outputs: list[Any]
    trace: Trace
    world: Any  # the World it ran under (simulator.core.world)
    program: Callable[..., Any] | None = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    @property
    def time(self) -> float:
        """Simulated seconds from the start to the last event."""
        return self.trace.end_time


class Engine:
    """One run in progress: the devices, the event heap, the mailboxes and the link state.

    Examples:
        ``World.start`` makes one to run a program step by step (``World.run`` runs it to the end):

        >>> from simulator import World
        >>> engine = World(2).start(lambda dev: dev.all_reduce(dev.rank + 1.0))
        >>> while engine.step():
        ...     pass
        >>> engine.finished, engine.result().outputs
        (True, [array(3.), array(3.)])
    """

    def __init__(self, world: Any, program: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        # world: the rules it runs under (simulator.core.world.World, which makes the engine)
        self.world = world
        self.world_size = world.size
        self.cost = world.cost
        self.rendezvous = world.send_mode == "rendezvous"
        self.strict = world.strict
        self.keep_payloads = world.keep_payloads
        self.max_events = world.max_events
        self.net = world.cost.network(world.size)
        # with zero latency a message can arrive when it is sent: the canonical order then checks causality
        cost = world.cost
        self._instant = (
            cost.latency == 0
            or any(r.latency == 0 for r in cost.regimes)
            or getattr(cost.topology, "inter_latency", 1.0) == 0
            or cost.spread is not None  # a drawn time may be shorter than the latency
        )
        # One latency and bandwidth for every message: devices may then book their links inline (the hot path);
        # ops bound by FLOPs alone too: they time their ops inline. Size regimes and a measured spread of
        # message times, or the roofline for ops, go the general way.
        self._plain_links = not cost.regimes and cost.spread is None
        self._plain_cost = self._plain_links and cost.memory_bandwidth is None
        # Devices record rows as events happen (simulator/core/rows.py); they move into trace.events in
        # canonical order (simulator/core/ordering.py) once no device can record an earlier one.
        self._rec = Recorder(world.keep_payloads)
        self.trace = ColumnarTrace(world.size, world.keep_payloads, self._rec, wide_codes=self.max_events >= 1 << 29)
        # the hot path compares the event count with this one number: the limit, or the next settle
        self._checkpoint = min(self.max_events, SETTLE_EVERY)
        self._flop_rate, self._op_latency = world.cost.flops, world.cost.op_latency  # what compute_time does, inline
        self._alpha = getattr(self.net, "alpha", 0.0)  # for links the devices book inline (Network)
        self._inv_bw = getattr(self.net, "inv_bandwidth", 0.0)
        self.outputs: list[Any] = [None] * world.size
        device = ProgramTimedDevice if world.program_time else Device
        self.devices = [device(self, r) for r in range(world.size)]
        self._heap: list[tuple[float, int, int]] = []  # (time, sequence, rank): who runs next, in time order
        self._ready: list[tuple[float, Device]] = []  # (time, device): who may run, when running ahead (see finish)
        self._ahead = False
        self._seq = 0
        self._chans: dict[tuple[int, int, int], Channel] = {}  # (src, dst, tag) -> what waits on that channel
        self._failure: tuple[int, BaseException] | None = None
        self._closing = False  # close() is ending the devices' greenlets
        self._blas = BlasThreads(world.blas_threads)
        self._calls: dict[tuple, list] = {}  # (members, call number) -> [first rank, its call, how many came]
        # The hook layers above the core use (the whole-ring fast path, simulator/collectives/booked.py): calls
        # that hold their members waiting outside any device call, by (group, call number), each able to say since
        # when it holds one (``waiting_since()``); and per-run caches those layers keep, by name.
        self.held_calls: dict[tuple, Any] = {}
        self.caches: dict[str, dict] = {}
        # The isolation check's hook (simulator/checker/isolation.py): set before ``finish``, every payload a receive
        # hands to its program passes through it, (rank, payload) -> the payload to hand over instead.
        self.replay: Callable[[int, Any], Any] | None = None
        # Payload copies the engine holds, against World.max_buffered_bytes: those the trace keeps, and those
        # waiting in a mailbox (by id: released when received, where the trace keeps none)
        self._buffered = 0
        self._buffered_by = [0] * world.size
        self._queued: dict[int, tuple[int, int]] = {}  # id(payload) -> (sender, bytes)
        self._unfinished = world.size
        self._direct = False
        # How devices take turns. Strict time order (rendezvous sends; and stepping where links are private):
        # a device yields whenever its clock passes another's next event. Where links are shared (a ring, a
        # two-level machine's ports) and sends are eager, only the bookings of shared links must happen in
        # time order: a device runs ahead through everything else and yields just before such a booking
        # (``_lookahead``; stepping and running alike, so both give the same times). Running a whole run
        # where every link is private, devices run ahead without yielding at all (``finish``).
        shared = getattr(self.net, "shared_links", True)
        self._lookahead = shared and not self.rendezvous
        self._in_time_order = not self._lookahead
        self._is_private = getattr(self.net, "is_private", None)
        self._sched = getcurrent()
        self._program, self._args, self._kwargs = program, args, kwargs  # to run it again (RunResult)
        self._greenlets = [greenlet(self._body(dev, program, args, kwargs)) for dev in self.devices]
        for dev, g in zip(self.devices, self._greenlets):
            dev._greenlet = g
        for r in range(world.size):
            self._push(0.0, r)

    # ---- running ------------------------------------------------------------------------------
    def _body(self, dev: Device, program, args, kwargs) -> Callable[[], None]:
        timed = isinstance(dev, ProgramTimedDevice)

        rank = dev.rank  # its slot, whatever the program does to dev.rank

        def run() -> None:
            try:
                own_args, own_kwargs = arguments_for(dev.rank, args, kwargs)  # private memory, as on real ranks
                if timed:
                    dev.start_program()
                out = program(dev, *own_args, **own_kwargs)
                if inspect.isgenerator(out) or inspect.iscoroutine(out):
                    not_a_plain_function(program, out)
                if timed:
                    dev.pay_program_time()  # what it ran after its last call
                self.outputs[rank] = returned(out)  # read now, not inside a check (payloads.returned)
            except GreenletExit as exc:
                if self._closing:  # the engine ends this device (close): let the greenlet go
                    raise
                self._failure = (rank, exc)  # the program's own: reported as any other of its errors
            except BaseException as exc:  # reported by the scheduler, with the rank
                self._failure = (rank, exc)
            dev._done = True
            self._unfinished -= 1
            if not self._unfinished:
                self.trace.outputs = self.outputs

        return run

    @property
    def finished(self) -> bool:
        return self._unfinished == 0

    # ---- what the layers above use: public names for the booked collectives and the views ----------------
    @property
    def recorder(self) -> Recorder:
        """The packed rows this run writes (``rows.Recorder``): the booked ring writes its rows here directly."""
        return self._rec

    @property
    def pending(self) -> bool:
        """Whether events wait to run (a live run that ``step`` can take further)."""
        return bool(self._heap)

    @property
    def plain_links(self) -> bool:
        """Whether every message costs alpha + n / B (no size regimes, no measured spread)."""
        return self._plain_links

    @property
    def plain_cost(self) -> bool:
        """Whether an op costs its latency plus FLOPs / rate alone (plain links, and no memory-bandwidth roofline)."""
        return self._plain_cost

    @property
    def flop_rate(self) -> float:
        """A device's FLOPs per second (the cost model's)."""
        return self._flop_rate

    @property
    def op_latency(self) -> float:
        """Seconds every op costs before its FLOPs (the cost model's)."""
        return self._op_latency

    @property
    def link_latency(self) -> float:
        """Alpha of a fully connected network's links, in seconds (0 on a topology: it prices each route)."""
        return self._alpha

    @property
    def link_seconds_per_byte(self) -> float:
        """1 / B of a fully connected network's links (0 on a topology: it prices each route)."""
        return self._inv_bw

    def wake(self, rank: int, t: float) -> None:
        """Resume device ``rank`` at simulated time ``t`` (a device parked while the booked ring ran)."""
        self._push(t, rank)

    def advance(self, dev: Device, t: float) -> None:
        """Move the running device's clock on to ``t`` (its part of a booked collective ends then)."""
        dev._advance(t)

    def refuse_more_events(self, rank: int) -> None:
        """Raise ``EventLimitError`` naming the device that keeps going: a booking would pass ``max_events``."""
        self._too_many_events(rank)

    def _push(self, t: float, rank: int) -> None:
        if self._ahead:
            self._ready.append((t, self.devices[rank]))
        else:
            self._seq += 1
            heappush(self._heap, (t, self._seq, rank))

    def _match(self, sent: tuple, rreq: Request) -> None:
        """Pair a message (a mailbox entry: row, payload, arrival, send Request, signature) with the receive
        that takes it; wake whoever waits on either. (Messaging._post inlines the eager case.)"""
        row, payload, arrive, sreq, sig = sent
        if arrive is None:  # rendezvous: the transfer starts once both sides have posted
            start = rreq.t_post if rreq.t_post > sreq.t_post else sreq.t_post
            start, sreq.done, arrive = self.net.transfer(sreq.owner, rreq.owner, sig[1], start)
            if not arrive < INF:  # (NaN too)
                raise infinite_message(self.cost, sreq.owner, rreq.owner, sig[1], start, arrive)
            self._rec.write_times(row, start, arrive)
            self._wake(sreq)
        rreq.row = row
        rreq.payload = payload
        rreq.sig = sig
        rreq.done = arrive
        dev = self.devices[rreq.owner]
        if dev._blocked is rreq:  # wake the receiver when the message arrives
            self._push(arrive if arrive > dev.clock else dev.clock, dev.rank)

    def _wake(self, req: Request) -> None:
        dev = self.devices[req.owner]
        if dev._blocked is req:
            t = req.done
            self._push(t if t > dev.clock else dev.clock, dev.rank)

    def _catch_up(self, dev: Device) -> None:
        """Let every device with an event earlier than ``dev``'s clock run first (devices may run ahead of
        each other on private links; a device that tests a request must see what time order shows)."""
        if self._ahead:  # the stack of woken devices has no time order: take turns by the heap from now on
            self._ahead = False
            for t, d in self._ready:
                self._push(t, d.rank)
            self._ready.clear()
        heap = self._heap
        while heap and heap[0][0] < dev.clock:
            self._push(dev.clock, dev.rank)
            self._give_way()

    def _give_way(self) -> None:
        """Called by a device that blocks or yields: resume the next device in time order.

        When running to the end, switch straight to that device (one switch instead of two); when
        stepping, return to the scheduler so each step stops promptly. Running ahead, the next device is
        the one woken last (a stack: no ordering needed, see ``finish``).
        """
        if self._ahead:
            ready = self._ready
            if ready:
                t, dev = ready[-1]
                g = dev._greenlet
                if g:  # started (a new greenlet must start from the scheduler, or stacks would nest)
                    ready.pop()
                    if t > dev.clock:
                        dev.clock = t
                    g.switch()  # never the current device: running ahead, a device is woken only when blocked
                    return
            self._sched.switch()
            return
        heap = self._heap
        if self._direct and heap:
            t, _, rank = heap[0]
            g = self._greenlets[rank]
            if g:  # started (a new greenlet must start from the scheduler, or stacks would nest)
                heappop(heap)
                dev = self.devices[rank]
                if t > dev.clock:
                    dev.clock = t
                if g is not getcurrent():
                    g.switch()
                return
        self._sched.switch()

    def _tick(self) -> None:
        """Resume the device with the earliest pending event (running ahead: the last woken) until it blocks or yields."""
        if self._ahead:
            t, dev = self._ready.pop()
            rank = dev.rank
        else:
            t, _, rank = heappop(self._heap)
        dev = self.devices[rank]
        if t > dev.clock:
            dev.clock = t
        self._sched = current = getcurrent()
        g = self._greenlets[rank]
        if g.parent is not current:
            g.parent = current
        g.switch()
        if self._failure is not None:
            rank, exc = self._failure
            self._failure = None
            self.close()
            self._chans.clear()  # the messages nobody will receive now: their payloads go at once
            self._settle()
            if isinstance(exc, SimulationError) or not isinstance(exc, (Exception, GreenletExit)):
                raise exc  # names the devices involved already; or Ctrl-C / SystemExit, which must pass
            raise RankError(rank, exc) from exc

    def step(self) -> bool:
        """Run until at least one more event is in the trace. Returns False once the run is over.

        An event enters the trace once no device can still record an earlier one, so the trace grows
        in canonical order, as a whole run's does. Between ticks every unfinished device either waits
        on the heap (its next event is no earlier than its heap time) or is blocked until a device on
        the heap acts: nothing earlier than the heap's first time can still happen.
        """
        n = len(self.trace.events)
        with self._blas.applied():
            while len(self.trace.events) == n:
                if not self._heap:
                    self._settle()
                    if len(self.trace.events) > n:
                        return True
                    if self._unfinished:
                        raise_deadlock(self)
                    return False
                self._tick()
                self._settle(self._settle_bound())
        return True

    def park(self, dev: Device, peer: int, tag: int) -> Request:
        """Block ``dev`` until someone wakes it (``_push``); while it waits it is described as receiving from
        ``peer`` (a member of a collective booked whole waits so: simulator/collectives/booked.py)."""
        req = Request("recv", dev.rank, peer, tag, None, None)
        dev._blocked = req
        self._give_way()
        dev._blocked = None
        return req

    def _settle_bound(self) -> float | None:
        """No event earlier than this can still be recorded: the heap's first time, or the arrival of a
        device waiting for a collective to be booked whole (see simulator/collectives/booked.py), if earlier."""
        bound = self._heap[0][0] if self._heap else None
        for b in self.held_calls.values():
            t = b.waiting_since()
            if bound is None or t < bound:
                bound = t
        return bound

    def _settle(self, before: float | None = None) -> None:
        """Move the recorded events earlier than ``before`` (all, for None) into the trace, in canonical order."""
        settle(self.trace, before, self._instant)

    def events(self) -> Iterator[tuple[str, Any]]:
        """Advance the run event by event, yielding each new (kind, record) as it happens."""
        i = 0
        while True:
            while i < len(self.trace.events):
                yield self.trace.events[i]
                i += 1
            if not self.step() and i >= len(self.trace.events):
                return

    def finish(self) -> RunResult:
        """Run to the end; report leftovers; return the result."""
        tick = self._tick
        self._direct = True
        # Where no two senders share a link and sends are eager, a device's sends book only its own
        # links, in its own (time) order, and a receive waits for its own message whatever the order
        # devices run in: devices may then run ahead of each other, and the log is put in canonical
        # order at the end. (Rendezvous sends book links when matched, so they keep strict time order.)
        # Then the order devices run in is free: a stack of woken devices replaces the heap.
        self._in_time_order = self.rendezvous
        if not self.rendezvous and not self._lookahead:
            self._ahead = True
            self._ready.extend((t, self.devices[r]) for t, _, r in sorted(self._heap, reverse=True))  # earliest on top
            self._heap.clear()
        ready, heap = self._ready, self._heap  # a device that calls test() moves the rest onto the heap
        # The trace holds millions of small records and makes no reference cycles: pausing the
        # cyclic garbage collector saves its repeated full scans of them (restored afterwards).
        collecting = gc.isenabled()
        gc.disable()
        try:
            with self._blas.applied():
                while ready or heap:
                    tick()
            self._settle()
        finally:
            if collecting:
                gc.enable()
        if self._unfinished:
            raise_deadlock(self)
        self.trace.finish()
        report_leftovers(self)
        return self.result()

    def result(self) -> RunResult:
        """The run as it stands: each device's return value (None for one that has not returned) and the trace."""
        return RunResult(self.outputs, self.trace, self.world, self._program, self._args, self._kwargs)

    def close(self) -> None:
        """Abandon the run: end every device's greenlet."""
        self._closing = True
        for g in self._greenlets:
            if g and not g.dead:
                g.parent = getcurrent()
                g.throw(GreenletExit)
        self._heap.clear()
        self._ready.clear()

    # ---- checks on the way -----------------------------------------------------------------------
    def _hold_copy(self, rank: int, nbytes: int) -> None:
        """Device ``rank``'s send made a copy the engine holds: count it against the budget."""
        self._buffered += nbytes
        self._buffered_by[rank] += nbytes
        if self._buffered > self.world.max_buffered_bytes:
            raise_over_budget(self, rank, nbytes)

    def _queue_copy(self, rank: int, payload: Any) -> None:
        """A copy waits in a mailbox (payloads are not kept): held until received (``_unqueue``)."""
        self._queued[id(payload)] = (rank, payload.nbytes)
        self._hold_copy(rank, payload.nbytes)

    def _unqueue(self, payload: Any) -> None:
        """A message left its mailbox: the receiver holds its payload now, no longer the engine."""
        held = self._queued.pop(id(payload), None)
        if held is not None:
            self._buffered -= held[1]
            self._buffered_by[held[0]] -= held[1]

    def _agree(self, rank: int, members: tuple[int, ...], number: int, call: Any) -> None:
        """Compare this member's collective call with the first member's call of the same number.

        members: the group's ranks in order (so that a group listed in another order is caught); call: the
        collective's own record of the call (``collectives.call.CallSignature``), compared with ``==`` and written
        out with ``describe()`` when two members differ."""
        group = members
        key = (members, number)
        entry = self._calls.get(key)
        if entry is None:
            self._calls[key] = [rank, call, 1]
            self.trace.groups.add(key[0])
            return
        first, first_call, came = entry
        if call != first_call:
            (r0, c0), (r1, c1) = sorted([(first, first_call.describe()), (rank, call.describe())])
            empty = first_call.has_empty_shape() or call.has_empty_shape()
            raise CollectiveMismatchError(
                f"devices {key[0]} made different collective calls (call #{number} among them):\n"
                f"  device {r0} calls {c0}\n  device {r1} calls {c1}\n"
                "  every member of a group must make the same collective calls, in the same order, with the same\n"
                "  arguments (the same group order, root, op, algorithm and shapes)"
                + (
                    "\n  a shape with no elements: was a value split along an axis shorter than the group (a batch\n"
                    "  of 1 along axis 0 gives the other members empty blocks)? split it along another axis="
                    if empty
                    else "\n  pieces of different sizes: give every member the same shapes= (each member's piece shape, in\n"
                    "  member order); torch needs equal sizes"
                    if first_call.only_shapes_differ(call)
                    else ""
                )
            )
        if came + 1 == len(group):
            del self._calls[key]
        else:
            entry[2] = came + 1

    def _event_checkpoint(self, rank: int) -> None:
        """The event count reached ``_checkpoint``: the limit (an error), or time to settle some events."""
        rec = self._rec
        count = rec.n_msgs + rec.n_ops
        if count >= self.max_events:
            self._too_many_events(rank)
        self.settle_below(self.devices[rank].clock)
        # Settle again after a sixth more events (at least SETTLE_EVERY): what waits unsettled, and the arrays a
        # settle makes, stay small beside the trace, while the events held back (a lagging device's) are looked
        # at a bounded number of times each.
        self._checkpoint = min(self.max_events, count + max(SETTLE_EVERY, count // 6))

    def settle_below(self, floor: float) -> None:
        """Settle every recorded event that no device can still precede. ``floor``: the running device's clock
        (or the lowest clock of collective members being booked): its next event is no earlier.

        Taking turns by the heap (in time order, or looking ahead to shared links), every other device's next
        event is no earlier than the heap's first time (a device runs from the time it is taken off the heap;
        a blocked one is woken by a message sent then or later) or than the arrival of a device waiting for
        a collective to be booked; running ahead off a stack, no earlier than its own clock.
        """
        if not self._ahead:
            bound = self._settle_bound()
        else:
            bound = min((d.clock for d in self.devices if not d._done), default=None)
        if bound is None or floor < bound:
            bound = floor
        self._settle(bound)

    def _too_many_events(self, rank: int) -> None:
        """The event limit is reached: name the device that keeps going, and how to raise the limit."""
        src = self._rec.table("msgs", copy=True)["src"]
        sends = np.bincount(src, minlength=1)
        top = int(sends.argmax())
        what = (
            f"device {top} sent {sends[top]:,} of the {len(src):,} messages"
            if len(src) and sends[top] * 2 > len(src)
            else f"device {rank} was running when the limit was reached"
        )
        raise EventLimitError(  # from the device's own coroutine: the scheduler ends the run
            f"the run recorded {self.max_events:,} events, its limit: {what}. A program that never stops? "
            "If the run is meant to be this long, raise the limit: World(..., max_events=...)"
        )
