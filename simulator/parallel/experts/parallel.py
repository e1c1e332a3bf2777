"""Expert parallelism: the experts spread over devices, tokens dispatched to them and combined back by all-to-all.

Device s of the group holds experts s E/P .. (s+1) E/P - 1 and routes its own group of N / P tokens (GShard's
local dispatch). One step:

    router      logits, probs, top-k and capacity on its tokens (no message)
    counts      an all-gather of every group's count per expert (small integers), so that every device
                knows how many rows it sends to and receives from each other device
    dispatch    ``all_to_all_single`` with per-device split sizes: the rows for device j's experts go to j
    experts     each runs its MLP on the rows it received (group 0's first), its own gradients complete
    combine     ``all_to_all_single`` back, with the split sizes of the dispatch the other way round
    un-permute  each returned row goes back to its token, times its gate, added to the residual

The backward sends the gated output gradients the way of the dispatch and the input-row gradients the way
of the combine; the router's weight gradient is a sum over tokens, all-reduced at the end. A device whose
experts are popular receives more rows and computes longer: capacity bounds it (dropped tokens keep only
their residual), and the timeline shows the rest as the others' idle time.

``all_to_all_single`` is torch.distributed's ``all_to_all_single(output, input, output_split_sizes,
input_split_sizes)`` on the simulator's ``all_to_all``; like torch it refuses split sizes that do not add up
to the rows it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ...checker import Reference
from ...core.device import Device
from ...core.engine import RunResult
from ...core.world import World
from ..transformer.ops import gelu, gelu_grad, mse_grad, mse_loss
from . import ops as X
from .model import MoE, moe_reference

ALL = slice(None)


def all_to_all_single(
    dev: Any, x: np.ndarray, output_split_sizes: Sequence[int], input_split_sizes: Sequence[int], group: Sequence[int]
) -> np.ndarray:
    """Rows ``input_split_sizes[j]`` of ``x`` go to member j; from member j come ``output_split_sizes[j]`` rows."""
    if sum(input_split_sizes) != x.shape[0]:
        raise ValueError(
            f"device {dev.rank}: all_to_all_single split sizes {list(input_split_sizes)} add up to "
            f"{sum(input_split_sizes)}, but the input has {x.shape[0]} rows"
        )
    bounds = np.cumsum([0, *input_split_sizes])
    chunks = [x[bounds[j] : bounds[j + 1]] for j in range(len(input_split_sizes))]
    shapes = [(int(n), *x.shape[1:]) for n in output_split_sizes]
    return np.concatenate(dev.all_to_all(chunks, tuple(group), shapes=shapes))


@dataclass(frozen=True)
class ExpertParallel:
    """One training step of ``model`` with its experts spread over ``group`` (default: every device).

    The model's ``groups`` must equal the group's size: each device routes one group of tokens.
    """

    model: MoE
    group: tuple[int, ...] | None = None

    def members(self, world_size: int) -> tuple[int, ...]:
        return tuple(self.group) if self.group is not None else tuple(range(world_size))

    def world(self, **options: Any) -> World:
        return World(len(self.group) if self.group else self.model.groups, **options)

    def run(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, **world_options: Any) -> RunResult:
        return self.world(**world_options).run(self, params, x, t)

    def reference(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
        return moe_reference(self.model, params, x, t)

    def owned(self, j: int, size: int) -> range:
        """The experts member j of a group of ``size`` holds."""
        per = self.model.experts // size
        return range(j * per, (j + 1) * per)

    # ---- the rank program -----------------------------------------------------------------------
    def __call__(self, dev: Device, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict | None:
        group = self.members(dev.world_size)
        if dev.rank not in group:
            return None
        model, P, E = self.model, len(group), self.model.experts
        if model.groups != P or E % P:
            raise ValueError(
                f"expert parallelism over {P} devices needs a model of {P} token groups and a multiple of {P} experts; "
                f"this one has {model.groups} groups and {E} experts"
            )
        s = group.index(dev.rank)
        N = x.shape[0]
        rows = model.group_rows(N, s)
        mine = self.owned(s, P)
        xs = dev.hold("x", x[rows], index=(rows, ALL), doc="this device's tokens")
        ts = dev.hold("t", t[rows], index=(rows, ALL))
        wr = dev.hold("Wr", params["Wr"])
        w = {k: dev.hold(k, params[k]) for e in mine for k in (f"E{e}.W1", f"E{e}.b1", f"E{e}.W2", f"E{e}.b2")}
        probs = dev.compute(
            "probs", X.softmax, dev.compute("logits", np.matmul, xs, wr, index=(rows, ALL)), index=(rows, ALL)
        )
        route = X.route(probs, model.top_k, model.capacity(N))
        for what in ("choice", "gates", "kept"):
            dev.compute(what, _const(getattr(route, what)), index=(rows, ALL))
        # every group's count per expert: how many rows go where
        counts = np.stack(dev.all_gather(route.counts(), group))  # (P, E)
        sends = [int(counts[s, list(self.owned(j, P))].sum()) for j in range(P)]
        recvs = [int(counts[j, list(mine)].sum()) for j in range(P)]
        outs = self._experts_forward(dev, group, w, counts, s, route, xs, sends, recvs)
        returned = self.combine(dev, group, outs, counts, s, sends, recvs)
        mine_rows = {e: dev.compute(f"E{e}.out", _const(returned[e]), index=_rows_of(counts, s, e)) for e in range(E)}
        y = self.unpermute(dev, xs, route, [mine_rows[e] for e in range(E)], rows)
        factor = 1.0 / N
        loss = dev.compute("loss", partial(mse_loss, factor), y, ts, partial=group)
        dy = dev.compute("dy", partial(mse_grad, factor), y, ts, index=(rows, ALL))
        grads = self._backward(dev, group, w, counts, s, route, dy, mine_rows, sends, recvs, probs, xs, wr, rows)
        grads["dWr"] = dev.all_reduce(grads["dWr"], "sum", group, name="dWr")
        grads["loss"] = dev.all_reduce(loss, "sum", group, name="loss")
        return grads

    def _experts_forward(self, dev, group, w, counts, s, route, xs, sends, recvs) -> dict[int, np.ndarray]:
        P = len(group)
        mine = self.owned(s, P)
        order = [e for j in range(P) for e in self.owned(j, P)]  # the send buffer: device 0's experts' rows first
        got = all_to_all_single(dev, np.concatenate([xs[route.rows[e]] for e in order]), recvs, sends, group)
        outs = {}
        for e, pieces in self._by_expert(got, counts, s, P).items():
            x_in = dev.compute(f"E{e}.in", lambda *p: np.concatenate(p), *pieces)
            u = dev.compute(
                f"E{e}.u", X.expert_hidden, x_in, w[f"E{e}.W1"], w[f"E{e}.b1"], flops=_mlp_flops(x_in, w[f"E{e}.W1"])
            )
            outs[e] = dev.compute(
                f"E{e}.out", X.expert_out, u, w[f"E{e}.W2"], w[f"E{e}.b2"], flops=_mlp_flops(u, w[f"E{e}.W2"])
            )
        assert set(outs) == set(mine)
        return outs

    def _by_expert(self, got: np.ndarray, counts: np.ndarray, s: int, P: int) -> dict[int, list[np.ndarray]]:
        """Rows received from each member, cut into this device's experts' parts (a member sends them in order)."""
        mine = list(self.owned(s, P))
        pieces: dict[int, list[np.ndarray]] = {e: [] for e in mine}
        at = 0
        for j in range(P):
            for e in mine:
                n = int(counts[j, e])
                pieces[e].append(got[at : at + n])
                at += n
        return pieces

    def combine(self, dev, group, outs, counts, s, sends, recvs) -> dict[int, np.ndarray]:
        """Each expert's output rows back to the devices their tokens came from (the dispatch reversed)."""
        P = len(group)
        mine = list(self.owned(s, P))
        back = []
        for j in range(P):  # to member j: its rows of each of my experts, in my experts' order
            for e in mine:
                start = int(counts[:j, e].sum())
                back.append(outs[e][start : start + int(counts[j, e])])
        got = all_to_all_single(dev, np.concatenate(back), sends, recvs, group)
        returned, at = {}, 0
        for j in range(P):
            for e in self.owned(j, P):
                n = int(counts[s, e])
                returned[e] = got[at : at + n]
                at += n
        return returned

    def unpermute(self, dev, xs, route, outs, rows) -> np.ndarray:
        """Every returned row to its token, times its gate, added to the residual."""
        return dev.compute("y", lambda x, *o: X.combine(x, route, list(o)), xs, *outs, index=(rows, ALL))

    def _backward(self, dev, group, w, counts, s, route, dy, outs, sends, recvs, probs, xs, wr, rows) -> dict:
        P, E = len(group), self.model.experts
        order = [e for j in range(P) for e in self.owned(j, P)]
        douts = [X.dout_rows(dy, route, e) for e in order]
        got = all_to_all_single(dev, np.concatenate(douts), recvs, sends, group)
        grads, dins = {}, {}
        for e, pieces in self._by_expert(got, counts, s, P).items():
            dout = dev.compute(f"E{e}.dout", lambda *p: np.concatenate(p), *pieces)
            x_in, u = dev.memory[f"E{e}.in"], dev.memory[f"E{e}.u"]
            w1, w2 = w[f"E{e}.W1"], w[f"E{e}.W2"]
            flops = _mlp_flops(x_in, w1)
            du = dev.compute(f"E{e}.du", lambda d, uu, w=w2: gelu_grad(d @ w.T, uu), dout, u, flops=flops)
            terms = {
                "dW2": (lambda uu, d: gelu(uu).T @ d, u, dout),
                "db2": (lambda d: d.sum(axis=0), dout),
                "dW1": (lambda xx, d: xx.T @ d, x_in, du),
                "db1": (lambda d: d.sum(axis=0), du),
            }
            for name, (fn, *inputs) in terms.items():
                grads[f"E{e}.{name}"] = dev.compute(f"E{e}.{name}", fn, *inputs, flops=flops if "W" in name else None)
            dins[e] = dev.compute(f"E{e}.din", lambda d, w=w1: d @ w.T, du, flops=flops)
        returned = self.combine(dev, group, dins, counts, s, sends, recvs)
        dgates = dev.compute("dgates", lambda d, *o: X.gate_grads(d, route, list(o)), dy, *[outs[e] for e in range(E)],
                             index=(rows, ALL))  # fmt: skip
        dlogits = dev.compute("dlogits", partial(X.logit_grads, choice=route.choice), dgates, probs, index=(rows, ALL))
        grads["dWr"] = dev.compute("dWr", lambda a, b: a.T @ b, xs, dlogits, partial=group)
        dev.compute(
            "dx", lambda d, dl, *di: X.scatter_rows(d, route, list(di)) + dl @ wr.T, dy, dlogits,
            *[returned[e] for e in range(E)], index=(rows, ALL),
        )  # fmt: skip
        return grads


