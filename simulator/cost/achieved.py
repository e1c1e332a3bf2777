"""What real kernels and libraries reach on a device: measured rates by size, each with its source.

A datasheet gives peaks (``CostModel.flops``, ``memory_bandwidth``, link bandwidths); no kernel runs at them.
The what-if (``simulator.parallel.whatif``) prices every op of a training step with what was *measured*
instead, and the presets (``simulator.cost.presets``) say where each measurement comes from:

- a matrix product of F floating-point operations runs at ``matmul.at(F)`` FLOP/s, measured on square
  products (cuBLAS), or, where products were measured by shape (``matmul_shapes``), at the rate measured for
  its rows, columns and reduction length, read between grid points in log(size) and kept beyond the grid's
  edges (``ShapeRates``), or at the median of the nearest measured shapes where they form no grid
  (``ShapeSamples``); either way lowered by tile quantization where a dimension is not a multiple of the tile
  (``TILE``, NVIDIA's "Matrix Multiplication Background User's Guide", section 3.1), and never faster than its bytes allow
  at the achieved memory bandwidth (the roofline);
- an op that only moves memory (a norm, a softmax, dropout, an activation, an optimizer step) takes its
  bytes over ``memory_bandwidth`` (STREAM copy, not the datasheet's peak), times the share of it a kernel of
  that size reaches (``memory_share``);
- a collective of n bytes over p ranks takes ``factor * n / busbw``, nccl-tests' own definition of bus
  bandwidth (NVIDIA/nccl-tests, doc/PERFORMANCE.md: factor 2(p-1)/p for an all-reduce, (p-1)/p for an
  all-gather or a reduce-scatter). Inside a node busbw is the curve measured over ``bus_ranks`` GPUs, read at
  the size whose ring steps carry as much as this collective's: a ring moves n / p bytes a step, and its
  bus bandwidth, B (n/p) / (alpha B + n/p) in the alpha-beta model, depends on n / p only, so a group of p
  reads the curve at n * bus_ranks / p. Between nodes it is at most ``nic_bandwidth`` per network port the
  group has on a node, after ``nic_latency``; a group with one GPU a node (a data-parallel group beside 8-way
  tensor parallelism) reaches what NCCL was measured to reach there (``nic_one_per_node``), which is less:
  with one GPU a node NCCL's rings do not fill the port.

``Curve.at`` interpolates a measured rate linearly in log(size) between points and keeps the end points'
rates beyond them (the curves start at sizes far below any the what-if prices: 1 kB messages, 1024^3
products).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

TILE = 128  # the output-tile edge cuBLAS's tensor-core kernels work in (multiples of it avoid tile quantization)


@dataclass(frozen=True)
class Curve:
    """A measured rate as a function of size: ``points`` are (size, rate) pairs, sizes increasing."""

    points: tuple[tuple[float, float], ...]
    source: str

    def __post_init__(self) -> None:
        pts = tuple((float(s), float(r)) for s, r in self.points)
        object.__setattr__(self, "points", pts)
        sizes = [s for s, _ in pts]
        if not pts or sizes != sorted(set(sizes)) or sizes[0] <= 0 or any(r <= 0 for _, r in pts):
            raise ValueError(f"Curve.points must be (size > 0, rate > 0) pairs in increasing size, got {self.points}")
        if not self.source:
            raise ValueError("Curve.source: say where the measured points come from")

    def at(self, size: float) -> float:
        """The rate at ``size`` (see the module docstring for how it is read between and beyond points)."""
        pts = self.points
        if size <= pts[0][0]:
            return pts[0][1]
        if size >= pts[-1][0]:
            return pts[-1][1]
        k = bisect.bisect_right([s for s, _ in pts], size)
        (s0, r0), (s1, r1) = pts[k - 1], pts[k]
        return r0 + (r1 - r0) * math.log(size / s0) / math.log(s1 / s0)

    def scaled(self, factor: float, source: str) -> Curve:
        """The same shape with every rate times ``factor`` (another dtype's or algorithm's peak)."""
        return Curve(tuple((s, r * factor) for s, r in self.points), source)


@dataclass(frozen=True)
class ShapeRates:
    """Measured rates of matrix products by shape: ``rates[i][j][l]`` FLOP/s for ``rows[i]`` rows (m times the
    batch: a batch of products runs as that many rows more), ``cols[j]`` output columns (n) and a reduction of
    ``depth[l]`` (k). Each axis is a tuple of increasing sizes."""

    rows: tuple[float, ...]
    cols: tuple[float, ...]
    depth: tuple[float, ...]
    rates: tuple[tuple[tuple[float, ...], ...], ...]
    source: str

    def __post_init__(self) -> None:
        for name in ("rows", "cols", "depth"):
            axis = getattr(self, name)
            if len(axis) < 2 or list(axis) != sorted(set(axis)) or axis[0] <= 0:
                raise ValueError(f"ShapeRates.{name} must be two or more increasing sizes > 0, got {axis}")
        shape = (len(self.rows), len(self.cols), len(self.depth))
        got = (len(self.rates), {len(r) for r in self.rates}, {len(c) for r in self.rates for c in r})
        if got != (shape[0], {shape[1]}, {shape[2]}) or any(x <= 0 for r in self.rates for c in r for x in c):
            raise ValueError(f"ShapeRates.rates must be a {shape[0]} x {shape[1]} x {shape[2]} grid of rates > 0")
        if not self.source:
            raise ValueError("ShapeRates.source: say where the measured products come from")

    def at(self, rows: float, cols: float, depth: float) -> float:
        """The rate of a product of this shape: read between grid points linearly in log(size) along each axis
        (trilinear in the logs), and at the nearest edge beyond the grid."""
        (i, ti), (j, tj), (k, tk) = _place(rows, self.rows), _place(cols, self.cols), _place(depth, self.depth)
        rate = 0.0
        for di, wi in ((0, 1.0 - ti), (1, ti)):
            for dj, wj in ((0, 1.0 - tj), (1, tj)):
                for dk, wk in ((0, 1.0 - tk), (1, tk)):
                    if wi * wj * wk:
                        rate += wi * wj * wk * self.rates[i + di][j + dj][k + dk]
        return rate

    def measured_flops(self, rows: float, cols: float, depth: float) -> float:
        """FLOPs of the product the grid was measured at where it reads this shape (each axis clamped to it)."""
        return 2.0 * _clamp(rows, self.rows) * _clamp(cols, self.cols) * _clamp(depth, self.depth)


@dataclass(frozen=True)
class ShapeSamples:
    """Measured rates of matrix products whose shapes do not form a grid: ``rates[(cols, depth)]`` is a tuple of
    (rows, FLOP/s) pairs, rows increasing, for products of n = ``cols`` output columns and a reduction of k =
    ``depth`` (the linear layers of real models, timed at several token counts).

    A product is read at the ``nearest`` measured (n, k) pairs, nearest in log(n) and log(k): each at its rows,
    linearly in log(rows) between its points and at its end points beyond them, and the median of those rates
    taken (one kernel's timing can stray by 10% from its neighbours' as cuBLAS's heuristic changes tiles)."""

    rates: dict[tuple[int, int], tuple[tuple[float, float], ...]]
    source: str
    nearest: int = 4
    _curves: tuple[tuple[float, float, Curve], ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        if len(self.rates) < self.nearest or self.nearest < 1:
            raise ValueError(f"ShapeSamples needs at least nearest = {self.nearest} >= 1 measured (n, k) pairs")
        for nk, pts in self.rates.items():
            rows = [r for r, _ in pts]
            if not pts or rows != sorted(set(rows)) or rows[0] <= 0 or any(x <= 0 for _, x in pts) or min(nk) <= 0:
                raise ValueError(f"ShapeSamples.rates[{nk}] must be (rows > 0, rate > 0) pairs in increasing rows")
        if not self.source:
            raise ValueError("ShapeSamples.source: say where the measured products come from")
        curves = tuple((math.log(n), math.log(k), Curve(pts, self.source)) for (n, k), pts in self.rates.items())
        object.__setattr__(self, "_curves", curves)

    def at(self, rows: float, cols: float, depth: float) -> float:
        """The rate of a product of this shape (see the class docstring)."""
        return statistics.median(curve.at(rows) for _, _, curve in self._near(cols, depth))

    def measured_flops(self, rows: float, cols: float, depth: float) -> float:
        """FLOPs of the products measured where this shape is read: the median over the nearest pairs of each
        pair's product at these rows, kept within the rows it was measured at."""
        return statistics.median(
            2.0 * _clamp(rows, tuple(r for r, _ in curve.points)) * math.exp(ln) * math.exp(lk)
            for ln, lk, curve in self._near(cols, depth)
        )

    def _near(self, cols: float, depth: float) -> list[tuple[float, float, Curve]]:
        ln, lk = math.log(cols), math.log(depth)
        return sorted(self._curves, key=lambda c: (c[0] - ln) ** 2 + (c[1] - lk) ** 2)[: self.nearest]


def _clamp(size: float, axis: tuple[float, ...]) -> float:
    """``size`` kept within the first and last of the increasing sizes ``axis``."""
    return min(max(size, axis[0]), axis[-1])


def _place(size: float, axis: tuple[float, ...]) -> tuple[int, float]:
    """(i, t): ``size`` lies t of the way from ``axis[i]`` to ``axis[i + 1]`` in log(size), clamped to the axis."""
    size = _clamp(size, axis)
    i = min(bisect.bisect_right(axis, size) - 1, len(axis) - 2)
    return i, math.log(size / axis[i]) / math.log(axis[i + 1] / axis[i])


COLLECTIVE_FACTORS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def bus_factor(kind: str, ranks: int) -> float:
    """nccl-tests' factor from algorithm bandwidth to bus bandwidth for ``kind`` over ``ranks`` ranks."""
    if kind == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    raise ValueError(f"no collective named {kind!r}; choose one of {', '.join(COLLECTIVE_FACTORS)}")


@dataclass(frozen=True)
class Achieved:
    """What kernels and NCCL reach on one kind of GPU system, measured (the sources are in each field).

    matmul:           FLOP/s of a dense 16-bit matrix product, by its FLOPs (square products measured)
    matmul_shapes:    FLOP/s of a dense 16-bit matrix product by its shape, where measured (None: ``matmul`` alone);
                      a product larger than ``matmul``'s fastest square runs at the share of it ``matmul`` falls to
    memory_bandwidth: bytes/s an element-wise kernel reaches (STREAM copy)
    bus:              NCCL bus bandwidth inside a node, bytes/s by message size, per collective (``all_reduce``
                      is required; the others fall back to it, as busbw is defined to be comparable)
    nic_bandwidth:    bytes/s one network port carries in a collective between nodes
    launch_seconds:   the CPU's time to issue one kernel from PyTorch, the launch's round trip
    matmul_fp8:       FLOP/s of an FP8 matrix product (Transformer Engine's), by its FLOPs; None: no FP8 tensor cores
    nics_per_node:    network ports per node (None: one per GPU, as in DGX nodes); its GPUs share them evenly
    nic_latency:      seconds a message between nodes costs before its bytes (small-message time)
    nic_one_per_node: bus bandwidth (bytes/s) NCCL reaches between nodes, by collective, when its group has one GPU
                      a node, where measured (None, or a collective not in it: ``nic_bandwidth``); never more
                      than the GPU's share of the ports (slower ports given by ``with_network`` limit it; faster
                      ones keep it, as nothing measured them)
    node_size:        GPUs per node (a group of more spans nodes)
    bus_ranks:        GPUs the ``bus`` curves were measured over
    attention:        FLOP/s of a fused (flash) attention kernel without a mask, or None where none was measured
    memory_share:     the share of ``memory_bandwidth`` an element-wise kernel reaches, by the bytes it moves (a
                      small kernel cannot keep every SM's loads in flight); None: all of it
    causal_share:     the share of ``attention`` a causal kernel reaches (counting the half of the score matrix it
                      computes), by sequence length; None: the same rate
    first_gen_share:  the share of a causal FlashAttention-2 kernel's speed that a fused kernel of FlashAttention's
                      first generation reaches, by the head dimension it computes with, each a curve over sequence
                      length; None where none was measured
    overlap_slowdown: the share of its speed a kernel loses while a collective runs beside it (NCCL's blocks
                      take SMs, and memory bandwidth, from it)
    sources:          where the scalar figures come from, by field name
    """

    matmul: Curve
    memory_bandwidth: float
    bus: dict[str, Curve]
    nic_bandwidth: float
    nic_latency: float
    node_size: int
    bus_ranks: int = 8
    attention: float | None = None
    nics_per_node: int | None = None
    overlap_slowdown: float = 0.0
    matmul_fp8: Curve | None = None
    causal_share: Curve | None = None
    first_gen_share: dict[int, Curve] | None = None
    memory_share: Curve | None = None
    launch_seconds: float = 0.0
    matmul_shapes: ShapeRates | ShapeSamples | None = None
    nic_one_per_node: dict[str, float] | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "all_reduce" not in self.bus:
            raise ValueError("Achieved.bus needs an 'all_reduce' curve (the others fall back to it)")
        for name in ("memory_bandwidth", "nic_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Achieved.{name} must be > 0 bytes/s, got {getattr(self, name)!r}")
        if not 0 <= self.overlap_slowdown < 1:
            raise ValueError(f"Achieved.overlap_slowdown must be a share in [0, 1), got {self.overlap_slowdown!r}")
        if self.nics_per_node is not None and (isinstance(self.nics_per_node, bool) or self.nics_per_node < 1):
            raise ValueError(f"Achieved.nics_per_node must be a whole number >= 1, got {self.nics_per_node!r}")
        if not (self.nic_latency >= 0 and math.isfinite(self.nic_latency)):
            raise ValueError(f"Achieved.nic_latency must be a finite number of seconds >= 0, got {self.nic_latency!r}")
        for kind, rate in (self.nic_one_per_node or {}).items():
            bus_factor(kind, 2)  # a collective's name, or a clear error naming the known ones
            if not rate > 0:
                raise ValueError(f"Achieved.nic_one_per_node[{kind!r}] must be > 0 bytes/s, got {rate!r}")

    @property
    def gpu_nic_bandwidth(self) -> float:
        """Bytes/s between nodes for one GPU while every GPU of its node sends: its share of the node's ports."""
        ports = self.node_size if self.nics_per_node is None else self.nics_per_node
        return self.nic_bandwidth * min(1.0, ports / self.node_size)

    @property
    def nic_p2p_bandwidth(self) -> float:
        """Bytes/s of NCCL's sends and receives between two GPUs on different nodes (a pipeline send): the GPU's
        share of the ports, or less where a two-rank all-to-all with one GPU a node was measured
        (``nic_one_per_node['all_to_all']``: nccl-tests' all-to-all is NCCL's sends and receives to every rank,
        grouped, src/alltoall.cu, so on two ranks it times one send and one receive each way)."""
        measured = (self.nic_one_per_node or {}).get("all_to_all")
        return self.gpu_nic_bandwidth if measured is None else min(self.gpu_nic_bandwidth, measured)

    # ---- compute ------------------------------------------------------------------------------
    def matmul_time(
        self, m: float, n: float, k: float, batch: float = 1, itemsize: int = 2, fp8: bool = False
    ) -> float:
        """Seconds for ``batch`` products of an (m, k) and a (k, n) matrix: the rate measured for their shape
        (``matmul_shapes``) or else at their FLOPs (the FP8 curve with ``fp8``), lowered by tile quantization of m
        and n, or their bytes at the memory bandwidth if that is slower."""
        flops = 2.0 * m * n * k * batch
        if flops <= 0:
            return 0.0
        if fp8 and self.matmul_fp8 is None:
            raise ValueError("this GPU has no FP8 tensor cores (no FP8 rate was measured): use precision='bf16'")
        if fp8:
            rate = self.matmul_fp8.at(flops)
        elif self.matmul_shapes is not None:
            shapes = self.matmul_shapes
            rate = shapes.at(m * batch, n, k) * self.long_product_share(flops, shapes.measured_flops(m * batch, n, k))
        else:
            rate = self.matmul.at(flops)
        rate *= _tile_use(m) * _tile_use(n)
        traffic = (m * k + k * n + m * n) * batch * itemsize / self.memory_bandwidth
        return max(flops / rate, traffic)

    def long_product_share(self, flops: float, measured: float = 0.0) -> float:
        """The share of the shape-measured rate a product of ``flops`` keeps, its shape having been measured at
        ``measured`` FLOPs: what ``matmul`` falls by from the larger of ``measured`` and its fastest square's
        FLOPs to ``flops`` (a long product can run slower than the shorter ones a shape table times), 1 where it
        does not fall. A fall the table measured is not counted again."""
        best_size, _ = max(self.matmul.points, key=lambda p: p[1])
        reference = max(measured, best_size)
        return 1.0 if flops <= reference else min(1.0, self.matmul.at(flops) / self.matmul.at(reference))

    def overlapped(self, compute: float, comm: float) -> tuple[float, float]:
        """(compute seconds, exposed communication seconds) of ``compute`` with a collective of ``comm`` seconds
        started beside it: while both run the kernel goes at 1 - ``overlap_slowdown`` of its speed."""
        slow = 1.0 - self.overlap_slowdown
        if comm * slow >= compute:  # the kernel finishes under the collective, which shows past it
            return compute / slow, comm - compute / slow
        return compute + self.overlap_slowdown * comm, 0.0

    def memory_time(self, nbytes: float) -> float:
        """Seconds for an element-wise op that reads and writes ``nbytes`` in all."""
        share = self.memory_share.at(nbytes) if self.memory_share is not None and nbytes > 0 else 1.0
        return nbytes / (self.memory_bandwidth * share)

    def attention_time(
        self,
        flops: float,
        causal_seq: float = 0.0,
        causal_part: float = 1.0,
        rate_share: float = 1.0,
        first_gen_head_dim: int = 0,
    ) -> float:
        """Seconds for a fused attention kernel of ``flops`` (needs a measured ``attention`` rate), running at
        ``rate_share`` of it (a padded head computing its padding). With ``causal_seq`` (the masked blocks'
        sequence length), the ``causal_part`` of the FLOPs that lies in masked blocks runs at ``causal_share`` of
        the rate: their diagonal tiles compute whole and their rows differ in length. With ``first_gen_head_dim``
        the kernel is one of FlashAttention's first generation computing heads of that size, and runs at
        ``first_gen_attention_share`` of the rate as well."""
        if self.attention is None:
            raise ValueError("no fused-attention rate was measured for this system; use unfused attention")
        share = self.causal_share.at(causal_seq) if causal_seq > 0 and self.causal_share is not None else 1.0
        if first_gen_head_dim:
            rate_share *= self.first_gen_attention_share(causal_seq, first_gen_head_dim)
        return flops * (causal_part / share + (1.0 - causal_part)) / (self.attention * rate_share)

    def first_gen_attention_share(self, seq: float, head_dim: int) -> float:
        """The share of FlashAttention-2's speed a first-generation fused kernel reaches on sequences of ``seq``
        with heads of ``head_dim``: read on each measured head dimension's curve, between them linearly in
        log(head dimension), and kept at the end ones beyond them."""
        if not self.first_gen_share:
            raise ValueError(
                "no first-generation fused-attention kernel was measured for this system; use --attention flash"
            )
        dims = sorted(self.first_gen_share)
        d = min(max(float(head_dim), dims[0]), dims[-1])
        lo = max(x for x in dims if x <= d)
        hi = min(x for x in dims if x >= d)
        low, high = self.first_gen_share[lo].at(seq), self.first_gen_share[hi].at(seq)
        return low if hi == lo else low + (high - low) * math.log(d / lo) / math.log(hi / lo)

    # ---- communication ------------------------------------------------------------------------
    def collective_time(self, kind: str, nbytes: float, ranks: int, per_node: int | None = None) -> float:
        """Seconds for a collective of ``nbytes`` (nccl-tests' size: the whole buffer) over ``ranks`` ranks,
        ``per_node`` of them on each node (``ranks`` when the group fits in one node)."""
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        per_node = ranks if per_node is None else per_node
        factor = bus_factor(kind, ranks)
        curve = self.bus.get(kind, self.bus["all_reduce"])
        inside = factor * nbytes / curve.at(nbytes * self.bus_ranks / ranks)
        if per_node >= ranks:
            return inside
        rate = per_node * self.gpu_nic_bandwidth
        if per_node == 1 and self.nic_one_per_node and kind in self.nic_one_per_node:
            rate = min(rate, self.nic_one_per_node[kind])
        between = self.nic_latency + factor * nbytes / rate
        return max(inside, between)

    def p2p_time(self, nbytes: float, same_node: bool) -> float:
        """Seconds for one message between two GPUs (a pipeline send): NVLink inside a node, else a port."""
        if nbytes <= 0:
            return 0.0
        if same_node:
            return nbytes / self.bus["all_reduce"].at(nbytes)
        return self.nic_latency + nbytes / self.nic_p2p_bandwidth


def _tile_use(dim: float) -> float:
    """The share of a dimension's tiles that hold real rows: dim / (TILE * ceil(dim / TILE))."""
    if dim <= 0:
        return 1.0
    return dim / (TILE * math.ceil(dim / TILE))
