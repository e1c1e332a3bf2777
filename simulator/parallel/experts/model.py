"""A mixture-of-experts layer: the model, its gradients in plain NumPy, and the one-device step naming every value.

``MoE`` holds the sizes (``experts_ops`` the arithmetic). ``MoE.gradients`` is the whole batch in plain NumPy,
the independent check of the hand-written backward (tests compare it with finite differences, away from the
points where a token's choice or its dropping would change). ``moe_reference`` runs the step on one device as
a rank program whose values carry the names every expert-parallel run uses:

    x, t, Wr, E{e}.W1, E{e}.b1, E{e}.W2, E{e}.b2           inputs and parameters
    logits, probs (N, E); choice, gates, kept (N, k)        the router, group by group
    E{e}.in, E{e}.u, E{e}.out                               expert e's rows: group 0's tokens first, then group 1's, ...
    y, loss                                                 the layer's output (residual included) and the loss
    dy, dgates, dlogits, dx, E{e}.dout, E{e}.du, E{e}.din   the backward
    dWr, E{e}.dW1, E{e}.db1, E{e}.dW2, E{e}.db2             the gradients

Groups: capacity is counted per group of N / groups tokens (GShard's local dispatch), so the model says how many
groups it has; under expert parallelism each device routes one group, and the one-device reference routes
the same groups one after the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ...checker import Reference
from ...core.device import Device
from ..transformer.ops import mse_grad, mse_loss
from . import ops as X


@dataclass(frozen=True)
class MoE:
    """E = ``experts`` GELU MLPs of width ``d_ff`` on tokens of width ``d_model``; each token goes to its ``top_k``
    most probable experts, at most ``capacity_factor`` times an even share of each group's assignments each."""

    d_model: int = 4
    d_ff: int = 8
    experts: int = 4
    top_k: int = 1
    capacity_factor: float = 1.25
    groups: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k = {self.top_k}: choose between 1 and the {self.experts} experts")
        if self.capacity_factor <= 0:
            raise ValueError(f"capacity_factor = {self.capacity_factor}: give a positive factor")

    def init(self, seed: int = 0, router_scale: float = 1.0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        d, f = self.d_model, self.d_ff
        params = {"Wr": rng.normal(0.0, router_scale / np.sqrt(d), size=(d, self.experts))}
        for e in range(self.experts):
            params[f"E{e}.W1"] = rng.normal(0.0, 1.0 / np.sqrt(d), size=(d, f))
            params[f"E{e}.b1"] = rng.normal(0.0, 0.1, size=(f,))
            params[f"E{e}.W2"] = rng.normal(0.0, 1.0 / np.sqrt(f), size=(f, d))
            params[f"E{e}.b2"] = rng.normal(0.0, 0.1, size=(d,))
        return params

    def data(self, tokens: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        return rng.normal(size=(tokens, self.d_model)), rng.normal(size=(tokens, self.d_model))

    def group_rows(self, tokens: int, g: int) -> slice:
        if tokens % self.groups:
            raise ValueError(f"{tokens} tokens do not split into {self.groups} equal groups")
        n = tokens // self.groups
        return slice(g * n, (g + 1) * n)

    def capacity(self, tokens: int) -> int:
        """Rows an expert takes from one group of this batch."""
        return X.capacity(tokens // self.groups, self.experts, self.top_k, self.capacity_factor)

    def routings(self, params: dict[str, np.ndarray], x: np.ndarray) -> list[X.Routing]:
        probs = X.softmax(x @ params["Wr"])
        cap = self.capacity(x.shape[0])
        return [X.route(probs[self.group_rows(x.shape[0], g)], self.top_k, cap) for g in range(self.groups)]

    # ---- plain NumPy, whole batch -----------------------------------------------------------------
    def _expert_inputs(self, x: np.ndarray, routes: list[X.Routing]) -> list[np.ndarray]:
        n = x.shape[0] // self.groups
        return [
            np.concatenate([x[g * n + routes[g].rows[e]] for g in range(self.groups)])
            for e in range(self.experts)
        ]  # fmt: skip

    def forward(self, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        routes = self.routings(params, x)
        ins = self._expert_inputs(x, routes)
        outs = [
            X.expert_out(X.expert_hidden(ins[e], *self._w1(params, e)), *self._w2(params, e))
            for e in range(self.experts)
        ]
        return self._combine(x, routes, outs)

    def _w1(self, params, e):
        return params[f"E{e}.W1"], params[f"E{e}.b1"]

    def _w2(self, params, e):
        return params[f"E{e}.W2"], params[f"E{e}.b2"]

    def _split_rows(self, routes: list[X.Routing], rows_of_e: np.ndarray, e: int) -> list[np.ndarray]:
        """Expert e's rows cut back into its groups' parts."""
        bounds = np.cumsum([0] + [len(r.rows[e]) for r in routes])
        return [rows_of_e[bounds[g] : bounds[g + 1]] for g in range(self.groups)]

    def _combine(self, x, routes, outs):
        n = x.shape[0] // self.groups
        parts = [self._split_rows(routes, outs[e], e) for e in range(self.experts)]
        return np.concatenate(
            [X.combine(x[g * n : (g + 1) * n], routes[g], [parts[e][g] for e in range(self.experts)]) for g in range(self.groups)]
        )  # fmt: skip

    def loss(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> float:
        return float(mse_loss(1.0 / x.shape[0], self.forward(params, x), t))

    def gradients(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict[str, np.ndarray]:
        """The loss and every parameter's gradient, in plain NumPy."""
        routes = self.routings(params, x)
        probs = X.softmax(x @ params["Wr"])
        ins = self._expert_inputs(x, routes)
        us = [X.expert_hidden(ins[e], *self._w1(params, e)) for e in range(self.experts)]
        outs = [X.expert_out(us[e], *self._w2(params, e)) for e in range(self.experts)]
        y = self._combine(x, routes, outs)
        factor = 1.0 / x.shape[0]
        dy = mse_grad(factor, y, t)
        n = x.shape[0] // self.groups
        grads: dict[str, np.ndarray] = {"loss": mse_loss(factor, y, t)}
        dins = []
        for e in range(self.experts):
            dout = np.concatenate(
                [X.dout_rows(dy[self.group_rows(x.shape[0], g)], routes[g], e) for g in range(self.groups)]
            )
            back = X.expert_backward(ins[e], us[e], params[f"E{e}.W1"], params[f"E{e}.W2"], dout)
            for w in ("W1", "b1", "W2", "b2"):
                grads[f"E{e}.d{w}"] = back["d" + w]
            dins.append(self._split_rows(routes, back["din"], e))
        dx, dlogits = [], []
        for g in range(self.groups):
            rows = self.group_rows(x.shape[0], g)
            outs_g = [self._split_rows(routes, outs[e], e)[g] for e in range(self.experts)]
            dlog = X.logit_grads(X.gate_grads(dy[rows], routes[g], outs_g), probs[rows], routes[g].choice)
            dlogits.append(dlog)
            dx.append(
                X.scatter_rows(dy[rows], routes[g], [dins[e][g] for e in range(self.experts)]) + dlog @ params["Wr"].T
            )
        grads["dWr"] = x.T @ np.concatenate(dlogits)
        grads["dx"] = np.concatenate(dx)
        assert n * self.groups == x.shape[0]
        return grads


# ---- the one-device step, every value named --------------------------------------------------------
def moe_step(dev: Device, model: MoE, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict:
    """One training step on one device, routing the groups one after the other (see the module docstring)."""
    E, N = model.experts, x.shape[0]
    xs = dev.hold("x", x, doc="the tokens")
    ts = dev.hold("t", t, doc="the targets")
    wr = dev.hold("Wr", params["Wr"], doc="the router's weights")
    w = {
        k: dev.hold(k, v, doc=f"expert {k[1:].split('.')[0]}'s {k.split('.')[1]}")
        for k, v in params.items()
        if k != "Wr"
    }
    logits = dev.compute("logits", np.matmul, xs, wr)
    probs = dev.compute("probs", X.softmax, logits)
    routes = model.routings(params, x)
    for what in ("choice", "gates", "kept"):
        dev.compute(what, _const(np.concatenate([getattr(r, what) for r in routes])), doc=f"the router's {what}")
    ins = [
        dev.compute(f"E{e}.in", _const(model._expert_inputs(x, routes)[e]), doc=f"the rows expert {e} takes")
        for e in range(E)
    ]
    us = [dev.compute(f"E{e}.u", X.expert_hidden, ins[e], w[f"E{e}.W1"], w[f"E{e}.b1"]) for e in range(E)]
    outs = [dev.compute(f"E{e}.out", X.expert_out, us[e], w[f"E{e}.W2"], w[f"E{e}.b2"]) for e in range(E)]
    y = dev.compute("y", lambda *o: model._combine(x, routes, list(o)), *outs, doc="the layer's output")
    factor = 1.0 / N
    dev.compute("loss", partial(mse_loss, factor), y, ts)
    dy = dev.compute("dy", partial(mse_grad, factor), y, ts)
    grads = {"loss": mse_loss(factor, y, t)}
    douts = [
        dev.compute(f"E{e}.dout", lambda d, e=e: np.concatenate(
            [X.dout_rows(d[model.group_rows(N, g)], routes[g], e) for g in range(model.groups)]
        ), dy)
        for e in range(E)
    ]  # fmt: skip
    dins = []
    for e in range(E):
        back = X.expert_backward(ins[e], us[e], params[f"E{e}.W1"], params[f"E{e}.W2"], douts[e])
        dev.compute(f"E{e}.du", _const(back["du"]))
        for name in ("dW1", "db1", "dW2", "db2"):
            grads[f"E{e}.{name}"] = dev.compute(f"E{e}.{name}", _const(back[name]))
        dins.append(dev.compute(f"E{e}.din", _const(back["din"])))
    dgates = dev.compute("dgates", lambda d, *o: _dgates(model, routes, list(o), d), dy, *outs)
    dlogits = dev.compute(
        "dlogits", lambda dg, p: _dlogits(model, routes, dg, p), dgates, probs, doc="the router's logits' gradient"
    )
    grads["dWr"] = dev.compute("dWr", lambda a, b: a.T @ b, xs, dlogits)
    dev.compute("dx", lambda d, dl, *di: _dx(model, routes, d, dl, list(di), wr), dy, dlogits, *dins)
    return grads


def _dgates(model: MoE, routes, outs, dy) -> np.ndarray:
    N = dy.shape[0]
    return np.concatenate(
        [X.gate_grads(dy[model.group_rows(N, g)], routes[g], [model._split_rows(routes, outs[e], e)[g] for e in range(model.experts)]) for g in range(model.groups)]
    )  # fmt: skip


def _dlogits(model: MoE, routes, dgates, probs) -> np.ndarray:
    N = dgates.shape[0]
    return np.concatenate(
        [X.logit_grads(dgates[model.group_rows(N, g)], probs[model.group_rows(N, g)], routes[g].choice) for g in range(model.groups)]
    )  # fmt: skip


def _dx(model: MoE, routes, dy, dlogits, dins, wr) -> np.ndarray:
    N = dy.shape[0]
    parts = [model._split_rows(routes, dins[e], e) for e in range(model.experts)]
    return np.concatenate(
        [X.scatter_rows(dy[model.group_rows(N, g)], routes[g], [parts[e][g] for e in range(model.experts)]) for g in range(model.groups)]
    ) + dlogits @ wr.T  # fmt: skip


def _const(value):
    return lambda: value


def moe_reference(model: MoE, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
    """The one-device step's named values: what every expert-parallel run is checked against."""
    return Reference.of(moe_step, model, params, x, t)
