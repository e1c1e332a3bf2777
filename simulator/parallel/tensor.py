"""Tensor parallelism: one layer's weight matrix split across devices, by columns or by rows.

Shapes (b = batch, k = inputs, n = outputs): X (b, k), W (k, n), Y = X @ W (b, n).

- Column-parallel: device j holds W[:, cols_j] (``Shard(1)``) and the whole X; it computes its
  columns Y[:, cols_j] with no message at all. An all-gather assembles Y where the whole is needed.
- Row-parallel: device j holds W[rows_j, :] (``Shard(0)``) and X[:, rows_j] (``Shard(1)``); its product
  X[:, rows_j] @ W[rows_j, :] is a full-size *partial sum* of Y (``Partial("sum")``). An all-reduce
  (every device gets Y) or a reduce-scatter (device j gets a block of Y's rows) completes it.
- The Megatron-LM MLP, Z = gelu(X @ A) @ B: A column-parallel, so gelu applies to whole columns of
  X @ A on each device without talking to the others; then B row-parallel, taking those column
  shards as they are. One all-reduce per forward (the "g" operator in the Megatron paper).

Every function here comes in two forms: a rank program (device 0 starts with the full arrays and
distributes the pieces as messages) and a single-device reference model that names the same values,
including each device's partial sum ``"Y.partial[j]"``, so the checker can compare the run shard by
shard and message by message, and can recognise a partial sum that escapes before its all-reduce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..tensors.mesh import DeviceMesh
from ..tensors.placements import R, S, chunk_bounds
from ..tensors.redistribute import distribute
from ..tensors.sharded import Layout

ALL = slice(None)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (as in GPT-2 and Megatron-LM)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def split(n: int, parts: int, j: int) -> slice:
    """Chunk j of n by torch.chunk's rule (the same rule as ``Shard``)."""
    b = chunk_bounds(n, parts)
    return slice(b[j], b[j + 1])


def group_mesh(dev: Any, group: Sequence[int] | None) -> tuple[DeviceMesh, tuple[int, ...], int]:
    """The group (None: every device) as a 1-D mesh, its ranks, and this device's place in it."""
    g = tuple(range(dev.world_size)) if group is None else tuple(group)
    return DeviceMesh(list(g)), g, g.index(dev.rank)


def _matmul_flops(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]


# ---- the layers, on pieces already in place --------------------------------------------------
def column_parallel(
    dev: Any, x: np.ndarray, w_cols: np.ndarray, n: int, *, group=None, gather: bool = True, algorithm: str = "ring"
) -> np.ndarray:
    """Y[:, cols_j] = X @ W[:, cols_j]; with ``gather``, an all-gather along columns returns the whole Y."""
    _, g, j = group_mesh(dev, group)
    cols = split(n, len(g), j)
    y = dev.compute("Y", np.matmul, x, w_cols, index=(ALL, cols), flops=_matmul_flops(x, w_cols))
    if not gather:
        return y
    shapes = [(x.shape[0], s.stop - s.start) for s in (split(n, len(g), m) for m in range(len(g)))]
    return dev.all_gather(y, g, algorithm, axis=1, shapes=shapes, name="Y")


def row_parallel(
    dev: Any,
    x_cols: np.ndarray,
    w_rows: np.ndarray,
    *,
    group=None,
    reduce: str | None = "all_reduce",
    algorithm: str = "ring",
    name: str = "Y",
) -> np.ndarray:
    """partial_j = X[:, rows_j] @ W[rows_j, :], then completed by ``reduce``.

    reduce: "all_reduce" (every device gets the whole Y), "reduce_scatter" (device j gets Y's row
    block j), or None (return the partial sum itself, e.g. to reduce later).
    """
    _, g, j = group_mesh(dev, group)
    partial = dev.compute(f"{name}.partial[{j}]", np.matmul, x_cols, w_rows, flops=_matmul_flops(x_cols, w_rows))
    return _REDUCERS[reduce](dev, partial, g, algorithm, name)


_REDUCERS = {
    "all_reduce": lambda dev, y, g, alg, name: dev.all_reduce(y, "sum", g, alg, name=name, partials=f"{name}.partial"),
    "reduce_scatter": lambda dev, y, g, alg, name: dev.reduce_scatter(
        y, "sum", g, alg, axis=0, name=name, partials=f"{name}.partial"
    ),
    None: lambda dev, y, g, alg, name: y,
}


