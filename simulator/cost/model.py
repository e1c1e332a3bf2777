"""The cost model: how long a message or a compute step takes in simulated time.

Assumptions, stated once (each topology below says how it refines them):

- A message of n bytes over one link takes ``alpha + n / B`` seconds (the alpha-beta model): alpha is
  the per-message latency, B the link bandwidth in bytes per second.
- A link carries one message at a time in each direction. A message waits until its link is free,
  holds it for ``n / B`` seconds, and arrives ``alpha`` after its last byte left. So back-to-back
  messages on one link overlap their latencies but queue their bytes: contention shows. Links serve
  messages in the order they were posted (no overtaking).
- An eager (buffered) send completes at once; a rendezvous send completes when its last byte has left
  the sender (after the matching receive was posted), not when it arrives.
- Messages of different sizes may follow different regimes (``CostModel.regimes``): from a regime's
  ``min_bytes`` on, its own latency and bandwidth replace the model's, as real transports change
  protocol with the size (a small message goes in one piece, a large one by rendezvous and streaming).
- A device computes one op at a time; f floating-point operations take ``f / flops`` seconds. With a
  ``memory_bandwidth``, an op that moves b bytes (its inputs read, its output written) takes at least
  ``b / memory_bandwidth`` (the roofline: whichever of arithmetic and memory traffic is slower sets the
  time), so an addition of two large arrays costs what its memory traffic costs. Every op also costs
  ``op_latency`` (a kernel launch, or an interpreter's call overhead). With ``roofline="sum"`` an op
  pays for both, one after the other, as one CPU core does: a BLAS call packs its operands before it
  multiplies, and nothing fetches the next bytes while it computes.
- Compute and communication overlap: a link carries bytes while its devices compute. A program gets
  that overlap by posting ``isend``/``irecv`` before computing and waiting afterwards (in eager mode a
  plain ``send`` is buffered and overlaps too).
- ``memory`` is the capacity of each device in bytes; the engine does not enforce it, the memory
  timeline (``simulator.views.memory``) checks a run against it.

Topologies (``CostModel.topology``):

- ``FullyConnected()`` (the default): a private link in each direction between every pair of devices.
- ``Ring()``: device i is linked only to i-1 and i+1 (mod p), both directions. See ``Ring`` for how a
  message between non-neighbours is routed and timed.
- ``TwoLevel(node_size, inter_latency, inter_bandwidth)``: nodes of ``node_size`` devices; inside a
  node, fully connected fast links (the model's ``latency``/``bandwidth``); between nodes, slower links
  through each device's own network port.

A ``CostModel`` is an immutable description; ``network(world_size)`` makes the mutable per-run link
state (``simulator.cost.links``), so two simulations never share anything. ``Network.transfer`` is on the
engine's hot path: keep it to a few dictionary operations.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .links import Network, RingNetwork, TwoLevelNetwork, ring_route
from .meta import MetaArray
from .spread import MessageSpread, SpreadNetwork
from .units import binary_size


class LinkState(Protocol):
    """Per-run link state, as the engine uses it.

    shared_links: whether two senders can book the same link (or port). If not, every link is booked
    by one device only, in its own program order, which is its time order; the engine can then let
    devices run ahead of each other without changing any time it computes.
    """

    shared_links: bool

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float, float]:
        """Book a message of ``nbytes`` posted at time ``t``. Returns (start, sender_done, arrival)."""
        ...


class Topology(Protocol):
    """How devices are wired: which links a message uses, and what each link costs."""

    def network(self, cost: CostModel, world_size: int) -> LinkState: ...

    def message_time(
        self, cost: CostModel, src: int, dst: int, nbytes: float, world_size: int | None = None
    ) -> float: ...

    def wire_time(self, cost: CostModel, src: int, dst: int, nbytes: float) -> float: ...

    def describe(self, cost: CostModel) -> str: ...


@dataclass(frozen=True)
class FullyConnected:
    """A private link in each direction between every pair of devices (like NVSwitch inside a node).

    A message takes ``latency + n / bandwidth`` on an idle link; only messages between the same
    source and destination queue behind each other.
    """

    def network(self, cost: CostModel, world_size: int) -> Network:
        return Network(cost, world_size)

    def message_time(self, cost: CostModel, src: int, dst: int, nbytes: float, world_size: int | None = None) -> float:
        alpha, bw = cost.link(nbytes)
        return alpha + nbytes / bw

    def wire_time(self, cost: CostModel, src: int, dst: int, nbytes: float) -> float:
        return nbytes / cost.link(nbytes)[1]

    def describe(self, cost: CostModel) -> str:
        return f"fully connected, {_links(cost)} per directed link"


@dataclass(frozen=True)
class Ring:
    """Device i has links only to its neighbours i-1 and i+1 (mod p), one in each direction.

    Routing: a message takes the shorter way round; when both ways are equally long (p even, distance
    p/2) it goes towards increasing rank. Timing: cut-through. The bytes stream through the h links of
    the route one after another; each hop adds one ``latency`` and the bytes are not stored and
    re-sent at each intermediate device. So on idle links a message over h hops takes
    ``h * latency + n / bandwidth``, and its link k (k = 0..h-1) is busy from ``start + k * latency``
    for ``n / bandwidth`` seconds. A message starts only when every link on its route will be free
    when its head gets there; intermediate devices forward without computing (their links are busy,
    their compute is not).
    """

    def network(self, cost: CostModel, world_size: int) -> RingNetwork:
        return RingNetwork(cost, world_size)

    def message_time(self, cost: CostModel, src: int, dst: int, nbytes: float, world_size: int | None = None) -> float:
        alpha, bw = cost.link(nbytes)
        return self.hops(src, dst, world_size) * alpha + nbytes / bw

    def wire_time(self, cost: CostModel, src: int, dst: int, nbytes: float) -> float:
        return nbytes / cost.link(nbytes)[1]

    def describe(self, cost: CostModel) -> str:
        return f"bidirectional ring, {_links(cost)} per link, shortest-way cut-through routing"

    @staticmethod
    def route(src: int, dst: int, world_size: int) -> list[tuple[int, int]]:
        """The directed links a message from src to dst uses, in order."""
        return ring_route(src, dst, world_size)

    @staticmethod
    def hops(src: int, dst: int, world_size: int | None) -> int:
        if world_size is None:
            raise ValueError("Ring.message_time needs world_size (the number of devices on the ring)")
        d = (dst - src) % world_size
        return min(d, world_size - d)


@dataclass(frozen=True)
class TwoLevel:
    """Nodes of ``node_size`` devices: fast links inside a node, slower ones between nodes.

    Device r sits on node ``r // node_size``. Inside a node the devices are fully connected with the
    cost model's ``latency`` and ``bandwidth`` (NVLink-like). Between nodes each device has its own
    network port (as in DGX systems, one InfiniBand adapter per GPU) joined by a non-blocking switch:
    a message from device a to device b on another node uses a's outgoing port and b's incoming port,
    each carrying one message at a time, and takes ``inter_latency + n / inter_bandwidth`` when both
    are idle. So two messages leaving one device for two other nodes queue on its port, and so do two
    messages arriving at one device from two other nodes.
    """

    node_size: int
    inter_latency: float
    inter_bandwidth: float

    def __post_init__(self) -> None:
        if not isinstance(self.node_size, int) or self.node_size < 1:
            raise ValueError(f"TwoLevel(node_size={self.node_size!r}): give the number of devices per node (>= 1)")
        _check_link("TwoLevel.inter", self.inter_latency, self.inter_bandwidth)

    def network(self, cost: CostModel, world_size: int) -> TwoLevelNetwork:
        return TwoLevelNetwork(cost, self, world_size)

    def same_node(self, a: int, b: int) -> bool:
        return a // self.node_size == b // self.node_size

    def message_time(self, cost: CostModel, src: int, dst: int, nbytes: float, world_size: int | None = None) -> float:
        if self.same_node(src, dst):
            alpha, bw = cost.link(nbytes)
            return alpha + nbytes / bw
        return self.inter_latency + nbytes / self.inter_bandwidth

    def wire_time(self, cost: CostModel, src: int, dst: int, nbytes: float) -> float:
        return nbytes / (cost.link(nbytes)[1] if self.same_node(src, dst) else self.inter_bandwidth)

    def describe(self, cost: CostModel) -> str:
        return (
            f"nodes of {self.node_size} devices: inside a node {_links(cost)} per directed "
            f"link; between nodes {_link(self.inter_latency, self.inter_bandwidth)} per device port"
        )


@dataclass(frozen=True)
class LinkRegime:
    """Messages of at least ``min_bytes`` (up to the next regime's) cost ``latency + n / bandwidth``.

    Calibration finds these where measured message times bend (``simulator.calibration.fit``).
    """

    min_bytes: int
    latency: float
    bandwidth: float

    def __post_init__(self) -> None:
        if isinstance(self.min_bytes, bool) or not isinstance(self.min_bytes, int) or self.min_bytes < 1:
            raise ValueError(f"LinkRegime(min_bytes={self.min_bytes!r}): give a whole number of bytes >= 1")
        _check_link("LinkRegime", self.latency, self.bandwidth)


@dataclass(frozen=True)
class CostModel:
    """Links between devices, and devices of a given speed and memory.

    Args:
        latency: alpha, seconds per message (default 1 us, a typical NVLink/PCIe software latency)
        bandwidth: bytes per second per directed link (default 100 GB/s)
        flops: floating-point operations per second per device (default 100 TFLOP/s)
        memory: bytes of memory per device, or None for unlimited
        topology: how the devices are wired (default: fully connected); for ``TwoLevel``, latency and
            bandwidth are those of the links inside a node
        name: a short label for figures and reports (the presets set it)
        op_latency: seconds every op costs before its arithmetic (a kernel launch; default 0), so that the
            many tiny ops of a classroom example take visible time
        memory_bandwidth: bytes per second an op reads and writes (None: ops are limited by FLOPs alone);
            an op then takes ``op_latency + max(flops / flops, bytes / memory_bandwidth)``
        roofline: "max" (the default: arithmetic and memory traffic overlap, as on a GPU) or "sum" (they
            do not: ``op_latency + flops / flops + bytes / memory_bandwidth``, as on one CPU core)
        packing: a matrix product first copies both of its operands into packed panels, as a CPU BLAS does, so
            its memory traffic counts each operand twice more (written packed, read back); needs a
            ``memory_bandwidth``. False (the default): inputs and output once. A product of a few rows
            through a large weight pays mostly for packing the weight, which its FLOPs and bytes alone
            do not show
        spread: a ``MessageSpread`` (``simulator.cost.spread``): each message's time drawn from measured ones,
            around the line the latency and bandwidth make; None (the default): every message of a
            size takes the same time
        regimes: ``LinkRegime``s in increasing ``min_bytes``: messages from a regime's size on use its latency
            and bandwidth instead of ``latency`` and ``bandwidth`` (which hold below the first regime)

    Examples:
        >>> import numpy as np
        >>> from simulator import CostModel, World
        >>> cost = CostModel(latency=1e-6, bandwidth=1e9)
        >>> def program(dev):
        ...     if dev.rank == 0:
        ...         dev.send(np.zeros(1000), 1)  # 8,000 bytes: 1 us + 8 us
        ...     else:
        ...         dev.recv(0)
        >>> round(World(2, cost=cost).run(program).time * 1e6, 6)
        9.0
    """

    latency: float = 1e-6
    bandwidth: float = 100e9
    flops: float = 100e12
    memory: float | None = None
    topology: FullyConnected | Ring | TwoLevel = field(default_factory=FullyConnected)
    name: str = ""
    op_latency: float = 0.0
    memory_bandwidth: float | None = None
    regimes: tuple[LinkRegime, ...] = ()
    roofline: str = "max"
    spread: MessageSpread | None = None
    packing: bool = False

    def __post_init__(self) -> None:
        _check_link("CostModel", self.latency, self.bandwidth)
        if self.spread is not None and not isinstance(self.spread, MessageSpread):
            raise ValueError(f"CostModel.spread must be a MessageSpread or None, got {self.spread!r}")
        if self.roofline not in ROOFLINES:
            raise ValueError(f"CostModel.roofline must be one of {ROOFLINES}, got {self.roofline!r}")
        if not isinstance(self.packing, bool):
            raise ValueError(f"CostModel.packing must be True or False, got {self.packing!r}")
        if self.packing and self.memory_bandwidth is None:
            raise ValueError(
                "CostModel.packing=True needs a memory_bandwidth: packing is memory traffic, which costs time only "
                "at a bandwidth (e.g. CostModel(..., memory_bandwidth=20e9, packing=True))"
            )
        if self.memory_bandwidth is not None and not self.memory_bandwidth > 0:
            raise ValueError(f"CostModel.memory_bandwidth must be > 0 bytes/s or None, got {self.memory_bandwidth!r}")
        object.__setattr__(self, "regimes", tuple(self.regimes))
        if any(not isinstance(r, LinkRegime) for r in self.regimes):
            raise ValueError(f"CostModel.regimes must be LinkRegime objects, got {self.regimes!r}")
        sizes = [r.min_bytes for r in self.regimes]
        if sizes != sorted(set(sizes)):
            raise ValueError(f"CostModel.regimes must start at increasing sizes, got min_bytes {sizes}")
        if not (self.op_latency >= 0 and math.isfinite(self.op_latency)):
            raise ValueError(f"CostModel.op_latency must be a finite number >= 0 seconds, got {self.op_latency!r}")
        if not self.flops > 0:
            raise ValueError(f"CostModel.flops must be > 0 FLOP/s, got {self.flops!r}")
        if self.memory is not None and not self.memory > 0:
            raise ValueError(f"CostModel.memory must be > 0 bytes or None (unlimited), got {self.memory!r}")

    def compute_time(self, flops: float) -> float:
        """Seconds a device needs for an op of ``flops`` floating-point operations (plus ``op_latency``)."""
        return self.op_latency + flops / self.flops if self.op_latency else flops / self.flops

    def op_time(self, flops: float, nbytes: float = 0.0, operand_bytes: float = 0.0) -> float:
        """Seconds for an op of ``flops`` that reads and writes ``nbytes``, plus ``op_latency``; a matrix
        product's two operands (``operand_bytes``) are also packed under ``packing``.

        The slower of arithmetic and memory traffic (``roofline="max"``), or both (``"sum"``)."""
        t = flops / self.flops
        if self.memory_bandwidth is not None:
            traffic = (nbytes + 2.0 * operand_bytes * self.packing) / self.memory_bandwidth
            t = t + traffic if self.roofline == "sum" else max(t, traffic)
        return self.op_latency + t

    def link(self, nbytes: float) -> tuple[float, float]:
        """(latency, bandwidth) of a message of ``nbytes``: the regime its size falls in, or the model's own."""
        alpha, bw = self.latency, self.bandwidth
        for r in self.regimes:
            if nbytes < r.min_bytes:
                break
            alpha, bw = r.latency, r.bandwidth
        return alpha, bw

    def message_time(self, nbytes: float, src: int = 0, dst: int = 1, world_size: int | None = None) -> float:
        """Seconds for one message from src to dst when every link on its way is idle.

        Fully connected: alpha + n / B. Ring: hops * alpha + n / B (needs ``world_size``). Two-level:
        the intra-node or the inter-node alpha and B.
        """
        return self.topology.message_time(self, src, dst, nbytes, world_size)

    def wire_time(self, nbytes: float, src: int = 0, dst: int = 1) -> float:
        """Seconds the bytes of one message occupy a link on its way from src to dst (n / B)."""
        return self.topology.wire_time(self, src, dst, nbytes)

    def network(self, world_size: int) -> LinkState:
        """Fresh per-run link state for ``world_size`` devices."""
        net = self.topology.network(self, world_size)
        return net if self.spread is None else SpreadNetwork(net, self.spread)

    def describe(self) -> str:
        """The assumptions in one paragraph, for reports and figure captions."""
        mem = "unlimited memory" if self.memory is None else f"{self.memory / 1e9:g} GB memory"
        who = f"{self.name}: " if self.name else ""
        launch = f" plus {self.op_latency * 1e6:g} us per op" if self.op_latency else ""
        traffic = ""
        if self.memory_bandwidth:
            both = " (paid one after the other)" if self.roofline == "sum" else ""
            packed = ", products packing their operands" if self.packing else ""
            traffic = f" and {self.memory_bandwidth / 1e9:g} GB/s of memory traffic{both}{packed}"
        spread = f"; {self.spread.describe()}" if self.spread is not None else ""
        return f"{who}{self.topology.describe(self)}; devices of {_rate(self.flops)}{traffic}{launch}, {mem}{spread}"


ROOFLINES = ("max", "sum")
MATMULS = (np.matmul, np.dot, operator.matmul)  # recognised as matrix products when costing an op


def op_flops(fn: Callable[..., Any], inputs: Sequence[Any], out: Any) -> float:
    """The work of ``fn(*inputs) -> out`` when the program does not say (``compute(..., flops=None)``).

    A matrix product (``np.matmul``, ``np.dot``, ``operator.matmul``) of an (m, k) and a (k, n) array
    costs 2mnk (a multiply and an add per term, batched dimensions included); anything else one
    operation per output element. Pass ``flops=`` for your own functions (a lambda that uses ``@``
    counts one operation per output element).
    """
    if any(fn is f for f in MATMULS) and len(inputs) == 2:
        a = np.shape(inputs[0])
        k = a[-1] if a else 1
        return 2.0 * max(int(np.size(out)), 1) * k
    return out.size if isinstance(out, (np.ndarray, MetaArray)) else 1


def operand_bytes(fn: Callable[..., Any], inputs: Sequence[Any], product: bool | None) -> int:
    """The bytes of a matrix product's two operands (its first two array inputs), which ``packing`` copies
    before multiplying; 0 for an op that is not a product. ``product``: None to recognise ``np.matmul``,
    ``np.dot`` and ``@`` (``MATMULS``), True for an op that computes a product of its first two inputs and
    more (a layer adding its bias), False for none."""
    if product is None:
        product = any(fn is f for f in MATMULS)
    if not product:
        return 0
    arrays = [a for a in inputs if isinstance(a, (np.ndarray, MetaArray))]
    return sum(a.nbytes for a in arrays[:2])


def op_bytes(inputs: Sequence[Any], out: Any) -> int:
    """The bytes an op reads and writes: its array inputs and its array output (for the roofline)."""
    n = out.nbytes if isinstance(out, (np.ndarray, MetaArray)) else 0
    for a in inputs:
        if isinstance(a, (np.ndarray, MetaArray)):
            n += a.nbytes
    return n


def _check_link(who: str, latency: float, bandwidth: float) -> None:
    if not (latency >= 0 and math.isfinite(latency)):
        raise ValueError(f"{who} latency must be a finite number >= 0 seconds, got {latency!r}")
    if not bandwidth > 0:
        raise ValueError(f"{who} bandwidth must be > 0 bytes/s, got {bandwidth!r}")
    if not 1.0 / bandwidth < math.inf:  # a subnormal: every message would take forever (0 bytes: NaN)
        raise ValueError(f"{who} bandwidth {bandwidth!r} bytes/s is too small to compute with; give e.g. 1e9")


def _link(latency: float, bandwidth: float) -> str:
    return f"alpha = {latency * 1e6:g} us, B = {bandwidth / 1e9:g} GB/s"


def _links(cost: CostModel) -> str:
    """The link figures, with each size regime's own when there are several."""
    if not cost.regimes:
        return _link(cost.latency, cost.bandwidth)
    parts = [f"{_link(cost.latency, cost.bandwidth)} below {binary_size(cost.regimes[0].min_bytes)}"]
    parts += [f"{_link(r.latency, r.bandwidth)} from {binary_size(r.min_bytes)}" for r in cost.regimes]
    return "; ".join(parts)


def _rate(flops: float) -> str:
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)):
        if flops >= scale:
            return f"{flops / scale:g} {unit}"
    return f"{flops:g} FLOP/s"
