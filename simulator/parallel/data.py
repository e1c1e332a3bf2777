"""Data parallelism: every replica holds the whole model, takes its share of the batch, and the
replicas average their gradients with an all-reduce.

As in PyTorch's DistributedDataParallel, replica r computes the mean loss over its own rows (with
gradient accumulation over ``microbatches`` microbatches), then the replicas all-reduce the sum of
their gradients and divide by their number: the result is the gradient of the mean loss over the
whole batch, exactly what one device computes on the whole batch.

Gradients are grouped into buckets in the order the backward finishes them (last layer first). A
bucket's all-reduce starts as soon as its last gradient is ready; with ``overlap`` it is an
``AsyncRingAllReduce`` that advances between the backward's ops, so the transfers of the last
layers' gradients travel while the earlier layers' backward computes. Without ``overlap`` every
bucket is reduced at the end with a blocking collective (``dev.all_reduce``).

Names: replica r's own gradient is ``dW3.replica[r]``, the all-reduced sum ``dW3.sum``, and the
average ``dW3``, matching ``mlp.reference_step(..., replicas=n)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..checker import Reference
from ..core.device import Device
from ..core.engine import RunResult
from ..core.world import World
from . import mlp as M
from .buckets import AsyncRingAllReduce
from .layers import LayerOps
from .mlp import MLP, split_rows
from .pipeline import ActionCosts, GradientSync, Pipeline
from .schedules import one_f_one_b

DP_TAG = 1 << 29  # data-parallel messages: above the pipeline's tags, below the collectives' TAG_BASE


def replica_rows(batch: int, replicas: int, rank: int) -> slice:
    """Replica ``rank``'s rows of a batch split evenly over ``replicas`` (an uneven split is refused: the replicas'
    mean losses would weigh rows unequally, and their average would not be the whole batch's gradient)."""
    if batch % replicas:
        raise ValueError(f"a batch of {batch} rows does not split evenly over {replicas} replicas")
    return split_rows(batch, replicas)[rank]


def replica_pipeline(mlp: MLP, microbatches: int, rank: int, **options: Any) -> Pipeline:
    """Replica ``rank``'s forward and backward on its own device: a one-stage 1F1B pipeline whose microbatches
    and gradients carry the replica's number (``dW3.replica[r]``)."""
    return Pipeline(
        mlp,
        one_f_one_b(1, microbatches),
        devices=(rank,),
        first_microbatch=rank * microbatches,
        grad_suffix=f".replica[{rank}]",
        **options,
    )


class BucketedAllReduce:
    """DDP's gradient synchronisation for one device (a ``GradientSync``): buckets, all-reduce, average.

    group:           the replicas' devices, in replica order
    bucket_elements: start a bucket's all-reduce once it holds at least this many numbers
                     (0: one bucket per layer, its weight and bias gradients together)
    overlap:         advance each bucket's ring between ops (True) or reduce all buckets at the end
    algorithm:       the blocking collective's algorithm when not overlapping
    free_extras:     packing the gradients into buckets and dividing by the number of replicas take no
                     time (under fixed action costs, whose formulas count forward and backward only);
                     False: each costs what an op costs
    """

    def __init__(
        self,
        dev: Device,
        ops: LayerOps,
        suffix: str,
        group: Sequence[int],
        bucket_elements: int = 0,
        overlap: bool = True,
        algorithm: str = "ring",
        free_extras: bool = True,
    ) -> None:
        self.dev, self.ops, self.suffix = dev, ops, suffix
        self.extra_seconds = 0.0 if free_extras else None
        self.group = tuple(group)
        self.n = len(self.group)
        self.cap = bucket_elements
        self.overlap = overlap
        self.algorithm = algorithm
        self.filling: list[tuple[str, np.ndarray]] = []
        self.buckets: list[tuple[list[tuple[str, np.ndarray]], str | None, AsyncRingAllReduce | np.ndarray]] = []

    def layer_done(self, k: int, grads: dict[str, np.ndarray]) -> None:
        self.filling += list(grads.items())
        if sum(v.size for _, v in self.filling) >= max(self.cap, 1):
            self._launch()

    def _launch(self) -> None:
        if not self.filling:
            return
        bases = [name for name, _ in self.filling]
        name = bucket_name(bases, self.ops.part)  # the reference names each replica's bucket like this
        # packing the gradients into one buffer is a copy a real rank makes: an op (not one of the model's)
        flat = self.dev.compute(
            f"{name or f'grad-bucket{len(self.buckets)}'}.packed",
            _pack,
            *(v for _, v in self.filling),
            keep=False,
            label="gradient bucket",
            seconds=self.extra_seconds,
        )
        if self.overlap:
            partials = f"{name}.replica" if name else None
            tag = DP_TAG + len(self.buckets)
            job: AsyncRingAllReduce | np.ndarray = AsyncRingAllReduce(
                self.dev, flat, self.group, tag, name or f"grad-bucket{len(self.buckets)}", partials
            )
        else:
            job = flat
        self.buckets.append((self.filling, name, job))
        self.filling = []

    def progress(self) -> None:
        for _, _, job in self.buckets:
            if isinstance(job, AsyncRingAllReduce):
                job.progress()

    def finish(self) -> dict[str, np.ndarray]:
        self._launch()
        out: dict[str, np.ndarray] = {}
        for entries, name, job in self.buckets:
            if isinstance(job, AsyncRingAllReduce):
                summed = job.finish()
            else:
                names = {"name": f"{name}.sum", "partials": f"{name}.replica"} if name else {}
                summed = self.dev.all_reduce(job, "sum", self.group, self.algorithm, **names)
            at = 0
            for name, value in entries:
                piece = summed[at : at + value.size].reshape(value.shape)
                at += value.size
                self.dev.free(name + self.suffix)  # the all-reduce works in place on the gradient buffer
                index = self.ops.index(name)
                total = self.dev.compute(f"{name}.sum", lambda v=piece: v, seconds=0.0, index=index, keep=False)
                out[name] = self.reduce(name, total, index)
        return out

    def reduce(self, name: str, summed: np.ndarray, index: Any) -> np.ndarray:
        """The replicas' summed gradient divided by their number: the data-parallel mean."""
        return self.dev.compute(name, partial(M.average, self.n), summed, seconds=self.extra_seconds, index=index)


