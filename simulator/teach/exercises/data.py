"""Exercises on data parallelism: average the gradients of two replicas, then shard the optimizer
state as ZeRO stage 1 does.

The model is a linear least-squares fit, small enough to read: the loss over rows i is
``mean_i (x_i . w - y_i)^2 / 2`` and its gradient ``X^T (X w - y) / n``. Two replicas hold the same w
and half of the rows each; each computes the mean gradient over its own rows.
"""

from __future__ import annotations

import numpy as np

from ...checker import Reference
from ...core.engine import RunResult, World
from .core import Exercise, Question, Requirement, exchanges_messages, held_bytes, returns_whole, world_run

REPLICAS = 2
X = (np.arange(24.0).reshape(8, 3) % 5 - 2) / 2  # 8 rows of 3 features
Y = np.arange(8.0) % 3 - 1  # 8 targets
W = np.array([0.5, -0.25, 1.0])  # the weights
BETA, LR = 0.9, 0.1  # momentum and learning rate for the ZeRO-1 step
G = np.arange(8.0) / 4 - 1  # the gradient of 8 parameters (already averaged over the replicas)
M = np.full(8, 0.5)  # the optimizer state: a momentum per parameter
P8 = np.arange(8.0) / 8  # the 8 parameters

__all__ = [
    "BETA", "G", "LR", "M", "P8", "REPLICAS", "W", "X", "Y", "data_parallel_average", "mean_gradient", "zero_one_step",
]  # fmt: skip


def mean_gradient(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The gradient of the mean squared error over these rows: X^T (X w - y) / n."""
    return x.T @ (x @ w - y) / len(y)


def one_device_gradients(dev, rank: int):
    """The model on one device, as replica ``rank`` sees it: its own rows' gradient, and the whole batch's."""
    rows = np.s_[4 * rank : 4 * rank + 4]
    dev.hold("X", X, doc="the batch's inputs")
    dev.hold("y", Y, doc="the batch's targets")
    dev.hold("w", W, doc="the weights")
    dev.compute("g.local", mean_gradient, X[rows], Y[rows], W, doc=f"the mean gradient over replica {rank}'s rows")
    return dev.compute("g", mean_gradient, X, Y, W, doc="the mean gradient over the whole batch")


def data_parallel_average() -> Exercise:
    return Exercise(
        name="data-parallel-average",
        title="Data parallelism: average the replicas' gradients",
        run=world_run(World(REPLICAS)),
        reference=lambda: {r: Reference.of(one_device_gradients, r) for r in range(REPLICAS)},
        questions=[
            Question(
                "factor",
                "Two replicas each compute the mean gradient over their own 4 rows. If they add their gradients "
                "and stop there, by what factor is the result off from the whole batch's mean gradient?",
                2,
                "2, the number of replicas: each local mean is already divided by 4 rows, so the sum is twice "
                "the mean over 8 rows. An average (sum, then divide by the replicas) fixes it.",
            ),
            Question(
                "messages",
                "The gradient has 3 numbers. How many messages does a ring all-reduce over 2 replicas send in all?",
                4,
                "4: two steps on each replica (one chunk each), whatever the size; chunks of 2 and 1 numbers.",
            ),
        ],
        hints=[
            "The checker compares each replica's g with the whole batch's mean gradient and says by how much "
            "it is off.",
            "dev.all_reduce adds by default (op='sum'). The replicas' mean gradients must be averaged.",
            'Use `dev.all_reduce(g_local, op="avg", name="g")`.',
        ],
        requirements=[
            returns_whole((3,), "g"),
            exchanges_messages(
                "each replica computes the gradient of its own samples, and an all-reduce averages them"
            ),
        ],
    )


def one_device_step(dev):
    """One momentum-SGD step on one device: m <- beta m + g, then p <- p - lr m."""
    p = dev.hold("p", P8, doc="the parameters")
    g = dev.hold("g", G, doc="the gradient")
    m = dev.hold("m", M, doc="the optimizer state (momentum)")
    m_new = dev.compute("m.new", lambda m, g: BETA * m + g, m, g, doc="the updated momentum")
    return dev.compute("p.new", lambda p, m: p - LR * m, p, m_new, doc="the updated parameters")


def _sharded_state(run: RunResult) -> str | None:
    total = M.nbytes
    for rank in range(run.trace.world_size):
        held = max(held_bytes(run, rank, lambda n, name=name: n == name) for name in ("m", "m.new"))
        if held > total // REPLICAS:
            return (
                f"device {rank} holds {held} bytes of the optimizer state m ({total} in all); ZeRO-1 keeps "
                f"1/{REPLICAS} of it, {total // REPLICAS} bytes, on each device"
            )
    return None


def zero_one_step() -> Exercise:
    return Exercise(
        name="zero-1-step",
        title="ZeRO-1: shard the optimizer state",
        run=world_run(World(REPLICAS)),
        reference=lambda: Reference.of(one_device_step),
        questions=[
            Question(
                "state",
                "8 parameters, one float64 momentum each, 2 devices: how many bytes of optimizer state does "
                "each device hold under ZeRO-1?",
                32,
                "64 bytes in all, split in 2: 32 each. Each device updates only its own half of the parameters.",
            ),
            Question(
                "messages",
                "After the update, every device needs every parameter. How many messages does that all-gather "
                "send on 2 devices?",
                2,
                "2: each device sends its half of the updated parameters to the other.",
            ),
        ],
        hints=[
            "The values are right, but every device holds all of m: shard it.",
            "Hold only this device's half of m (index=half), update that half of m and of p, then all-gather p.",
            'm = dev.hold("m", M[half], index=half); update "m.new" and "p.new" with index=half (p[half], '
            'g[half]); then `return dev.all_gather(p_new, axis=0, name="p.new")`.',
        ],
        requirements=[
            Requirement("each device holds 1/p of the optimizer state", _sharded_state),
            returns_whole((8,), "p.new"),
            exchanges_messages("each device updates its own half of p, and an all-gather joins the halves"),
        ],
    )
