"""TorchDevice: the simulator's Device API over torch.distributed, for one real rank process.

A rank program written for ``simulator.core.device.Device`` runs unchanged on a ``TorchDevice``: the same
``rank``, ``world_size``, ``clock``, ``memory``, ``hold``/``free``/``compute``, ``send``/``recv``/
``isend``/``irecv``/``wait``, with the same arguments. Compute stays NumPy; tensors exist only at the
boundary (a payload becomes a torch byte tensor just before it is sent, and a NumPy view right after
it is received). What differs:

- ``clock`` is measured: seconds since a start common to all ranks (see ``worker.common_epoch``).
- Messages travel as an optional header, then the payload bytes (see ``wire``); the header lets a
  recv leave shape and dtype undeclared and lets the receiver check its declared contract.
- ``send_mode="eager"`` (the default, as in the simulator) makes ``send`` return at once: the transfer
  is an ``isend`` kept in flight (gloo itself only completes a send once the receiver has posted its
  recv). ``"rendezvous"`` makes ``send`` wait for that, as the simulator's rendezvous mode does.
- Every wait has a timeout: a hang becomes a ``CommTimeoutError`` naming this rank and the peer.
- Tags must be ints in 0 .. 2**30 - 1 (as in the simulator: the collectives own the range above), and NCCL matches messages by order per pair of ranks,
  not by tag; so on NCCL an ``irecv`` reads its header at once (it returns once the sender has sent),
  and programs that post several receives before any send deadlock there (a timeout, not a hang).
- ``compute(..., seconds=...)`` is a modelling directive of the simulator; here the measured time of
  ``fn`` is what the trace records.

Everything the device does is recorded (``recording.RankRecord``); the launcher merges the records of
all ranks into one ``Trace``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..collectives import CollectiveMethods
from ..core.device import DeviceMemory, kept, partial_group, run_op
from ..core.errors import ContractError, SimulationError
from ..core.payloads import kept_inputs, nbytes_of
from ..core.trace import Op
from ..cost.model import op_flops
from .errors import CommError, CommTimeoutError
from .groups import new_subgroup
from .messages import TorchMessaging, TorchRequest
from .pool import BufferPool
from .recording import OpRecord, RankRecord

SEND_MODES = ("eager", "rendezvous")
# Where dev.all_reduce and its siblings go: torch.distributed's own, or the simulator's message algorithms.
COLLECTIVES = {"native": "simulator.real.native", "messages": "simulator.collectives"}


def _collective(name: str) -> Callable[..., Any]:
    """A TorchDevice method with the signature of ``CollectiveMethods.<name>``, sent to the chosen implementation.

    ``collectives="messages"`` runs ``simulator.collectives.<name>`` (message by message, as in the
    simulator); ``"native"`` runs ``simulator.real.native.<name>`` (torch.distributed's own).
    """
    method = getattr(CollectiveMethods, name)
    signature = inspect.signature(method)

    @functools.wraps(method)
    def call(self: TorchDevice, *args: Any, **kwargs: Any) -> Any:
        # the group, as a simulation's trace keeps it (the checker names a sum over it: "summed over 2 devices")
        group = signature.bind(self, *args, **kwargs).arguments.get("group")
        self.record.groups.add(tuple(range(self.world_size)) if group is None else tuple(int(r) for r in group))
        mark = len(self._in_flight)
        out = getattr(self._collectives, name)(self, *args, **kwargs)
        # Every member is inside the collective and receives what it was sent before returning: wait for
        # this call's eager sends now, so their buffers go with the call instead of living until the run
        # ends (a run of many large all-reduces would otherwise hold every chunk it ever sent).
        self.settle(since=mark)
        return out

    return call


@dataclass
class RankResources:
    """What a rank process keeps from one run to the next: torch groups of subgroups, large buffers."""

    header_group: Any = None  # the process group headers travel on (see ``wire``); made by ``join``
    groups: dict[tuple[int, ...], Any] = field(default_factory=dict)
    pool: BufferPool = field(default_factory=BufferPool)

    @classmethod
    def join(cls, world_size: int) -> RankResources:
        """Resources for a process that has just joined the default group (every rank must call this)."""
        return cls(header_group=dist.new_group(list(range(world_size))))


class TorchDevice(DeviceMemory, TorchMessaging):
    """One real rank. Rank programs call only the methods that ``simulator.core.device.Device`` has.

    rank, world_size: this process's place in the default process group
    device:           where tensors live at the boundary (cpu for gloo, cuda:i for nccl)
    timeout:          seconds any single wait may take before it becomes a CommTimeoutError
    epoch:            the perf_counter value that is t = 0 on every rank
    headers:          send a shape/dtype header before each payload (see ``wire``)
    ordered_headers:  read each header as soon as its recv is posted (needed where the transport
                      matches by order, not by tag: NCCL)
    collectives:      "native" (torch.distributed's own) or "messages" (the simulator's algorithms,
                      message by message, for a one-to-one comparison with a simulation)
    resources:        what the rank process keeps across runs (process groups, large buffers)
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        *,
        device: Any = "cpu",
        timeout: float = 30.0,
        epoch: float | None = None,
        keep_payloads: bool = True,
        send_mode: str = "eager",
        strict: bool = False,
        headers: bool = True,
        ordered_headers: bool = False,
        collectives: str = "native",
        resources: RankResources | None = None,
    ) -> None:
        if send_mode not in SEND_MODES:
            raise ValueError(f"TorchDevice(send_mode={send_mode!r}): choose one of {SEND_MODES}")
        self.rank = rank
        self.world_size = world_size
        self.device = torch.device(device)
        self.timeout = float(timeout)
        self.wait_timeout = timedelta(seconds=self.timeout)
        self._epoch = time.perf_counter() if epoch is None else epoch
        self.keep_payloads = keep_payloads
        self.send_mode = send_mode
        self.strict = strict
        self.headers = headers
        self.ordered_headers = ordered_headers
        if collectives not in COLLECTIVES:
            raise ValueError(f"TorchDevice(collectives={collectives!r}): choose one of {tuple(COLLECTIVES)}")
        self.collectives = collectives
        self._collectives = importlib.import_module(COLLECTIVES[collectives])
        self.resources = RankResources() if resources is None else resources
        self._header_group = self.resources.header_group if headers else None
        self.record = RankRecord(rank)
        self._memory: dict[str, Any] = {}
        self._send_seq: dict[tuple[int, int], int] = {}
        self._recv_seq: dict[tuple[int, int], int] = {}
        self._unheaded: dict[tuple[int, int], deque[TorchRequest]] = {}  # recvs whose header is unread
        self._in_flight: list[TorchRequest] = []  # sends not yet known complete (eager, or never waited on)
        self._open_recvs: set[TorchRequest] = set()  # posted, not yet waited
        self._native_calls: dict[tuple[int, ...], int] = {}  # members -> native collectives they called

    def __repr__(self) -> str:
        return f"<TorchDevice {self.rank}/{self.world_size} {self.device} t={self.clock:.3g}s>"

    def start_clock(self, epoch: float) -> None:
        """Make the perf_counter value ``epoch`` this device's t = 0 (before anything is recorded)."""
        self._epoch = epoch

    @property
    def clock(self) -> float:
        """Measured seconds since the common start."""
        return time.perf_counter() - self._epoch

    # ---- memory (memory, hold and free come from DeviceMemory) -------------------------------
    def _record_memory(self, kind, name, arr, index, doc, partial) -> None:
        t = self.clock
        nbytes = 0 if arr is None else arr.nbytes
        kept = arr if self.keep_payloads else None
        op = Op(None, self.rank, name, t, t, 0, None, kept, index, doc, True, nbytes, partial)
        self.record.ops.append(OpRecord(kind, op, self.record.next_order()))

    # ---- said after the fact (as on the simulated device) ------------------------------------------
    @property
    def ops_recorded(self) -> int:
        """How many ops and holds this rank has recorded so far: the row number the next one gets."""
        return len(self.record.ops)

    def amend_op(self, row: int, *, partial: Any, index: Any = None) -> None:
        """Say after the fact that op ``row`` computed one term of a sum of the part ``index`` (see ``Device``)."""
        op = self.record.ops[row].op
        op.partial, op.index = partial_group(self, partial, op.name), index

    def amend_received(self, req: TorchRequest, *, name: str, index: Any = None) -> None:
        """Say after the fact what the message a completed receive took carries in the model (see ``Device``)."""
        for rv in reversed(self.record.recvs):
            if (rv.src, rv.tag, rv.seq) == (req.peer, req.tag, req.seq):
                rv.name, rv.index = name, index
                return
        raise ValueError(f"device {self.rank}: {req!r} has not completed, so it took no message to amend")

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
        """Run ``fn(*inputs)`` as the op ``name`` and record its measured duration.

        Arguments as for ``Device.compute``; ``seconds`` and ``product`` (for a simulated duration) are
        accepted and ignored.
        """
        if product is not None and not isinstance(product, bool):
            raise ValueError(f"device {self.rank}: op {name!r} got product={product!r}; give True, False or None")
        group = partial_group(self, partial, name)
        t0 = self.clock
        out = run_op(self.rank, name, fn, inputs)
        t1 = self.clock
        out = kept(out)  # (after the op's time: a value kept as it was, payloads recorded or not, as simulated)
        if flops is None:
            flops = op_flops(fn, inputs, out)
        nbytes = nbytes_of(out) if keep else 0
        if self.keep_payloads:
            op = Op(None, self.rank, name, t0, t1, flops, kept_inputs(inputs, label), out, index, doc, keep, nbytes)
        else:
            op = Op(None, self.rank, name, t0, t1, flops, None, None, index, doc, keep, nbytes)
        op.partial, op.label = group, label
        self.record.ops.append(OpRecord("op", op, self.record.next_order()))
        if keep:
            self._memory[name] = out
        return out

    # ---- collectives: the same methods (names, arguments, docs) as simulator.collectives gives Device ----
    all_reduce = _collective("all_reduce")
    reduce_scatter = _collective("reduce_scatter")
    all_gather = _collective("all_gather")
    broadcast = _collective("broadcast")
    reduce = _collective("reduce")
    scatter = _collective("scatter")
    gather = _collective("gather")
    all_to_all = _collective("all_to_all")
    barrier = _collective("barrier")

    # ---- what native collectives need (see ``native``) ---------------------------------------
    def process_group(self, ranks: tuple[int, ...]) -> Any:
        """The torch process group of these ranks, created by its members on first use (see ``groups``)."""
        key = tuple(sorted(ranks))  # torch's groups hold their ranks sorted
        groups = self.resources.groups
        pg = groups.get(key)
        if pg is None:
            pg = self.native(lambda: new_subgroup(key, self.wait_timeout), f"creating the process group {key}")
            groups[key] = pg
        return pg

    def buffer(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A writable array for a collective's result (a reused buffer when large and unreferenced)."""
        return self.resources.pool.take(shape, dtype)

    def tensor(self, arr: np.ndarray) -> torch.Tensor:
        """A writable NumPy array as a torch tensor on this rank's device (no copy on CPU)."""
        return self._to_device(torch.from_numpy(arr))

    def array(self, t: torch.Tensor) -> np.ndarray:
        """A tensor's values as a NumPy array (no copy on CPU)."""
        return self._from_device(t)

    def native(self, call: Callable[[], Any], what: str) -> Any:
        """Run one torch.distributed call, turning its failures into the simulator's errors."""
        try:
            return call()
        except RuntimeError as exc:
            raise self.comm_error(exc, what, "some member never joined it", "another member", collective=True) from exc

    def record_collective(
        self, kind: str, name: str | None, inputs: tuple, output: Any, t0: float, index: Any = None, group=None
    ) -> Any:
        """Record a native collective as one op (named ``name`` for the checker, if given); returns output.

        Its label, ``all_reduce#3 native on 0,1`` (the call's number among its members' calls, as a simulated
        collective's label counts them, and the members), marks it as a collective's step, as the simulated
        one's messages are marked, and lets the checker join the members' calls (``simulator.checker.causal``).
        """
        if isinstance(output, np.ndarray) and output.flags.writeable:
            output.setflags(write=False)
        members = tuple(sorted(group)) if group is not None else tuple(range(self.world_size))
        number = self._native_calls.get(members, 0)
        self._native_calls[members] = number + 1
        doc = f"torch.distributed.{kind} on {self.device.type} (native; its messages are not visible)"
        t1 = self.clock
        kept = (inputs, output) if self.keep_payloads else (None, None)
        nbytes = nbytes_of(output) if name is not None else 0
        op_name = name if name is not None else f"{kind} (native)"
        op = Op(None, self.rank, op_name, t0, t1, 0, kept[0], kept[1], index, doc, name is not None, nbytes)
        op.label = f"{kind}#{number} native on {','.join(map(str, members))}"
        self.record.ops.append(OpRecord("op", op, self.record.next_order()))
        if name is not None:
            self._memory[name] = output
        return output

    def check_collective_contract(self, kind: str, src: int, shape, dtype, got_shape, got_dtype) -> None:
        """A collective's declared shape/dtype against what the header says arrived."""
        shape = None if shape is None else ((int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape))
        dtype = None if dtype is None else np.dtype(dtype)
        if (shape is not None and shape != got_shape) or (dtype is not None and dtype != got_dtype):
            raise ContractError(
                f"contract violated in {kind} from device {src} to device {self.rank}: device {self.rank} declared "
                f"{shape if shape is not None else 'any shape'} {dtype.name if dtype is not None else 'any dtype'}, "
                f"device {src} sent {got_shape} {got_dtype.name}"
            )

    # ---- internals ----------------------------------------------------------------------------
    def comm_error(
        self, exc: RuntimeError, what: str, hang: str, peers: str, collective: bool = False
    ) -> SimulationError:
        """The simulator's error for a failed torch.distributed call (``what``, a collective or not): a timeout (a
        hang) or a failure."""
        text = str(exc)
        first = text.splitlines()[0] if text else type(exc).__name__
        if "timed out" in text.lower() or "timeout" in text.lower():
            err = CommTimeoutError(
                f"device {self.rank}: {what} did not complete within {self.timeout:g} s: {hang} (a hang). "
                f"torch.distributed said: {first}"
            )
        else:
            err = CommError(
                f"device {self.rank}: {what} failed; {peers} may have failed or exited first. torch.distributed said: "
                f"{first}"
            )
        err.waiting, err.collective = what, collective  # (kept when pickled: the launcher compares them)
        return err

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.device.type == "cpu" else t.to(self.device)

    def _from_device(self, t: torch.Tensor) -> np.ndarray:
        return t.numpy() if self.device.type == "cpu" else t.cpu().numpy()
