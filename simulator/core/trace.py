"""What happened in a run: messages, ops, and the event log that orders them.

A ``Trace`` is the whole record of a run. Its ``events`` list holds ``(kind, record)`` pairs in the
order the engine processed them, which is simulated-time order:

- ``("send", Message)``   a message left its source
- ``("recv", Message)``   a receive completed: the payload is now in the destination's hands
- ``("op", Op)``          a compute step ran on a device
- ``("hold", Op)``        a value was placed in a device's memory (an input, a weight)
- ``("free", Op)``        a value was dropped from a device's memory

Records are plain slotted objects (cheap to make by the million); ``signature()`` turns a trace into
comparable tuples so determinism can be asserted event for event.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .values import SHOW_ALL, ValueStyle, clip, part_text, summary, value_text


class Message:
    """One message between two devices. Times are simulated seconds.

    t_send: the sender posted it; t_start: its first byte entered the link; t_arrive: its last byte
    reached the destination; t_recv: the receiver's wait completed (None while unreceived).
    ``name`` is what the receiver said the message carries (its role in the model), for the checker.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> def program(dev):
        ...     if dev.rank == 0:
        ...         dev.send(np.arange(3.0), 1)
        ...     else:
        ...         dev.recv(0, name="x")
        >>> m = World(2).run(program).trace.messages[0]
        >>> m.src, m.dst, m.shape, m.nbytes, m.name
        (0, 1, (3,), 24, 'x')
    """

    __slots__ = (
        "id",
        "src",
        "dst",
        "tag",
        "shape",
        "dtype",
        "nbytes",
        "t_send",
        "t_start",
        "t_arrive",
        "t_recv",
        "payload",
        "name",
        "index",
        "label",
    )

    def __init__(self, id, src, dst, tag, shape, dtype, nbytes, t_send, payload, label, t_start=None, t_arrive=None):
        self.id = id
        self.src = src
        self.dst = dst
        self.tag = tag
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.t_send = t_send
        self.t_start = t_start
        self.t_arrive = t_arrive
        self.t_recv = None
        self.payload = payload
        self.name = None
        self.index = None
        self.label = label

    def signature(self) -> tuple:
        return (
            "msg",
            self.id,
            self.src,
            self.dst,
            self.tag,
            self.shape,
            str(self.dtype),
            self.nbytes,
            self.t_send,
            self.t_start,
            self.t_arrive,
            self.t_recv,
            self.name,
            self.label,
        )

    def describe(self) -> str:
        what = f" carrying {self.name}" if self.name else ""
        via = self.label or f"tag {self.tag}"  # a collective's message by its call and step, not its raw tag
        return (
            f"message #{self.id} from device {self.src} to device {self.dst} ({via})"
            f"{what}: {_sig(self.shape, self.dtype)}, {self.nbytes} bytes"
        )

    def __repr__(self) -> str:
        return f"<Message {self.describe()}>"


class Op:
    """A compute step (or a hold/free of a named value) on one device.

    ``inputs``/``output`` are kept only when the run keeps payloads. ``index`` says which part of the
    single-device value ``name`` this device computes (a shard), or None for the whole value.
    ``keep`` says whether the output stays in the device's memory under ``name``. ``nbytes`` is how
    many bytes the record places in that memory (0 for a free, and for an op whose output is not
    kept), known even when payloads are not kept. ``partial`` is None, or the ranks of the group over
    which this value is one term of a sum (the sum of the group's terms is ``name``). ``label`` marks an
    op that is not one of the model's own steps: a collective's reduction (e.g. ``"all_reduce#0 ring"``),
    or, in a reference, a value only one way of splitting makes (a row split's partial sums).

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> run = World(1).run(lambda dev: dev.compute("y", np.add, np.ones(2), 1.0, flops=2))
        >>> op = run.trace.ops[0]
        >>> op.rank, op.name, op.flops, op.output
        (0, 'y', 2, array([2., 2.]))
    """

    __slots__ = (
        "id", "rank", "name", "t_start", "t_end", "flops", "inputs", "output", "index", "doc", "keep", "nbytes",
        "partial", "label",
    )  # fmt: skip

    def __init__(
        self, id, rank, name, t_start, t_end, flops, inputs, output, index, doc, keep=True, nbytes=0, partial=None,
        label=None,
    ):  # fmt: skip
        self.id = id
        self.rank = rank
        self.name = name
        self.t_start = t_start
        self.t_end = t_end
        self.flops = flops
        self.inputs = inputs
        self.output = output
        self.index = index
        self.doc = doc
        self.keep = keep
        self.nbytes = nbytes
        self.partial = partial
        self.label = label

    def signature(self) -> tuple:
        return ("op", self.id, self.rank, self.name, self.t_start, self.t_end, self.flops)

    def __repr__(self) -> str:
        return f"<Op #{self.id} {self.name!r} on device {self.rank} [{self.t_start:.3g}, {self.t_end:.3g}] s>"


class Trace:
    """The record of one run: every message and op, in processing order.

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> run = World(2).run(lambda dev: dev.all_reduce(np.ones(2)))
        >>> trace = run.trace
        >>> len(trace.messages), len(trace.ops), [kind for kind, _ in trace.events][:2]
        (4, 2, ['send', 'send'])
    """

    def __init__(self, world_size: int, payloads: bool = True) -> None:
        self.world_size = world_size
        self.events: list[tuple[str, Any]] = []
        self.messages: list[Message] = []
        self.ops: list[Op] = []
        self.payloads = payloads  # whether message payloads and op values were kept
        self.outputs: list[Any] | None = None  # what each device's program returned, once it has finished
        self.groups: set[tuple[int, ...]] = set()  # the groups of devices that made collective calls together

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        return (
            f"<Trace of {self.world_size} devices: {len(self.events)} events, {len(self.messages)} messages, "
            f"{len(self.ops)} ops, ends at {_us(self.end_time)}; .log() lists the events>"
        )

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.events)

    def signature(self) -> list[tuple]:
        """Every event as comparable plain data: two identical runs give equal signatures."""
        return [(kind, *rec.signature()) for kind, rec in self.events]

    @property
    def end_time(self) -> float:
        """The simulated time at which the last device finished its last event."""
        t = 0.0
        for m in self.messages:
            t = max(t, m.t_recv if m.t_recv is not None else m.t_arrive or 0.0)
        for op in self.ops:
            t = max(t, op.t_end)
        return t

    def unreceived(self) -> list[Message]:
        return [m for m in self.messages if m.t_recv is None]

    def log(self, width: int | None = None) -> list[str]:
        """One readable line per event, e.g. ``t=1.000us  send  device 0 -> 1  msg #0 tag 0 (1,) float64 = [7.]``;
        with ``width``, every line within that many characters."""
        return [format_event(kind, rec, width) for kind, rec in self.events]


def format_event(
    kind: str, rec: Any, width: int | None = None, style: ValueStyle | None = None, *, value: bool = True
) -> str:
    """One event on one line: ``t=1.000us  send  device 0 -> 1  msg #0 tag 0 (1,) float64 = [7.]``.

    A message of a collective is named by its label (``all_reduce#0 ring step 1 chunk 2``), not its tag.
    Values show in full when small (see ``simulator.core.values``); with ``width`` the line is kept within it
    (a value that does not fit is summarised, then cut). ``value=False`` leaves the value out (a view
    that shows it elsewhere).
    """
    style = style or SHOW_ALL
    if not value:
        rec = _Valueless(rec)
    if kind == "send":
        via = rec.label if rec.label else f"tag {rec.tag}"
        head = f"t={_us(rec.t_send)}  send  device {rec.src} -> {rec.dst}  msg #{rec.id} {via}"
        return _with_value(head, rec.payload, "", width, style, _sig(rec.shape, rec.dtype))
    if kind == "recv":
        name = f" as {_named(rec)}" if rec.name else ""
        head = f"t={_us(rec.t_recv)}  recv  device {rec.dst} <- {rec.src}  msg #{rec.id}{name}"
        return _with_value(head, rec.payload, "", width, style)
    if kind == "op":
        head = f"t={_us(rec.t_start)}  op    device {rec.rank}  {_named(rec)}"
        return _with_value(head, rec.output, f"  ({_us(rec.t_end - rec.t_start)})", width, style)
    return _with_value(
        f"t={_us(rec.t_start)}  {kind:<5} device {rec.rank}  {_named(rec)}", rec.output, "", width, style
    )


class _Valueless:
    """A record seen without its value (payload and output read as None)."""

    def __init__(self, rec: Any) -> None:
        self._rec = rec

    payload = output = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rec, name)


def _named(rec: Any) -> str:
    """A record's name, with the part of the whole value it is and the devices of a partial sum."""
    part = part_text(rec.index)
    partial = getattr(rec, "partial", None)
    return (
        f"{rec.name}"
        + (f" {part}" if part else "")
        + (f" (partial over {', '.join(map(str, partial))})" if partial else "")
    )


def _with_value(head: str, value: Any, tail: str, width: int | None, style: ValueStyle, sig: str = "") -> str:
    """``head [sig] = value tail``; a summarised value says its shape itself, so ``sig`` is left out then."""
    if value is None or isinstance(value, dict):
        return clip(f"{head} {sig}".rstrip() + tail, width or 0)
    full = f"{head} {sig}".rstrip()
    room = (1 << 30) if width is None else width - len(full) - len(tail) - 3
    if room < 12:  # no room for a value worth reading: the event alone
        return clip(full + tail, width or 0)
    text = value_text(value, room, style)
    if sig and text.startswith(sig):  # a summary says its shape itself: "(4, 4) float64 [...] norm 2.6"
        return f"{head} {clip(summary(np.asarray(value), style), room + len(sig) + 3)}{tail}"
    return f"{full} = {text}{tail}"


def _us(t: float) -> str:
    return f"{t * 1e6:.3f}us"


def _sig(shape, dtype) -> str:
    return f"{tuple(shape)} {np.dtype(dtype).name}"
