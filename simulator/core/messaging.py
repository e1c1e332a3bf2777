"""Point-to-point messaging, the part of ``Device`` that sends and receives: ``send``/``recv``/``isend``/
``irecv``/``wait``/``test`` with the torch.distributed names, the requests they return, and the channels
messages queue on. A mixin of ``Device`` (it uses the device's engine, clock and recorder).

Every send and receive is recorded as one packed row (``simulator.core.rows``): these methods are the
engine's hot path, so they avoid making objects per message (a blocking receive that finds its message
waiting makes none at all) and bind what they use to locals.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

import numpy as np

from ..cost.meta import MetaArray
from .errors import SimulationError, copy_too_big, infinite_message
from .p2p import PointToPoint, WaitedByItsDevice, contract_violation, describe_request
from .payloads import _immutable, check_payload, sealed
from .rows import EV_RECV, EV_SEND, MSG, RECV
from .tags import TAG_BASE, CollectiveTag

POLL_LIMIT = 100_000  # test() calls on a pending request without the clock moving: a program that only polls
NAN = float("nan")
INF = float("inf")
_pack_msg = MSG.pack
_pack_recv = RECV.pack
_ndarray = np.ndarray
_dtype = np.dtype


class Request(WaitedByItsDevice):
    """A pending send or receive; ``wait`` on it. ``done`` is its completion time once known.

    A matched receive holds its message's ``row`` and ``payload`` until it is waited on.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> def program(dev):
        ...     if dev.rank == 0:
        ...         req = dev.isend(np.ones(2), 1)
        ...     else:
        ...         req = dev.irecv(0, shape=(2,), dtype=np.float64)
        ...     return dev.wait(req)
        >>> World(2).run(program).outputs
        [None, array([1., 1.])]
    """

    __slots__ = (
        "kind", "owner", "peer", "tag", "row", "payload", "sig", "done", "shape", "dtype", "name", "index", "t_post",
        "taken",
    )  # fmt: skip

    def __init__(self, kind, owner, peer, tag, row, done, shape=None, dtype=None, name=None, index=None, t_post=0.0):
        self.kind = kind
        self.owner = owner
        self.peer = peer
        self.tag = tag
        self.row = row  # the message's row (a send's from the start, a receive's once matched)
        self.payload = None
        self.sig = None  # (signature id, bytes) of the matched message
        self.done = done
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.index = index
        self.t_post = t_post  # when it was posted: a rendezvous transfer cannot start before both are
        self.taken = False  # a receive's payload was handed over (waiting twice is an error)

    def describe(self) -> str:
        return describe_request(self.kind, self.peer, self.tag)

    def __repr__(self) -> str:
        state = "pending" if self.done is None else f"done at {self.done:.3g} s"
        return f"<Request device {self.owner} {self.describe()} {state}>"


class Channel:
    """One (src, dst, tag): messages sent on it and not yet received, receives posted and not yet matched.

    A message waits as ``(row, payload, arrival, send Request, signature)``: arrival None and a send
    Request for a rendezvous send not yet matched, else the arrival time and None.
    """

    __slots__ = ("mail", "posted")

    def __init__(self) -> None:
        self.mail: deque[tuple] = deque()
        self.posted: deque[Request] = deque()


class Messaging(PointToPoint):
    """A device's sends and receives on the engine's clock (mixed into ``Device``; the rules they keep, shared
    with a real rank's, are ``PointToPoint``'s)."""

    _request_type = Request

    # ---- point-to-point -----------------------------------------------------------------------
    def isend(self, value: Any, dst: int, tag: int = 0, *, label: str | None = None) -> Request:
        """Start sending a copy of ``value`` to device ``dst``; returns a Request to ``wait`` on.

        Args:
            value: a NumPy array or a number (a writable array is copied; read-only ones are sent as they are).
            dst: the receiving device's rank.
            tag: tells apart messages between the same two devices (0 to 2**30 - 1).
            label: the text the views show for the message (default: none).

        Returns:
            The send's ``Request``: ``wait`` on it before changing ``value`` in rendezvous mode.

        Examples:
            >>> import numpy as np
            >>> from simulator import World
            >>> def program(dev):
            ...     if dev.rank == 0:
            ...         dev.wait(dev.isend(np.ones(2), 1, tag=7))
            ...     else:
            ...         return dev.recv(0, 7)
            >>> World(2).run(program).outputs
            [None, array([1., 1.])]
        """
        sreq = self._post(tag, -1 if label is None else self._rec.labels(label), value, dst, -1, -1)
        if sreq is None:  # eager: already complete
            sreq = Request("send", self.rank, dst, tag, self._rec.n_msgs - 1, self.clock)
        return sreq

    def send(self, value: Any, dst: int, tag: int = 0, *, label: str | None = None) -> None:
        """Send a copy of ``value`` to device ``dst``.

        Eager mode (the default): returns at once, the message buffered until the link carries it. Rendezvous
        mode (``World(send_mode="rendezvous")``): returns once the receiver has posted its receive and the last
        byte has left.

        Args:
            value: a NumPy array or a number.
            dst: the receiving device's rank.
            tag: tells apart messages between the same two devices (0 to 2**30 - 1).
            label: the text the views show for the message (default: none).

        Examples:
            >>> import numpy as np
            >>> from simulator import World
            >>> def program(dev):
            ...     if dev.rank == 0:
            ...         dev.send(np.arange(2.0), 1)
            ...     else:
            ...         return dev.recv(0)
            >>> World(2).run(program).outputs
            [None, array([0., 1.])]
        """
        sreq = self._post(tag, -1 if label is None else self._rec.labels(label), value, dst, -1, -1)
        if sreq is not None:
            self.wait(sreq)

    @property
    def needs_contract(self) -> bool:
        return self._engine.strict

    def _call_label(self, text: str) -> int:
        """A collective call's label as ``_post`` takes it: interned (see ``PointToPoint._call_label``)."""
        return self._rec.labels(text)

    def _channel(self, src: int, dst: int, tag: int) -> Channel:
        """The engine's channel (src, dst, tag), remembered by its two ends: keyed by the peer and the tag in one
        int, ``tag << 16 | peer`` (an int hashes faster than a tuple: every message looks its channel up twice)."""
        eng = self._engine
        ch = eng._chans.get((src, dst, tag))
        if ch is None:
            ch = eng._chans[(src, dst, tag)] = Channel()
        sender, receiver = eng.devices[src], eng.devices[dst]
        sender._out[dst if not tag else tag << 16 | dst] = ch
        receiver._in[src if not tag else tag << 16 | src] = ch
        return ch

    def _payload(self, value: Any, dst: int) -> tuple[Any, tuple[int, int]]:
        """What a message carries (``value`` itself when immutable, else a read-only copy) and its signature."""
        if (type(value) is _ndarray and _immutable(value)) or type(value) is MetaArray:
            payload = value  # nobody can write through it: hand it over as it is
        else:
            check_payload(value, self.rank, f"send(dst={dst})")
            # the copy's size, counted against World.max_buffered_bytes before it is made: a broadcast_to view
            # of a few bytes can stand for gigabytes, which would be copied for seconds and only then refused
            nbytes = value.nbytes if type(value) is _ndarray else np.asarray(value).nbytes
            eng = self._engine
            if nbytes > eng.world.max_buffered_bytes:
                raise copy_too_big(eng.world.max_buffered_bytes, self.rank, dst, value, nbytes)
            if self._rec.keep_payloads:  # the trace keeps the copy for good (see World.max_buffered_bytes)
                eng._hold_copy(self.rank, nbytes)
            payload = sealed(np.array(value))
        rec = self._rec
        sig = rec.sigs.get((payload.shape, payload.dtype))
        if sig is None:
            check_payload(payload, self.rank, f"send(dst={dst})")  # a held array of strings, say
            sig = rec.sig(payload.shape, payload.dtype, payload.nbytes)
        return payload, sig

    def _post(self, tag: Any, label: int, value: Any, dst: Any, step: Any, chunk: Any) -> Request | None:
        """Record and route a message; returns the pending send Request, or None if already complete.

        Every send goes this way, a program's plain one, a labelled one and a collective's parts alike: the
        engine's hot path. label: the interned label (or -1); step and chunk: a collective part's (or -1), see
        ``columns`` (a part named by text, ``"fold"``, ``"all"``, is interned too). A collective binds its tag
        and label once (``functools.partial``) and passes the rest per message (``PointToPoint._post``).
        """
        rank = self.rank
        if type(dst) is not int or dst == rank or not 0 <= dst < self.world_size:
            dst = self._peer(dst, "send", "dst")
        if type(tag) is not CollectiveTag and (type(tag) is not int or not 0 <= tag < TAG_BASE):
            tag = self._tag(tag, "send")
        if value is self._known:  # forwarding what it just received: checked already
            payload = value
            sig = self._known_sig
        else:
            payload, sig = self._payload(value, dst)
        eng = self._engine
        rec = self._rec
        links = self._links
        sreq = None
        if links is not None:  # a private link (eager sends; the common case): book it here, as Network.transfer does
            t = self.clock
            start = links.get(dst, 0.0)
            if start < t:
                start = t
            links[dst] = done = start + sig[1] * eng._inv_bw
            arrive = done + eng._alpha
        else:
            if eng._lookahead and not (eng._is_private and eng._is_private(rank, dst)):
                heap = eng._heap  # a shared link: book it only once every device with an earlier event has gone
                if heap and heap[0][0] < self.clock:
                    eng._push(self.clock, rank)
                    eng._give_way()
            t = self.clock
            if eng.rendezvous:  # the transfer waits for the matching recv (see Engine._match)
                start = arrive = NAN
                sreq = Request("send", rank, dst, tag, rec.n_msgs, None, t_post=t)
            else:  # buffered: the send completes at once, the link carries the bytes when it is free
                start, _, arrive = eng.net.transfer(rank, dst, sig[1], t)
        if not arrive < INF and sreq is None:  # (NaN too; a rendezvous send's times come when it is matched)
            raise infinite_message(eng.cost, rank, dst, sig[1], t, arrive)
        row = rec.n_msgs
        if row + rec.n_ops >= eng._checkpoint:
            eng._event_checkpoint(rank)
        try:
            packed = _pack_msg(rank, dst, tag, sig[0], label, step, chunk, t, start, arrive)
        except struct.error:  # a part named by text ("fold", "all"): interned, as a negative number
            packed = _pack_msg(rank, dst, tag, sig[0], label, rec.part(step), rec.part(chunk), t, start, arrive)
        rec.n_msgs = row + 1
        self._add_msg(packed)
        self._log(EV_SEND)
        if rec.keep_payloads:
            rec.add_msg_payload(payload)
        ch = self._out.get(dst if not tag else tag << 16 | dst)
        if ch is None:
            ch = self._channel(rank, dst, tag)
        if sreq is not None:  # rendezvous
            if ch.posted:
                eng._match((row, payload, None, sreq, sig), ch.posted.popleft())
            else:
                ch.mail.append((row, payload, None, sreq, sig))
                if payload is not value and not rec.keep_payloads:  # a copy, buffered
                    eng._queue_copy(rank, payload)
        elif ch.posted:  # a receive waits for it (Engine._match, inlined: the hot path)
            rreq = ch.posted.popleft()
            rreq.row = row
            rreq.payload = payload
            rreq.sig = sig
            rreq.done = arrive
            dev = eng.devices[rreq.owner]
            if dev._blocked is rreq:  # wake the receiver when the message arrives
                if eng._ahead:
                    eng._ready.append((arrive if arrive > dev.clock else dev.clock, dev))
                else:
                    eng._push(arrive if arrive > dev.clock else dev.clock, dev.rank)
        else:
            ch.mail.append((row, payload, arrive, None, sig))
            if payload is not value and not rec.keep_payloads:  # a copy, buffered
                eng._queue_copy(rank, payload)
        return sreq

    def _post_recv(self, src, tag, shape, dtype, name, index) -> Request:
        eng = self._engine
        if type(src) is not int or src == self.rank or not 0 <= src < self.world_size:
            src = self._peer(src, "recv", "src")
        if type(tag) is not CollectiveTag and (type(tag) is not int or not 0 <= tag < TAG_BASE):
            tag = self._tag(tag, "recv")
        if shape is not None or dtype is not None or eng.strict:
            shape, dtype = self._contract(src, tag, shape, dtype, "strict mode" if eng.strict else None)
        rreq = Request("recv", self.rank, src, tag, None, None, shape, dtype, name, index, self.clock)
        ch = self._in.get(src if not tag else tag << 16 | src)
        if ch is None:
            ch = self._channel(src, self.rank, tag)
        if ch.mail:
            sent = ch.mail.popleft()
            if eng._queued:
                eng._unqueue(sent[1])
            eng._match(sent, rreq)
        else:
            ch.posted.append(rreq)
        return rreq

    def recv(
        self,
        src: int,
        tag: int = 0,
        *,
        shape: tuple[int, ...] | None = None,
        dtype: Any = None,
        name: str | None = None,
        index: Any = None,
    ) -> np.ndarray:
        """Receive a message from device ``src``; returns its payload, read-only.

        Args:
            src: the sending device's rank.
            tag: the tag the sender used.
            shape: the shape expected (the contract, checked when the message arrives; strict worlds need it).
            dtype: the dtype expected.
            name: what the message carries in the model: the value is held in memory under it, and the checker
                compares it with the single-device value of that name.
            index: which part of the single-device value ``name`` it carries (a shard), e.g.
                ``(slice(0, 2),)``.

        Examples:
            >>> import numpy as np
            >>> from simulator import World
            >>> def program(dev):
            ...     if dev.rank == 0:
            ...         dev.send(np.arange(2.0), 1)
            ...     else:
            ...         h = dev.recv(0, shape=(2,), dtype=np.float64, name="h")
            ...         return h, sorted(dev.memory)
            >>> World(2).run(program).outputs[1]
            (array([0., 1.]), ['h'])
        """
        eng = self._engine
        rank = self.rank
        if type(src) is not int or src == rank or not 0 <= src < self.world_size:
            src = self._peer(src, "recv", "src")
        if type(tag) is not CollectiveTag and (type(tag) is not int or not 0 <= tag < TAG_BASE):
            tag = self._tag(tag, "recv")
        # the contract, normalised unless given as a tuple and a dtype already (a collective's are)
        if (shape is not None and type(shape) is not tuple) or (dtype is not None and not isinstance(dtype, _dtype)):
            shape, dtype = self._contract(src, tag, shape, dtype, "strict mode" if eng.strict else None)
        elif eng.strict:
            self._contract(src, tag, shape, dtype, "strict mode")
        if eng.rendezvous:  # the transfer starts once both sides have posted: the general path
            return self.wait(self._post_recv(src, tag, shape, dtype, name, index))
        ch = self._in.get(src if not tag else tag << 16 | src)
        if ch is None:
            ch = self._channel(src, rank, tag)
        mail = ch.mail
        if mail:  # the message is on its way already: take it
            row, payload, arrive, _, sig = mail.popleft()
            if eng._queued:  # a copy the engine held (see World.max_buffered_bytes)
                eng._unqueue(payload)
            if arrive > self.clock:
                if eng._in_time_order:
                    self._advance(arrive)
                else:  # running ahead (Engine.finish): nobody else's turn to give way to
                    self.clock = arrive
        else:  # nothing yet: wait for it, on the device's own reusable request (nobody else sees it)
            req = self._rreq
            req.peer, req.tag, req.done = src, tag, None
            ch.posted.append(req)
            self._blocked = req
            eng._give_way()
            self._blocked = None
            row, payload, sig = req.row, req.payload, req.sig
            req.payload = None
        if (shape is not None and shape != payload.shape) or (
            dtype is not None and dtype is not payload.dtype and dtype != payload.dtype
        ):
            self._contract_violated(row, payload, shape, dtype)
        self._add_recv(_pack_recv(row, self.clock))
        self._log(EV_RECV)
        if eng.replay is not None:  # the isolation check hands over what the unchanged run received
            payload = eng.replay(rank, payload)
        self._known = payload
        self._known_sig = sig
        if name is not None or index is not None:
            self._rec.msg_extra[row] = (name, index)
            self._keep_named(name, payload)
        return payload

    def test(self, req: Request) -> bool:
        """Whether ``req`` has completed by this device's clock (torch's ``is_completed``); never blocks.

        The answer is the one strict time order gives: every device with an earlier event runs first,
        so a message sent before now in simulated time has been sent, however the engine schedules.
        """
        if type(req) is not Request:
            self._a_request(req, "test")
        if not self._engine._in_time_order:
            self._engine._catch_up(self)
        if req.done is not None and req.done <= self.clock:
            self._polls = 0
            return True
        # No simulated time passes between two tests: a program that only polls never sees its request
        # complete. Say so rather than spin forever.
        if self._polls and self.clock != self._poll_clock:
            self._polls = 0
        self._polls += 1
        self._poll_clock = self.clock
        if self._polls >= POLL_LIMIT:
            raise SimulationError(
                f"device {self.rank} tested {req.describe()} {POLL_LIMIT:,} times at t = {self.clock:.6g} s, its clock "
                "standing still: in a simulation no time passes between two tests, so the request cannot complete. "
                "Compute something between tests (as an overlapped all-reduce does), or call dev.wait(req)."
            )
        return False

    def wait(self, req: Request) -> np.ndarray | None:
        """Block until ``req`` completes; the device's clock moves on to that time.

        Args:
            req: a ``Request`` from ``isend`` or ``irecv``.

        Returns:
            A receive's payload (read-only); None for a send.

        Examples:
            >>> import numpy as np
            >>> from simulator import World
            >>> def program(dev):
            ...     req = dev.irecv(1 - dev.rank, shape=(1,), dtype=np.float64)
            ...     dev.send(np.array([dev.rank + 10.0]), 1 - dev.rank)
            ...     return dev.wait(req)
            >>> World(2).run(program).outputs
            [array([11.]), array([10.])]
        """
        self._own(req)
        if req.done is None:
            self._blocked = req
            self._engine._give_way()
            self._blocked = None
        elif req.done > self.clock:
            self._advance(req.done)
        if req.kind == "send":
            return None
        if req.taken:
            raise SimulationError(f"device {self.rank} waited twice on the receive of message #{req.row}")
        req.taken = True
        payload, req.payload = req.payload, None
        self._known_sig = req.sig
        return self._deliver(req.row, payload, req.shape, req.dtype, req.name, req.index)

    def _deliver(self, row: int, payload: Any, shape, dtype, name, index) -> Any:
        """The receive completes now: check the contract, record it, hand over the payload."""
        if (shape is not None and shape != payload.shape) or (dtype is not None and dtype != payload.dtype):
            self._contract_violated(row, payload, shape, dtype)
        rec = self._rec
        self._add_recv(_pack_recv(row, self.clock))
        self._log(EV_RECV)
        if self._engine.replay is not None:  # the isolation check hands over what the unchanged run received
            payload = self._engine.replay(self.rank, payload)
        self._known = payload  # (and wait set _known_sig)
        if name is not None or index is not None:
            rec.msg_extra[row] = (name, index)
            self._keep_named(name, payload)
        return payload

    def _contract_violated(self, row: int, payload: Any, shape, dtype) -> None:
        src, dst, tag, _, label, step, chunk = MSG.unpack_from(self._rec.msgs, row * MSG.size)[:7]
        collective = self._engine.trace.label_text(label, step, chunk) if label >= 0 else None
        raise contract_violation(
            f"message #{row}", src, dst, tag, (shape, dtype), (payload.shape, payload.dtype), collective
        )
