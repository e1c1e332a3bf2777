"""Tensor-parallel MLP layers with their backward: Megatron-LM's column/row pairs, as ``LayerOps``.

Layers pair up: odd layer k is column-parallel, even layer k + 1 row-parallel (``simulator.parallel
.tensor`` explains the forward of the pair). Device j of the tensor-parallel group holds

    layer k   (column):  W[k][:, cols_j], b[k][cols_j]     -> its columns of h[k], no message
    layer k+1 (row):     W[k+1][cols_j, :], all of b[k+1]   -> a partial sum of z = h[k] @ W[k+1]

One all-reduce per pair in the forward (the partial sums of z, Megatron's "g") and one in the
backward (the partial sums of dh[k-1] = dz[k] @ W[k].T, Megatron's "f"):

    forward   h[k][:, cols_j] = act(h[k-1] @ W[k][:, cols_j] + b[k][cols_j])
              z.partial[j]    = h[k][:, cols_j] @ W[k+1][cols_j, :]       all-reduce -> z
              h[k+1]          = act(z + b[k+1])                            (whole, on every device)
    backward  dz[k+1]         = dh[k+1] * act'(h[k+1])                    (whole)
              dh[k][:, cols_j] = dz[k+1] @ W[k+1][cols_j, :].T             (its columns, no message)
              dz[k][:, cols_j] = dh[k][:, cols_j] * act'(h[k][:, cols_j])
              dh[k-1].partial[j] = dz[k][:, cols_j] @ W[k][:, cols_j].T    all-reduce -> dh[k-1]
    weights   dW[k][:, cols_j], db[k][cols_j], dW[k+1][cols_j, :] from local values; db[k+1] whole

A pipeline stage must hold whole pairs, so what crosses between stages is always a whole activation.
Shards carry ``index``; ``tensor_parallel_values`` adds the partial sums to the one-device reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..checker import Reference
from ..core.device import Device
from . import mlp as M
from .layers import weight_grads
from .mlp import MLP, mb
from .tensor import ALL, split


def is_column(k: int) -> bool:
    """Odd layers are column-parallel, even layers row-parallel."""
    return k % 2 == 1


def hidden_cols(mlp: MLP, tp: int, j: int, k: int) -> slice:
    """Device j's columns of the hidden width between a column layer and the row layer after it."""
    return split(mlp.widths[k if is_column(k) else k - 1], tp, j)


def tp_index(mlp: MLP, tp: int, j: int, name: str) -> Any:
    """Which part of parameter or gradient ``name`` (``W3``, ``db2``) device j of ``tp`` holds."""
    k = int(name.lstrip("dWb"))
    weight = name.rstrip("0123456789").endswith("W")
    c = hidden_cols(mlp, tp, j, k)
    if is_column(k):
        return (ALL, c) if weight else c
    return (c, ALL) if weight else None


