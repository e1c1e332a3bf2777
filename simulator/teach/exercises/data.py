"""Exercises on data parallelism: average the gradients of two replicas, then shard the optimizer
state as ZeRO stage 1 does.

The model is a linear least-squares fit, small enough to read: the loss over rows i is
``mean_i (x_i . w - y_i)^2 / 2`` and its gradient ``X^T (X w - y) / n``. Two replicas hold the same w
and half of the rows each (they are given only those); each computes the mean gradient over its own rows,
under a name of its own if it likes (a replica's term is not one of the model's values every program must
compute); an all-reduce combines them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy import allclose as _allclose  # the grader's own, taken before any student code loads

from ...checker import ALL, Budget, Reference, Split
from ...core.engine import RunResult
from .core import Exercise, Question, Requirement, held_bytes, received, returns_whole, rounded

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


def rows(rank: int) -> slice:
    return np.s_[4 * rank : 4 * rank + 4]


def one_device_gradients(dev, x, y, w, rank: int):
    """The model on one device, as replica ``rank`` sees it: its own rows' gradient, and the whole batch's."""
    dev.hold("X", x, doc="the batch's inputs")
    dev.hold("y", y, doc="the batch's targets")
    dev.hold("w", w, doc="the weights")
    own = rows(rank)
    # labelled: a replica's term, one way of splitting makes it; a program may name it as it likes
    dev.compute(
        "g.local", mean_gradient, x[own], y[own], w, doc=f"the mean gradient over replica {rank}'s rows",
        label="a replica's term",
    )  # fmt: skip
    return dev.compute("g", mean_gradient, x, y, w, doc="the mean gradient over the whole batch")


def dp_inputs(rng: np.random.Generator | None) -> dict[str, Any]:
    if rng is None:
        return {"X": X.copy(), "y": Y.copy(), "w": W.copy()}
    return {"X": rounded(rng, (8, 3)), "y": rounded(rng, (8,)), "w": rounded(rng, (3,))}


def dp_split(inputs: Mapping[str, Any]) -> Split:
    return Split(
        given={"X": {r: rows(r) for r in range(REPLICAS)}, "y": {r: rows(r) for r in range(REPLICAS)}, "w": ALL},
        collectives=("all_reduce",),
        budget=Budget(bytes=24, messages=2, what="a ring all-reduce of the gradient"),
    )


def _other_term(inputs: Mapping[str, Any], rank: int) -> list[np.ndarray]:
    """What the all-reduce brings a replica, element by element: the other replica's gradient (or its half), or
    the finished sum (or mean) of both."""
    terms = [mean_gradient(inputs["X"][rows(r)], inputs["y"][rows(r)], inputs["w"]) for r in range(REPLICAS)]
    other, total = terms[1 - rank], terms[0] + terms[1]
    return [other, other / REPLICAS, total, total / REPLICAS]


def data_parallel_average() -> Exercise:
    name = "data-parallel-average"
    return Exercise(
        name=name,
        title="Data parallelism: average the replicas' gradients",
        size=REPLICAS,
        inputs=dp_inputs,
        arguments=("X", "y", "w"),
        reference=lambda i: {r: Reference.of(one_device_gradients, i["X"], i["y"], i["w"], r) for r in range(REPLICAS)},
        split=dp_split,
        questions=(
            Question(
                name,
                "factor",
                "Two replicas each compute the mean gradient over their own 4 rows. If they add "
                "their gradients and stop there, by what factor is the result off from the whole batch's mean "
                "gradient?",
                "c429d5578fcc57b623db1923adad2d9f",
                "Xef+FcVJ3w8Y32qFcmSrvi2UECkKSrrUVbDIRLfj7Jd2FVWJGQifetZJfnVX2imegDCjdpN80H216ssr3oXK5VlAp27EU68JBXjD4ThaUbNLjm6AmpZlLl3uyC6Ql/2kd1dbclb9CXbGgIUjYP/IqePLLjhclz13osxLdu+8t/vpam2drn4HoT5ldtNR2IyBVNr0BgpEkyZfF1cygA1ErQqiAtVKLZCkyv4=",
                "Each local gradient is a mean over 4 rows; the whole batch's is a mean over 8.",
            ),
            Question(
                name,
                "messages",
                "The gradient has 3 numbers. How many messages does a ring all-reduce over 2 replicas send in all?",
                "dbab57586998d9d30beaeff5497d5038",
                "w+XVKIXGmhuhMGA/rucF88MNgZDxLG2LPSqlIYmiYiAkY++CuYkzGxdQ+PxTJRJzGnjKSfC4Q5ELkJ5Ljr+n43CMhrYd6B5kPbBWtIMbq1+a9a00MQPOBc1P0b4=",
                "A ring all-reduce on p devices takes 2(p - 1) steps, one message per device per step.",
            ),
        ),  # fmt: skip
        hints={
            "value:message": (
                "The checker compares each replica's g with the whole batch's mean gradient and says by how much it "
                "is off.",
                "dev.all_reduce adds by default (op='sum'). The replicas' mean gradients must be averaged.",
            ),
            "value:result": (
                "What each replica returns is compared with the whole batch's mean gradient: by what factor is it off?",
                "dev.all_reduce adds by default (op='sum'); an average is the sum divided by the replicas.",
            ),
            "split:collective": ("One all-reduce combines the replicas' gradients; no other collective is needed.",),
            "requirement:received": (
                "A replica has only its own rows: the other replica's gradient reaches it in the all-reduce's messages.",
            ),
        },
        requirements=(returns_whole((3,), "g"), received("the other replica's gradient", _other_term)),
    )


def one_device_step(dev, p, g, m):
    """One momentum-SGD step on one device: m <- beta m + g, then p <- p - lr m."""
    p = dev.hold("p", p, doc="the parameters")
    g = dev.hold("g", g, doc="the gradient")
    m = dev.hold("m", m, doc="the optimizer state (momentum)")
    m_new = dev.compute("m.new", lambda m, g: BETA * m + g, m, g, doc="the updated momentum")
    return dev.compute("p.new", lambda p, m: p - LR * m, p, m_new, doc="the updated parameters")


def zero_inputs(rng: np.random.Generator | None) -> dict[str, Any]:
    if rng is None:
        return {"p": P8.copy(), "g": G.copy(), "m": M.copy()}
    return {"p": rounded(rng, (8,)), "g": rounded(rng, (8,)), "m": rounded(rng, (8,))}


def _sharded_state(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
    """No device holds more than its half of m (or of m's update), under any name."""
    m, m_new = inputs["m"], BETA * inputs["m"] + inputs["g"]
    total = m.nbytes
    for rank in range(run.trace.world_size):
        held = max(held_bytes(run, rank, lambda n, name=name: n == name) for name in ("m", "m.new"))
        whole = any(
            kind in ("hold", "op", "recv")
            and getattr(rec, "rank", getattr(rec, "dst", None)) == rank
            and _is_whole(rec.output if kind != "recv" else rec.payload, m, m_new)
            for kind, rec in run.trace.events
        )
        if held > total // REPLICAS or whole:
            held = max(held, total)
            return (
                f"device {rank} holds {held} bytes of the optimizer state m ({total} in all); ZeRO-1 keeps "
                f"1/{REPLICAS} of it, {total // REPLICAS} bytes, on each device"
            )
    return None


def _gathered(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
    """Every device received the other devices' halves of p.new: the all-gather ZeRO-1 ends with. Without it a
    device's whole p.new was made from all of m in plain NumPy, out of the trace's sight (each device is given
    all of m, so that keeping only its half is the lesson)."""
    p_new = inputs["p"] - LR * (BETA * inputs["m"] + inputs["g"])
    size = len(p_new) // REPLICAS
    for rank in range(run.trace.world_size):
        got = [rec.payload for kind, rec in run.trace.events if kind == "recv" and rec.dst == rank]
        for other in range(run.trace.world_size):
            block = p_new[other * size : (other + 1) * size]
            if other != rank and not any(np.shape(x) == block.shape and _allclose(x, block) for x in got):
                return (
                    f"device {rank} never received device {other}'s half of p.new, yet returned all of p.new: it "
                    f"computed device {other}'s half itself, from optimizer state ZeRO-1 leaves to device {other}"
                )
    return None


def _is_whole(value: Any, m: np.ndarray, m_new: np.ndarray) -> bool:
    if not isinstance(value, np.ndarray) or value.shape != m.shape:
        return False
    return bool(_allclose(value, m) or _allclose(value, m_new))


def zero_one_step() -> Exercise:
    name = "zero-1-step"
    return Exercise(
        name=name,
        title="ZeRO-1: shard the optimizer state",
        size=REPLICAS,
        inputs=zero_inputs,
        arguments=("p", "g", "m"),
        reference=lambda i: Reference.of(one_device_step, i["p"], i["g"], i["m"]),
        split=lambda i: Split(
            collectives=("all_gather",), budget=Budget(bytes=32, messages=1, what="an all-gather of p's halves")
        ),
        questions=(
            Question(
                name,
                "state",
                "8 parameters, one float64 momentum each, 2 devices: how many bytes of optimizer "
                "state does each device hold under ZeRO-1?",
                "5d04006364bc8494422689a8c5dfec31",
                "iGbBxbQSGrTycsq3w8WBDH+47Ls94V7I+vPvTfXa86U0Asly+lw5oTJOhjc2Fe7MU9Q+aqKo3m1nUJfsLYNfZuqHkiQVqVtLZY3v6rWoT6PJywwauCSJEyzx0zUKow==",
                "How many bytes of momentum are there in all, and how many devices share them?",
            ),
            Question(
                name,
                "messages",
                "After the update, every device needs every parameter. How many messages does "
                "that all-gather send on 2 devices?",
                "c5e342647156b1abbf55b8cf8baa2fae",
                "VUhm8aEnviI9thIHj0NPDs89O7f3Kv5JllcrikCzUyfYSVgjVYZ5b+iYTWCVrNT5mIPVuFH8dsmsqtDOagQgLpsCb0Hz",
                "Each device has updated one half: who needs it?",
            ),
        ),  # fmt: skip
        hints={
            "requirement:sharded": (
                "The values are right, but every device holds all of m: keep only this device's half.",
                "Hold only this device's half of m (index=half), update that half of m and of p, then all-gather p.",
            ),
            "requirement:whole": ("Every device needs every parameter after the step: an all-gather of the halves.",),
            "requirement:gathered": (
                "Each device may update only its own half of p: the other half comes from the device that owns it.",
                "Compute p.new on this device's half only (index=half), then dev.all_gather(p_new, axis=0).",
            ),
        },
        requirements=(
            Requirement("sharded", "each device holds 1/p of the optimizer state", _sharded_state),
            returns_whole((8,), "p.new"),
            Requirement("gathered", "every device receives the other halves of p.new", _gathered),
        ),
    )
