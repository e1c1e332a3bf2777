"""Exercises on tensor parallelism: one layer Y = X @ W over two devices, split by W's columns
(each device computes a block of Y's columns) and by W's rows (each device computes a partial sum of
the whole Y, and an all-reduce adds them)."""

from __future__ import annotations

import numpy as np

from ...checker import Reference
from ...core.engine import World
from .core import Exercise, Question, exchanges_messages, returns_whole, world_run

X = np.arange(8.0).reshape(2, 4) / 4 - 0.5  # (2, 4): small numbers that print in full
W = (np.arange(24.0).reshape(4, 6) % 5 - 2) / 2  # (4, 6)

__all__ = ["W", "X", "column_split", "linear", "row_split"]


def linear(dev, x=X, w=W):
    """The layer on one device: Y = X @ W."""
    dev.hold("X", x, doc="the layer's input")
    dev.hold("W", w, doc="the layer's weight")
    return dev.compute("Y", np.matmul, x, w, doc="the layer's output X @ W")


def column_split() -> Exercise:
    """Each device holds all of X and three of W's six columns, computes those columns of Y, and all-gathers Y."""
    return Exercise(
        name="column-split",
        title="Column-parallel: split W by columns",
        run=world_run(World(2)),
        reference=lambda: Reference.of(linear),
        questions=[
            Question(
                "columns",
                "Y = X @ W is (2, 6). How many of Y's columns does each device compute?",
                3,
                "Three: column j of Y needs only column j of W (and all of X), so a device with three of W's "
                "columns computes those three columns of Y, with no message.",
            ),
            Question(
                "messages",
                "How many messages does the all-gather send in all, on two devices?",
                2,
                "Two: each device sends its block to the other (a ring of two: p - 1 = 1 step, one message each).",
            ),
        ],
        hints=[
            "The checker says which block of Y each device computes: tell it, with index=.",
            "Pass index=cols to the op that computes the block; then every device needs the other's block: "
            "an all-gather along the columns.",
            'Compute with `dev.compute("Y", np.matmul, X, w, index=cols)`, then return '
            '`dev.all_gather(y, axis=1, name="Y")`, which concatenates the blocks in device order.',
        ],
        requirements=[
            returns_whole((2, 6), "Y"),
            exchanges_messages("each device computes its own columns of Y, and the devices gather them"),
        ],
    )


def row_split() -> Exercise:
    """Each device holds two of X's columns and the matching two rows of W: its product is a partial sum of Y."""
    return Exercise(
        name="row-split",
        title="Row-parallel: split W by rows, add the partial sums",
        run=world_run(World(2)),
        reference=lambda: Reference.of(linear),
        questions=[
            Question(
                "shape",
                "What shape is each device's product X[:, rows] @ W[rows, :]?",
                (2, 6),
                "(2, 6), the whole shape of Y: each device sums over half of the inner dimension, so each "
                "product is one term of Y = X[:, 0:2] @ W[0:2] + X[:, 2:4] @ W[2:4].",
            ),
            Question(
                "messages",
                "A ring all-reduce on two devices: how many messages in all?",
                4,
                "Four: 2(p - 1) = 2 steps on each of the 2 devices (a reduce-scatter step, then an all-gather "
                "step), one message per device per step.",
            ),
            Question(
                "bytes",
                "How many bytes does each device send in that all-reduce (Y is 12 float64, 96 bytes)?",
                96,
                "2(p - 1)/p x 96 = 96 bytes: half of Y in the reduce-scatter step, half in the all-gather step.",
            ),
        ],
        hints=[
            "The checker says a device returns a partial sum: one term of Y, not Y.",
            "The two partial sums must be added, and both devices need the total: that is an all-reduce.",
            'Return `dev.all_reduce(y, name="Y")` instead of y.',
        ],
        requirements=[
            returns_whole((2, 6), "Y"),
            exchanges_messages("each device multiplies its own rows of W, and an all-reduce adds the partial sums"),
        ],
    )
