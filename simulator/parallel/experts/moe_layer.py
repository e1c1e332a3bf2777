"""A mixture-of-experts layer inside a stack of layers, on whatever tokens a device holds, experts over an "ep" group.

``MoELayer`` has the interface of ``transformer_block.Block`` (``forward(dev, x, g, rows)``, ``backward(dev, dy,
g)``), so a step can stack it between transformer blocks: y = x + the gated experts' outputs (``experts_ops``),
on the tokens of the device's part of the activation, (B, n, D) with n the tokens its split says
(``split.index("outside")``). With an expert-parallel group the experts are spread over it, and the rows travel
by ``all_to_all_single`` as in ``simulator.parallel.experts.parallel`` (counts all-gathered first).

Names: ``L{l}.Wr`` and ``L{l}.E{e}.W1`` ...; per microbatch ``L{l}.logits``, ``probs``, ``gates`` (B, S, ...),
``L{l}.y`` and the backward's ``dgates``, ``dlogits``, and the input gradient. Expert e's rows are the
model's ``L{l}.E{e}.in`` ... on one device; under expert parallelism the rows an expert receives mix
sequences of several devices (other microbatches of the step), so there they are the layer's own
intermediates, labelled like a collective's (unchecked by name), and the experts' gradients are checked once
summed: ``expert_names`` lists what a one-device reference holds that such a run does not compute.

Capacity counts per device (each device is a token group): a one-device reference routes one group per
microbatch, so the two agree when the capacity drops nothing (``MoE.capacity_factor >= experts / top_k``),
which ``MoELayer`` checks. (``simulator.parallel.experts.parallel`` shows dropping, with matching groups.)
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import numpy as np

from ...core.device import Device
from ..transformer.model import input_grad_name, input_name, pname, vname
from ..transformer.ops import gelu, gelu_grad
from . import ops as X
from .model import MoE
from .parallel import all_to_all_single

EXPERT_INTERNALS = re.compile(r"^L\d+\.(E\d+\.(in|u|out|dout|du|din)|dE\d+\.(W1|b1|W2|b2))\.mb\d+(\+|$)")


def expert_names(name: str) -> bool:
    """Names a one-device reference computes that an expert-parallel run does not: drop them from ``computed``."""
    return bool(EXPERT_INTERNALS.match(name))


class MoELayer:
    """Layer ``layer`` of a stack: a mixture of experts (see the module docstring)."""

    def __init__(
        self,
        dev: Device,
        moe: MoE,
        split: Any,
        layer: int,
        params: dict[str, np.ndarray],
        batch: tuple[int, int, int],
        ep_group: tuple[int, ...] | None = None,
        expert_sync: tuple[int, ...] | None = None,
    ) -> None:
        if moe.capacity_factor * moe.top_k < moe.experts:
            raise ValueError(
                f"a mixture of experts in a stack routes each device's tokens as one group: give a capacity factor of "
                f"at least experts / top_k = {moe.experts / moe.top_k:g} (nothing dropped), not {moe.capacity_factor}"
            )
        self.moe, self.split, self.layer, self.batch = moe, split, layer, batch
        self.group = tuple(ep_group) if ep_group else (dev.rank,)
        P, E = len(self.group), moe.experts
        if E % P:
            raise ValueError(f"{E} experts do not spread evenly over an expert-parallel group of {P}")
        self.me = self.group.index(dev.rank)
        self.mine = range(self.me * E // P, (self.me + 1) * E // P)
        self.p = {"Wr": dev.hold(pname(layer, "Wr"), params[pname(layer, "Wr")], doc=f"layer {layer}'s router")}
        for e in self.mine:
            for w in ("W1", "b1", "W2", "b2"):
                key = f"E{e}.{w}"
                self.p[key] = dev.hold(pname(layer, key), params[pname(layer, key)], doc=f"expert {e}'s {w}")
        self.saved: dict[int, tuple] = {}
        self.expert_sync = expert_sync
        # An expert's rows are the model's own only when this device holds every token of the microbatch and
        # every expert; otherwise they are a mix of some tokens (other devices' sequences, under expert
        # parallelism), and the rows, the experts' microbatch gradients and their sums get the layer's own names.
        self.own_names = self.parallel or split.index("outside") is not None
        self.internal_grads = (
            {f"E{e}.{w}" for e in self.mine for w in ("W1", "b1", "W2", "b2")} if self.own_names else set()
        )

    @property
    def parallel(self) -> bool:
        return len(self.group) > 1

    def grad_name(self, what: str, g: int) -> str:
        return vname(self.layer, "d" + what + (".ep" if what in self.internal_grads else ""), g)

    def grad_partial(self, what: str) -> tuple[int, ...] | None:
        """A microbatch's gradient on this device: a sum over its tokens (the router's, and the experts' on one device)."""
        return self.split.grad_partial("Wr")

    def sync_group(self, what: str) -> tuple[int, ...] | None:
        """The devices a step gradient adds up over: an expert's replicas (``expert_sync``), or the router's."""
        if what in self.internal_grads and self.expert_sync is not None:
            return self.expert_sync
        sync = getattr(self.split, "sync_group", self.split.grad_partial)
        return sync("Wr")

    def _name(self, what: str, g: int) -> str:
        """A value's name: the model's, or under expert parallelism, for an expert's rows, the layer's own."""
        return vname(self.layer, what + (".ep" if self.own_names else ""), g)

    def owner(self, e: int) -> int:
        return e // (self.moe.experts // len(self.group))

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, dev: Device, x: np.ndarray, g: int, rows: slice) -> np.ndarray:
        n = partial(vname, self.layer, g=g)
        oi, moe, E = self.split.index("outside"), self.moe, self.moe.experts
        b, tokens, d = x.shape
        logits = dev.compute(n("logits"), np.matmul, x, self.p["Wr"], index=oi)
        probs = dev.compute(n("probs"), X.softmax, logits, index=oi)
        route = X.route(probs.reshape(-1, E), moe.top_k, X.capacity(b * tokens, E, moe.top_k, moe.capacity_factor))
        dev.compute(n("gates"), _const(route.gates.reshape(b, tokens, -1)), index=oi)
        flat = x.reshape(-1, d)
        rows_in, counts = self._dispatch(dev, [flat[route.rows[e]] for e in range(E)], route.counts())
        outs = {}
        for e in self.mine:
            u = dev.compute(self._name(f"E{e}.u", g), X.expert_hidden, rows_in[e], self.p[f"E{e}.W1"], self.p[f"E{e}.b1"],
                            label=self._label(), flops=_mm(rows_in[e], self.p[f"E{e}.W1"]))  # fmt: skip
            outs[e] = dev.compute(self._name(f"E{e}.out", g), X.expert_out, u, self.p[f"E{e}.W2"], self.p[f"E{e}.b2"],
                                  label=self._label(), flops=_mm(u, self.p[f"E{e}.W2"]))  # fmt: skip
        back = self._combine(dev, outs, counts)
        y = dev.compute(n("y"), lambda xx, *o: X.combine(xx.reshape(-1, d), route, list(o)).reshape(b, tokens, d), x,
                        *[back[e] for e in range(E)], index=oi)  # fmt: skip
        self.saved[g] = (route, rows_in, counts, back, probs)
        return y

    def _label(self) -> str | None:
        return f"expert rows L{self.layer}" if self.own_names else None

    def _dispatch(
        self, dev: Device, rows: list[np.ndarray], counts: np.ndarray, every: np.ndarray | None = None
    ) -> tuple[dict[int, np.ndarray], np.ndarray]:
        """Each expert's rows to its owner; returns this device's experts' rows (from every member, in order).

        every: the (P, E) counts of the group, all-gathered by the forward (the backward's rows go the same way)."""
        if not self.parallel:
            return {e: rows[e] for e in range(len(rows))}, counts[None, :]
        P = len(self.group)
        if every is None:
            every = np.stack(dev.all_gather(counts, self.group))  # (P, E): who sends what where
        sends = [int(every[self.me, list(self._of(j))].sum()) for j in range(P)]
        recvs = [int(every[j, list(self.mine)].sum()) for j in range(P)]
        got = all_to_all_single(dev, np.concatenate(rows), recvs, sends, self.group)
        return self._cut(got, every), every

    def _of(self, j: int) -> range:
        per = self.moe.experts // len(self.group)
        return range(j * per, (j + 1) * per)

    def _cut(self, got: np.ndarray, every: np.ndarray) -> dict[int, np.ndarray]:
        pieces: dict[int, list[np.ndarray]] = {e: [] for e in self.mine}
        at = 0
        for j in range(len(self.group)):
            for e in self.mine:
                pieces[e].append(got[at : at + int(every[j, e])])
                at += int(every[j, e])
        return {e: np.concatenate(p) for e, p in pieces.items()}

    def _combine(self, dev: Device, outs: dict[int, np.ndarray], every: np.ndarray) -> dict[int, np.ndarray]:
        """Each expert's output rows back to the devices their tokens came from; returns this device's rows per expert."""
        if not self.parallel:
            return outs
        P = len(self.group)
        back = []
        for j in range(P):
            for e in self.mine:
                start = int(every[:j, e].sum())
                back.append(outs[e][start : start + int(every[j, e])])
        sends = [int(every[self.me, list(self._of(j))].sum()) for j in range(P)]
        recvs = [int(every[j, list(self.mine)].sum()) for j in range(P)]
        got = all_to_all_single(dev, np.concatenate(back), sends, recvs, self.group)
        returned, at = {}, 0
        for j in range(P):
            for e in self._of(j):
                returned[e] = got[at : at + int(every[self.me, e])]
                at += int(every[self.me, e])
        return returned

    # ---- backward --------------------------------------------------------------------------------
    def backward(self, dev: Device, dy: np.ndarray, g: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n = partial(vname, self.layer, g=g)
        oi, E = self.split.index("outside"), self.moe.experts
        route, rows_in, every, back, probs = self.saved.pop(g)
        x = dev.memory[input_name(self.layer, g)]
        b, tokens, d = dy.shape
        flat_dy = dy.reshape(-1, d)
        douts, _ = self._dispatch(dev, [X.dout_rows(flat_dy, route, e) for e in range(E)], route.counts(), every)
        grads, dins = {}, {}
        for e in self.mine:
            dout = dev.compute(self._name(f"E{e}.dout", g), _const(douts[e]), seconds=0.0, label=self._label())
            x_in, w1, w2 = rows_in[e], self.p[f"E{e}.W1"], self.p[f"E{e}.W2"]
            u = X.expert_hidden(x_in, w1, self.p[f"E{e}.b1"])  # (recomputed: the forward kept only the output)
            flops = _mm(x_in, w1)
            du = dev.compute(self._name(f"E{e}.du", g), lambda d, uu, w=w2: gelu_grad(d @ w.T, uu), dout, u,
                             label=self._label(), flops=flops)  # fmt: skip
            terms = {
                "W2": (lambda uu, d: gelu(uu).T @ d, u, dout),
                "b2": (lambda d: d.sum(axis=0), dout),
                "W1": (lambda xx, d: xx.T @ d, x_in, du),
                "b1": (lambda d: d.sum(axis=0), du),
            }
            for w, (fn, *inputs) in terms.items():
                what = f"E{e}.{w}"
                grads[what] = dev.compute(
                    self.grad_name(what, g), fn, *inputs, label=self._label(), flops=flops if w.startswith("W") else None,
                    partial=None if self.own_names else self.grad_partial(what),
                )  # fmt: skip
            dins[e] = dev.compute(
                self._name(f"E{e}.din", g), lambda d, w=w1: d @ w.T, du, label=self._label(), flops=flops
            )
        returned = self._combine(dev, dins, every)
        dgates = dev.compute(
            n("dgates"), lambda dd, *o: X.gate_grads(dd.reshape(-1, d), route, list(o)).reshape(b, tokens, -1), dy,
            *[back[e] for e in range(E)], index=oi,
        )  # fmt: skip
        dlogits = dev.compute(
            n("dlogits"), lambda dg, p: X.logit_grads(dg.reshape(-1, dg.shape[-1]), p.reshape(-1, E), route.choice)
            .reshape(b, tokens, E), dgates, probs, index=oi,
        )  # fmt: skip
        grads["Wr"] = dev.compute(
            n("dWr"), lambda xx, dl: xx.reshape(-1, d).T @ dl.reshape(-1, E), x, dlogits,
            partial=self.split.grad_partial("Wr"),
        )  # fmt: skip
        dx = dev.compute(
            input_grad_name(self.layer, g),
            lambda dd, dl, *di: (X.scatter_rows(dd.reshape(-1, d), route, list(di)) + dl.reshape(-1, E) @ self.p["Wr"].T)
            .reshape(b, tokens, d), dy, dlogits, *[returned[e] for e in range(E)], index=oi,
        )  # fmt: skip
        for what in ("logits", "probs", "gates", "dgates", "dlogits", "y"):
            if n(what) in dev.memory:
                dev.free(n(what))
        dev.free(input_name(self.layer, g))
        return dx, grads


def _mm(x: np.ndarray, w: np.ndarray) -> float:
    return 2.0 * x.shape[0] * w.shape[0] * w.shape[1]


def _const(value: Any):
    return lambda: value