def megatron_mlp(
    dev: Any, x: np.ndarray, a_cols: np.ndarray, b_rows: np.ndarray, h: int, *, group=None, algorithm: str = "ring"
) -> np.ndarray:
    """Z = gelu(X @ A) @ B with A split by columns and B by rows: one all-reduce in the forward pass."""
    _, g, j = group_mesh(dev, group)
    cols = split(h, len(g), j)
    xa = dev.compute("XA", np.matmul, x, a_cols, index=(ALL, cols), flops=_matmul_flops(x, a_cols))
    hidden = dev.compute("H", gelu, xa, index=(ALL, cols))  # whole columns: no partial sums here
    return row_parallel(dev, hidden, b_rows, group=g, algorithm=algorithm, name="Z")


# ---- rank programs: device 0 starts with everything and distributes it -----------------------
def column_parallel_program(dev: Any, X, W, gather: bool = True, algorithm: str = "ring", group=None):
    mesh, g, _ = group_mesh(dev, group)
    x = distribute(dev, X, Layout(np.shape(X), mesh, (R,)), g[0], name="X")
    w = distribute(dev, W, Layout(np.shape(W), mesh, (S(1),)), g[0], name="W")
    return column_parallel(dev, x, w, np.shape(W)[1], group=g, gather=gather, algorithm=algorithm)


def row_parallel_program(dev: Any, X, W, reduce: str | None = "all_reduce", algorithm: str = "ring", group=None):
    mesh, g, _ = group_mesh(dev, group)
    x = distribute(dev, X, Layout(np.shape(X), mesh, (S(1),)), g[0], name="X")
    w = distribute(dev, W, Layout(np.shape(W), mesh, (S(0),)), g[0], name="W")
    return row_parallel(dev, x, w, group=g, reduce=reduce, algorithm=algorithm)


def distribute_mlp(dev: Any, X, A, B, group=None):
    """X to every device, A by columns, B by rows: the Megatron layout."""
    mesh, g, _ = group_mesh(dev, group)
    x = distribute(dev, X, Layout(np.shape(X), mesh, (R,)), g[0], name="X")
    a = distribute(dev, A, Layout(np.shape(A), mesh, (S(1),)), g[0], name="A")
    b = distribute(dev, B, Layout(np.shape(B), mesh, (S(0),)), g[0], name="B")
    return x, a, b


def megatron_mlp_program(dev: Any, X, A, B, residual: bool = False, algorithm: str = "ring", group=None):
    """The Megatron MLP; with ``residual``, the block's output X + Z as in a transformer layer."""
    x, a, b = distribute_mlp(dev, X, A, B, group)
    z = megatron_mlp(dev, x, a, b, np.shape(A)[1], group=group, algorithm=algorithm)
    return dev.compute("out", np.add, x, z) if residual else z


# ---- single-device references ----------------------------------------------------------------
def _hold_partials(dev: Any, name: str, a: np.ndarray, b: np.ndarray, tp: int, what: str) -> None:
    """Name each device's partial sum a[:, rows_j] @ b[rows_j, :] as the single device computes it.

    Labelled as the row split's: values a run that splits otherwise need not compute (see Reference.computed).
    """
    for j in range(tp):
        rows = split(b.shape[0], tp, j)
        dev.compute(
            f"{name}.partial[{j}]",
            np.matmul,
            a[:, rows],
            b[rows, :],
            doc=f"device {j}'s partial sum of {what}, before the all-reduce",
            label="row-parallel partial sum",
        )


def linear_reference(dev: Any, X, W, tp: int) -> np.ndarray:
    """Y = X @ W on one device, with the partial sums a row split into ``tp`` pieces would make."""
    x = dev.hold("X", X, doc="the layer's input")
    w = dev.hold("W", W, doc="the weight matrix")
    _hold_partials(dev, "Y", x, w, tp, "Y = X @ W")
    return dev.compute("Y", np.matmul, x, w, doc="the layer's output X @ W")


def mlp_reference(dev: Any, X, A, B, tp: int, residual: bool = False) -> np.ndarray:
    """Z = gelu(X @ A) @ B on one device (and X + Z with ``residual``), naming the partial sums of Z."""
    x = dev.hold("X", X, doc="the model's raw input")
    a = dev.hold("A", A, doc="the first weight matrix")
    b = dev.hold("B", B, doc="the second weight matrix")
    xa = dev.compute("XA", np.matmul, x, a, doc="X @ A, before the activation")
    hidden = dev.compute("H", gelu, xa, doc="gelu(X @ A), the hidden activation")
    _hold_partials(dev, "Z", hidden, b, tp, "Z = H @ B")
    z = dev.compute("Z", np.matmul, hidden, b, doc="the MLP's output gelu(X @ A) @ B")
    return dev.compute("out", np.add, x, z, doc="the block's output X + Z") if residual else z
