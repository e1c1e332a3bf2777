"""ZeRO (Rajbhandari et al., 2020): data parallelism that shards the model states instead of copying them.

Per parameter, mixed-precision Adam training holds 2 bytes of fp16 parameter, 2 of fp16 gradient and
K = 12 of optimizer state (fp32 master copy and two moments). With N replicas and Psi parameters:

    stage 0  plain data parallelism            (2 + 2 + K) Psi
    stage 1  optimizer state sharded            2 Psi + 2 Psi + K Psi / N
    stage 2  ... and gradients                  2 Psi + (2 + K) Psi / N
    stage 3  ... and parameters (FSDP)          (2 + 2 + K) Psi / N

Each layer's parameters form one flat vector ``p{k}`` = [W[k] flattened, b[k]] (FSDP's flat parameter
per unit); replica r owns chunk r of it (torch.chunk's rule), and of the flat gradient ``g{k}`` and
the optimizer state ``master{k}``, ``m{k}``, ``v{k}``. What each stage does:

    stage 0, 1  all-reduce the gradients (bucketed, overlapped with the backward, as ``data.py``)
    stage 2, 3  reduce-scatter each layer's flat gradient as soon as the backward finishes it: each
                replica keeps only the sum of its chunk, and frees the whole local gradient
    stage 0     every replica runs Adam on everything
    stage 1-3   each replica runs Adam on its chunk; stages 1 and 2 then all-gather the new parameters
    stage 3     holds only its chunk of the parameters: before a layer's forward, and again before its
                backward, it all-gathers the layer (``p{k}.gathered``) and frees it right after use

``model_state_bytes`` reads, from the trace, what a device holds just before the optimizer step and
prices it at the paper's bytes per element, so the table above can be checked against a run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from ..checker import Reference
from ..core.device import Device
from ..core.engine import RunResult
from ..core.trace import Trace
from ..core.world import World
from ..tensors.placements import FlatSlice, chunk_bounds
from . import mlp as M
from .data import BucketedAllReduce, add_bucket_values, bucket_layout, replica_pipeline, replica_rows
from .layers import DenseLayers, LayerOps
from .mlp import MLP
from .optim import Adam

STAGES = (0, 1, 2, 3)
PAPER_BYTES = {"parameters": 2, "gradients": 2, "optimizer": 4}  # per element; 3 optimizer arrays: K = 12
_CATEGORIES = (
    (re.compile(r"^(W|b)\d+$|^p\d+(\.gathered|\.new)?$"), "parameters"),
    (re.compile(r"^d(W|b)\d+(\.replica\[\d+\])?$|^g\d+$"), "gradients"),
    (re.compile(r"^(master|m|v)\d+(\.new)?$"), "optimizer"),
)


def flatten(W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A layer's flat parameter (or gradient): W row by row, then b."""
    return np.concatenate([np.ravel(W), np.ravel(b)])


