"""Device: the only thing a rank program sees.

A device has a rank, a private memory of named arrays, a clock, and point-to-point messaging with
the torch.distributed names (``send``/``recv``/``isend``/``irecv``/``wait``). Blocking calls suspend
the program (a greenlet) until the engine's simulated clock says the call completes.

Nothing crosses between devices except messages, and neither side can change what the other holds:
a payload is handed to the receiver read-only, copied at the send unless it is already immutable (a
read-only array over read-only memory, as hold, compute and recv produce), which needs no copy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .collectives import CollectiveMethods
from .cost import op_bytes, op_flops
from .errors import ContractError, OpError, SimulationError, describe_inputs
from .tags import TAG_BASE, CollectiveTag, user_tag
from .trace import Message, Op

if TYPE_CHECKING:
    from .engine import Engine

INF = float("inf")


class Request:
    """A pending send or receive; ``wait`` on it. ``done`` is its completion time once known."""

    __slots__ = ("kind", "owner", "peer", "tag", "msg", "done", "shape", "dtype", "name", "index", "t_post")

    def __init__(self, kind, owner, peer, tag, msg, done, shape=None, dtype=None, name=None, index=None, t_post=0.0):
        self.kind = kind
        self.owner = owner
        self.peer = peer
        self.tag = tag
        self.msg = msg
        self.done = done
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.index = index
        self.t_post = t_post  # when it was posted: a rendezvous transfer cannot start before both are

    def describe(self) -> str:
        if self.kind == "send":
            return f"send(dst={self.peer}, tag={self.tag})"
        return f"recv(src={self.peer}, tag={self.tag})"

    def __repr__(self) -> str:
        state = "pending" if self.done is None else f"done at {self.done:.3g} s"
        return f"<Request device {self.owner} {self.describe()} {state}>"


def _nbytes(value: Any) -> int:
    """Bytes a value occupies in memory: arrays and numbers by size; tuples and lists add up."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, (int, float, complex, np.generic)):
        return np.asarray(value).nbytes
    return 0


def _immutable(value: Any) -> bool:
    """A read-only array over read-only memory all the way down (what hold, compute and recv hand out).

    Sending one needs no copy: neither side can change what the other sees. Anything else, a writable
    array, a view of one, a list, a scalar, is copied into a fresh read-only array.
    """
    while type(value) is np.ndarray:
        if value.flags.writeable:
            return False
        value = value.base
        if value is None:
            return True
    return False


def frozen(value: Any) -> np.ndarray:
    """``value`` itself when it is already immutable, else a read-only copy: sendable without copies."""
    return value if _immutable(value) else freeze(value)


def freeze(value: Any) -> np.ndarray:
    """A read-only copy of ``value``: what a message carries."""
    return sealed(np.array(value))


def sealed(arr: np.ndarray) -> np.ndarray:
    """``arr`` made read-only for good: a read-only view of it, whose flag cannot be set back (numpy
    refuses to make a view writeable over read-only memory), so no program can change what the trace
    recorded."""
    arr.setflags(write=False)
    return arr.view()


def run_op(rank: int, name: str, fn: Callable[..., Any], inputs: tuple) -> Any:
    """``fn(*inputs)``, its output read-only for good; an error names the op, the device and its inputs."""
    try:
        out = fn(*inputs)
    except Exception as exc:  # keep numpy's words, add where and with what
        raise OpError(
            f"op {name!r} on device {rank} raised {type(exc).__name__}: {exc}\n  its inputs: {describe_inputs(inputs)}"
        ) from exc
    if isinstance(out, np.ndarray) and out.flags.writeable:
        out = sealed(out)
    return out


