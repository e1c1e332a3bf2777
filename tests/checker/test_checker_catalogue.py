"""A catalogue of programs written the way students write them, right and wrong, through the checker.

Styles vary on purpose: the model's names and their own, receives with and without ``name=``,
partial sums declared or not, shards returned or assembled, integer and standard-normal data,
batch size 1, hand-written collectives and the library's strategies. A wrong program is never
"passed"; a right one is never "FAILED".
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from simulator.parallel.data import DataParallel
from simulator.parallel.mlp import MLP
from simulator.parallel.pipeline import Pipeline
from simulator.parallel.schedules import gpipe, one_f_one_b
from simulator.parallel.zero import ZeRO
from simulator.teach.examples import get

RNG = np.random.default_rng(2026)
PASSED, FAILED, NOT_VERIFIED = "passed", "FAILED", "not verified"


@dataclass
class Case:
    world: World
    program: Callable[..., Any]
    reference: Callable[[], Any]
    expect: str  # the verdict
    args: tuple = ()


# ---- the seed: A = 2x + 1 on device 0, B = A^2 on device 1 -----------------------------------------
def seed_model(dev, x):
    dev.hold("x", x, doc="the raw input")
    return dev.compute("B", np.square, dev.compute("A", lambda v: 2 * v + 1, x))


def seed(bug=None, name="A", isend=False):
    def program(dev, x):
        if dev.rank == 0:
            x = dev.hold("x", x)
            a = dev.compute("A", (lambda v: 2 * v - 1) if bug == "minus" else (lambda v: 2 * v + 1), x)
            value = x if bug == "raw" else a
            if isend:
                dev.wait(dev.isend(value, 1))
            else:
                dev.send(value, 1)
            return None
        h = dev.wait(dev.irecv(0, name=name)) if isend else dev.recv(0, name=name)
        return dev.compute("B", (lambda v: v**3) if bug == "cube" else np.square, h)

    return program


X1 = np.array([3.0])
XN = RNG.standard_normal(5)


def seed_ref(x):
    return lambda: Reference.of(seed_model, x)


# ---- four stages of a student's own functions -----------------------------------------------------
STAGES = [lambda v: v * v, lambda v: v + 3, np.sin, lambda v: 10 * v]


def four_model(dev, x):
    h = dev.hold("x", x)
    for i, f in enumerate(STAGES):
        h = dev.compute(f"S{i + 1}", f, h)
    return h


def four(names="S", bug=None, recv_names=False, per_device=1):
    def program(dev, x):
        first = dev.rank * per_device
        h = dev.hold("x", x) if dev.rank == 0 else dev.recv(dev.rank - 1, name=f"S{first}" if recv_names else None)
        for s in range(first, first + per_device):
            f = STAGES[s]
            if bug == "order" and s in (1, 2):
                f = STAGES[3 - s]
            if bug == "times100" and s == 3:
                f = lambda v: 100 * v  # noqa: E731
            out = dev.compute(f"{names}{s + 1}", f, h)
            if bug == "stage1-to-stage3" and s == 1:
                out = h
            h = out
        if dev.rank < dev.world_size - 1:
            dev.send(h, dev.rank + 1)
            return None
        return h

    return program


XB = RNG.standard_normal((1, 3))  # batch size 1


# ---- Y = X @ W, split by columns --------------------------------------------------------------
X, W = RNG.standard_normal((2, 4)), RNG.standard_normal((4, 6))


def linear(dev):
    return dev.compute("Y", np.matmul, dev.hold("X", X), dev.hold("W", W))


def column(join=None, shard="mine", declare=True, returned_block=None):
    def program(dev):
        p = dev.world_size
        c = W.shape[1] // p
        mine = np.s_[:, c * dev.rank : c * (dev.rank + 1)]
        take = dev.rank if shard == "mine" else (dev.rank + 1) % p
        w = dev.hold("W", W[:, c * take : c * (take + 1)], index=mine)
        y = dev.compute("Y", np.matmul, dev.hold("X", X), w, index=mine if declare else None)
        if join is None:
            return y
        return dev.compute("Y", join, *dev.all_gather(y))

    return program


def by_columns(*ps):
    return np.concatenate(ps, axis=1)


# ---- Y = X @ W, split by rows (partial sums) ---------------------------------------------------------
def row(name="Y", partial=True, reduce="all_reduce", rows_of=None):
    def program(dev):
        p = dev.world_size
        k = W.shape[0] // p
        j = dev.rank if rows_of is None else rows_of
        x = dev.hold("X", X[:, k * j : k * (j + 1)], index=np.s_[:, k * dev.rank : k * (dev.rank + 1)])
        y = dev.compute(name, np.matmul, x, W[k * j : k * (j + 1)], partial=partial)
        if reduce == "all_reduce":
            return dev.all_reduce(y)
        if reduce == "twice":
            return dev.all_reduce(dev.all_reduce(y))
        if reduce == "by hand":  # device 1 sends its partial sum, device 0 adds
            if dev.rank == 1:
                dev.send(y, 0)
                return None
            return dev.compute("Y", np.add, y, dev.recv(1))
        if reduce == "sent as complete":
            if dev.rank == 1:
                dev.send(y, 0)
                return None
            return dev.compute("out", lambda a, b: a + 0 * b, dev.recv(1, name="Y"), y)
        if reduce == "reduce_scatter":
            return dev.reduce_scatter(y, axis=0, name="Y")
        return y

    return program


def linear_out(dev):
    return dev.compute("out", lambda v: v, linear(dev))


# ---- the Megatron MLP ----------------------------------------------------------------------------
XM, A, B = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 8)), RNG.standard_normal((8, 4))


def gelu(v):
    return 0.5 * v * (1 + np.tanh(0.8 * v))


def mlp_model(dev, X=XM):
    x = dev.hold("X", X)
    h = dev.compute("H", gelu, dev.compute("XA", np.matmul, x, A))
    return dev.compute("Z", np.matmul, h, B)


def megatron(bug=None, X=XM):
    def program(dev):
        p = dev.world_size
        c = A.shape[1] // p
        cols = np.s_[:, c * dev.rank : c * (dev.rank + 1)]
        x = dev.hold("X", X)
        xa = dev.compute("XA", np.matmul, x, A[cols], index=cols)
        if bug == "full x":
            xa = dev.compute("XA", np.matmul, x, A[:, :c], index=cols)
        h = dev.compute("H", gelu, xa, index=cols)
        z = dev.compute("Z", np.matmul, h, B[c * dev.rank : c * (dev.rank + 1)], partial=True)
        if bug == "gelu on partials":
            return dev.all_reduce(dev.compute("G", gelu, z))
        return dev.all_reduce(z)

    return program


def gelu_model(dev):
    return dev.compute("G", gelu, mlp_model(dev))


XI = np.arange(12.0).reshape(3, 4)  # integer-valued floats: exact arithmetic


# ---- data parallelism: the mean over the batch ------------------------------------------------------
XD = RNG.standard_normal((8, 3))


def mean_rows(v):
    return v.mean(axis=0)


def dp_model(dev):
    return dev.compute("g", mean_rows, dev.hold("x", XD))


def dp(style="partial", group=None):
    def program(dev):
        p = dev.world_size if group is None else group
        q, r = divmod(dev.rank, p)
        members = tuple(range(q * p, (q + 1) * p))
        b = XD.shape[0] // p
        rows = np.s_[b * r : b * (r + 1)]
        x = dev.hold("x", XD[rows], index=rows)
        if style == "partial":
            return dev.all_reduce(dev.compute("g", lambda v: mean_rows(v) / p, x, partial=members), group=members)
        local = dev.compute("g.local", mean_rows, x)
        if style == "avg":
            return dev.compute("g", np.copy, dev.all_reduce(local, op="avg", group=members))
        total = dev.all_reduce(local, group=members)
        divide = {"sum then divide": p, "sum only": 1, "divide twice": p * p}[style]
        return dev.compute("g", lambda v: v / divide, total)

    return program


# ---- a ring all-reduce by hand --------------------------------------------------------------------
V = RNG.standard_normal((4, 5))


def ring_model(dev):
    for r in range(4):
        dev.hold(f"v{r}", V[r])
    return dev.compute("total", lambda: V.sum(axis=0))


def ring(bug=None):
    def program(dev):
        p, r = dev.world_size, dev.rank
        mine = dev.hold(f"v{r}", V[r])
        acc, passing = mine, mine
        for _ in range(p - 1):
            dev.send(passing, (r + 1) % p)
            passing = dev.recv((r - 1) % p)
            acc = acc + passing
        if bug == "own twice":
            acc = acc + mine
        return dev.compute("total", lambda: acc)

    return program


# ---- broadcast, reduce ----------------------------------------------------------------------------
def bcast_model(dev):
    w = dev.hold("w", W[0])
    return dev.compute("y", lambda v: 3 * v, w)


def bcast(root=0):
    def program(dev):
        w = dev.broadcast(W[dev.rank] if dev.rank == root else None, src=root, name="w" if root == 0 else None)
        return dev.compute("y", lambda v: 3 * v, w)

    return program


def reduce_model(dev):
    return dev.compute("total", lambda: V[:2].sum(axis=0))


def reduce_root(dev):
    return dev.reduce(V[dev.rank], dst=0, name="total")


# ---- replicas with their own inputs ------------------------------------------------------------------
def replicated(swap=False):
    def program(dev, inputs):
        x = inputs[(1 - dev.rank) if swap else dev.rank]
        return seed_model(dev, x)

    return program


INPUTS = (np.array([3.0]), np.array([4.0]))


def per_rank_refs():
    return {r: Reference.of(seed_model, INPUTS[r]) for r in range(2)}


# ---- the library's strategies ------------------------------------------------------------------------
MLP3 = MLP((3, 4, 4, 2))
PX, PT = MLP3.data(8, seed=5)
PARAMS = MLP3.init(seed=6)


def library(job):
    return Case(job.world(), job, lambda: job.reference(PARAMS, PX, PT), PASSED, (PARAMS, PX, PT))


def scenario(name, expect):
    s = get(name)
    return Case(s.world, s.program, s.reference, expect, s.args)


CORRECT = {
    "seed, named receive": Case(World(2), seed(), seed_ref(X1), PASSED, (X1,)),
    "seed, receive without name=": Case(World(2), seed(name=None), seed_ref(X1), PASSED, (X1,)),
    "seed, isend and irecv": Case(World(2), seed(isend=True), seed_ref(X1), PASSED, (X1,)),
    "seed, standard-normal batch": Case(World(2), seed(), seed_ref(XN), PASSED, (XN,)),
    "seed, rendezvous sends": Case(World(2, send_mode="rendezvous"), seed(), seed_ref(X1), PASSED, (X1,)),
    "four stages, model's names": Case(World(4), four(), lambda: Reference.of(four_model, XB), PASSED, (XB,)),
    "four stages, named receives": Case(
        World(4), four(recv_names=True), lambda: Reference.of(four_model, XB), PASSED, (XB,)
    ),
    "four stages on two devices": Case(
        World(2), four(per_device=2), lambda: Reference.of(four_model, XB), PASSED, (XB,)
    ),
    "four stages, own names": Case(World(4), four("stage"), lambda: Reference.of(four_model, XB), NOT_VERIFIED, (XB,)),
    "column split, shards returned": Case(World(2), column(), lambda: Reference.of(linear), PASSED),
    "column split on 3 devices": Case(World(3), column(), lambda: Reference.of(linear), PASSED),
    "column split, gathered": Case(World(2), column(by_columns), lambda: Reference.of(linear), PASSED),
    "row split, partial=True": Case(World(2), row(), lambda: Reference.of(linear), PASSED),
    "row split, partial over a group": Case(World(2), row(partial=(0, 1)), lambda: Reference.of(linear), PASSED),
    "row split, reduced by hand": Case(World(2), row(reduce="by hand"), lambda: Reference.of(linear), PASSED),
    "row split, reduce-scatter": Case(World(2), row(reduce="reduce_scatter"), lambda: Reference.of(linear), PASSED),
    "row split on 4 devices": Case(World(4), row(), lambda: Reference.of(linear), PASSED),
    "Megatron MLP": Case(World(2), megatron(), lambda: Reference.of(mlp_model), PASSED),
    "Megatron MLP on 4 devices": Case(World(4), megatron(), lambda: Reference.of(mlp_model), PASSED),
    "Megatron MLP, integer data": Case(World(2), megatron(X=XI), lambda: Reference.of(mlp_model, XI), PASSED),
    "data parallel, partial means": Case(World(4), dp(), lambda: Reference.of(dp_model), PASSED),
    "data parallel, all-reduce average": Case(World(4), dp("avg"), lambda: Reference.of(dp_model), NOT_VERIFIED),
    "data parallel, sum then divide": Case(
        World(2), dp("sum then divide"), lambda: Reference.of(dp_model), NOT_VERIFIED
    ),
    "data parallel in two groups": Case(World(4), dp(group=2), lambda: Reference.of(dp_model), PASSED),
    "ring all-reduce by hand": Case(World(4), ring(), lambda: Reference.of(ring_model), PASSED),
    "broadcast of the weights": Case(World(3), bcast(), lambda: Reference.of(bcast_model), PASSED),
    "reduce to one device": Case(World(2), reduce_root, lambda: Reference.of(reduce_model), PASSED),
    "replicas with their own inputs": Case(World(2), replicated(), per_rank_refs, PASSED, (INPUTS,)),
    "pipeline, GPipe": library(Pipeline(MLP3, gpipe(3, 2))),
    "pipeline, 1F1B": library(Pipeline(MLP3, one_f_one_b(3, 4))),
    "data parallel (library)": library(DataParallel(MLP3, 2, microbatches=2)),
    "ZeRO stage 2": library(ZeRO(MLP3, 2, 2)),
    "the 3-D step": scenario("3d-step", PASSED),
    "tensor-parallel row split scenario": scenario("tp-row", PASSED),
}

WRONG = {
    "seed, raw input crosses": Case(World(2), seed("raw"), seed_ref(X1), FAILED, (X1,)),
    "seed, raw input, no name=": Case(World(2), seed("raw", name=None), seed_ref(X1), FAILED, (X1,)),
    "seed, raw input, float batch": Case(World(2), seed("raw"), seed_ref(XN), FAILED, (XN,)),
    "seed, B cubes": Case(World(2), seed("cube"), seed_ref(X1), FAILED, (X1,)),
    "seed, A subtracts": Case(World(2), seed("minus", name=None), seed_ref(XN), FAILED, (XN,)),
    "four stages, own names, wrong input": Case(
        World(4), four("stage", "stage1-to-stage3"), lambda: Reference.of(four_model, XB), FAILED, (XB,)
    ),
    "four stages, wrong input": Case(
        World(4), four("S", "stage1-to-stage3"), lambda: Reference.of(four_model, XB), FAILED, (XB,)
    ),
    "four stages, swapped functions": Case(
        World(4), four("S", "order"), lambda: Reference.of(four_model, XB), FAILED, (XB,)
    ),
    "four stages, own names, swapped": Case(
        World(4), four("s", "order"), lambda: Reference.of(four_model, XB), FAILED, (XB,)
    ),
    "four stages, last stage x100": Case(
        World(2), four("S", "times100", per_device=2), lambda: Reference.of(four_model, XB), FAILED, (XB,)
    ),
    "column split, wrong order": Case(
        World(3), column(lambda *ps: np.concatenate(ps[::-1], axis=1)), lambda: Reference.of(linear), FAILED
    ),
    "column split, wrong axis": Case(
        World(2), column(lambda *ps: np.concatenate(ps, axis=0)), lambda: Reference.of(linear), FAILED
    ),
    "column split, neighbour's shard": Case(World(2), column(shard="next"), lambda: Reference.of(linear), FAILED),
    "column split, undeclared shards": Case(World(2), column(declare=False), lambda: Reference.of(linear), FAILED),
    "row split, all-reduce forgotten": Case(World(2), row(reduce=None), lambda: Reference.of(linear), FAILED),
    "row split, own name, no all-reduce": Case(
        World(2), row("Yp", partial=None, reduce=None), lambda: Reference.of(linear), FAILED
    ),
    "row split, undeclared partial": Case(World(2), row(partial=None), lambda: Reference.of(linear), FAILED),
    "row split, all-reduced twice": Case(World(2), row(reduce="twice"), lambda: Reference.of(linear), FAILED),
    "row split, the same rows twice": Case(World(2), row(rows_of=0), lambda: Reference.of(linear), FAILED),
    "row split, partial sent as complete": Case(
        World(2), row(reduce="sent as complete"), lambda: Reference.of(linear_out), FAILED
    ),
    "Megatron MLP, gelu on partial sums": Case(
        World(2), megatron("gelu on partials"), lambda: Reference.of(gelu_model), FAILED
    ),
    "Megatron MLP, wrong A columns": Case(World(2), megatron("full x"), lambda: Reference.of(mlp_model), FAILED),
    "data parallel, summed not averaged": Case(World(4), dp("sum only"), lambda: Reference.of(dp_model), FAILED),
    "data parallel, divided twice": Case(World(4), dp("divide twice"), lambda: Reference.of(dp_model), FAILED),
    "data parallel, partial means not divided": Case(
        World(2), lambda dev: dp()(dev) * 2, lambda: Reference.of(dp_model), FAILED
    ),
    "data parallel in groups, summed": Case(World(4), dp("sum only", group=2), lambda: Reference.of(dp_model), FAILED),
    "ring by hand, own value added twice": Case(World(4), ring("own twice"), lambda: Reference.of(ring_model), FAILED),
    "broadcast from the wrong root": Case(World(3), bcast(root=1), lambda: Reference.of(bcast_model), FAILED),
    "replicas fed each other's input": Case(World(2), replicated(swap=True), per_rank_refs, FAILED, (INPUTS,)),
    "labels off by one (library)": scenario("labels-off-by-one", FAILED),
    "wrong upstream stage": scenario("wrong-upstream-stage", FAILED),
    "gradients summed, not averaged (library)": scenario("dp-sum-not-average", FAILED),
    "shards assembled in the wrong order (library)": scenario("tp-bug-wrong-order", FAILED),
    "all-reduce forgotten (library)": scenario("tp-bug-forgot-all-reduce", FAILED),
}


def _verdict(case: Case):
    return check(case.world.run(case.program, *case.args), case.reference())


def test_the_catalogue_is_big_enough():
    assert len(CORRECT) >= 30 and len(WRONG) >= 30


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_a_right_program_is_never_failed(name):
    case = CORRECT[name]
    report = _verdict(case)
    assert report.verdict != FAILED, str(report)
    assert report.verdict == case.expect, str(report)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_program_is_never_passed(name):
    case = WRONG[name]
    report = _verdict(case)
    assert report.verdict != PASSED and not report.ok, str(report)
    assert report.verdict == case.expect, str(report)