def _pack(*grads: np.ndarray) -> np.ndarray:
    return np.concatenate([np.ravel(g) for g in grads])


SyncClass = Callable[..., GradientSync]


def bucket_name(grads: Sequence[str], part: str | None = None) -> str:
    """The name of a bucket of gradients, e.g. ``bucket(dW4,db4)``, or ``bucket(dW4,db4)@tp1`` for the
    bucket of tensor-parallel device 1's parts of them."""
    return f"bucket({','.join(grads)})" + (f"@{part}" if part else "")


def bucket_layout(mlp: MLP, layers: Sequence[int], bucket_elements: int) -> list[list[str]]:
    """The buckets ``BucketedAllReduce`` makes from ``layers`` (finished last first): lists of gradient names."""
    buckets, filling, size = [], [], 0
    for k in sorted(layers, reverse=True):
        d_in, d_out = mlp.widths[k - 1], mlp.widths[k]
        filling += [f"dW{k}", f"db{k}"]
        size += d_in * d_out + d_out
        if size >= max(bucket_elements, 1):
            buckets.append(filling)
            filling, size = [], 0
    return buckets + ([filling] if filling else [])


def add_bucket_values(
    ref: Reference,
    buckets: list[list[str]],
    replicas: int,
    part: str | None = None,
    index: Callable[[str], Any] = lambda name: None,
) -> Reference:
    """Name each replica's flattened bucket (and their sum) in ``ref``, so the all-reduce traffic is checked.

    part, index: for devices that hold parts of the parameters, the part's name and its index per gradient.
    """
    for grads in buckets:
        name = bucket_name(grads, part)

        def piece(g: str, m: int) -> np.ndarray:
            value = np.asarray(ref.values[f"{g}.replica[{m}]"])
            at = index(g)
            return np.ravel(value if at is None else value[at])

        flats = [np.concatenate([piece(g, m) for g in grads]) for m in range(replicas)]
        for m, flat in enumerate(flats):
            ref.values[f"{name}.replica[{m}]"] = flat
            ref.docs[f"{name}.replica[{m}]"] = f"replica {m}'s gradients {', '.join(grads)}, flattened into one bucket"
        ref.values[f"{name}.sum"] = sum(flats[1:], flats[0])
        ref.docs[f"{name}.sum"] = f"the bucket {', '.join(grads)} summed over the replicas"
    return ref


@dataclass(frozen=True)
class DataParallel:
    """One data-parallel training step of ``mlp`` over ``replicas`` devices; call it as the rank program.

    microbatches:    gradient accumulation steps per replica (forward and backward in turn, 1F1B)
    bucket_elements: see ``BucketedAllReduce`` (0: one bucket per layer)
    overlap:         overlap the all-reduce with the backward
    algorithm:       the collective's algorithm when not overlapping
    costs:           fixed seconds per microbatch's forward and backward (None: the FLOP rate)
    sync_class:      the gradient synchronisation (``BucketedAllReduce``; a subclass can change a step)
    """

    mlp: MLP
    replicas: int
    microbatches: int = 1
    bucket_elements: int = 0
    overlap: bool = True
    algorithm: str = "ring"
    costs: ActionCosts | None = None
    sync_class: SyncClass = BucketedAllReduce

    def __post_init__(self) -> None:
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"DataParallel(replicas={self.replicas!r}): give a positive number of replicas")

    def world(self, **options: Any) -> World:
        return World(self.replicas, **options)

    def run(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, **world_options: Any) -> RunResult:
        return self.world(**world_options).run(self, params, x, t)

    def reference(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
        """One device computing each replica's gradient and their average (= the whole batch's gradient),
        with each replica's gradient buckets named so every message of the all-reduce is checked."""
        ref = M.mlp_reference(self.mlp, params, x, t, self.microbatches, self.replicas)
        layout = bucket_layout(self.mlp, range(1, self.mlp.layers + 1), self.bucket_elements)
        return add_bucket_values(ref, layout, self.replicas)

    def __call__(self, dev: Device, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict:
        """Replica ``dev.rank`` takes its rows of the batch, runs forward and backward, all-reduces."""
        rows, group = replica_rows(x.shape[0], self.replicas, dev.rank), tuple(range(self.replicas))
        sync = partial(
            self.sync_class,
            group=group,
            bucket_elements=self.bucket_elements,
            overlap=self.overlap,
            algorithm=self.algorithm,
            free_extras=self.costs is not None,
        )
        pipe = replica_pipeline(self.mlp, self.microbatches, dev.rank, costs=self.costs, sync=sync)
        return pipe(dev, params, x[rows], t[rows])