def check_payload(value: Any, rank: int, where: str) -> None:
    """Messages carry numbers: refuse strings, bytes, Python objects and masked arrays with the fix."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(
            f"device {rank}: {where} got a masked array; a message would drop its mask. Send the data and the "
            "mask as two arrays (value.data and value.mask)."
        )
    kind = value.dtype.kind if isinstance(value, np.ndarray) else np.asarray(value).dtype.kind
    if kind not in "biufc":
        raise TypeError(
            f"device {rank}: {where} got {type(value).__name__} {value!r:.60}; a message carries numbers (a NumPy "
            "array or a scalar of booleans, integers, floats or complex numbers), not strings, bytes or objects"
        )


class DeviceMemory:
    """A device's private memory of named values; each backend records changes its own way."""

    rank: int
    _memory: dict[str, Any]

    @property
    def memory(self) -> Mapping[str, Any]:
        """This device's named values (read-only view)."""
        return MappingProxyType(self._memory)

    def hold(
        self, name: str, value: Any, *, index: Any = None, partial: Any = None, doc: str | None = None
    ) -> np.ndarray:
        """Place a value in this device's memory under ``name`` (an input, a weight, a shard).

        index:   which part of the single-device value ``name`` this is (e.g. ``np.s_[:, 0:3]``)
        partial: this is one term of a sum over a group of devices whose total is ``name``: True (every
                 device) or the group's ranks (see ``Device.compute``)
        """
        arr = freeze(value)
        self._record_memory("hold", name, arr, index, doc, partial_group(self, partial, name))
        self._memory[name] = arr
        return arr

    def free(self, name: str) -> None:
        """Drop a named value from memory."""
        if name not in self._memory:
            raise KeyError(f"device {self.rank} holds no value named {name!r}; it holds {sorted(self._memory)}")
        self._record_memory("free", name, None, None, None, None)
        del self._memory[name]

    def _record_memory(
        self, kind: str, name: str, arr: np.ndarray | None, index: Any, doc: str | None, partial: tuple | None
    ) -> None:
        """Record a hold (arr) or a free (None) in this backend's trace."""
        raise NotImplementedError


def partial_group(dev: Any, partial: Any, name: str) -> tuple[int, ...] | None:
    """``partial=`` as a tuple of ranks: True means every device; a group must include the device."""
    if partial is None or partial is False:
        return None
    if partial is True:
        return tuple(range(dev.world_size))
    try:
        group = tuple(int(r) for r in partial)
    except TypeError:
        raise TypeError(
            f"device {dev.rank}: partial={partial!r} for {name!r}: say True (a sum over every device) or list the "
            "ranks whose terms add up to it, e.g. partial=(0, 1)"
        ) from None
    if len(set(group)) != len(group) or any(not 0 <= r < dev.world_size for r in group) or dev.rank not in group:
        raise ValueError(
            f"device {dev.rank}: partial={group} for {name!r} must list distinct ranks in 0..{dev.world_size - 1}, "
            f"this device ({dev.rank}) among them"
        )
    return group


