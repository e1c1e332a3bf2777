"""Exercises on the seed model (stage A computes 2x + 1, stage B squares it): split it over two
devices yourself, then find and fix the classroom bug where the raw input crosses the boundary."""

from __future__ import annotations

import numpy as np

from ...checker import Reference
from ...core.engine import World
from ..examples.seeds import model, stage_a, stage_b
from .core import Exercise, Question, exchanges_messages, world_run

X = np.array([3.0])  # the input: A = 7 crosses the boundary, B returns 49

__all__ = ["X", "model", "raw_input_bug", "split_the_seed", "stage_a", "stage_b"]


def split_the_seed() -> Exercise:
    """Split the two-stage model over two devices: A on device 0, B on device 1, A's output crosses."""
    return Exercise(
        name="split-the-seed",
        title="Split the seed model over two devices",
        run=world_run(World(2), X),
        reference=lambda: Reference.of(model, X),
        questions=[
            Question(
                "returns",
                "With x = 3, what does device 1 return?",
                49.0,
                "A = 2 * 3 + 1 = 7 crosses the boundary and B squares it: 49, exactly what one device computes.",
            ),
            Question(
                "messages",
                "How many messages cross between the two devices?",
                1,
                "One: A's output, from device 0 to device 1. Nothing else needs to cross.",
            ),
            Question(
                "bytes",
                "How many bytes does that message carry?",
                8,
                "A is one float64: 8 bytes. The boundary's contract is shape (1,), dtype float64.",
            ),
        ],
        hints=[
            "Read the FAILED line: which value does device 1 square, and which should it square?",
            "Device 1 never receives A's output. Device 0 sends with dev.send(value, dst=1); device 1 "
            "receives with dev.recv(src=0, ...).",
            "On device 0, after computing h: `dev.send(h, dst=1)`. On device 1, instead of `h = x`: "
            '`h = dev.recv(src=0, name="A", shape=(1,), dtype=np.float64)`.',
        ],
        requirements=[exchanges_messages("stage A runs on device 0 and sends its output to device 1, which runs B")],
    )


def raw_input_bug() -> Exercise:
    """The classroom bug: the program runs, B returns a number, and the number is wrong. Find and fix it."""
    return Exercise(
        name="raw-input-bug",
        title="Find and fix the raw-input bug",
        run=world_run(World(2), X),
        reference=lambda: Reference.of(model, X),
        questions=[
            Question(
                "returns",
                "Before you run it: with x = 3, what does the buggy program return on device 1?",
                9.0,
                "9: device 0 sends x = 3, not A's output 7, and B squares what it is given. B is not wrong.",
            ),
            Question(
                "message",
                "Which message (its number, #0, #1, ...) does the checker point at?",
                0,
                "Message #0, the only one: the first place the run differs from one device is the value that "
                "crosses, before B ever runs.",
            ),
        ],
        hints=[
            "The checker names a message and says what it carried and what it should have carried.",
            "Device 0 computes h = A(x), then sends something. Is it h?",
            "Replace `dev.send(x, dst=1)` with `dev.send(h, dst=1)`.",
        ],
        requirements=[exchanges_messages("stage A runs on device 0 and sends its output to device 1, which runs B")],
    )
