"""A small MLP with real arithmetic: a NumPy forward, a hand-written backward, and its one-device reference.

Layer k (1..L) maps ``h[k-1]`` of shape (rows, d[k-1]) to ``h[k] = act(h[k-1] @ W[k] + b[k])``; the
last layer has no activation, so ``h[L]`` is the prediction y. ``h[0]`` is the input x. A microbatch's
loss is ``0.5 * sum((y - t)**2) * scale``, where ``scale`` is one over the rows of the batch the
gradient is a mean over (the whole batch on one device, the local batch on a data-parallel replica).

The backward of layer k is written in the two parts zero-bubble schedules separate:

    input part  (I):  dz[k] = dh[k] * act'(h[k])        dh[k-1] = dz[k] @ W[k].T
    weight part (W):  dW[k] = h[k-1].T @ dz[k]           db[k]   = dz[k].sum(0)

The input part is what the previous stage waits for; the weight part only feeds the optimizer, so
it can wait. The last layer has no activation, so its dz is dh itself.

Names, shared by the reference and every parallel run so the checker can compare them: parameters
``W1``, ``b1``, ...; per microbatch g: ``x.mb{g}``, ``t.mb{g}``, ``h{k}.mb{g}``, ``loss.mb{g}``,
``dh{k}.mb{g}`` (``dh{L}`` is the loss gradient), ``dz{k}.mb{g}``, and the microbatch's gradient
contributions ``dW{k}.mb{g}``, ``db{k}.mb{g}``; then the step's gradients ``dW{k}``, ``db{k}`` and
``loss``. With data-parallel replicas the reference also names each replica's gradient
``dW{k}.replica[r]`` and their plain sum ``dW{k}.sum``, so a missing division is recognised (one
device is one replica: ``dW{k}.replica[0]`` equals ``dW{k}``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from ..checker import Reference
from ..core.device import Device


@dataclass(frozen=True)
class Activation:
    """An elementwise nonlinearity and its derivative written in terms of its output."""

    name: str
    fn: Callable[[np.ndarray], np.ndarray]
    grad_from_output: Callable[[np.ndarray], np.ndarray]


ACTIVATIONS = {
    "tanh": Activation("tanh", np.tanh, lambda h: 1.0 - h * h),
    "relu": Activation("relu", lambda z: np.maximum(z, 0.0), lambda h: (h > 0).astype(h.dtype)),
}


# ---- the arithmetic, one function per op (the same functions run on one device and in parallel) ----
def layer_forward(act: Activation | None, h_prev: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    z = h_prev @ W + b
    return z if act is None else act.fn(z)


def activation_backward(act: Activation, dh: np.ndarray, h: np.ndarray) -> np.ndarray:
    return dh * act.grad_from_output(h)


def input_grad(dz: np.ndarray, W: np.ndarray) -> np.ndarray:
    return dz @ W.T


def weight_grad(h_prev: np.ndarray, dz: np.ndarray) -> np.ndarray:
    return h_prev.T @ dz


def bias_grad(dz: np.ndarray) -> np.ndarray:
    return dz.sum(axis=0)


def loss_value(scale: float, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    d = y - t
    return np.array(0.5 * float(np.sum(d * d)) * scale)


def loss_grad(scale: float, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (y - t) * scale


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def average(count: int, total: np.ndarray) -> np.ndarray:
    """A sum over ``count`` replicas divided by their number: the data-parallel mean."""
    return total / count


def matmul_flops(rows: int, d_in: int, d_out: int) -> int:
    """Multiply-adds of a (rows, d_in) @ (d_in, d_out) product, counted as 2 FLOPs each."""
    return 2 * rows * d_in * d_out


def mb(name: str, g: int) -> str:
    """The name of a per-microbatch value: ``mb("h2", 3) == "h2.mb3"``."""
    return f"{name}.mb{g}"


def act_name(layer: int) -> str:
    """The activation entering layer ``layer + 1``: x for layer 0, else h{layer}."""
    return "x" if layer == 0 else f"h{layer}"


def split_rows(n: int, parts: int) -> list[slice]:
    """Row slices of n rows in ``parts`` nearly equal pieces (the first ones one longer if uneven)."""
    if not isinstance(parts, int) or parts < 1:
        raise ValueError(f"cannot split {n} rows into {parts!r} parts; give a positive number of parts")
    if parts > n:
        raise ValueError(f"cannot split a batch of {n} rows into {parts} microbatches: use at most {n}")
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out


@dataclass(frozen=True)
class MLP:
    """A stack of linear layers with an activation between them.

    widths: (d0, d1, ..., dL): layer k maps d[k-1] features to d[k]; L = len(widths) - 1 layers
    activation: a name in ``ACTIVATIONS`` ("tanh" or "relu"), applied after every layer but the last
    """

    widths: tuple[int, ...]
    activation: str = "tanh"

    def __post_init__(self) -> None:
        widths = tuple(self.widths)
        if len(widths) < 2 or not all(isinstance(w, int | np.integer) and w > 0 for w in widths):
            raise ValueError(f"MLP(widths={self.widths!r}): give at least two positive layer widths, e.g. (4, 8, 8, 2)")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"MLP(activation={self.activation!r}): choose one of {sorted(ACTIVATIONS)}")
        object.__setattr__(self, "widths", tuple(int(w) for w in widths))

    @property
    def layers(self) -> int:
        return len(self.widths) - 1

    def act(self, layer: int) -> Activation | None:
        """The activation after ``layer`` (1-based); None for the last layer."""
        return None if layer == self.layers else ACTIVATIONS[self.activation]

    def forward_op(self, layer: int) -> Callable[..., np.ndarray]:
        return partial(layer_forward, self.act(layer))

    def backward_op(self, layer: int) -> Callable[..., np.ndarray]:
        return partial(activation_backward, self.act(layer))

    def param_names(self) -> list[str]:
        return [f"{p}{k}" for k in range(1, self.layers + 1) for p in ("W", "b")]

    def init(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Parameters with a fixed seed, scaled so tanh stays away from saturation."""
        rng = np.random.default_rng(seed)
        params: dict[str, np.ndarray] = {}
        for k in range(1, self.layers + 1):
            d_in, d_out = self.widths[k - 1], self.widths[k]
            params[f"W{k}"] = rng.normal(0.0, 1.0 / np.sqrt(d_in), size=(d_in, d_out))
            params[f"b{k}"] = rng.normal(0.0, 0.1, size=(d_out,))
        return params

    def data(self, rows: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """A batch of inputs x (rows, d0) and targets t (rows, dL)."""
        rng = np.random.default_rng(seed)
        return rng.normal(size=(rows, self.widths[0])), rng.normal(size=(rows, self.widths[-1]))

    def check_batch(self, x: np.ndarray, t: np.ndarray) -> None:
        if x.ndim != 2 or x.shape[1] != self.widths[0]:
            raise ValueError(f"x has shape {x.shape}; this MLP takes (rows, {self.widths[0]})")
        if t.shape != (x.shape[0], self.widths[-1]):
            raise ValueError(
                f"t has shape {t.shape}; with {x.shape[0]} rows of x it must be {(x.shape[0], self.widths[-1])}"
            )

    # ---- plain NumPy, whole batch: the independent check of everything below -------------------
    def forward(self, params: dict[str, np.ndarray], x: np.ndarray) -> list[np.ndarray]:
        """Activations h[0] = x, h[1], ..., h[L] of the whole batch."""
        hs = [x]
        for k in range(1, self.layers + 1):
            hs.append(layer_forward(self.act(k), hs[-1], params[f"W{k}"], params[f"b{k}"]))
        return hs

    def gradients(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict[str, np.ndarray]:
        """Loss and every parameter gradient of the mean loss over the whole batch, on one device."""
        self.check_batch(x, t)
        scale = 1.0 / x.shape[0]
        hs = self.forward(params, x)
        out = {"loss": loss_value(scale, hs[-1], t)}
        dh = loss_grad(scale, hs[-1], t)
        for k in range(self.layers, 0, -1):
            act = self.act(k)
            dz = dh if act is None else activation_backward(act, dh, hs[k])
            out[f"dW{k}"] = weight_grad(hs[k - 1], dz)
            out[f"db{k}"] = bias_grad(dz)
            dh = input_grad(dz, params[f"W{k}"])
        return out


# ---- the one-device reference, as a rank program whose trace names every value ------------------
def reference_step(
    dev: Device,
    mlp: MLP,
    params: dict[str, np.ndarray],
    x: np.ndarray,
    t: np.ndarray,
    microbatches: int = 1,
    replicas: int | None = None,
) -> dict[str, np.ndarray]:
    """One training step's gradients on one device, computed the way the parallel runs compute them.

    The batch is split into ``replicas`` equal parts, each into ``microbatches`` microbatches, numbered
    g = replica * microbatches + i. Each replica's gradient is the mean over its rows (accumulated
    over its microbatches in order); the step's gradient is the average over replicas, which equals
    the mean over the whole batch. Returns the gradients by name and the loss (``"loss"``), as the
    parallel runs return them (each device its own part). ``replicas=None``: no data parallelism (the
    step returns its loss); with a number (1 included), each replica returns its own loss,
    ``loss.replica[r]``, as the data-parallel runs do.
    """
    n = replicas or 1
    mlp.check_batch(x, t)
    if x.shape[0] % n:
        raise ValueError(f"{x.shape[0]} rows do not split evenly over {n} replicas")
    L = mlp.layers
    for k in range(1, L + 1):
        dev.hold(f"W{k}", params[f"W{k}"], doc=f"layer {k}'s weight")
        dev.hold(f"b{k}", params[f"b{k}"], doc=f"layer {k}'s bias")
    dev.hold("x", x, doc="the whole batch of inputs")
    dev.hold("t", t, doc="the whole batch of targets")
    local_rows = x.shape[0] // n
    scale = 1.0 / local_rows
    replica_grads: list[dict[str, np.ndarray]] = []
    replica_losses = []
    for r in range(n):
        acc: dict[str, np.ndarray] = {}
        loss = None
        for i, rows in enumerate(split_rows(local_rows, microbatches)):
            g = r * microbatches + i
            rows = slice(r * local_rows + rows.start, r * local_rows + rows.stop)
            contrib, mb_loss = _microbatch(dev, mlp, params, x[rows], t[rows], g, scale)
            loss = mb_loss if loss is None else loss + mb_loss
            for name, value in contrib.items():
                acc[name] = value if name not in acc else acc[name] + value
        replica_grads.append(acc)
        replica_losses.append(loss)
    names = [f"{p}{k}" for k in range(L, 0, -1) for p in ("dW", "db")]
    step: dict[str, np.ndarray] = {}
    for name in names:  # what a data-parallel run sends on the way is held: only the averages must be computed
        for r in range(n):
            doc = f"replica {r}'s own {_grad_doc(name)}, before averaging"
            dev.hold(f"{name}.replica[{r}]", replica_grads[r][name], doc=doc)
        doc = f"the replicas' gradients of {name[1:]} summed but not divided by {n}"
        total = dev.hold(f"{name}.sum", sum(g[name] for g in replica_grads), doc=doc)
        step[name] = dev.compute(name, partial(average, n), total, seconds=0.0, doc=_grad_doc(name))
    if replicas is None:  # not data-parallel: the run returns the step's loss
        step["loss"] = dev.compute("loss", _const(replica_losses[0]), seconds=0.0, doc="the step's loss")
        return step
    for r in range(n):  # each replica returns the loss of its own part of the batch
        loss = f"loss.replica[{r}]"
        step[loss] = dev.compute(loss, _const(replica_losses[r]), seconds=0.0, doc=f"replica {r}'s own loss")
    total_loss = dev.hold("loss.sum", sum(replica_losses), doc="the replicas' losses summed")
    dev.hold("loss", average(n, total_loss), doc="the step's loss, averaged over the replicas")
    return step


def _const(value: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: value


def _grad_doc(name: str) -> str:
    return f"the gradient of {name[1:]}"


def _microbatch(dev, mlp, params, x, t, g, scale):
    """Forward and backward of one microbatch on one device; returns its gradient contributions."""
    L = mlp.layers
    dev.hold(mb("x", g), x, doc=f"the inputs of microbatch {g}")
    dev.hold(mb("t", g), t, doc=f"the targets (labels) of microbatch {g}")
    hs = [x]
    for k in range(1, L + 1):
        hs.append(
            dev.compute(
                mb(f"h{k}", g),
                mlp.forward_op(k),
                hs[-1],
                params[f"W{k}"],
                params[f"b{k}"],
                doc=f"layer {k}'s output for microbatch {g}" + (" (the prediction y)" if k == L else ""),
            )
        )
    loss = dev.compute(mb("loss", g), partial(loss_value, scale), hs[-1], t, doc=f"the loss of microbatch {g}")
    dh = dev.compute(mb(f"dh{L}", g), partial(loss_grad, scale), hs[-1], t, doc=f"the loss gradient of microbatch {g}")
    contrib = {}
    for k in range(L, 0, -1):
        if k < L:
            dz = dev.compute(
                mb(f"dz{k}", g),
                mlp.backward_op(k),
                dh,
                hs[k],
                doc=f"the gradient at layer {k}'s pre-activation, microbatch {g}",
            )
        else:
            dz = dh
        if k > 1:
            dh = dev.compute(
                mb(f"dh{k - 1}", g),
                input_grad,
                dz,
                params[f"W{k}"],
                doc=f"the gradient flowing back into layer {k - 1}'s output, microbatch {g}",
            )
        contrib[f"dW{k}"] = dev.compute(
            mb(f"dW{k}", g), weight_grad, hs[k - 1], dz, doc=f"microbatch {g}'s part of the gradient of W{k}"
        )
        contrib[f"db{k}"] = dev.compute(
            mb(f"db{k}", g), bias_grad, dz, doc=f"microbatch {g}'s part of the gradient of b{k}"
        )
    return contrib, loss


def mlp_reference(
    mlp: MLP,
    params: dict[str, np.ndarray],
    x: np.ndarray,
    t: np.ndarray,
    microbatches: int = 1,
    replicas: int | None = None,
) -> Reference:
    """The named values of ``reference_step`` on one device: what every parallel run is checked against."""
    return Reference.of(reference_step, mlp, params, x, t, microbatches, replicas)
