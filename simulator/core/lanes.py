"""A ring's lane: one device's step of a ring collective (send to the right, receive from the left, maybe reduce)
as one call, with everything the step needs bound once per collective call.

A ring collective's member sends p - 1 parts to its right neighbour and receives p - 1 from its left, all on one
tag, each part checked once already (the members compared their calls, ``Engine._agree``). Through ``send``,
``recv`` and ``_reduce`` each part pays again for what cannot change within the call: the peer's and the tag's
checks, the channel's look-up, the label's interning, the mode's branches. ``ring_exchanger`` binds all of it
once and returns ``exchange(value, step, chunk, into=None)``: the send of part (step, chunk), the receive of the
next part and, given ``into``, its reduction ``fn(received, into)``, recorded as exactly the rows, payloads and
times that ``_post``, ``recv`` and ``_reduce`` record for them (the same trace, event for event: the tests of
simulator/collectives compare it), on the device's own channels, so that the generic calls and a lane mix freely.

It serves the common case alone: eager sends on private links, ops priced by FLOPs, no isolation replay, no
program time, no strict contracts. Anywhere else ``ring_exchanger`` returns None and the ring takes the generic
calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..cost.meta import MetaArray
from .device import Device, _kept_inputs
from .errors import infinite_message, infinite_op
from .payloads import run_op
from .rows import EV_OP, EV_RECV, EV_SEND, MSG, OP, OP_DROPPED, RECV

INF = float("inf")
_ndarray = np.ndarray
_pack_msg = MSG.pack
_pack_recv = RECV.pack
_pack_op = OP.pack
_RECV_OP = bytes((EV_RECV, EV_OP))  # a receive and the reduction right after it: one write to the log


def ring_exchanger(
    dev: Any, tag: int, label: str, right: int, left: int, reduce_name: str | None = None, fn: Callable | None = None
) -> Callable[..., Any] | None:
    """``exchange(value, step, chunk, into=None)`` for device ``dev`` in a ring call (``tag``, ``label``): send
    ``value`` to ``right`` as part (step, chunk), receive the next part from ``left`` and return it, or, given
    ``into``, return ``fn(received, into)`` recorded as the op ``reduce_name`` (``into.size`` FLOPs, not kept in
    memory), as ``Device._reduce`` records it. None where the generic calls must go (see the module)."""
    if type(dev) is not Device:  # (a device that pays its program's time times each call: the generic way)
        return None
    eng = dev._engine
    links = dev._links
    if links is None or eng.rendezvous or eng.strict or eng.replay is not None or not eng._plain_cost:
        return None
    me = dev.rank
    rec = dev._rec
    label_id = rec.labels(label)
    name_id = -1 if reduce_name is None else rec.names(reduce_name)
    out_ch = dev._out.get(right if not tag else tag << 16 | right) or dev._channel(me, right, tag)
    in_ch = dev._in.get(left if not tag else tag << 16 | left) or dev._channel(left, me, tag)
    out_mail, out_posted = out_ch.mail, out_ch.posted
    in_mail, in_posted = in_ch.mail, in_ch.posted
    add_msg, add_recv, add_op = rec.msgs.extend, rec.recvs.extend, rec.ops.extend
    log, log_more = rec.log.append, rec.log.extend
    keep = rec.keep_payloads
    alpha, inv_bw = eng._alpha, eng._inv_bw
    op_latency, flop_rate = eng._op_latency, eng._flop_rate
    devices, sigs = eng.devices, rec.sigs
    payload_of = dev._payload
    known, known_sig = dev._known, dev._known_sig  # an immutable payload whose signature is known: sent unchecked
    out_sigs: dict[tuple, tuple[int, int]] = {}  # a reduction's shape -> its signature (dtype fixed within a call)

    def exchange(value: Any, step: int, chunk: int, into: Any = None) -> Any:
        nonlocal known, known_sig
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
        add_msg(_pack_msg(me, right, tag, sig[0], label_id, step, chunk, t, start, arrive))
        log(EV_SEND)
        if keep:
            rec.msg_payloads.append(payload)
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
            if eng._queued:
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
        if into is None:
            log(EV_RECV)
            return got
        # ---- reduce it into ``into`` (``Device._reduce``)
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
            log_op = EV_OP
        else:
            log_op = None
        rec.n_ops = row + 1
        t0 = dev.clock
        flops = into.size
        seconds = op_latency + flops / flop_rate
        if not t0 + seconds < INF:
            if log_op is None:
                log(EV_RECV)
            raise infinite_op(eng.cost, me, rec.names.values[name_id], flops, seconds, t0)
        add_op(_pack_op(OP_DROPPED, me, name_id, label_id, t0, t0 + seconds, flops, 0))
        if log_op is None:
            log_more(_RECV_OP)
        else:
            log(log_op)
        if keep:
            rec.op_payloads.append((_kept_inputs((got, into)), out))
        if type(out) is _ndarray or type(out) is MetaArray:  # immutable, and what is sent next
            shape = out.shape
            sig = out_sigs.get(shape)
            if sig is None:
                sig = sigs.get((shape, out.dtype))
                if sig is not None:
                    out_sigs[shape] = sig
            if sig is not None:
                known, known_sig = out, sig
        if seconds > 0:
            if eng._in_time_order:
                dev._advance(t0 + seconds)
            else:
                dev.clock = t0 + seconds
        return out

    return exchange
