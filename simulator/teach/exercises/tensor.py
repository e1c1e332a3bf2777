"""Exercises on tensor parallelism: one layer Y = X @ W over two devices, split by W's columns (each device
computes a block of Y's columns, then an all-gather) and by W's rows (each device computes a partial sum of
the whole Y, and an all-reduce adds them).

Each device is given only its part: in the column split all of X and three of W's columns; in the row split
two of X's columns and the matching two rows of W. The split allows the one collective each teaches, and no
more bytes than it sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...checker import ALL, Budget, Reference, Split
from .core import Exercise, Question, received, returns_whole, rounded

X = np.arange(8.0).reshape(2, 4) / 4 - 0.5  # (2, 4): small numbers that print in full
W = (np.arange(24.0).reshape(4, 6) % 5 - 2) / 2  # (4, 6)

__all__ = ["W", "X", "column_split", "linear", "row_split"]


def linear(dev, x=X, w=W):
    """The layer on one device: Y = X @ W."""
    dev.hold("X", x, doc="the layer's input")
    dev.hold("W", w, doc="the layer's weight")
    return dev.compute("Y", np.matmul, x, w, doc="the layer's output X @ W")


def inputs(rng: np.random.Generator | None) -> dict[str, Any]:
    if rng is None:
        return {"X": X.copy(), "W": W.copy()}
    return {"X": rounded(rng, (2, 4)), "W": rounded(rng, (4, 6))}


def reference(inputs: Mapping[str, Any]) -> Reference:
    return Reference.of(linear, inputs["X"], inputs["W"])


def column_split_split(inputs: Mapping[str, Any]) -> Split:
    """All of X to both devices, W's columns 3r..3r+2 to device r; Y's blocks gathered (48 bytes each)."""
    return Split(
        given={"X": ALL, "W": {r: np.s_[:, 3 * r : 3 * r + 3] for r in range(2)}},
        collectives=("all_gather",),
        budget=Budget(bytes=48, messages=1, what="an all-gather of Y's two blocks"),
    )


def row_split_split(inputs: Mapping[str, Any]) -> Split:
    """X's columns 2r..2r+1 and W's rows 2r..2r+1 to device r; the partial sums all-reduced (96 bytes each)."""
    return Split(
        given={
            "X": {r: np.s_[:, 2 * r : 2 * r + 2] for r in range(2)},
            "W": {r: np.s_[2 * r : 2 * r + 2] for r in range(2)},
        },
        collectives=("all_reduce",),
        budget=Budget(bytes=96, messages=2, what="a ring all-reduce of Y"),
    )


def _other_block(inputs: Mapping[str, Any], rank: int) -> list[np.ndarray]:
    """The block of Y the other device computes: what the all-gather brings."""
    other = np.s_[:, 3 * (1 - rank) : 3 * (1 - rank) + 3]
    return [inputs["X"] @ inputs["W"][other]]


def _other_partial_sum(inputs: Mapping[str, Any], rank: int) -> list[np.ndarray]:
    """What the all-reduce brings, element by element: the other device's partial sum of Y, or the total."""
    x, w = inputs["X"], inputs["W"]
    other = slice(2 * (1 - rank), 2 * (1 - rank) + 2)
    return [x[:, other] @ w[other], x @ w]