class Device(DeviceMemory, CollectiveMethods):
    """One simulated device. Rank programs call only these methods (the collectives come from
    ``CollectiveMethods``: all_reduce, all_gather, ... written as messages in simulator/collectives.py)."""

    def __init__(self, engine: Engine, rank: int) -> None:
        self._engine = engine
        self.rank = rank
        self.world_size = engine.world_size
        self.clock = 0.0
        self.eager_sends = not engine.rendezvous  # a send completes at once (collectives skip its wait)
        self._memory: dict[str, Any] = {}
        self._log: list[tuple[str, Any]] = []  # this device's events, in its program order, until they settle
        self._blocked: Request | None = None
        self._done = False

    def __repr__(self) -> str:
        return f"<Device {self.rank}/{self.world_size} t={self.clock:.3g}s>"

    # ---- memory -------------------------------------------------------------------------------
    def _record_memory(self, kind, name, arr, index, doc, partial) -> None:
        eng = self._engine
        if eng._op_ids + len(eng._messages) >= eng.max_events:
            eng._too_many_events(self.rank)
        t = self.clock
        nbytes = 0 if arr is None else arr.nbytes
        kept = arr if eng.keep_payloads else None
        op = Op(eng._next_op_id(), self.rank, name, t, t, 0, None, kept, index, doc, True, nbytes, partial)
        self._log.append((kind, op))

    # ---- compute ------------------------------------------------------------------------------
    def compute(
        self,
        name: str,
        fn: Callable[..., Any],
        *inputs: Any,
        flops: float | None = None,
        seconds: float | None = None,
        index: Any = None,
        partial: Any = None,
        doc: str | None = None,
        keep: bool = True,
        label: str | None = None,
    ) -> Any:
        """Run ``fn(*inputs)`` as the op ``name``; the clock advances by its cost.

        flops:   work for the cost model (default: 2mnk for np.matmul / np.dot / @ of an (m, k) and a
                 (k, n) array, else one operation per output element; see ``cost.op_flops``)
        seconds: a fixed duration instead of flops
        index:   which part of the single-device value ``name`` this computes (for the checker)
        partial: this output is one term of a sum over a group of devices, and the group's terms add up
                 to ``name`` (a row-parallel matmul before its all-reduce): True for every device, or the
                 group's ranks. The checker adds the terms up and compares the sum with ``name``, and
                 flags a partial sum used where the complete value is needed.
        keep:    store the output in memory under ``name``
        label:   the collective step this op belongs to (set by the collectives)
        """
        eng = self._engine
        group = partial_group(self, partial, name)
        out = run_op(self.rank, name, fn, inputs)
        if seconds is None:
            if flops is None:
                flops = op_flops(fn, inputs, out)
            elif not 0 <= flops < INF:
                raise ValueError(f"device {self.rank}: op {name!r} got flops={flops!r}; give a finite count >= 0")
            cost = eng.cost
            if cost.memory_bandwidth is None:
                seconds = cost.compute_time(flops)
            else:  # the roofline: memory traffic may be what limits the op
                seconds = cost.op_time(flops, op_bytes(inputs, out))
        elif not 0 <= seconds < INF:
            raise ValueError(
                f"device {self.rank}: op {name!r} got seconds={seconds!r}; give a finite duration >= 0 (or flops=)"
            )
        if eng._op_ids + len(eng._messages) >= eng.max_events:
            eng._too_many_events(self.rank)
        t0 = self.clock
        nbytes = _nbytes(out) if keep else 0
        if eng.keep_payloads:
            ins = tuple(np.array(a) if isinstance(a, np.ndarray) and a.flags.writeable else a for a in inputs)
            op = Op(eng._next_op_id(), self.rank, name, t0, t0 + seconds, flops, ins, out, index, doc, keep, nbytes)
        else:
            op = Op(eng._next_op_id(), self.rank, name, t0, t0 + seconds, flops, None, None, index, doc, keep, nbytes)
        op.partial, op.label = group, label
        self._log.append(("op", op))
        if keep:
            self._memory[name] = out
        if seconds > 0:
            self._advance(t0 + seconds)
        return out

    # ---- point-to-point -----------------------------------------------------------------------
    def isend(self, value: Any, dst: int, tag: int = 0, *, label: str | None = None) -> Request:
        """Start sending a copy of ``value`` to device ``dst``; returns a Request to ``wait`` on."""
        sreq = self._post_send(value, dst, tag, label)
        if sreq is None:  # eager: already complete
            sreq = Request("send", self.rank, dst, tag, None, self.clock)
        return sreq

    def send(self, value: Any, dst: int, tag: int = 0, *, label: str | None = None) -> None:
        """Send a copy of ``value`` to device ``dst``.

        Eager mode: returns at once (the message is buffered; the link carries it when free).
        Rendezvous mode: returns once the receiver has posted its recv and the last byte has left.
        """
        sreq = self._post_send(value, dst, tag, label)
        if sreq is not None:
            self.wait(sreq)

    def _post_send(self, value, dst, tag, label) -> Request | None:
        """Record and route a message; returns the pending send Request, or None if already complete."""
        eng = self._engine
        if type(dst) is not int or dst == self.rank or not 0 <= dst < self.world_size:
            dst = self._peer(dst, "send", "dst")
        if type(tag) is not CollectiveTag and (type(tag) is not int or not 0 <= tag < TAG_BASE):
            tag = self._tag(tag, "send")
        if _immutable(value):  # nobody can write through it: hand it over as it is
            payload = value
            if payload.dtype.kind not in "biufc":  # a held array of strings, say
                check_payload(payload, self.rank, f"send(dst={dst})")
        else:
            check_payload(value, self.rank, f"send(dst={dst})")
            payload = sealed(np.array(value))
        n = len(eng._messages)
        if n + eng._op_ids >= eng.max_events:
            eng._too_many_events(self.rank)
        t = self.clock
        nbytes = payload.nbytes
        if eng.rendezvous:  # the transfer waits for the matching recv (see Engine._match)
            start = arrive = None
        else:  # buffered: the send completes at once, the link carries the bytes when it is free
            start, _, arrive = eng.net.transfer(self.rank, dst, nbytes, t)
        msg = Message(
            n,
            self.rank,
            dst,
            tag,
            payload.shape,
            payload.dtype,
            nbytes,
            t,
            payload,
            label,
            start,
            arrive,
        )
        eng._messages.append(msg)
        self._log.append(("send", msg))
        sreq = Request("send", self.rank, dst, tag, msg, None) if start is None else None
        key = (self.rank, dst, tag)
        posted = eng._posted.get(key)
        if posted:
            eng._match(msg, sreq, posted.popleft())
        else:
            box = eng._mail.get(key)
            if box is None:
                box = eng._mail[key] = deque()
            box.append((msg, sreq))
        return sreq

    def irecv(
        self,
        src: int,
        tag: int = 0,
        *,
        shape: tuple[int, ...] | None = None,
        dtype: Any = None,
        name: str | None = None,
        index: Any = None,
    ) -> Request:
        """Post a receive from device ``src``; ``wait`` on the Request returns the payload.

        shape, dtype: the contract, what the receiver expects (checked when the message arrives)
        name:         what the message carries in the model (stored in memory under it; checked)
        index:        which part of the single-device value ``name`` it carries (a shard)
        """
        return self._post_recv(src, tag, shape, dtype, name, index)

    def _post_recv(self, src, tag, shape, dtype, name, index) -> Request:
        eng = self._engine
        if type(src) is not int or src == self.rank or not 0 <= src < self.world_size:
            src = self._peer(src, "recv", "src")
        if type(tag) is not CollectiveTag and (type(tag) is not int or not 0 <= tag < TAG_BASE):
            tag = self._tag(tag, "recv")
        if shape is not None or dtype is not None or eng.strict:
            shape, dtype = self._contract(src, tag, shape, dtype)
        rreq = Request("recv", self.rank, src, tag, None, None, shape, dtype, name, index, self.clock)
        key = (src, self.rank, tag)
        box = eng._mail.get(key)
        if box:
            msg, sreq = box.popleft()
            eng._match(msg, sreq, rreq)
        else:
            posted = eng._posted.get(key)
            if posted is None:
                posted = eng._posted[key] = deque()
            posted.append(rreq)
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
        """Receive a message from device ``src`` (see ``irecv``); returns its read-only payload."""
        fast = type(src) is int and (type(tag) is CollectiveTag or (type(tag) is int and 0 <= tag < TAG_BASE))
        box = self._engine._mail.get((src, self.rank, tag)) if fast else None
        if box and box[0][1] is None:  # fast path: an eager message is already on its way
            if shape is not None or dtype is not None or self._engine.strict:
                shape, dtype = self._contract(src, tag, shape, dtype)
            msg = box.popleft()[0]
            if msg.t_arrive > self.clock:
                self._advance(msg.t_arrive)
            return self._deliver(msg, shape, dtype, name, index)
        return self.wait(self._post_recv(src, tag, shape, dtype, name, index))

    def test(self, req: Request) -> bool:
        """Whether ``req`` has completed by this device's clock (torch's ``is_completed``); never blocks.

        The answer is the one strict time order gives: every device with an earlier event runs first,
        so a message sent before now in simulated time has been sent, however the engine schedules.
        """
        if not self._engine._in_time_order:
            self._engine._catch_up(self)
        return req.done is not None and req.done <= self.clock

    def wait(self, req: Request) -> np.ndarray | None:
        """Block until ``req`` completes. A receive returns its payload; a send returns None."""
        if req.owner != self.rank:
            raise SimulationError(f"device {self.rank} waits on a request that belongs to device {req.owner}")
        if req.done is None:
            self._blocked = req
            self._engine._give_way()
            self._blocked = None
        elif req.done > self.clock:
            self._advance(req.done)
        if req.kind == "send":
            return None
        if req.msg.t_recv is not None:
            raise SimulationError(f"device {self.rank} waited twice on the receive of message #{req.msg.id}")
        return self._deliver(req.msg, req.shape, req.dtype, req.name, req.index)

    def _contract(self, src, tag, shape, dtype) -> tuple[tuple[int, ...] | None, np.dtype | None]:
        """Normalise a receive's declared contract."""
        if shape is not None and type(shape) is not tuple:  # (a tuple, e.g. an array's .shape, is kept as is)
            shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        if dtype is not None and not isinstance(dtype, np.dtype):
            dtype = np.dtype(dtype)
        if self._engine.strict and (shape is None or dtype is None):
            raise ContractError(
                f"strict mode: device {self.rank} posts recv(src={src}, tag={tag}) without a contract; "
                f"declare what it expects, e.g. recv(src={src}, shape=(1,), dtype=np.float64)"
            )
        return shape, dtype

    def _deliver(self, msg: Message, shape, dtype, name, index) -> np.ndarray:
        """The receive completes now: check the contract, record it, hand over the payload."""
        payload = msg.payload
        if (shape is not None and shape != payload.shape) or (dtype is not None and dtype != payload.dtype):
            declared = (
                f"{shape if shape is not None else 'any shape'} {dtype.name if dtype is not None else 'any dtype'}"
            )
            raise ContractError(
                f"contract violated on message #{msg.id} from device {msg.src} to device {msg.dst} (tag {msg.tag}): "
                f"device {msg.dst} declared {declared}, device {msg.src} sent {payload.shape} {payload.dtype.name}. "
                + (
                    f"The message belongs to {msg.label}: every member of a collective must pass an array of the "
                    "same shape and dtype."
                    if msg.label
                    else "Make the sender send what the receiver declares, or fix the declaration."
                )
            )
        eng = self._engine
        msg.t_recv = self.clock
        msg.name = name
        msg.index = index
        self._log.append(("recv", msg))
        if name is not None:
            self._memory[name] = payload
        if not eng.keep_payloads:
            msg.payload = None
        return payload

    # ---- clock --------------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        """Move this device's clock to t, letting any device with an earlier event go first."""
        self.clock = t
        eng = self._engine
        heap = eng._heap
        if heap and eng._in_time_order and heap[0][0] < t:
            eng._push(t, self.rank)
            eng._give_way()

    def _agree_collective(self, group: tuple[int, ...], number: int, call: str) -> None:
        """A collective call about to start (see collectives._Call.agree): the engine compares members' calls."""
        self._engine._agree(self.rank, group, number, call)

    def _peer(self, peer: Any, op: str, arg: str) -> int:
        """A valid peer rank as an int, or an error that names the value and the fix."""
        if isinstance(peer, (bool, np.bool_)) or not isinstance(peer, (int, np.integer)):
            raise TypeError(
                f"device {self.rank}: {op}({arg}={peer!r}) must name a device by its rank, an int in "
                f"0..{self.world_size - 1}; got {type(peer).__name__}"
            )
        peer = int(peer)
        if peer == self.rank:
            raise ValueError(f"device {self.rank}: {op}({arg}={peer}) names itself; a device cannot message itself")
        if not 0 <= peer < self.world_size:
            raise ValueError(
                f"device {self.rank}: {op}({arg}={peer!r}) names no device; ranks are 0..{self.world_size - 1}"
            )
        return peer

    def _tag(self, tag: Any, op: str) -> int:
        return user_tag(tag, self.rank, op)
        if isinstance(tag, (bool, np.bool_)) or not isinstance(tag, (int, np.integer)):
            raise TypeError(
                f"device {self.rank}: {op}(tag={tag!r}): a tag is an int (0 to {TAG_BASE - 1:,}); "
                f"got {type(tag).__name__}"
            )
        tag = int(tag)
        if tag < 0:
            raise ValueError(
                f"device {self.rank}: {op}(tag={tag}): tags are >= 0; use a tag from 0 to {TAG_BASE - 1:,}"
            )
        if tag >= TAG_BASE:
            raise ValueError(
                f"device {self.rank}: {op}(tag={tag:,}): tags from {TAG_BASE:,} (2**30) up are reserved for the "
                f"collectives, whose messages would be mixed up with yours; use a tag below {TAG_BASE:,}"
            )
        return tag
