"""A TorchDevice's sends and receives: ``send``/``recv``/``isend``/``irecv``/``wait``/``test`` over
torch.distributed, with the simulator's arguments, and the requests they return (a mixin of
``TorchDevice``, which brings the rank, the clock, the record and the process groups). The rules they keep
(peers, tags, contracts, who may wait) are the simulated device's own: ``simulator.core.p2p``.

A message travels as an optional header, then the payload bytes (see ``wire``). Every wait has a timeout:
a hang becomes a ``CommTimeoutError`` naming this rank and the peer.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..core.errors import SimulationError
from ..core.p2p import PointToPoint, WaitedByItsDevice, contract_violation, describe_request
from ..core.trace import Message
from .recording import RecvRecord, SendRecord
from .wire import (
    HEADER_LEN,
    as_bytes,
    decode_header,
    encode_header,
    from_bytes,
    nbytes_of,
)


class TorchRequest(WaitedByItsDevice):
    """A pending send or receive on a TorchDevice; ``wait`` on it (as with ``simulator.core.device.Request``)."""

    __slots__ = (
        "kind",
        "owner",
        "peer",
        "tag",
        "seq",
        "works",
        "tensors",
        "shape",
        "dtype",
        "name",
        "index",
        "t_post",
        "header",
        "buffer",
        "into",
        "state",
        "t_done",
    )

    def __init__(self, kind, owner, peer, tag, seq, shape=None, dtype=None, name=None, index=None, t_post=0.0):
        self.kind = kind
        self.owner = owner
        self.peer = peer
        self.tag = tag
        self.seq = seq
        self.works: list[Any] = []
        self.tensors: list[Any] = []  # kept alive until the transfer completes
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.index = index
        self.t_post = t_post
        self.header = None  # recv: the header buffer while its payload recv is not yet posted
        self.buffer = None  # recv: the payload buffer
        self.into: np.ndarray | None = None  # recv: the caller's array to receive into (``recv_into``)
        self.state = "posted"  # -> "payload-posted" (recv) -> "done"
        self.t_done: float | None = None

    @property
    def done(self) -> float | None:
        """When the request completed (this device's clock), or None if not known to be complete.

        As ``simulator.core.device.Request.done``, for programs that test before they wait. torch gives no
        reliable test (gloo marks a request complete only once it is waited on), so here a request is
        done once waited on, and an eager send is done at once, as in the simulator.
        """
        return self.t_done

    def describe(self) -> str:
        return describe_request(self.kind, self.peer, self.tag)

    def __repr__(self) -> str:
        return f"<TorchRequest device {self.owner} {self.describe()} {self.state}>"


class TorchMessaging(PointToPoint):
    """Point-to-point messaging on a real rank (mixed into ``TorchDevice``)."""

    _request_type = TorchRequest

    def isend(self, value: Any, dst: int, tag: int = 0, *, label: str | None = None) -> TorchRequest:
        """Start sending a copy of ``value`` to rank ``dst``; returns a request to ``wait`` on."""
        t = self.clock
        tag = self._tag(tag, "send")
        dst = self._peer(dst, "send", "dst")
        payload = np.array(value, order="C")  # the copy the message carries (the program may reuse value)
        seq = self._next(self._send_seq, (dst, tag))
        req = TorchRequest("send", self.rank, dst, tag, seq, t_post=t)
        try:
            if self.headers:
                head = self._to_device(torch.from_numpy(encode_header(payload, self.rank)))
                req.tensors.append(head)
                req.works.append(dist.isend(head, dst, group=self._header_group, tag=tag))
            if payload.nbytes:
                body = self._to_device(torch.from_numpy(as_bytes(payload)))
                req.tensors.append(body)
                req.works.append(dist.isend(body, dst, tag=tag))
        except RuntimeError as exc:
            raise self._comm_error(exc, req) from exc
        if self.send_mode == "eager":  # complete at once for the program, as in the simulator; the
            req.t_done = t  # transfer completes when the receiver takes it (gloo sends are rendezvous)
        # held until the run ends (or its collective does), waited on or not: a send the program never waits on
        # is delivered, as simulated (dropped with its request, its buffers went and its receiver hung)
        self._in_flight.append(req)
        payload.setflags(write=False)
        msg = Message(None, self.rank, dst, tag, payload.shape, payload.dtype, payload.nbytes, t, None, label)
        if self.keep_payloads:
            msg.payload = payload
        self.record.sends.append(SendRecord(msg, seq, self.record.next_order()))
        return req

    def recv_into(self, src: int, tag: int, out: np.ndarray, *, name: str | None = None, index: Any = None):
        """Receive a message of ``out``'s shape and dtype straight into ``out`` (writable, C-contiguous: a
        block of a collective's result); returns ``out``'s values, read-only. Not in the simulator's API: a
        real rank's collective uses it (when the device has it) to save the copy that would assemble a result
        from blocks received apart (of 64 MiB: some 8 ms here)."""
        return self.wait(self._post_recv(src, tag, out.shape, out.dtype, name, index, into=out))

    @property
    def needs_contract(self) -> bool:
        return self.strict or not self.headers  # (without headers nothing says a message's shape)

    def _post_recv(self, src, tag, shape, dtype, name, index, into: np.ndarray | None = None) -> TorchRequest:
        t = self.clock
        tag = self._tag(tag, "recv")
        src = self._peer(src, "recv", "src")
        required = "strict mode" if self.strict else None if self.headers else "with headers off (headers=False)"
        shape, dtype = self._contract(src, tag, shape, dtype, required)
        seq = self._next(self._recv_seq, (src, tag))
        req = TorchRequest("recv", self.rank, src, tag, seq, shape, dtype, name, index, t_post=t)
        req.into = into
        try:
            if self.headers:
                req.header = torch.empty(HEADER_LEN, dtype=torch.int64, device=self.device)
                req.works.append(dist.irecv(req.header, src, group=self._header_group, tag=tag))
                self._unheaded.setdefault((src, tag), deque()).append(req)
                if self.ordered_headers:
                    self._read_headers(src, tag, upto=req)
            else:
                self._post_payload(req, shape, dtype)
        except RuntimeError as exc:
            raise self._comm_error(exc, req) from exc
        self._open_recvs.add(req)
        return req

    def test(self, req: TorchRequest) -> bool:
        """Whether ``req`` is known to be complete (see ``TorchRequest.done``); never blocks. A program that keeps
        testing a request for longer than ``timeout`` is told that only a wait completes it here, not left to spin."""
        self._a_request(req, "test")
        if req.done is None and self.clock - req.t_post > self.timeout:
            raise SimulationError(
                f"device {self.rank} has tested {req.describe()} for {self.timeout:g} s (the timeout) and it is still "
                "pending: on real ranks gloo says a send or receive has completed only once it is waited on, so a "
                "program that polls it waits forever. Wait on it: dev.wait(req) (torch: work.wait())"
            )
        return req.done is not None

    def wait(self, req: TorchRequest) -> np.ndarray | None:
        """Block until ``req`` completes (at most ``timeout`` s). A recv returns its payload; a send None."""
        self._own(req)
        if req.kind == "send":
            if self.send_mode == "rendezvous" and req.state != "done":
                # done once the receiver has posted its receive, which its header's transfer shows; the
                # payload's completes when the receiver takes it (waiting for that here would deadlock two
                # ranks that each isend, irecv, then wait on the send first, which gloo completes)
                if self.headers and len(req.works) > 1:
                    self._finish_works(req, only=1)  # (the payload's transfer: settled with the run's in flight)
                else:
                    self._finish_works(req)
                    req.tensors.clear()  # (its buffers: done with, though the request stays in flight's list)
                req.state = "done"
                req.t_done = self.clock
            return None  # eager: already complete for the program (see isend)
        if req.state == "done":
            raise SimulationError(f"device {self.rank} waited twice on the receive {req.describe()} #{req.seq}")
        if req.state == "posted":  # its header (and those before it on the channel) must be read first
            self._read_headers(req.peer, req.tag, upto=req)
        self._finish_works(req)
        payload = from_bytes(self._from_device(req.buffer), req.shape, req.dtype)
        if req.into is not None and not np.shares_memory(payload, req.into):  # received on a GPU: copy it over
            np.copyto(req.into, payload)
            payload = from_bytes(as_bytes(req.into), req.shape, req.dtype)
        t = req.t_done = self.clock
        req.state = "done"
        req.tensors.clear()
        self._open_recvs.discard(req)
        self.record.recvs.append(
            RecvRecord(
                req.peer, self.rank, req.tag, req.seq, req.t_post, t, req.name, req.index, self.record.next_order()
            )
        )
        self._keep_named(req.name, payload)
        return payload

    def open_receives(self) -> int:
        """How many receives were posted but never waited on (they would swallow a later message)."""
        return len(self._open_recvs)

    def sends_in_flight(self) -> int:
        """How many sends the run still holds until it settles: eager ones, and every rendezvous one (waited on or
        not: a waited one's buffers are let go, its request kept)."""
        return len(self._in_flight)

    def settle(self, since: int = 0) -> None:
        """Wait for the eager sends' transfers (call once every receive of the run has completed), or for
        those sent since the ``since``-th (a collective's own, once every member has joined it)."""
        for req in self._in_flight[since:]:
            self._finish_works(req)
        del self._in_flight[since:]

    def _read_headers(self, src: int, tag: int, upto: TorchRequest) -> None:
        """Read, in channel order, the headers of the receives up to ``upto``, and post their payload recvs."""
        pending = self._unheaded[(src, tag)]
        while pending:
            req = pending.popleft()
            self._finish_works(req)
            shape, dtype = decode_header(self._from_device(req.header))
            req.header = None
            self._check_contract(req, shape, dtype)
            self._post_payload(req, shape, dtype)
            if req is upto:
                return

    def _post_payload(self, req: TorchRequest, shape, dtype) -> None:
        req.shape, req.dtype = shape, dtype
        if req.into is not None and self.device.type == "cpu":
            req.buffer = torch.from_numpy(as_bytes(req.into))
        else:
            req.buffer = torch.empty(nbytes_of(shape, dtype), dtype=torch.uint8, device=self.device)
        req.works = [dist.irecv(req.buffer, req.peer, tag=req.tag)] if req.buffer.numel() else []
        req.state = "payload-posted"

    def _finish_works(self, req: TorchRequest, only: int | None = None) -> None:
        """Wait for the request's transfers (the first ``only`` of them, if given), each within the timeout."""
        n = len(req.works) if only is None else only
        try:
            for work in req.works[:n]:
                work.wait(self.wait_timeout)
        except RuntimeError as exc:
            raise self._comm_error(exc, req) from exc
        del req.works[:n]

    def _comm_error(self, exc: RuntimeError, req: TorchRequest) -> SimulationError:
        waits_for = "never sent a matching message" if req.kind == "recv" else "never posted the matching recv"
        return self.comm_error(exc, req.describe(), f"device {req.peer} {waits_for}", f"device {req.peer}")

    def _check_contract(self, req: TorchRequest, shape, dtype) -> None:
        if (req.shape is not None and req.shape != shape) or (req.dtype is not None and req.dtype != dtype):
            where = f"message {req.seq} of the channel"
            raise contract_violation(where, req.peer, self.rank, req.tag, (req.shape, req.dtype), (shape, dtype))

    @staticmethod
    def _next(counters: dict, key) -> int:
        n = counters.get(key, 0)
        counters[key] = n + 1
        return n