def _rows_of(counts: np.ndarray, s: int, e: int) -> slice:
    """Group s's rows of expert e's buffer: after those of groups 0 .. s-1."""
    start = int(counts[:s, e].sum())
    return slice(start, start + int(counts[s, e]))


def _mlp_flops(x: np.ndarray, w: np.ndarray) -> float:
    return 2.0 * x.shape[0] * w.shape[0] * w.shape[1]


def _const(value):
    return lambda: value


def expert_volume(model: MoE, counts: np.ndarray) -> tuple[int, int]:
    """Messages and bytes of an expert-parallel step over P = model.groups devices, summed over the devices.

    counts (P, E): rows each group sends each expert (the routing, with capacity applied). The count
    all-gather (a ring: each device's E counts cross P - 1 links), four all-to-alls (dispatch and combine,
    forward and backward; direct, every pair exchanges a message, empty ones included) and two ring
    all-reduces (the router's gradient and the loss): 9 P (P - 1) messages. Bytes: the counts, every row that
    leaves its device four times (D values each), and the all-reduces' 2 (P - 1) (D E + 1) values.
    """
    P, E, D = model.groups, model.experts, model.d_model
    per = E // P
    off_device = sum(int(counts[s, e]) for s in range(P) for e in range(E) if e // per != s)
    messages = 9 * P * (P - 1)
    nbytes = (P * (P - 1) * E + 4 * off_device * D + 2 * (P - 1) * (D * E + 1)) * 8
    return messages, nbytes


def op_region(name: str) -> str:
    """What an op of an expert-parallel step does, in words (a timeline's colour key)."""
    if name.startswith("E") and "." in name:
        return "expert backward" if name.split(".", 1)[1].startswith(("d", "backward")) else "expert forward"
    if name in ("logits", "probs", "choice", "gates", "kept", "dgates", "dlogits", "dWr"):
        return "router"
    return "combine, loss, sums"
