"""The checker's catalogue of student programs (tests/checker/test_checker_catalogue.py), rewritten in torch: each program
here is the twin of one written against ``Device`` there, and gets the same verdict, checked against
``Reference.of_torch`` of the same model. Modules take the model's names (``S1``, ``proj``, ``a``); nothing
declares a shard or a partial sum: the torch backend learns them from the shapes and from ``dist.all_reduce``.
"""

from collections import OrderedDict

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.torchsim.programs import TwoStage, seed_split  # noqa: E402
from tests.checker.test_checker_catalogue import CORRECT, WRONG  # noqa: E402

RNG = np.random.default_rng(30)


class Fn(nn.Module):
    """A module computing ``fn`` (the catalogue's stages and activations)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def rank_and_size():
    return dist.get_rank(), dist.get_world_size()


# ---- the seed --------------------------------------------------------------------------------------
X1, XN = torch.tensor([3.0]), torch.tensor(RNG.standard_normal(5))


def seed_isend(x):
    model = TwoStage()
    if dist.get_rank() == 0:
        dist.isend(model.a(x), dst=1).wait()
        return None
    h = torch.empty_like(x)
    dist.irecv(h, src=0).wait()
    return model.b(h)


def seed_variant(x, stage):
    model = TwoStage()
    if stage == "a":
        model.a = Fn(lambda v: 2 * v - 1)
    else:
        model.b = Fn(lambda v: v**3)
    if dist.get_rank() == 0:
        dist.send(model.a(x), dst=1)
        return None
    h = torch.empty_like(x)
    dist.recv(h, src=0)
    return model.b(h)


# ---- four stages of a student's own functions ----------------------------------------------------------
STAGES = [lambda v: v * v, lambda v: v + 3, torch.sin, lambda v: 10 * v]
XB = torch.tensor(RNG.standard_normal((1, 3)))  # batch size 1


def four_model():
    return nn.Sequential(OrderedDict((f"S{i + 1}", Fn(f)) for i, f in enumerate(STAGES)))


def four(x, per_device=1, bug=None):
    rank, p = rank_and_size()
    model = four_model()
    if bug == "order":
        model.S2, model.S3 = Fn(STAGES[2]), Fn(STAGES[1])
    h = x
    if rank > 0:
        h = torch.empty_like(x)
        dist.recv(h, src=rank - 1)
    for s in range(rank * per_device, (rank + 1) * per_device):
        out = model[s](h)
        h = h if bug == "stage1-to-stage3" and s == 1 else out
    if rank < p - 1:
        dist.send(h, dst=rank + 1)
        return None
    return h


# ---- Y = X W, split by columns and by rows ------------------------------------------------------------
XL, WL = torch.tensor(RNG.standard_normal((2, 4))), torch.tensor(RNG.standard_normal((4, 6)))


class Linear(nn.Module):
    """Y = X W, as a module ``proj`` (a bias-free nn.Linear holds W transposed)."""

    def __init__(self, w):
        super().__init__()
        self.proj = nn.Linear(w.shape[0], w.shape[1], bias=False, dtype=w.dtype)
        with torch.no_grad():
            self.proj.weight.copy_(w.T)

    def forward(self, x):
        return self.proj(x)


def column(join=None, shard="mine"):
    rank, p = rank_and_size()
    take = rank if shard == "mine" else (rank + 1) % p
    y = Linear(WL.chunk(p, dim=1)[take])(XL)
    if join is None:
        return y
    pieces = [torch.empty_like(y) for _ in range(p)]
    dist.all_gather(pieces, y)
    return torch.cat(pieces[::-1], dim=1) if join == "reversed" else torch.cat(pieces, dim=1 if join == "cat" else 0)


def row(reduce="all_reduce", rows_of=None):
    rank, p = rank_and_size()
    j = rank if rows_of is None else rows_of
    y = Linear(WL.chunk(p, dim=0)[j])(XL.chunk(p, dim=1)[rank])
    if reduce == "reduce_scatter":
        out = torch.empty(y.shape[0] // p, y.shape[1], dtype=y.dtype)
        dist.reduce_scatter_tensor(out, y)
        return out
    for _ in range({"all_reduce": 1, "twice": 2, None: 0}[reduce]):
        dist.all_reduce(y)
    return y


# ---- the Megatron MLP --------------------------------------------------------------------------------------
XM = torch.tensor(RNG.standard_normal((3, 4)))
A, B = torch.tensor(RNG.standard_normal((4, 8))), torch.tensor(RNG.standard_normal((8, 4)))


def gelu(v):
    return 0.5 * v * (1 + torch.tanh(0.8 * v))


class Megatron(nn.Module):
    def __init__(self, a, b, final=False):
        super().__init__()
        self.xa, self.h, self.z = Linear(a), Fn(gelu), Linear(b)
        self.g = Fn(gelu) if final else None

    def forward(self, x):
        z = self.z(self.h(self.xa(x)))
        return self.g(z) if self.g is not None else z


def megatron(bug=None):
    rank, p = rank_and_size()
    cols = A.chunk(p, dim=1)[0 if bug == "wrong columns" else rank]
    model = Megatron(cols, B.chunk(p, dim=0)[rank], final=bug == "gelu on partials")
    y = model(XM)
    dist.all_reduce(y)
    return y


# ---- data parallelism: the mean over the batch ---------------------------------------------------------------
XD = torch.tensor(RNG.standard_normal((8, 3)))


class MeanRows(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = Fn(lambda v: v.mean(dim=0))

    def forward(self, x):
        return self.g(x)


def data_parallel(op):
    rank, p = rank_and_size()
    g = MeanRows()(XD.chunk(p, dim=0)[rank])
    dist.all_reduce(g, op=op)
    return g


# ---- broadcast, replicas ---------------------------------------------------------------------------------
class Triple(nn.Module):
    def __init__(self):
        super().__init__()
        self.y = Fn(lambda v: 3 * v)

    def forward(self, w):
        return self.y(w)


def broadcast(root=0):
    w = WL[dist.get_rank()].clone()
    dist.broadcast(w, src=root)
    return Triple()(w)


INPUTS = (torch.tensor([3.0]), torch.tensor([4.0]))


def replicas(swap=False):
    rank = dist.get_rank()
    return TwoStage()(INPUTS[1 - rank if swap else rank])


def per_rank():
    return {r: Reference.of_torch(TwoStage(), INPUTS[r]) for r in range(2)}


def ref(model, *args):
    return lambda: Reference.of_torch(model, *args)


# twin name -> (world size, program, its arguments, the reference)
TWINS = {
    "seed, named receive": (2, seed_split, (X1,), ref(TwoStage(), X1)),
    "seed, isend and irecv": (2, seed_isend, (X1,), ref(TwoStage(), X1)),
    "seed, standard-normal batch": (2, seed_split, (XN,), ref(TwoStage(), XN)),
    "seed, raw input crosses": (2, seed_split, (X1, "raw input"), ref(TwoStage(), X1)),
    "seed, raw input, float batch": (2, seed_split, (XN, "raw input"), ref(TwoStage(), XN)),
    "seed, B cubes": (2, seed_variant, (X1, "b"), ref(TwoStage(), X1)),
    "seed, A subtracts": (2, seed_variant, (XN, "a"), ref(TwoStage(), XN)),
    "four stages, model's names": (4, four, (XB,), ref(four_model(), XB)),
    "four stages on two devices": (2, four, (XB, 2), ref(four_model(), XB)),
    "four stages, wrong input": (4, four, (XB, 1, "stage1-to-stage3"), ref(four_model(), XB)),
    "four stages, swapped functions": (4, four, (XB, 1, "order"), ref(four_model(), XB)),
    "column split, shards returned": (2, column, (), ref(Linear(WL), XL)),
    "column split on 3 devices": (3, column, (), ref(Linear(WL), XL)),
    "column split, gathered": (2, column, ("cat",), ref(Linear(WL), XL)),
    "column split, wrong order": (3, column, ("reversed",), ref(Linear(WL), XL)),
    "column split, wrong axis": (2, column, ("axis 0",), ref(Linear(WL), XL)),
    "column split, neighbour's shard": (2, column, (None, "next"), ref(Linear(WL), XL)),
    "row split, partial=True": (2, row, (), ref(Linear(WL), XL)),
    "row split on 4 devices": (4, row, (), ref(Linear(WL), XL)),
    "row split, reduce-scatter": (2, row, ("reduce_scatter",), ref(Linear(WL), XL)),
    "row split, all-reduce forgotten": (2, row, (None,), ref(Linear(WL), XL)),
    "row split, all-reduced twice": (2, row, ("twice",), ref(Linear(WL), XL)),
    "row split, the same rows twice": (2, row, ("all_reduce", 0), ref(Linear(WL), XL)),
    "Megatron MLP": (2, megatron, (), ref(Megatron(A, B), XM)),
    "Megatron MLP on 4 devices": (4, megatron, (), ref(Megatron(A, B), XM)),
    "Megatron MLP, gelu on partial sums": (2, megatron, ("gelu on partials",), ref(Megatron(A, B, True), XM)),
    "Megatron MLP, wrong A columns": (2, megatron, ("wrong columns",), ref(Megatron(A, B), XM)),
    "data parallel, partial means": (4, data_parallel, (dist.ReduceOp.AVG,), ref(MeanRows(), XD)),
    "data parallel, summed not averaged": (4, data_parallel, (dist.ReduceOp.SUM,), ref(MeanRows(), XD)),
    "broadcast of the weights": (3, broadcast, (), ref(Triple(), WL[0])),
    "broadcast from the wrong root": (3, broadcast, (1,), ref(Triple(), WL[0])),
    "replicas with their own inputs": (2, replicas, (), per_rank),
    "replicas fed each other's input": (2, replicas, (True,), per_rank),
}


def test_the_twins_cover_most_of_the_catalogue():
    assert len(TWINS) >= 30
    assert set(TWINS) <= set(CORRECT) | set(WRONG)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_torch_twin_gets_its_twins_verdict(name):
    size, program, args, reference = TWINS[name]
    twin = CORRECT.get(name) or WRONG[name]
    report = check(simulate_torch(program, size, *args), reference())
    assert report.verdict == twin.expect, f"{name}: {report}"
