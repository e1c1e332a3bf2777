"""A ring's lane: one member's steps of a ring collective (send to the right, receive from the left, maybe
reduce) run in one loop, with everything a step needs bound once per collective call.

A ring collective's member sends p - 1 parts to its right neighbour and receives p - 1 from its left, all on one
tag, each part checked once already (the members compared their calls, ``Engine._agree``). Through ``send``,
``recv`` and ``_reduce`` each part pays again for what cannot change within the call: the peer's and the tag's
checks, the channel's look-up, the label's interning, the mode's branches, three calls. ``RingLane.pass_along``
binds all of it once and runs the steps: each sends a value on as part (step, chunk), receives the next part
and, given the member's blocks, reduces it into its block; what a step makes is what the next one sends. It
records exactly the rows, payloads and times that ``_post``, ``recv`` and ``_reduce`` record for the same parts
(the same trace, byte for byte: tests/collectives/test_ring_lane.py compares them), on the device's own channels,
so that the generic calls and a lane mix freely.

It serves the common case alone: eager sends on private links, ops priced by FLOPs, no isolation replay, no
program time, no strict contracts. Anywhere else ``ring_lane`` returns None and the ring takes the generic
calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..cost.meta import MetaArray
from .device import Device
from .errors import infinite_message, infinite_op
from .payloads import kept_reduction_inputs, run_op
from .rows import EV_OP, EV_RECV, EV_SEND, MSG, OP, OP_DROPPED, RECV

INF = float("inf")
_ndarray = np.ndarray
_pack_msg = MSG.pack
_pack_recv = RECV.pack
_pack_op = OP.pack
_RECV_OP = bytes((EV_RECV, EV_OP))  # a receive and the reduction right after it: one write to the log


def ring_lane(dev: Any, tag: int, label: str, right: int, left: int, p: int) -> RingLane | None:
    """Device ``dev``'s lane in a ring call (``tag``, ``label``) of ``p`` members that sends to ``right`` and
    receives from ``left``; None where the generic calls must go (see the module)."""
    if type(dev) is not Device:  # (a device that pays its program's time times each call: the generic way)
        return None
    eng = dev._engine
    if dev._links is None or eng.rendezvous or eng.strict or eng.replay is not None or not eng._plain_cost:
        return None
    return RingLane(dev, tag, label, right, left, p)


class RingLane:
    """One member's two channels in a ring call, and what its steps record them with (see the module)."""

    __slots__ = ("dev", "tag", "label", "right", "left", "p", "out_ch", "in_ch")

    def __init__(self, dev: Device, tag: int, label: str, right: int, left: int, p: int) -> None:
        self.dev, self.tag, self.right, self.left, self.p = dev, tag, right, left, p
        self.label = dev._rec.labels(label)
        me = dev.rank
        self.out_ch = dev._out.get(right if not tag else tag << 16 | right) or dev._channel(me, right, tag)
        self.in_ch = dev._in.get(left if not tag else tag << 16 | left) or dev._channel(left, me, tag)

    def pass_along(
        self,
        first: Any,
        chunk0: int,
        count: int,
        step0: int,
        blocks: tuple[Any, tuple[int, ...]] | None = None,
        reduce_name: str | None = None,
        fn: Callable[[Any, Any], Any] | None = None,
        chunks: list | None = None,
    ) -> Any:
        """``count`` steps, numbered from ``step0``: step i sends its value as chunk ``(chunk0 - i) % p`` (step 0
        sends ``first``), receives chunk ``(chunk0 - i - 1) % p`` from the left and makes the next value: the part
        received, or with ``blocks`` (a flat array and its blocks' bounds: block j is ``flat[b[j]:b[j + 1]]``)
        ``fn(received, block)``, recorded as the op ``reduce_name`` of ``block.size`` FLOPs (not kept in memory),
        as ``Device._reduce`` records it. ``chunks``: a list where each value made is put at its chunk's number (or
        None: only the one a step sends on is held, never all p). Returns the last value made."""
        dev, tag, right, left, label_id, p = self.dev, self.tag, self.right, self.left, self.label, self.p
        me = dev.rank
        eng = dev._engine
        rec = dev._rec
        flat, bounds = blocks if blocks is not None else (None, None)
        name_id = -1 if reduce_name is None else rec.names(reduce_name)
        links = dev._links
        out_mail, out_posted = self.out_ch.mail, self.out_ch.posted
        in_mail, in_posted = self.in_ch.mail, self.in_ch.posted
        # the device's own bound appends, and the buffers themselves: no bound method made per lane (a suspended
        # member's frame holds what it binds: 256 members' would raise a run's transient peak)
        add_msg, add_recv, log = dev._add_msg, dev._add_recv, dev._log
        ops, events = rec.ops, rec.log
        keep = rec.keep_payloads
        alpha, inv_bw = eng._alpha, eng._inv_bw
        op_latency, flop_rate = eng._op_latency, eng._flop_rate
        devices, sigs = eng.devices, rec.sigs
        queued = eng._queued  # (the engine's one dict of copies waiting in mailboxes)
        payload_of = dev._payload
        known, known_sig = dev._known, dev._known_sig  # an immutable payload whose signature is known: sent unchecked
        value = first
        out_j = chunk0 % p
        for step in range(step0, step0 + count):
            # ---- send value to the right (``Messaging._post``: an eager send on a private link)
            if value is known:
                payload, sig = value, known_sig
            else:
                payload, sig = payload_of(value, right)
            t = dev.clock
            start = links.get(right, 0.0)
            if start < t:
                start = t
            links[right] = done = start + sig[1] * inv_bw
            arrive = done + alpha
            if not arrive < INF:
                raise infinite_message(eng.cost, me, right, sig[1], t, arrive)
            row = rec.n_msgs
            if row + rec.n_ops >= eng._checkpoint:
                eng._event_checkpoint(me)
            rec.n_msgs = row + 1
            add_msg(_pack_msg(me, right, tag, sig[0], label_id, step, out_j, t, start, arrive))
            log(EV_SEND)
            if keep:
                rec.add_msg_payload(payload)
            if out_posted:  # the right neighbour waits for it: wake it when it arrives
                rreq = out_posted.popleft()
                rreq.row, rreq.payload, rreq.sig, rreq.done = row, payload, sig, arrive
                other = devices[rreq.owner]
                if other._blocked is rreq:
                    when = arrive if arrive > other.clock else other.clock
                    if eng._ahead:
                        eng._ready.append((when, other))
                    else:
                        eng._push(when, other.rank)
            else:
                out_mail.append((row, payload, arrive, None, sig))
                if payload is not value and not keep:  # a copy, buffered
                    eng._queue_copy(me, payload)
            # ---- receive the next part from the left (``Messaging.recv``)
            if in_mail:
                row, got, arrive, _, sig = in_mail.popleft()
                if queued:
                    eng._unqueue(got)
                if arrive > dev.clock:
                    if eng._in_time_order:
                        dev._advance(arrive)
                    else:
                        dev.clock = arrive
            else:  # not sent yet: wait for it on the device's reusable request
                req = dev._rreq
                req.peer, req.tag, req.done = left, tag, None
                in_posted.append(req)
                dev._blocked = req
                eng._give_way()
                dev._blocked = None
                row, got, sig = req.row, req.payload, req.sig
                req.payload = None
            add_recv(_pack_recv(row, dev.clock))
            known, known_sig = got, sig
            out_j = out_j - 1 if out_j else p - 1  # the chunk received now, sent on at the next step
            if flat is None:
                log(EV_RECV)
                if chunks is not None:
                    chunks[out_j] = got
                value = got
                continue
            # ---- reduce it into this member's block (``Device._reduce``)
            into = flat[bounds[out_j] : bounds[out_j + 1]]
            try:
                out = fn(got, into)
            except Exception:  # the error compute gives, naming the op, the device and its inputs
                log(EV_RECV)
                run_op(me, rec.names.values[name_id], fn, (got, into))
                raise
            if type(out) is _ndarray and out.flags.writeable:
                out.setflags(write=False)  # read-only for good (see payloads.sealed)
                out = out.view()
            row = rec.n_ops
            if row + rec.n_msgs >= eng._checkpoint:
                log(EV_RECV)
                eng._event_checkpoint(me)
                logged = True
            else:
                logged = False
            rec.n_ops = row + 1
            t0 = dev.clock
            flops = into.size
            seconds = op_latency + flops / flop_rate
            if not t0 + seconds < INF:
                if not logged:
                    log(EV_RECV)
                raise infinite_op(eng.cost, me, rec.names.values[name_id], flops, seconds, t0)
            ops.extend(_pack_op(OP_DROPPED, me, name_id, label_id, t0, t0 + seconds, flops, 0))
            if logged:
                log(EV_OP)
            else:
                events.extend(_RECV_OP)
            if keep:
                rec.add_op_payload((kept_reduction_inputs((got, into)), out))
            if type(out) is _ndarray or type(out) is MetaArray:  # immutable, and what is sent next
                sig = sigs.get((out.shape, out.dtype))
                if sig is not None:
                    known, known_sig = out, sig
            if seconds > 0:
                if eng._in_time_order:
                    dev._advance(t0 + seconds)
                else:
                    dev.clock = t0 + seconds
            if chunks is not None:
                chunks[out_j] = out
            value = out
        return value
