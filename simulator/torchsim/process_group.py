"""``SimProcessGroup``: torch.distributed's process group whose every call runs on a simulated device.

torch.distributed sends each call of a group (``dist.all_reduce``, ``dist.send``, and the functional
collectives DTensor uses) to the group's methods (``allreduce``, ``send``, ``_allgather_base``, ...). Here
each method turns its tensors into NumPy arrays and asks the rank's simulated device (through
``context.RankContext.request``) to run the simulator's own collective, message by message, with the
algorithm the simulation chose; then it writes the result into the tensors torch gave it.

Collectives run to their end within the call (the simulated time of the collective is where it was called,
with no overlap of its messages with later compute). One called with ``async_op=True`` returns a work whose
results reach the program's tensors only when the program waits on it (``AsyncCollective``): on real ranks a
tensor read before the wait may not hold them, so here it never does, and the checker shows the stale value.
Point-to-point calls are truly asynchronous: ``isend``/``irecv`` post a request on the device and the work's
``wait`` waits for it, so a program may post both directions before waiting, as it must with torch.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .bookkeeping import message_label
from .context import RankContext, call_site, internal
from .values import numpy_dtype, to_numpy, write_into
from .works import AsyncCollective, SimWork, done, what_call

REDUCE_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.PRODUCT: "product",
}
# each collective's algorithm when the simulation names none for it (the simulator's own defaults)
DEFAULT_ALGORITHMS = {
    "all_reduce": "ring",
    "reduce_scatter": "ring",
    "all_gather": "ring",
    "broadcast": "tree",
    "reduce": "tree",
    "scatter": "direct",
    "gather": "direct",
    "all_to_all": "direct",
    "barrier": "dissemination",
}


class SimProcessGroup(dist.ProcessGroup):
    """One rank's handle on a group of simulated ranks (created by torch through the "simulator" backend)."""

    def __init__(self, ctx: RankContext, group_rank: int, group_size: int) -> None:
        super().__init__(group_rank, group_size)
        self._ctx = ctx
        self._group_rank, self._size = group_rank, group_size
        self._ranks: tuple[int, ...] | None = None
        self._deferred: list | None = None  # the writes of the call in progress, when the program asked async_op
        self._held: list = []  # (tensor, its bytes) of each tensor that call reads or writes, checked at the wait

    def __repr__(self) -> str:
        return f"<SimProcessGroup rank {self._group_rank} of {self._size} (simulated rank {self._ctx.rank})>"

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "simulator"

    @property
    def group_name(self) -> str:
        return dist.distributed_c10d._world.pg_names[self]

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._group_rank

    @property
    def ranks(self) -> tuple[int, ...]:
        """The group's members as global ranks, in group-rank order."""
        if self._ranks is None:
            mapping = dist.distributed_c10d._world.pg_group_ranks[self]
            self._ranks = tuple(g for g, _ in sorted(mapping.items(), key=lambda kv: kv[1]))
        return self._ranks

    # ---- helpers ------------------------------------------------------------------------------
    def _run(self, api: str, fn: Any) -> Any:
        return self._ctx.request(fn, what_call(f"{api} on ranks {list(self.ranks)}", call_site()))

    def _member(self, group_rank: int, role: str, api: str) -> int:
        """The global rank of the group's ``group_rank``, the ``role`` rank of an ``api`` call; one that is not in
        the group is refused as torch's backends refuse it ("invalid destination rank: 7"), naming the call (gloo
        crashes on a send to rank 7 of 2, and a negative one would pick a rank from the end)."""
        if 0 <= group_rank < self._size:
            return self.ranks[group_rank]
        ranks = "the world" if self._size == self._ctx.world_size else f"the group {list(self.ranks)}"
        raise ValueError(
            f"rank {self._ctx.rank}: invalid {role} rank: {group_rank} ({api} at {call_site() or 'the program'}): "
            f"{ranks} has ranks 0 to {self._size - 1}; give {api} a rank of the group"
        )

    def _np(self, t: torch.Tensor, api: str) -> np.ndarray:
        with internal(self._ctx):
            x = to_numpy(t, self._ctx.rank, api)
        if self._deferred is not None:
            self._held.append((t, x.tobytes()))
        return x

    def _start(self, opts: Any) -> None:
        """A collective call begins. Its results wait for the program's ``work.wait()`` when the program asked
        ``dist.<collective>(..., async_op=True)``: torch's own functions set ``opts.asyncOp`` from it. (C++ makes it
        True by default, and the functional collectives DTensor uses keep that: they are not called from torch's
        ``distributed_c10d``, and complete within the call, as they always have here.)"""
        asked = getattr(opts, "asyncOp", False) and sys._getframe(2).f_code.co_filename == c10d.__file__
        self._deferred = [] if asked else None
        self._held = []

    def _write(self, t: torch.Tensor, value: Any) -> None:
        if self._deferred is not None:
            self._np(t, "the output")  # what it holds until the wait: the program must leave it so
            self._deferred.append((t, value))
            return
        with internal(self._ctx):
            write_into(t, value)

    def _finish(self, api: str, result: Any) -> Any:
        """The call's work: completed, or the program's to wait on (``AsyncCollective``)."""
        writes, held, self._deferred, self._held = self._deferred, self._held, None, []
        if writes is None:
            return done(result)
        return AsyncCollective(
            self._ctx, what_call(f"{api} on ranks {list(self.ranks)}", call_site()), writes, held, result
        )

    def _algorithm(self, kind: str) -> str:
        return self._ctx.algorithms.get(kind, DEFAULT_ALGORITHMS[kind])

    def _op(self, reduce_op: Any, api: str) -> str:
        op = REDUCE_OPS.get(getattr(reduce_op, "op", reduce_op))
        if op is None:
            raise ValueError(
                f"rank {self._ctx.rank}: {api} with op {reduce_op} is not simulated; use SUM, AVG, MAX, MIN or PRODUCT"
            )
        return op

    # ---- collectives --------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._start(opts)
        op = self._op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "all_reduce")
        group, alg = self.ranks, self._algorithm("all_reduce")
        for t in tensors:
            x = self._np(t, "all_reduce")
            name = self._ctx.sink.reduced(t, group, op)  # a module's output, all-reduced: it was a partial sum
            out = self._run("all_reduce", lambda dev, x=x, n=name: dev.all_reduce(x, op, group, alg, name=n))
            self._write(t, out)
        return self._finish("all_reduce", tensors)

    allreduce_coalesced = allreduce

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("all_gather")
        for outs, t in zip(outputs, inputs):
            x, shapes = self._np(t, "all_gather"), [tuple(o.shape) for o in outs]
            pieces = self._run("all_gather", lambda dev, x=x, s=shapes: dev.all_gather(x, group, alg, shapes=s))
            for o, piece in zip(outs, pieces):
                self._write(o, piece)
        return self._finish("all_gather", outputs)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("all_gather")
        self._size_check("all_gather_into_tensor", output, input, len(group))
        x = self._np(input, "all_gather_into_tensor")
        whole = self._run("all_gather_into_tensor", lambda dev: dev.all_gather(x, group, alg, axis=0))
        self._write(output, whole)
        return self._finish("all_gather_into_tensor", [output])

    all_gather_single = _allgather_base  # (torch 2.13's name; both are called, by Python and by C++)

    def allgather_into_tensor_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return done(outputs)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        self._start(opts)
        op, group, alg = self._op(opts.reduceOp, "reduce_scatter"), self.ranks, self._algorithm("reduce_scatter")
        for o, blocks in zip(outputs, inputs):
            whole = _rows_of_one_tensor(blocks)
            if whole is not None and self._ctx.sink.recorded(whole):  # a module's output, cut in rows
                if len(blocks) == len(group) and len({b.shape[0] for b in blocks}) == 1:  # the tensor form: named
                    self._reduce_scatter_rows(o, whole, opts)
                    continue
                self._ctx.sink.reduced(whole, group, op)  # unequal: the output was a term of a sum all the same
            xs = [self._np(b, "reduce_scatter") for b in blocks]
            mine = self._run("reduce_scatter", lambda dev, xs=xs: dev.reduce_scatter(xs, op, group, alg))
            self._write(o, mine)
        return self._finish("reduce_scatter", outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        self._start(opts)
        self._reduce_scatter_rows(output, input, opts)
        return self._finish("reduce_scatter_tensor", [output])

    def _reduce_scatter_rows(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> None:
        op, group, alg = self._op(opts.reduceOp, "reduce_scatter_tensor"), self.ranks, self._algorithm("reduce_scatter")
        self._size_check("reduce_scatter_tensor", input, output, len(group))
        x = self._np(input, "reduce_scatter_tensor")
        name = self._ctx.sink.reduced(input, group, op)
        mine = self._run("reduce_scatter_tensor", lambda dev: dev.reduce_scatter(x, op, group, alg, axis=0, name=name))
        self._write(output, mine)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return done(outputs)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("broadcast")
        root = self._member(opts.rootRank, "root", "broadcast")
        for t in tensors:
            x = self._np(t, "broadcast") if self._ctx.rank == root else None
            shape, dtype = tuple(t.shape), numpy_dtype(t.dtype)
            got = self._run(
                "broadcast", lambda dev, x=x, s=shape, d=dtype: dev.broadcast(x, root, group, alg, shape=s, dtype=d)
            )
            if self._ctx.rank != root:
                self._write(t, got)
        return self._finish("broadcast", tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._start(opts)
        op, group, alg = self._op(opts.reduceOp, "reduce"), self.ranks, self._algorithm("reduce")
        root = self._member(opts.rootRank, "root", "reduce")
        for t in tensors:
            x = self._np(t, "reduce")
            name = self._ctx.sink.reduced(t, group, op)
            out = self._run("reduce", lambda dev, x=x, n=name: dev.reduce(x, root, op, group, alg, name=n))
            if out is not None:
                self._write(t, out)
        return self._finish("reduce", tensors)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("gather")
        root = self._member(opts.rootRank, "root", "gather")
        x = self._np(inputs[0], "gather")
        shapes = [tuple(o.shape) for o in outputs[0]] if outputs else None
        pieces = self._run("gather", lambda dev: dev.gather(x, root, group, alg, shapes=shapes))
        if pieces is not None:
            for o, piece in zip(outputs[0], pieces):
                self._write(o, piece)
        return self._finish("gather", outputs)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("scatter")
        root, out = self._member(opts.rootRank, "root", "scatter"), outputs[0]
        chunks = [self._np(t, "scatter") for t in inputs[0]] if self._ctx.rank == root else None
        shape, dtype = tuple(out.shape), numpy_dtype(out.dtype)
        mine = self._run("scatter", lambda dev: dev.scatter(chunks, root, group, alg, shape=shape, dtype=dtype))
        self._write(out, mine)
        return self._finish("scatter", outputs)

    def alltoall_base(
        self, output: torch.Tensor, input: torch.Tensor, output_splits: list, input_splits: list, opts: Any = None
    ) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("all_to_all")
        p = len(group)
        self._contiguous(input, "all-to-all it", "Tensors must be contiguous")
        if not output.is_contiguous():  # gloo takes it and writes its bytes in memory order: the values scrambled
            raise ValueError(
                f"rank {self._ctx.rank}: all_to_all_single's output of shape {tuple(output.shape)} and strides "
                f"{output.stride()} is not contiguous: gloo fills its memory in order, so on real ranks the values land "
                "in the wrong places (no error). Receive into a fresh torch.empty(shape) and copy it where it goes"
            )
        x = self._np(input, "all_to_all_single")
        send = _splits(input_splits, x.shape[0], p)
        recv = _splits(output_splits, output.shape[0], p)
        at = np.cumsum([0, *send])
        chunks = [x[at[j] : at[j + 1]] for j in range(p)]
        shapes = [(n, *output.shape[1:]) for n in recv]
        got = self._run("all_to_all_single", lambda dev: dev.all_to_all(chunks, group, alg, shapes=shapes))
        self._write(output, np.concatenate(got, axis=0) if got else np.zeros(output.shape))
        return self._finish("all_to_all_single", [output])

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("all_to_all")
        chunks = [self._np(t, "all_to_all") for t in inputs]
        shapes = [tuple(o.shape) for o in outputs]
        got = self._run("all_to_all", lambda dev: dev.all_to_all(chunks, group, alg, shapes=shapes))
        for o, piece in zip(outputs, got):
            self._write(o, piece)
        return self._finish("all_to_all", outputs)

    def barrier(self, opts: Any = None) -> Any:
        self._start(opts)
        group, alg = self.ranks, self._algorithm("barrier")
        self._run("barrier", lambda dev: dev.barrier(group, alg))
        return self._finish("barrier", [])

    # ---- point to point -----------------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        peer = self._member(dst, "destination", "send")
        self._contiguous(tensors[0], f"send to rank {peer}")
        x = self._np(tensors[0], "send")
        what, site, label = f"send to rank {peer}", call_site(), message_label(self._ctx)
        req = self._ctx.request(lambda dev: dev.isend(x, peer, tag, label=label), what_call(what, site))
        return SimWork(self._ctx, req, what, site, sent=(tensors[0], x))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        peer, t = self._member(src, "source", "recv"), tensors[0]
        self._contiguous(t, f"recv from rank {peer} into it")
        shape, dtype = tuple(t.shape), numpy_dtype(t.dtype)
        what, site = f"recv from rank {peer}", call_site()

        def post(dev: Any) -> Any:  # the dtype and the number of elements (SimWork._fits): torch fills any shape,
            return dev.irecv(peer, tag, shape=shape if dev.needs_contract else None, dtype=dtype)  # unless declared

        req = self._ctx.request(post, what_call(what, site))
        return SimWork(self._ctx, req, what, site, t)

    def _contiguous(self, t: torch.Tensor, what: str, says: str = "input tensor has to be contiguous") -> None:
        """gloo (and NCCL) send, receive and all-to-all only contiguous tensors: a transposed one stops a real rank
        there (its all-reduce, broadcast and the tensor forms of all-gather and reduce-scatter take one)."""
        if not t.is_contiguous():
            raise ValueError(
                f"rank {self._ctx.rank}: a tensor of shape {tuple(t.shape)} and strides {t.stride()} is not contiguous, "
                f"and gloo and NCCL refuse to {what} ('{says}'): pass t.contiguous(), or receive into a fresh "
                "torch.empty(shape) and copy it where it goes"
            )

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> Any:
        raise ValueError(
            f"rank {self._ctx.rank}: recv without src (from any rank) is not simulated: a simulated receive names "
            f"its sender, so that every run is the same. Give recv(tensor, src=...)"
        )

    def _size_check(self, api: str, big: torch.Tensor, small: torch.Tensor, p: int) -> None:
        """The larger tensor is the p smaller ones concatenated along dim 0, as gloo requires. (torch's docs and NCCL
        take them stacked too, shape (p, *small); gloo refuses that form, or stops the process, so a program that
        uses it is refused here, with the form both take.)"""
        big_shape, small_shape = tuple(big.shape), tuple(small.shape)
        if big_shape and small_shape and big_shape == (p * small_shape[0], *small_shape[1:]):
            return
        stacked = (
            f" ({big_shape} is the stacked form: NCCL takes it, gloo does not; give the concatenated one, "
            f"{(p * small_shape[0], *small_shape[1:])}, and view it as {big_shape} where you need that)"
            if small_shape and big_shape == (p, *small_shape)
            else ""
        )
        raise ValueError(
            f"rank {self._ctx.rank}: {api} on {p} ranks needs the larger tensor to be {p} times the smaller one "
            f"along dim 0; got {big_shape} and {small_shape}{stacked}"
        )


def _splits(sizes: Any, n: int, p: int) -> list[int]:
    """all_to_all_single's split sizes along dim 0 (equal splits when none are given)."""
    if sizes is None or len(sizes) == 0:
        if n % p:
            raise ValueError(f"all_to_all_single without split sizes needs dim 0 ({n}) divisible by the group ({p})")
        return [n // p] * p
    return [int(s) for s in sizes]


def _rows_of_one_tensor(blocks: list[torch.Tensor]) -> torch.Tensor | None:
    """The tensor ``blocks`` are the consecutive row blocks of, all of it (``list(y.chunk(p))``), or None."""
    base = blocks[0]._base if blocks else None
    if base is None or base.dim() == 0 or not base.is_contiguous() or any(b._base is not base for b in blocks):
        return None
    at = base.storage_offset()
    for b in blocks:
        if b.dim() != base.dim() or tuple(b.shape[1:]) != tuple(base.shape[1:]) or b.storage_offset() != at:
            return None
        at += b.shape[0] * base.stride(0)
    return base if at == base.storage_offset() + base.shape[0] * base.stride(0) else None
