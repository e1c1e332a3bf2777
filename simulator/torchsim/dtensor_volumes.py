"""What PyTorch's DTensor sends to redistribute a tensor, measured in one process without any peers.

``dtensor_bytes(mesh_shape, shape, src, dst, rank)`` starts torch's "fake" process group (a single process
playing one rank; collectives return at once), builds a DTensor with ``src`` placements, redistributes it
to ``dst`` under a dispatch mode that records every functional collective DTensor issues, and turns each
into the bytes this rank sends under the ring algorithms the simulator uses by default:

    all_gather_into_tensor  of n elements over p ranks   (p - 1) n
    reduce_scatter_tensor   of n elements                (p - 1) n / p
    all_reduce              of n elements                2 (p - 1) n / p
    all_to_all_single       of n elements                the elements sent to the p - 1 others

so ``simulator.tensors.redistribute`` can be compared with DTensor transition by transition (tests/
test_redistribute_volumes.py). torch is imported when it is called; the fake process group is created
and destroyed around each call, so nothing stays behind.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..tensors.placements import Partial, Placement, Replicate, Shard
from ..tensors.sharded import Layout


@dataclass
class DTensorCalls:
    """The collectives DTensor issued on one rank, and the bytes that rank sends for them."""

    calls: list[tuple[str, int, int]] = field(default_factory=list)  # (kind, elements in, group size)
    bytes: int = 0

    @property
    def kinds(self) -> list[str]:
        return [k for k, _, _ in self.calls]


def _torch_placement(p: Placement):
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS

    if isinstance(p, Shard):
        return TS(p.dim)
    if isinstance(p, Partial):
        return TP(p.op)
    return TR()


def dtensor_bytes(
    mesh_shape: Sequence[int],
    shape: Sequence[int],
    src: Sequence[Placement],
    dst: Sequence[Placement],
    rank: int = 0,
    itemsize: int = 8,
) -> DTensorCalls:
    """The collectives DTensor runs on ``rank`` for ``src`` -> ``dst``, and the bytes that rank sends."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.distributed_c10d import _resolve_process_group
    from torch.distributed.tensor import DTensor
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils._python_dispatch import TorchDispatchMode

    out = DTensorCalls()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if func.namespace == "_c10d_functional" and name in SENT:
                x = args[0]
                group = _resolve_process_group(args[-1]).size()
                extra = args[1] if name == "all_to_all_single" else None
                out.calls.append((name, x.numel(), group))
                out.bytes += SENT[name](x, group, extra, rank) * itemsize
            return func(*args, **(kwargs or {}))

    n = int(np.prod(mesh_shape))
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=n)
    try:
        mesh = init_device_mesh("cpu", tuple(mesh_shape))
        layout = Layout(tuple(shape), _our_mesh(mesh_shape), tuple(src))
        local = torch.zeros(layout.local_shape(rank), dtype=torch.float64)
        d = DTensor.from_local(
            local, mesh, [_torch_placement(p) for p in src], run_check=False, shape=tuple(shape),
            stride=tuple(int(s) for s in np.cumprod((1, *reversed(shape[1:])))[::-1]),
        )  # fmt: skip
        with Record(), _quiet(_DTENSOR_ADVICE):
            d.redistribute(mesh, [_torch_placement(p) for p in dst])
    finally:
        dist.destroy_process_group()
    return out


# DTensor's warnings while it plans on the fake group ("2 sequential all_reduce operations ... suboptimal", "CPU
# process group does not support alltoall yet"): advice for a real run, noise in a table that measures its plans
_DTENSOR_ADVICE = ("torch.distributed.tensor._redistribute", "torch.distributed.tensor._collective_utils")


@contextlib.contextmanager
def _quiet(names: Sequence[str]) -> Iterator[None]:
    """The loggers ``names`` keep their errors only, for the block."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def dtensor_plan(
    mesh_shape: Sequence[int], shape: Sequence[int], src: Sequence[Placement], dst: Sequence[Placement]
) -> list[tuple[int, Placement, Placement]]:
    """DTensor's own plan for ``src`` -> ``dst``: (mesh dim, from, to) per step, in our placement types.

    Read from ``torch.distributed.tensor._redistribute._gen_transform_infos`` (torch 2.13's greedy planner),
    the steps DTensor then runs one collective each (an all-to-all where we read Shard(i) -> Shard(j): on
    GPUs DTensor runs one; on CPU it falls back to an all-gather and a slice).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.distributed.tensor._redistribute import _gen_transform_infos_non_cached
    from torch.testing._internal.distributed.fake_pg import FakeStore

    n = int(np.prod(mesh_shape))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=n)
    try:
        mesh = init_device_mesh("cpu", tuple(mesh_shape))
        stride = tuple(int(s) for s in np.cumprod((1, *reversed(shape[1:])))[::-1])
        meta = TensorMeta(torch.Size(shape), stride, torch.float64)
        a = DTensorSpec(mesh, tuple(_torch_placement(p) for p in src), tensor_meta=meta)
        b = DTensorSpec(mesh, tuple(_torch_placement(p) for p in dst), tensor_meta=meta)
        infos = _gen_transform_infos_non_cached(a, b)
    finally:
        dist.destroy_process_group()
    return [
        (i.mesh_dim, _our_placement(i.src_dst_placements[0]), _our_placement(i.src_dst_placements[1])) for i in infos
    ]


def _our_placement(p) -> Placement:
    if p.is_shard():
        return Shard(p.dim)
    if p.is_partial():
        return Partial(p.reduce_op)
    return Replicate()


def _our_mesh(mesh_shape: Sequence[int]):
    from ..tensors.mesh import DeviceMesh

    return DeviceMesh.grid(tuple(mesh_shape))


def _all_to_all_sent(x, p, output_splits, rank) -> int:
    return int(x.numel() - x.numel() // p) if not output_splits else int(x.numel() - x[0:0].numel())


SENT = {
    "all_gather_into_tensor": lambda x, p, _, r: (p - 1) * x.numel(),
    "reduce_scatter_tensor": lambda x, p, _, r: (p - 1) * x.numel() // p,
    "all_reduce": lambda x, p, _, r: 2 * (p - 1) * x.numel() // p,
    "all_to_all_single": lambda x, p, _, r: (p - 1) * x.numel() // p,
}