def unflatten(p: np.ndarray, W_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    n = W_shape[0] * W_shape[1]
    return p[:n].reshape(W_shape), p[n:]


def layer_size(mlp: MLP, k: int) -> int:
    return mlp.widths[k - 1] * mlp.widths[k] + mlp.widths[k]


def chunk(size: int, n: int, r: int) -> slice:
    b = chunk_bounds(size, n)
    return slice(b[r], b[r + 1])


class ShardedLayers(DenseLayers):
    """ZeRO-3's parameters: hold chunk r of each layer's flat parameter; gather the layer around each use."""

    def __init__(self, dev: Device, mlp: MLP, group: tuple[int, ...]) -> None:
        super().__init__(mlp)
        self.group = group
        self.n = len(group)
        self.r = group.index(dev.rank)
        self.shards: dict[int, np.ndarray] = {}

    def hold(self, dev: Device, params: dict[str, np.ndarray], k: int) -> None:
        sl = chunk(layer_size(self.mlp, k), self.n, self.r)
        flat = flatten(params[f"W{k}"], params[f"b{k}"])
        self.shards[k] = dev.hold(f"p{k}", flat[sl], index=sl, doc=f"replica {self.r}'s chunk of layer {k}")

    def _gather(self, dev: Device, k: int) -> None:
        size = layer_size(self.mlp, k)
        shapes = [(chunk(size, self.n, m).stop - chunk(size, self.n, m).start,) for m in range(self.n)]
        whole = dev.all_gather(self.shards[k], self.group, axis=0, shapes=shapes, name=f"p{k}.gathered")
        W, b = unflatten(whole, (self.mlp.widths[k - 1], self.mlp.widths[k]))
        self.params[f"W{k}"] = dev.hold(f"W{k}", W)
        self.params[f"b{k}"] = dev.hold(f"b{k}", b)

    def _release(self, dev: Device, k: int) -> None:
        for name in (f"W{k}", f"b{k}", f"p{k}.gathered"):
            dev.free(name)

    def forward(self, dev: Device, k: int, h: np.ndarray, g: int, seconds: float | None) -> np.ndarray:
        self._gather(dev, k)
        out = super().forward(dev, k, h, g, seconds)
        self._release(dev, k)
        return out

    def input_grad(self, dev, k, dh, h, g, seconds):
        if k == 1:  # the first layer's input gradient is not needed: no weights, no gather
            return super().input_grad(dev, k, dh, h, g, seconds)
        self._gather(dev, k)
        out = super().input_grad(dev, k, dh, h, g, seconds)
        self._release(dev, k)
        return out


class ZeroSync:
    """The gradient reduction and the sharded Adam step of one replica (a ``GradientSync``)."""

    def __init__(
        self,
        dev: Device,
        ops: LayerOps,
        suffix: str,
        group: tuple[int, ...],
        stage: int,
        params: dict[str, np.ndarray],
        adam: Adam,
        mlp: MLP,
    ) -> None:
        self.dev, self.group, self.stage, self.adam, self.mlp = dev, group, stage, adam, mlp
        self.n = len(group)
        self.r = group.index(dev.rank)
        self.suffix = suffix
        self.allreduce = BucketedAllReduce(dev, ops, suffix, group) if stage < 2 else None
        self.grads: dict[int, np.ndarray] = {}
        self.state: dict[str, np.ndarray] = {}
        for k in range(1, mlp.layers + 1):  # the optimizer state this replica keeps (all of it at stage 0)
            sl = self.mine(k)
            p = flatten(params[f"W{k}"], params[f"b{k}"])[sl]
            idx = self.index(k)
            self.state[f"master{k}"] = dev.hold(f"master{k}", p, index=idx, doc="fp32 master copy of the parameters")
            self.state[f"m{k}"] = dev.hold(f"m{k}", np.zeros_like(p), index=idx, doc="Adam's first moment")
            self.state[f"v{k}"] = dev.hold(f"v{k}", np.zeros_like(p), index=idx, doc="Adam's second moment")

    def mine(self, k: int) -> slice:
        """The chunk of layer k's flat vector this replica updates."""
        size = layer_size(self.mlp, k)
        return slice(0, size) if self.stage == 0 else chunk(size, self.n, self.r)

    def index(self, k: int) -> FlatSlice | None:
        sl = self.mine(k)
        return None if self.stage == 0 else FlatSlice(sl.start, sl.stop)

    def layer_done(self, k: int, grads: dict[str, np.ndarray]) -> None:
        if self.allreduce is not None:
            self.allreduce.layer_done(k, grads)
            return
        dev = self.dev
        local = flatten(*grads.values())
        for name in grads:
            dev.free(name + self.suffix)  # reduce-scatter keeps only this replica's chunk of the sum
        summed = dev.reduce_scatter(local, "sum", self.group, axis=0, name=f"g{k}.sum", partials=f"g{k}.replica")
        _drop(dev, f"g{k}.replica")
        dev.free(f"g{k}.sum")
        self.grads[k] = dev.compute(f"g{k}", partial(M.average, self.n), summed, index=self.index(k))

    def progress(self) -> None:
        if self.allreduce is not None:
            self.allreduce.progress()

    def finish(self) -> dict[str, np.ndarray]:
        dev = self.dev
        if self.allreduce is not None:
            averaged = self.allreduce.finish()
            for k in range(1, self.mlp.layers + 1):
                sl = self.mine(k)
                self.grads[k] = dev.compute(
                    f"g{k}",
                    lambda W, b, sl=sl: flatten(W, b)[sl],
                    averaged[f"dW{k}"],
                    averaged[f"db{k}"],
                    index=self.index(k),
                    keep=False,  # a view of the gradient buffer, not a second copy
                )
        out = {}
        for k in range(1, self.mlp.layers + 1):
            out[f"p{k}.new"] = self._adam(k)
        return out

    def _adam(self, k: int) -> np.ndarray:
        dev, adam, idx, g = self.dev, self.adam, self.index(k), self.grads[k]
        m = dev.compute(f"m{k}.new", adam.first_moment, self.state[f"m{k}"], g, index=idx)
        v = dev.compute(f"v{k}.new", adam.second_moment, self.state[f"v{k}"], g, index=idx)
        p = dev.compute(f"p{k}.new", partial(adam.update, 1), self.state[f"master{k}"], m, v, index=idx)
        for old in (f"m{k}", f"v{k}"):
            dev.free(old)  # updated in place in a real optimizer
        if self.stage in (1, 2):  # every replica needs the whole new parameters for the next forward
            size = layer_size(self.mlp, k)
            shapes = [(chunk(size, self.n, m).stop - chunk(size, self.n, m).start,) for m in range(self.n)]
            p = dev.all_gather(p, self.group, axis=0, shapes=shapes, name=f"p{k}.new")
        return p


def _drop(dev: Device, prefix: str) -> None:
    for name in [n for n in dev.memory if n.startswith(prefix)]:
        dev.free(name)


@dataclass(frozen=True)
class ZeRO:
    """One ZeRO training step (gradients and an Adam update) over ``replicas`` devices; a rank program."""

    mlp: MLP
    replicas: int
    stage: int
    microbatches: int = 1
    adam: Adam = field(default_factory=Adam)

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"ZeRO(stage={self.stage!r}): choose a stage in {STAGES}")

    def world(self, **options: Any) -> World:
        return World(self.replicas, **options)

    def run(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, **world_options: Any) -> RunResult:
        return self.world(**world_options).run(self, params, x, t)

    def __call__(self, dev: Device, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict:
        rows, group = replica_rows(x.shape[0], self.replicas, dev.rank), tuple(range(self.replicas))
        pipe = replica_pipeline(
            self.mlp,
            self.microbatches,
            dev.rank,
            layer_ops=partial(ShardedLayers, group=group) if self.stage == 3 else None,
            sync=partial(ZeroSync, group=group, stage=self.stage, params=params, adam=self.adam, mlp=self.mlp),
        )
        return pipe(dev, params, x[rows], t[rows])

    def reference(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
        """One device: the replicas' gradients, their average, the flat vectors and one Adam step."""
        n, mlp = self.replicas, self.mlp
        ref = M.mlp_reference(mlp, params, x, t, self.microbatches, n)
        add_bucket_values(ref, bucket_layout(mlp, range(1, mlp.layers + 1), 0), n)
        put = partial(_put, ref)
        for k in range(1, mlp.layers + 1):
            p = flatten(params[f"W{k}"], params[f"b{k}"])
            put(f"p{k}", p, f"layer {k}'s parameters as one flat vector")
            put(f"p{k}.gathered", p, f"layer {k}'s flat parameters, gathered from every replica's chunk")
            put(f"master{k}", p, f"the fp32 master copy of layer {k}'s parameters")
            put(f"m{k}", np.zeros_like(p), "Adam's first moment before the step")
            put(f"v{k}", np.zeros_like(p), "Adam's second moment before the step")
            for r in range(n):
                local = flatten(ref.values[f"dW{k}.replica[{r}]"], ref.values[f"db{k}.replica[{r}]"])
                put(f"g{k}.replica[{r}]", local, f"replica {r}'s own flat gradient of layer {k}")
            put(f"g{k}.sum", flatten(ref.values[f"dW{k}.sum"], ref.values[f"db{k}.sum"]), "the replicas' sum")
            g = flatten(ref.values[f"dW{k}"], ref.values[f"db{k}"])
            put(f"g{k}", g, f"layer {k}'s flat gradient, averaged over the replicas")
            m = self.adam.first_moment(np.zeros_like(p), g)
            v = self.adam.second_moment(np.zeros_like(p), g)
            put(f"m{k}.new", m, "Adam's first moment after the step")
            put(f"v{k}.new", v, "Adam's second moment after the step")
            put(f"p{k}.new", self.adam.update(1, p, m, v), f"layer {k}'s parameters after one Adam step")
        # Each replica returns its part of the new parameters and its own loss; the averaged gradients
        # are computed as flat chunks (g1, g2, ...), not under the names dW1, db1, ...
        ref.result = {f"p{k}.new": ref.values[f"p{k}.new"] for k in range(1, mlp.layers + 1)}
        ref.result |= {f"loss.replica[{r}]": ref.values[f"loss.replica[{r}]"] for r in range(n)}
        ref.computed = [name for name in ref.computed if not re.match(r"^d[Wb]\d+$", name)]
        return ref


def _put(ref: Reference, name: str, value: np.ndarray, doc: str) -> None:
    ref.values[name] = value
    ref.docs[name] = doc


# ---- the memory accounting ----------------------------------------------------------------------
def category(name: str) -> str | None:
    """Which model state a memory name is (parameters, gradients, optimizer), or None (activations, ...)."""
    for pattern, cat in _CATEGORIES:
        if pattern.match(name):
            return cat
    return None


def model_state_bytes(trace: Trace, device: int) -> dict[str, int]:
    """What ``device`` holds just before its optimizer step, priced at the paper's bytes per element.

    The trace is replayed (hold, kept op outputs, named receives, frees) up to the device's first
    Adam op; float64 elements are counted and priced at ``PAPER_BYTES``.
    """
    live: dict[str, int] = {}
    first_adam = re.compile(r"^m\d+\.new$")
    for kind, rec in trace.events:
        if kind == "recv":
            if rec.dst == device and rec.name is not None:
                live[rec.name] = rec.nbytes
            continue
        if kind not in ("op", "hold", "free") or rec.rank != device:
            continue
        if kind == "op" and first_adam.match(rec.name):
            break
        if kind == "free":
            live.pop(rec.name, None)
        elif kind == "hold" or rec.keep:
            live[rec.name] = rec.nbytes
    out = dict.fromkeys(PAPER_BYTES, 0)
    for name, nbytes in live.items():
        cat = category(name)
        if cat is not None:
            out[cat] += nbytes // 8 * PAPER_BYTES[cat]
    return out


def paper_bytes(params: int, replicas: int, stage: int, k: int = 12) -> dict[str, float]:
    """The ZeRO paper's model-state bytes per device for ``params`` parameters (K = ``k``)."""
    shard = {"parameters": stage >= 3, "gradients": stage >= 2, "optimizer": stage >= 1}
    per = {"parameters": 2, "gradients": 2, "optimizer": k}
    return {cat: per[cat] * params / (replicas if shard[cat] else 1) for cat in per}
