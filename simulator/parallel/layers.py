"""The arithmetic of one MLP layer on one device, as named ops: whole layers, or tensor-parallel shards.

A pipeline or data-parallel runtime decides *when* each layer's forward, input-gradient and
weight-gradient work runs; a ``LayerOps`` object decides *how*: which ops, on which part of the
weights, with which messages. ``DenseLayers`` computes whole layers (every device that holds layer k
holds all of W[k]). ``simulator.parallel.tensor_layers`` splits pairs of layers Megatron-style.

Each method names its values as ``simulator.parallel.mlp`` does, so the checker compares them with
the one-device reference; ``index`` marks a shard. ``ops(kind, k)`` counts the ops a layer's part
makes, so a runtime can spread a fixed action cost evenly over them. ``weight_grad``'s ``keep`` says
whether the microbatch's gradient stays in memory (it does when it starts a gradient buffer).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..core.device import Device
from . import mlp as M
from .mlp import MLP, mb


class LayerOps(Protocol):
    """How a device runs layer k's parts (see the module docstring).

    ``part`` names which part of the parameters the device holds (None: whole layers); ``index(name)``
    is that part of parameter or gradient ``name`` as a numpy index.
    """

    part: str | None

    def hold(self, dev: Device, params: dict[str, np.ndarray], k: int) -> None: ...

    def forward(self, dev: Device, k: int, h: np.ndarray, g: int, seconds: float | None) -> np.ndarray: ...

    def input_grad(
        self, dev: Device, k: int, dh: np.ndarray, h: np.ndarray, g: int, seconds: float | None
    ) -> tuple[np.ndarray, np.ndarray | None]: ...

    def weight_grad(
        self, dev: Device, k: int, h_prev: np.ndarray, dz: np.ndarray, g: int, seconds: float | None, keep: bool
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def ops(self, kind: str, k: int) -> int: ...

    def index(self, name: str) -> Any: ...


class DenseLayers:
    """Whole layers: the device holds W[k] and b[k] and computes everything about layer k itself."""

    part = None

    def __init__(self, mlp: MLP) -> None:
        self.mlp = mlp
        self.params: dict[str, np.ndarray] = {}

    def hold(self, dev: Device, params: dict[str, np.ndarray], k: int) -> None:
        for p in ("W", "b"):
            self.params[f"{p}{k}"] = dev.hold(f"{p}{k}", params[f"{p}{k}"], doc=f"layer {k}'s {p}")

    def forward(self, dev: Device, k: int, h: np.ndarray, g: int, seconds: float | None) -> np.ndarray:
        W, b = self.params[f"W{k}"], self.params[f"b{k}"]
        return dev.compute(
            mb(f"h{k}", g),
            self.mlp.forward_op(k),
            h,
            W,
            b,
            product=True,
            flops=M.matmul_flops(h.shape[0], *W.shape),
            seconds=seconds,
        )

    def input_grad(
        self, dev: Device, k: int, dh: np.ndarray, h: np.ndarray, g: int, seconds: float | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """dz[k] from dh[k] (dh itself for the last layer), then dh[k-1] (none for the first layer)."""
        dz = (
            dh
            if k == self.mlp.layers
            else dev.compute(mb(f"dz{k}", g), self.mlp.backward_op(k), dh, h, seconds=seconds)
        )
        if k == 1:
            return dz, None
        W = self.params[f"W{k}"]
        dh_prev = dev.compute(
            mb(f"dh{k - 1}", g),
            M.input_grad,
            dz,
            W,
            product=True,
            flops=M.matmul_flops(dz.shape[0], W.shape[1], W.shape[0]),
            seconds=seconds,
        )
        return dz, dh_prev

    def weight_grad(
        self, dev: Device, k: int, h_prev: np.ndarray, dz: np.ndarray, g: int, seconds: float | None, keep: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        return weight_grads(self, dev, k, h_prev, dz, g, seconds, keep)

    def ops(self, kind: str, k: int) -> int:
        L = self.mlp.layers
        return {"F": 1, "I": (k < L) + (k > 1), "W": 2}[kind]

    def index(self, name: str) -> Any:
        return None


def weight_grads(
    layers: LayerOps, dev: Device, k: int, h_prev: np.ndarray, dz: np.ndarray, g: int, seconds: float | None, keep: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Layer k's weight and bias gradients of microbatch g, as ops named ``dW{k}``/``db{k}``: the same
    arithmetic whole or on a shard (``layers.index`` says which block of W and b the device holds)."""
    dW = dev.compute(
        mb(f"dW{k}", g),
        M.weight_grad,
        h_prev,
        dz,
        product=True,
        flops=M.matmul_flops(h_prev.shape[1], h_prev.shape[0], dz.shape[1]),
        seconds=seconds,
        index=layers.index(f"W{k}"),
        keep=keep,
    )
    db = dev.compute(mb(f"db{k}", g), M.bias_grad, dz, seconds=seconds, index=layers.index(f"b{k}"), keep=keep)
    return dW, db
