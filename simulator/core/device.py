"""Device: the only thing a rank program sees.

A device has a rank, a private memory of named arrays, a clock, and point-to-point messaging with
the torch.distributed names (``send``/``recv``/``isend``/``irecv``/``wait``, in ``simulator.core.messaging``).
Blocking calls suspend the program (a greenlet) until the engine's simulated clock says the call completes.

Nothing crosses between devices except messages, and neither side can change what the other holds
(see ``simulator.core.values``: payloads are read-only, copied at the send unless already immutable).

Every send, receive and op is recorded as one packed row (``simulator.core.rows``): these methods are
the engine's hot path, so they avoid making objects per message (a blocking receive that finds its
message waiting makes none at all) and bind what they use to locals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..cost.meta import MetaArray
from ..cost.model import op_bytes, op_flops, operand_bytes
from .errors import infinite_op
from .messaging import Channel, Messaging, Request  # noqa: F401  (Request, Channel: re-exported)
from .payloads import (  # noqa: F401  (re-exported: the torch backend and others import them from here)
    DeviceMemory,
    _immutable,
    _nbytes,
    check_payload,
    freeze,
    frozen,
    kept,
    kept_inputs,
    kept_reduction_inputs,
    partial_group,
    run_op,
    sealed,
)
from .rows import EV_OP, FREE, HOLD, OP, OP_DROPPED, OP_KEPT

INF = float("inf")
_ndarray = np.ndarray
NAN = float("nan")
_NOTHING_YET = object()  # what a device "last received" before it receives anything: no value a program can send
_pack_op = OP.pack


class Device(DeviceMemory, Messaging):
    """One simulated device. Rank programs call only these methods: memory and ops here, sends and receives
    from ``Messaging``, and the collectives (all_reduce, all_gather, ...), which ``simulator.collectives``
    attaches as it loads: they are written as messages, in the layer above this one.

    Examples:
        A rank program gets its device as its first argument:

        >>> import numpy as np
        >>> from simulator import World
        >>> def program(dev):
        ...     w = dev.hold("w", np.full(2, dev.rank + 1.0))
        ...     y = dev.compute("y", np.multiply, w, 3.0)
        ...     return dev.all_reduce(y)
        >>> World(2).run(program).outputs
        [array([9., 9.]), array([9., 9.])]
    """

    def __init__(self, engine: Any, rank: int) -> None:  # the Engine that runs it (core/engine.py)
        self._engine = engine
        self.rank = rank
        self.world_size = engine.world_size
        self.clock = 0.0
        self.eager_sends = not engine.rendezvous  # a send completes at once (collectives skip its wait)
        self._memory: dict[str, Any] = {}
        self._blocked: Request | None = None
        self._done = False
        rec = engine._rec
        self._rec = rec
        self._log = rec.log.append  # one byte per event, in the order events happen
        self._add_msg = rec.msgs.extend  # (bound once: the hot path calls them for every message)
        self._add_recv = rec.recvs.extend
        # The last payload received (or a collective's last reduction): immutable for good, and what forwarding
        # programs (a ring pass, an all-gather, a reduce-scatter) send next, so sending it skips the check.
        self._known: Any = _NOTHING_YET  # (not None: sending None must meet the payload check)
        self._known_sig: tuple[int, int] | None = None  # its (signature id, bytes)
        self._greenlet: Any = None  # set by the engine
        self._rreq = Request("recv", rank, -1, 0, None, None)  # reused by every blocking recv that waits
        self._polls = 0  # test() calls that found their request pending while the clock stood still
        self._poll_clock = 0.0  # ... at this time
        self._out: dict[Any, Channel] = {}  # dst (tag 0) or (dst, tag) -> the channel it sends on
        self._in: dict[Any, Channel] = {}  # src (tag 0) or (src, tag) -> the channel it receives on
        # this device's outgoing links, when no other device books them (fully connected): booked inline
        private = not getattr(engine.net, "shared_links", True) and not engine.rendezvous and engine._plain_links
        self._links = engine.net.private_links(rank) if private else None

    def __repr__(self) -> str:
        return f"<Device {self.rank}/{self.world_size} t={self.clock:.3g}s>"

    # ---- memory -------------------------------------------------------------------------------
    def _record_memory(self, kind, name, arr, index, doc, partial) -> None:
        eng = self._engine
        rec = self._rec
        row = rec.n_ops
        if row + rec.n_msgs >= eng._checkpoint:
            eng._event_checkpoint(self.rank)
        rec.n_ops = row + 1
        t = self.clock
        nbytes = 0 if arr is None else arr.nbytes
        rec.ops.extend(_pack_op(HOLD if kind == "hold" else FREE, self.rank, rec.names(name), -1, t, t, 0.0, nbytes))
        self._log(EV_OP)
        if rec.keep_payloads:
            rec.add_op_payload((None, arr))
        if index is not None or doc is not None or partial is not None:
            rec.op_extra[row] = (index, doc, partial)

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
        product: bool | None = None,
    ) -> Any:
        """Run ``fn(*inputs)`` as the op ``name``; the clock advances by its cost.

        flops:   work for the cost model (default: 2mnk for np.matmul / np.dot / @ of an (m, k) and a
                 (k, n) array, else one operation per output element; see ``cost.op_flops``)
        seconds: a fixed duration instead of flops
        index:   which part of the single-device value ``name`` this computes (for the checker)
        partial: this output is one term of a sum over a group of devices, and the group's terms add up
                 to ``name`` (a row-parallel matmul before its all-reduce): True for every device, or the
                 group's ranks. The checker adds the terms up and compares the sum with ``name`` (or their
                 mean, for terms of an average: replicas' gradients), and flags a partial sum used where the
                 complete value is needed.
        keep:    store the output in memory under ``name``
        label:   the collective step this op belongs to (set by the collectives)
        product: the op is a matrix product of its first two inputs, for a cost model whose products pack
                 their operands (``CostModel.packing``); None (the default) recognises np.matmul / np.dot / @.
                 For a function of your own (a layer's ``x @ W + b``), pass ``flops=`` too
        """
        if product is not None and not isinstance(product, bool):
            raise ValueError(f"device {self.rank}: op {name!r} got product={product!r}; give True, False or None")
        eng = self._engine
        group = partial_group(self, partial, name) if partial is not None else None
        # the output is a value kept as it was, payloads recorded or not: a program that writes the buffer it was a
        # view of does not change it (else the same program computed other values where no payloads are kept)
        out = kept(run_op(self.rank, name, fn, inputs))
        if seconds is None:
            if flops is None:
                flops = op_flops(fn, inputs, out)
            elif not 0 <= flops < INF:
                raise ValueError(f"device {self.rank}: op {name!r} got flops={flops!r}; give a finite count >= 0")
            if eng._plain_cost:
                seconds = eng._op_latency + flops / eng._flop_rate
            else:  # the roofline: memory traffic may be what limits the op
                packed = operand_bytes(fn, inputs, product) if eng.cost.packing else 0
                seconds = eng.cost.op_time(flops, op_bytes(inputs, out), packed)
        elif not 0 <= seconds < INF:
            raise ValueError(
                f"device {self.rank}: op {name!r} got seconds={seconds!r}; give a finite duration >= 0 (or flops=)"
            )
        if not self.clock + seconds < INF:  # (NaN too) tiny FLOP/s, say: refused here, before any view sees it
            raise infinite_op(eng.cost, self.rank, name, flops, seconds, self.clock)
        inputs = kept_inputs(inputs, label) if self._rec.keep_payloads else None
        self._record_op(name, out, inputs, flops, seconds, index, group, doc, keep, label)
        if keep:
            self._memory[name] = out
        if seconds > 0:
            self._advance(self.clock + seconds)
        return out

    def _record_op(self, name, out, inputs, flops, seconds, index, group, doc, keep, label) -> None:
        """One op row (and its payloads and extras, if any) at the current time."""
        eng = self._engine
        rec = self._rec
        row = rec.n_ops
        if row + rec.n_msgs >= eng._checkpoint:
            eng._event_checkpoint(self.rank)
        rec.n_ops = row + 1
        t0 = self.clock
        nbytes = _nbytes(out) if keep else 0
        rec.ops.extend(
            _pack_op(
                OP_KEPT if keep else OP_DROPPED,
                self.rank,
                rec.names(name),
                -1 if label is None else rec.labels(label),
                t0,
                t0 + seconds,
                NAN if flops is None else flops,
                nbytes,
            )
        )
        self._log(EV_OP)
        if rec.keep_payloads:
            rec.add_op_payload((inputs, out))
        if index is not None or doc is not None or group is not None:
            rec.op_extra[row] = (index, doc, group)

    # ---- said after the fact -------------------------------------------------------------------
    @property
    def ops_recorded(self) -> int:
        """How many ops and holds the run has recorded so far: the row number the next one gets (for ``amend``)."""
        return self._rec.n_ops

    def amend_op(self, row: int, *, partial: Any, index: Any = None) -> None:
        """Say after the fact that op ``row`` of this device computed one term of a sum (``partial``, as for
        ``compute``) of the part ``index`` of its value. A program that learns it later says it here: the torch
        backend records a module's output and sees only afterwards that the program all-reduces it (then the
        output was a partial sum)."""
        doc = self._rec.op_extra.get(row, (None, None, None))[1]
        self._rec.op_extra[row] = (index, doc, partial_group(self, partial, "amended op"))

    def amend_received(self, req: Request, *, name: str, index: Any = None) -> None:
        """Say after the fact what the message a completed receive ``req`` took carries in the model (as ``recv``'s
        ``name`` and ``index`` say it): the torch backend learns it when the program feeds the received tensor
        to a module. The value is not stored in memory under ``name``: the program has moved on."""
        self._rec.msg_extra[req.row] = (name, index)

    def _op_name(self, text: str) -> int:
        """An op's name as ``_reduce`` takes it: interned."""
        return self._rec.names(text)

    def _reduce(self, name: int, label: int, fn: Callable[[Any, Any], Any], received: Any, local: Any, flops: float):
        """A collective's reduction ``fn(received, local)``: recorded as ``compute(name, fn, received, local,
        flops=flops, keep=False, label=label)`` records it, with ``name`` and ``label`` interned once per call
        (``_op_name``, ``_call_label``) and no per-op checks (a collective's own arguments need none). The hot
        path of a collective's reduce phase: one op row, nothing else made."""
        eng = self._engine
        if not eng._plain_cost:  # the roofline prices the op's bytes too: the general way
            names = self._rec
            return self.compute(
                names.names.values[name], fn, received, local, flops=flops, keep=False, label=names.labels.values[label]
            )
        try:
            out = fn(received, local)
        except Exception:  # the error compute gives, naming the op, the device and its inputs
            run_op(self.rank, self._rec.names.values[name], fn, (received, local))
            raise
        if type(out) is _ndarray and out.flags.writeable:
            out.setflags(write=False)  # read-only for good (see payloads.sealed)
            out = out.view()
        rec = self._rec
        row = rec.n_ops
        if row + rec.n_msgs >= eng._checkpoint:
            eng._event_checkpoint(self.rank)
        rec.n_ops = row + 1
        t0 = self.clock
        seconds = eng._op_latency + flops / eng._flop_rate
        if not t0 + seconds < INF:  # (NaN too) tiny FLOP/s, say: refused here, as compute refuses it
            raise infinite_op(eng.cost, self.rank, rec.names.values[name], flops, seconds, t0)
        rec.ops.extend(_pack_op(OP_DROPPED, self.rank, name, label, t0, t0 + seconds, flops, 0))
        self._log(EV_OP)
        if rec.keep_payloads:
            rec.add_op_payload((kept_reduction_inputs((received, local)), out))
        if type(out) is _ndarray or type(out) is MetaArray:  # immutable, and usually what is sent next
            sig = rec.sigs.get((out.shape, out.dtype))
            if sig is not None:
                self._known, self._known_sig = out, sig
        if seconds > 0:
            if eng._in_time_order:
                self._advance(t0 + seconds)
            else:  # running ahead (Engine.finish): nobody else's turn to give way to
                self.clock = t0 + seconds
        return out

    # ---- clock --------------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        """Move this device's clock to t, letting any device with an earlier event go first."""
        self.clock = t
        eng = self._engine
        heap = eng._heap
        if heap and eng._in_time_order and heap[0][0] < t:
            eng._push(t, self.rank)
            eng._give_way()

    def _agree_collective(self, members: tuple[int, ...], number: int, call: Any) -> None:
        """A collective call about to start (see collectives._Call.agree): the engine compares members' calls."""
        self._engine._agree(self.rank, members, number, call)
