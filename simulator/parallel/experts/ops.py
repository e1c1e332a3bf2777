"""A mixture-of-experts layer in NumPy: a router, top-k, capacity and token dropping, and its hand-written backward.

Tokens x (N, D) go through y = x + sum_j gate_j * expert_{e_j}(x): a residual plus the gated outputs of the
experts each token is routed to (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021).

    logits = x Wr,  probs = softmax(logits)           (N, E)
    choice = the k most probable experts per token    (N, k); ties go to the lower expert
    gates  = their probabilities (k = 1, Switch), or those renormalised to sum to 1 (k > 1, GShard)
    expert e: out = gelu(in W1[e] + b1[e]) W2[e] + b2[e]

Capacity (GShard's local groups): the tokens are cut into ``groups`` equal groups (one per device under
expert parallelism); within a group expert e takes at most C = ceil(capacity_factor * n * k / E) tokens,
first choices before second choices, in token order; an assignment past C is dropped, and the token keeps
only its residual for it. ``Routing`` is that bookkeeping, a pure function of one group's probabilities.

The backward, besides each expert's MLP backward:

    d out[e][r] = gate * dy[t]           d gate = out[e][r] . dy[t]        (row r of expert e is token t)
    k > 1: gates = raw / S,  d raw_i = (d gate_i - sum_j d gate_j gate_j) / S
    d probs[t, e_j] = d raw_j;  d logits = probs * (d probs - sum(d probs * probs));  dWr = x^T d logits

The choice and the dropping are discrete: no gradient flows through them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..transformer.ops import gelu, gelu_grad, softmax


@dataclass(frozen=True)
class Routing:
    """Where one group's tokens go: for each expert, the (token, slot) pairs it takes, in its buffer's order.

    choice, gates, kept: (n, k) arrays; rows[e]: the token of each row of expert e's input, slots[e] the
    choice (0 .. k-1) that sent it.
    """

    choice: np.ndarray
    gates: np.ndarray
    kept: np.ndarray
    rows: tuple[np.ndarray, ...]
    slots: tuple[np.ndarray, ...]

    def counts(self) -> np.ndarray:
        """How many of this group's tokens each expert takes: (E,)."""
        return np.array([len(r) for r in self.rows], dtype=np.int64)


def top_k(probs: np.ndarray, k: int) -> np.ndarray:
    """The k most probable experts per token, the most probable first; ties go to the lower index."""
    return np.argsort(-probs, axis=1, kind="stable")[:, :k]


def gate_values(probs: np.ndarray, choice: np.ndarray) -> np.ndarray:
    raw = np.take_along_axis(probs, choice, axis=1)
    return raw if choice.shape[1] == 1 else raw / raw.sum(axis=1, keepdims=True)


def capacity(tokens: int, experts: int, k: int, factor: float) -> int:
    """Tokens an expert takes from a group of ``tokens``: ceil(factor * tokens * k / experts)."""
    return math.ceil(factor * tokens * k / experts)


def route(probs: np.ndarray, k: int, cap: int) -> Routing:
    """Top-k, then each expert fills its buffer of ``cap`` rows: first choices before second, in token order."""
    n, experts = probs.shape
    choice = top_k(probs, k)
    kept = np.zeros(choice.shape, dtype=bool)
    rows: list[list[int]] = [[] for _ in range(experts)]
    slots: list[list[int]] = [[] for _ in range(experts)]
    for j in range(k):
        for t in range(n):
            e = int(choice[t, j])
            if len(rows[e]) < cap:
                kept[t, j] = True
                rows[e].append(t)
                slots[e].append(j)
    as_arrays = tuple(np.array(r, dtype=np.int64) for r in rows)
    return Routing(
        choice, gate_values(probs, choice), kept, as_arrays, tuple(np.array(s, dtype=np.int64) for s in slots)
    )


# ---- an expert: a GELU MLP on the rows it takes ------------------------------------------------
def expert_hidden(x: np.ndarray, w1: np.ndarray, b1: np.ndarray) -> np.ndarray:
    return x @ w1 + b1


def expert_out(u: np.ndarray, w2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    return gelu(u) @ w2 + b2


def expert_backward(
    x: np.ndarray, u: np.ndarray, w1: np.ndarray, w2: np.ndarray, dout: np.ndarray
) -> dict[str, np.ndarray]:
    """The expert's gradients for its rows: du, its weights' and biases', and d in (its input rows)."""
    du = gelu_grad(dout @ w2.T, u)
    return {
        "du": du,
        "dW2": gelu(u).T @ dout,
        "db2": dout.sum(axis=0),
        "dW1": x.T @ du,
        "db1": du.sum(axis=0),
        "din": du @ w1.T,
    }


# ---- combining and its backward --------------------------------------------------------------------
def combine(x: np.ndarray, routing: Routing, outs: list[np.ndarray]) -> np.ndarray:
    """y = x + sum over each token's kept assignments of gate * its expert's output row."""
    y = x.copy()
    for e, (rows, slots) in enumerate(zip(routing.rows, routing.slots)):
        np.add.at(y, rows, routing.gates[rows, slots][:, None] * outs[e])
    return y


def dout_rows(dy: np.ndarray, routing: Routing, e: int) -> np.ndarray:
    """d out for expert e's rows: gate * dy of the row's token."""
    rows, slots = routing.rows[e], routing.slots[e]
    return routing.gates[rows, slots][:, None] * dy[rows]


def gate_grads(dy: np.ndarray, routing: Routing, outs: list[np.ndarray]) -> np.ndarray:
    """d gate (n, k): out . dy for kept assignments, 0 for dropped ones."""
    dg = np.zeros(routing.gates.shape)
    for e, (rows, slots) in enumerate(zip(routing.rows, routing.slots)):
        dg[rows, slots] = (outs[e] * dy[rows]).sum(axis=1)
    return dg


def logit_grads(dgates: np.ndarray, probs: np.ndarray, choice: np.ndarray) -> np.ndarray:
    """Through the renormalisation (k > 1), the choice (a selection: no gradient of its own) and the softmax."""
    raw = np.take_along_axis(probs, choice, axis=1)
    if choice.shape[1] > 1:
        total = raw.sum(axis=1, keepdims=True)
        gates = raw / total
        draw = (dgates - (dgates * gates).sum(axis=1, keepdims=True)) / total
    else:
        draw = dgates
    dprobs = np.zeros_like(probs)
    np.put_along_axis(dprobs, choice, draw, axis=1)  # top-k picks distinct experts: no entry is written twice
    return probs * (dprobs - (dprobs * probs).sum(axis=1, keepdims=True))


def scatter_rows(dx: np.ndarray, routing: Routing, dins: list[np.ndarray]) -> np.ndarray:
    """dx plus each expert's input-row gradients added back to their tokens."""
    out = dx.copy()
    for e, rows in enumerate(routing.rows):
        np.add.at(out, rows, dins[e])
    return out


__all__ = ["Routing", "capacity", "combine", "route", "softmax"]
