"""Tensor-parallel scenarios: the column and row splits, the Megatron MLP, and five classroom bugs.

Every bug below runs to the end (numbers come out, nothing crashes) and only the check against the
single-device model shows it, at the first op or message that holds a wrong value, saying which
value it holds instead. Sizes are small so every value can be printed; the data are integers
divided by 4 so that the numbers are easy to read and sums are exact.
"""

from __future__ import annotations

import numpy as np

from ...checker import ALL, Reference, Split
from ...core.device import Device
from ...core.world import World
from ...parallel import tensor as tp
from ...tensors.mesh import DeviceMesh
from ...tensors.placements import R, S
from ...tensors.redistribute import distribute
from ...tensors.sharded import Layout
from ..scenario import Scenario

TP = 2
B, D, HIDDEN = 2, 4, 8  # HIDDEN / TP == D: a column shard of H has the shape of X (bug 3 needs that)


def _data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-4, 5, size=shape) / 4.0


X = _data(1, B, D)
W = _data(2, D, 6)
A = _data(3, D, HIDDEN)
BW = _data(4, HIDDEN, D)


# ---- a row-parallel linear followed by an activation -----------------------------------------
def linear_gelu_reference(dev: Device, X, W, tp_size: int) -> np.ndarray:
    """gelu(X @ W) on one device, naming the partial sums a row split of W would make."""
    y = tp.linear_reference(dev, X, W, tp_size)
    return dev.compute("G", tp.gelu, y, doc="gelu(X @ W)")


def linear_gelu(dev: Device, X, W) -> np.ndarray:
    """Row-parallel linear, all-reduce, then gelu: the activation sees whole sums."""
    y = tp.row_parallel_program(dev, X, W)
    return dev.compute("G", tp.gelu, y)


def bug_gelu_on_partials(dev: Device, X, W) -> np.ndarray:
    """BUG: gelu applied to each device's partial sum, then all-reduced. gelu(a + b) != gelu(a) + gelu(b)."""
    partial = tp.row_parallel_program(dev, X, W, reduce=None)
    g = dev.compute("G", tp.gelu, partial)  # too early: partial is not Y yet
    return dev.all_reduce(g)


# ---- the Megatron MLP block (with its residual add) ------------------------------------------
def bug_forgot_all_reduce(dev: Device, X, A, B) -> np.ndarray:
    """BUG: the row-parallel output is used as if it were complete; its all-reduce is missing."""
    x, a, b = tp.distribute_mlp(dev, X, A, B)
    _, g, j = tp.group_mesh(dev, None)
    cols = (tp.ALL, tp.split(np.shape(A)[1], len(g), j))
    xa = dev.compute("XA", np.matmul, x, a, index=cols)
    h = dev.compute("H", tp.gelu, xa, index=cols)
    z = tp.row_parallel(dev, h, b, reduce=None, name="Z")  # the all-reduce should follow here
    return dev.compute("out", np.add, x, z)


def bug_full_x_to_row_shards(dev: Device, X, A, B) -> np.ndarray:
    """BUG: the row-parallel layer is handed the raw input X instead of its shard of H = gelu(X @ A)."""
    x, a, b = tp.distribute_mlp(dev, X, A, B)
    _, g, j = tp.group_mesh(dev, None)
    cols = (tp.ALL, tp.split(np.shape(A)[1], len(g), j))
    xa = dev.compute("XA", np.matmul, x, a, index=cols)
    dev.compute("H", tp.gelu, xa, index=cols)
    z = tp.row_parallel(dev, x, b, name="Z")  # should be the H shard just computed
    return dev.compute("out", np.add, x, z)


def bug_all_reduce_twice(dev: Device, X, A, B) -> np.ndarray:
    """BUG: the all-reduce runs twice (once inside the layer, once more by its caller)."""
    x, a, b = tp.distribute_mlp(dev, X, A, B)
    z = tp.megatron_mlp(dev, x, a, b, np.shape(A)[1])
    z = dev.all_reduce(z, name="Z", partials="Z.partial")  # the layer already did this
    return dev.compute("out", np.add, x, z)


# ---- column-parallel linear, assembled -------------------------------------------------------
def bug_wrong_order(dev: Device, X, W) -> np.ndarray:
    """BUG: the gathered column blocks of Y are put together in the wrong order."""
    mesh = DeviceMesh(list(range(dev.world_size)))
    x = distribute(dev, X, Layout(np.shape(X), mesh, (R,)), 0, name="X")
    w = distribute(dev, W, Layout(np.shape(W), mesh, (S(1),)), 0, name="W")
    y = tp.column_parallel(dev, x, w, np.shape(W)[1], gather=False)
    p = dev.world_size
    n = np.shape(W)[1]
    cols = [tp.split(n, p, m) for m in range(p)]
    blocks = dev.all_gather(y, name="Y", indices=[(tp.ALL, c) for c in cols])
    return dev.compute("Y", lambda: np.concatenate(blocks[::-1], axis=1))  # should be blocks in order