def column_split() -> Exercise:
    """Each device holds all of X and three of W's six columns, computes those columns of Y, and all-gathers Y."""
    name = "column-split"
    return Exercise(
        name=name,
        title="Column-parallel: split W by columns",
        size=2,
        inputs=inputs,
        arguments=("X", "W"),
        reference=reference,
        split=column_split_split,
        questions=(
            Question(
                name,
                "columns",
                "Y = X @ W is (2, 6). How many of Y's columns does each device compute?",
                "059a3cfb2e17ef90d0a0386c8ac854b0",
                "3//AE0XmAnfqAy9MQlTBThWTWaLGFwk63wQNvvq4EFa2DwvYat7zMNqKGK6F4qjUZdjo1JjgzzfDUnT/2DfXk5a3mx8ISe4EvkaDHWVShy5IgW9LFF+Px7MwQn7egsrjHmKL/buaTrfY/5EIarawbdVD2LFVYd/P177PYGD0Y1S8r3XeKghI0FmMQ9Pi5IOE8e4Gh/rjOA==",
                "Which columns of W does column j of Y need?",
            ),
            Question(
                name,
                "messages",
                "How many messages does the all-gather send in all, on two devices?",
                "222fbb063ab7a1b0114bf5bee7c9e154",
                "EuomR5qZWggATWvdTV+dqNQgQdbn7kDIsSijZTavWf/28VPbM5pA1xObi5Xo+OP+FghU1Baqf7y1Krx+zgijxUgW9Bhd4/FT6p6bsKgZ39AqLYJaT5l+hivfLwQgsU47",
                "Each device needs the block it does not have: who sends what to whom?",
            ),
        ),  # fmt: skip
        hints={
            "value:input": (
                "The checker says which block of Y each device computes: tell it, with index= on the op.",
                "Pass index=cols to the op that computes the block; then every device needs the other's block: "
                "an all-gather along the columns.",
            ),
            "requirement:whole": (
                "Every device must end with the whole Y: an all-gather along the columns joins the two blocks "
                "(dev.all_gather(y, axis=1, name=...)).",
            ),
            "requirement:received": (
                "A device computes only its own block of Y: the other block reaches it in the all-gather's message.",
            ),
        },
        requirements=(returns_whole((2, 6), "Y"), received("the other device's block of Y", _other_block)),
    )


def row_split() -> Exercise:
    """Each device holds two of X's columns and the matching two rows of W: its product is a partial sum of Y."""
    name = "row-split"
    return Exercise(
        name=name,
        title="Row-parallel: split W by rows, add the partial sums",
        size=2,
        inputs=inputs,
        arguments=("X", "W"),
        reference=reference,
        split=row_split_split,
        questions=(
            Question(
                name,
                "shape",
                "What shape is each device's product X[:, rows] @ W[rows, :]?",
                "14539d800c0519b30594586ea8dc296a",
                "fcsMunxPFtY0yTGlxTl/XJm6diqKED5Ct6SUiogjOk8ku1SCTJ6XY/BM3SZ4fJfFKDu+3N6DmQfBKRtFB1zE+XHA3ayLyk6jfCkaDKMRegkMp1c1b+lt0hOIsqKNr8kacTgFsaORtPbAQCsEGDOSk8SfqIGVkFSKL+WCaQI/Sx4Y8TLCi74iZ+hdEnSXQwFWsTuJEatuFntZTnLz",
                "(2, 2) @ (2, 6): write it as a shape, e.g. (3, 4).",
            ),
            Question(
                name,
                "messages",
                "A ring all-reduce on two devices: how many messages in all?",
                "499a83bd579db117d254a961a3d09022",
                "/HQLvmmHZcfq57sV8nKQyCMgptfMmP/92fxWvmBV6zqLNWNj3O3TN3F2XxMygTG11FAyJkXbZ0u/Ovebls6dUTCuczmiHeSfgUqUJm3fvcoa1++wgIocY5yl0T5L06bIl3Dar+iedmlQbKjMjsyPtX+0NoobjNicBWpJeR3RzX0aNMG4",
                "A ring all-reduce is a reduce-scatter then an all-gather: count each device's steps.",
            ),
            Question(
                name,
                "bytes",
                "How many bytes does each device send in that all-reduce (Y is 12 float64, 96 bytes)?",
                "636b076b6803ae871eb1c68690e5db34",
                "p5/0bQVH/v2TmiPY+EyXdSHueEempzih/VDpgyyxby8mtXOftVyFSoTLvo8MOQ8Sb4RC/n8G2zqNpepwf8DgYq/Tpr6lxEo8pJtUzG6IxUhRYFR+FIF1tylEJ9ghDw==",
                "A ring of p sends 2(p - 1)/p of the array from each device.",
            ),
        ),  # fmt: skip
        hints={
            "value:result": (
                "The checker says a device returns a partial sum: one term of Y, not Y.",
                "The two partial sums must be added, and both devices need the total: that is one collective.",
            ),
            "requirement:whole": ("Every device must end with the whole Y: the all-reduce gives it to both.",),
            "requirement:received": (
                "A device computes only its own partial sum: the other one reaches it in the all-reduce's messages.",
            ),
        },
        requirements=(
            returns_whole((2, 6), "Y"),
            received("the other device's partial sum of Y (or the total)", _other_partial_sum),
        ),
    )