def bias_act(act: M.Activation | None, z: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = z + b
    return out if act is None else act.fn(out)


class TensorParallelLayers:
    """Layer pairs split over ``group`` (a ``LayerOps``; see the module docstring)."""

    def __init__(self, dev: Device, mlp: MLP, group: Sequence[int]) -> None:
        if mlp.layers % 2:
            raise ValueError(
                f"tensor-parallel layers come in column/row pairs: the MLP has {mlp.layers} layers; use an even number"
            )
        self.mlp = mlp
        self.group = tuple(group)
        self.tp = len(self.group)
        self.j = self.group.index(dev.rank)
        self.params: dict[str, np.ndarray] = {}

    @property
    def part(self) -> str:
        return f"tp{self.j}"

    def cols(self, k: int) -> slice:
        """This device's columns of the hidden width between layer k (column) and k + 1 (row)."""
        return hidden_cols(self.mlp, self.tp, self.j, k)

    def index(self, name: str) -> Any:
        """Which part of parameter (or gradient) ``name`` this device holds."""
        return tp_index(self.mlp, self.tp, self.j, name)

    def hold(self, dev: Device, params: dict[str, np.ndarray], k: int) -> None:
        for p in ("W", "b"):
            index = self.index(f"{p}{k}")
            value = params[f"{p}{k}"] if index is None else np.asarray(params[f"{p}{k}"])[index]
            # the doc names the device by its rank in the world (j is only its place in the group), and a
            # row layer's bias is whole on every device of the group, not a part
            doc = (
                f"device {dev.rank}'s part of {p}{k}"
                if index is not None
                else f"all of {p}{k}, held whole by devices {', '.join(map(str, self.group))}"
            )
            self.params[f"{p}{k}"] = dev.hold(f"{p}{k}", value, index=index, doc=doc)

    def forward(self, dev: Device, k: int, h: np.ndarray, g: int, seconds: float | None) -> np.ndarray:
        W, b = self.params[f"W{k}"], self.params[f"b{k}"]
        flops = M.matmul_flops(h.shape[0], *W.shape)
        if is_column(k):
            return dev.compute(
                mb(f"h{k}", g),
                self.mlp.forward_op(k),
                h,
                W,
                b,
                flops=flops,
                seconds=seconds,
                index=self.index(f"W{k}"),
                product=True,
            )
        z = mb(f"z{k}", g)
        partial = dev.compute(f"{z}.partial[{self.j}]", np.matmul, h, W, flops=flops, seconds=seconds)
        total = dev.all_reduce(partial, "sum", self.group, name=z, partials=f"{z}.partial")
        _drop(dev, f"{z}.partial")
        out = dev.compute(mb(f"h{k}", g), _bound(bias_act, self.mlp.act(k)), total, b, seconds=seconds)
        dev.free(z)
        return out

    def input_grad(
        self, dev: Device, k: int, dh: np.ndarray, h: np.ndarray, g: int, seconds: float | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if k == self.mlp.layers:
            dz = dh
        else:
            index = (ALL, self.cols(k)) if is_column(k) else None
            dz = dev.compute(mb(f"dz{k}", g), self.mlp.backward_op(k), dh, h, seconds=seconds, index=index)
        W = self.params[f"W{k}"]
        flops = M.matmul_flops(dz.shape[0], W.shape[1], W.shape[0])
        if not is_column(k):  # row layer: this device's columns of dh[k-1], no message
            dh_prev = dev.compute(
                mb(f"dh{k - 1}", g),
                M.input_grad,
                dz,
                W,
                flops=flops,
                seconds=seconds,
                index=(ALL, self.cols(k)),
                product=True,
            )
            return dz, dh_prev
        if k == 1:
            return dz, None
        dh_prev = mb(f"dh{k - 1}", g)
        partial = dev.compute(
            f"{dh_prev}.partial[{self.j}]", M.input_grad, dz, W, flops=flops, seconds=seconds, product=True
        )
        total = dev.all_reduce(partial, "sum", self.group, name=dh_prev, partials=f"{dh_prev}.partial")
        _drop(dev, f"{dh_prev}.partial")
        return dz, total

    def weight_grad(
        self, dev: Device, k: int, h_prev: np.ndarray, dz: np.ndarray, g: int, seconds: float | None, keep: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        return weight_grads(self, dev, k, h_prev, dz, g, seconds, keep)  # its block of W and b: self.index

    def ops(self, kind: str, k: int) -> int:
        """Ops per layer part: a row layer's forward is a matmul then bias and activation; a column
        layer's input gradient has no matmul for the first layer (nothing before it needs dh[0])."""
        dz = k < self.mlp.layers
        if is_column(k):
            return {"F": 1, "I": dz + (k > 1), "W": 2}[kind]
        return {"F": 2, "I": dz + 1, "W": 2}[kind]


def _bound(fn, act):
    return lambda z, b: fn(act, z, b)


def _drop(dev: Device, prefix: str) -> None:
    """Free what an all-reduce left in memory under its partial sums' names (it has been used)."""
    for name in [n for n in dev.memory if n.startswith(prefix)]:
        dev.free(name)


def tensor_parallel_values(ref: Reference, mlp: MLP, tp: int, microbatches: int) -> Reference:
    """Add to a one-device reference the partial sums a tensor-parallel run all-reduces: ``z{k}.mb{g}``
    (h[k-1] @ W[k], before the bias) and its parts ``z{k}.mb{g}.partial[j]`` for row layers, and the parts
    ``dh{k-1}.mb{g}.partial[j]`` of the input gradients of column layers."""
    W = {k: ref.values[f"W{k}"] for k in range(1, mlp.layers + 1)}
    for g in range(microbatches):
        for k in range(1, mlp.layers + 1):
            if not is_column(k):
                h = ref.values[mb(f"h{k - 1}", g)]
                name = mb(f"z{k}", g)
                _put(ref, name, h @ W[k], f"layer {k}'s h @ W before the bias, microbatch {g}")
                for j in range(tp):
                    c = split(mlp.widths[k - 1], tp, j)
                    _put(ref, f"{name}.partial[{j}]", h[:, c] @ W[k][c, :], f"device {j}'s partial sum of {name}")
            elif k > 1:
                dz = ref.values[mb(f"dz{k}", g)]
                name = mb(f"dh{k - 1}", g)
                for j in range(tp):
                    c = split(mlp.widths[k], tp, j)
                    _put(ref, f"{name}.partial[{j}]", dz[:, c] @ W[k][:, c].T, f"device {j}'s partial sum of {name}")
    return ref


def _put(ref: Reference, name: str, value: np.ndarray, doc: str) -> None:
    ref.values[name] = value
    ref.docs[name] = doc