def tp_split(collective: str) -> Split:
    """Device 0 is given the layer's inputs and weights and hands each device its shard (its own messages may
    carry only those); the devices combine their blocks with the one collective the story is about."""
    inputs = ("X", "W", "A", "B")
    return Split(given=dict.fromkeys(inputs, 0), crosses=dict.fromkeys(inputs, ALL), collectives=(collective,))


def _linear_ref():
    return Reference.of(tp.linear_reference, X, W, TP)


def _mlp_ref(residual: bool = True):
    return lambda: Reference.of(tp.mlp_reference, X, A, BW, TP, residual)


def _tp(name, title, story, program, args, reference, collective="all_reduce", bug=False) -> Scenario:
    """A scenario on TP devices of the classroom machine, split as ``tp_split(collective)`` says; a bug is
    expected to diverge."""
    return Scenario(
        name=name,
        title=title,
        story=story,
        world=World(TP, cost="classroom"),
        program=program,
        args=args,
        reference=reference,
        expect="diverge" if bug else "match",
        tags=("tensor", "bug") if bug else ("tensor",),
        split=tp_split(collective),
    )


SCENARIOS = [
    _tp(
        "tp-column",
        "Column-parallel linear: W split by columns, Y all-gathered",
        "Device 0 sends device 1 what it needs: all of X and half of W's columns. Then each device computes "
        "its half of Y's columns with no message in between, and an all-gather gives every device the whole Y.",
        tp.column_parallel_program,
        (X, W),
        _linear_ref,
        collective="all_gather",
    ),
    _tp(
        "tp-row",
        "Row-parallel linear: W split by rows, partial sums all-reduced",
        "Each device holds half of W's rows and the matching half of X's columns. Its product has the "
        "full shape of Y but is only a partial sum; the all-reduce adds the partial sums into Y.",
        tp.row_parallel_program,
        (X, W),
        _linear_ref,
    ),
    _tp(
        "tp-row-reduce-scatter",
        "Row-parallel linear completed by a reduce-scatter",
        "The same partial sums, but each device keeps only its block of Y's rows: a reduce-scatter "
        "moves half the bytes of an all-reduce.",
        tp.row_parallel_program,
        (X, W, "reduce_scatter"),
        _linear_ref,
        collective="reduce_scatter",
    ),
    _tp(
        "tp-megatron-mlp",
        "The Megatron MLP: column-parallel, gelu, row-parallel, one all-reduce",
        "A is split by columns, so each device applies gelu to whole columns of X @ A; B is split by "
        "rows, so those column shards feed it directly. One all-reduce completes the block.",
        tp.megatron_mlp_program,
        (X, A, BW, True),
        _mlp_ref(),
    ),
    _tp(
        "tp-linear-gelu",
        "Row-parallel linear then gelu, the right way",
        "The partial sums are all-reduced first; only the complete Y goes through gelu.",
        linear_gelu,
        (X, W),
        lambda: Reference.of(linear_gelu_reference, X, W, TP),
    ),
    _tp(
        "tp-bug-gelu-on-partials",
        "Bug: the activation applied to partial sums before the all-reduce",
        "Each device applies gelu to its partial sum and the results are then added. But gelu is not "
        "linear: gelu(a) + gelu(b) is not gelu(a + b). The check stops at the gelu op, whose input is "
        "device 0's partial sum instead of the complete X @ W.",
        bug_gelu_on_partials,
        (X, W),
        lambda: Reference.of(linear_gelu_reference, X, W, TP),
        bug=True,
    ),
    _tp(
        "tp-bug-forgot-all-reduce",
        "Bug: the all-reduce after a row-parallel matmul is forgotten",
        "Each device's product is only a partial sum of Z. Without the all-reduce, the residual add "
        "uses that partial sum as if it were Z, and the check says so at the add.",
        bug_forgot_all_reduce,
        (X, A, BW),
        _mlp_ref(),
        bug=True,
    ),
    _tp(
        "tp-bug-full-x-to-row-shards",
        "Bug: the raw input X is handed to the row-parallel shards",
        "The second layer should receive each device's shard of gelu(X @ A); it is given the raw input "
        "X, which happens to have the same shape. The shapes agree, the values do not: the check names X "
        "as what crossed into the row-parallel matmul.",
        bug_full_x_to_row_shards,
        (X, A, BW),
        _mlp_ref(),
        bug=True,
    ),
    _tp(
        "tp-bug-all-reduce-twice",
        "Bug: the all-reduce applied twice",
        "The layer already all-reduced Z; its caller does it again. The first message of the second "
        "all-reduce carries a piece of the complete Z where a partial sum belongs.",
        bug_all_reduce_twice,
        (X, A, BW),
        _mlp_ref(),
        bug=True,
    ),
    _tp(
        "tp-bug-wrong-order",
        "Bug: the column shards of Y assembled in the wrong order",
        "Every device computes the right block of Y and every block arrives intact, but they are "
        "concatenated in reverse. The check stops at the assembled Y and says the blocks are out of order.",
        bug_wrong_order,
        (X, W),
        _linear_ref,
        collective="all_gather",
        bug=True,
    ),
]
