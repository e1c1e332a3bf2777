"""Exercises on the seed model (stage A computes 2x + 1, stage B squares it): split it over two devices yourself,
then find and fix the classroom bug where the raw input crosses the boundary.

The split both exercises declare: device 0 computes A, device 1 computes B, device 0 alone is given x, only A
may cross, from device 0 to device 1, and no collective runs (a collective's messages are not held to
``crosses``: a broadcast of B would carry the answer past it). So a program that sends x and recomputes A on
device 1 gets FAILED even though B's value is right, and device 1 is handed no x at all (None). Both also
require that A's value reach device 1 in a message: B written in plain NumPy from A read through a variable
the devices share is named by no op, so nothing else in the trace would show it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy import allclose as _allclose  # the grader's own, taken before any student code loads

from ...checker import Reference, Split
from ...checker.causal import op_kind
from ...core.engine import RunResult
from ..examples.seeds import SEED_SPLIT, model, stage_a, stage_b
from .core import Exercise, Question, Requirement, rounded

X = np.array([3.0])  # the notebook's input: A = 7 crosses the boundary, B returns 49

__all__ = ["X", "model", "raw_input_bug", "split_the_seed", "stage_a", "stage_b"]


def inputs(rng: np.random.Generator | None) -> dict[str, Any]:
    """x = 3 in the notebook; random ones away from -1 (where 2x + 1 = x and nothing could tell them apart)."""
    if rng is None:
        return {"x": X.copy()}
    x = rounded(rng, (1,), -5.0, 5.0)
    return {"x": x if abs(x[0] + 1) > 0.2 else x + 1.5}


def reference(inputs: Mapping[str, Any]) -> Reference:
    return Reference.of(model, inputs["x"])


def split(inputs: Mapping[str, Any]) -> Split:
    return replace(SEED_SPLIT, collectives=())


def _a_crossed(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
    """A's value reached device 1 in a message of the program's own, from device 0."""
    a = stage_a(inputs["x"])
    for kind, rec in run.trace.events:
        if kind != "recv" or (rec.src, rec.dst) != (0, 1) or op_kind(rec.label) is not None:
            continue
        if np.shape(rec.payload) == a.shape and _allclose(rec.payload, a):
            return None
    return (
        "A's output never reached device 1 in a message from device 0: device 1 has only what it is given or "
        "receives (a variable the devices share works only in this simulation, not on real processes)"
    )


CROSSED = Requirement("crossed", "A's output crosses from device 0 to device 1 in a message", _a_crossed)


_SPLIT_HINTS = {
    "split:cross": ("Only A's output may cross from device 0 to device 1: which value does device 0 send?",),
    "split:compute": (
        "Device 1 computes only B: A's output must arrive from device 0 as a message, not be recomputed there.",
    ),
    "split:given": ("Device 1 is given no x: only device 0 holds the model's input.",),
    "split:collective": ("No collective here: device 0 sends A's output with dev.send, device 1 receives it.",),
    "requirement:crossed": ("Device 0 sends h, A's output, with dev.send(h, dst=1); device 1 receives it.",),
}


def split_the_seed() -> Exercise:
    """Split the two-stage model over two devices: A on device 0, B on device 1, A's output crosses."""
    name = "split-the-seed"
    return Exercise(
        name=name,
        title="Split the seed model over two devices",
        size=2,
        inputs=inputs,
        arguments=("x",),
        reference=reference,
        split=split,
        questions=(
            Question(
                name,
                "returns",
                "With x = 3, what does device 1 return?",
                "b54e492e0c427f9b360f2c1d60258323",
                "qB9lHkGcOf2Y4zRg+h+QRk4BIiTVW1lZsFyQIAu/V+GfhmixOqnzEYgz/oE5kVJnwLvbwYmyHvwqS5V0jl+ksGuPqOOZIAf/x7X6a26rWel1Msv3ycc8wdZN2f1PAw==",
                "Follow x = 3 through A (2x + 1), then B (squaring).",
            ),
            Question(
                name,
                "messages",
                "How many messages cross between the two devices?",
                "2ef2aeee5bd914ce4f6127abc290b2e6",
                "tALjmY1ARvlEEJlquyH6YRXYeu41N0v3IlJfFdGd7qS2TPsd+1XDlvs9A7wPBT1bKECcVoNUgEfT8eFabUbg7Yyjio2xvxOs",
                "What does device 1 need that only device 0 has?",
            ),
            Question(
                name,
                "bytes",
                "How many bytes does that message carry?",
                "4392a3c5e95f2c7c73c339dc8c80e3cc",
                "/Zyuocm5pSZnWnZpIGullktvGerKt6y7W8waXmJDAfadRT85ryQJhlr4xGrliCClYnyMfnYRcxhFNWbuRxiN8j7tnxHs+vewX5mMWTdcJ9U=",
                "A float64 is 8 bytes; how many numbers does A's output hold?",
            ),
        ),  # fmt: skip
        hints={
            "stopped": (
                "Device 1 is given no x (its x is None): A's output can reach it only as a message. Device 0 sends "
                "it with dev.send(value, dst=1); device 1 receives it with dev.recv(src=0, ...).",
                "On device 1, in place of the placeholder: receive from device 0, and say what arrives: "
                'name="A", shape=(1,), dtype=np.float64.',
            ),
            "deadlock": ("Device 1 waits for a message device 0 never sends: send h (A's output) to device 1.",),
            "value:input": ("Which value does device 1 square, and which should it square?",),
            "unverified:never computed": (
                'Name what device 1 receives: dev.recv(src=0, name="A", ...), so the checker can compare it with A.',
            ),
            **_SPLIT_HINTS,
        },
        requirements=(CROSSED,),
    )


def raw_input_bug() -> Exercise:
    """The classroom bug: the program runs, B returns a number, and the number is wrong. Find and fix it."""
    name = "raw-input-bug"
    return Exercise(
        name=name,
        title="Find and fix the raw-input bug",
        size=2,
        inputs=inputs,
        arguments=("x",),
        reference=reference,
        split=split,
        questions=(
            Question(
                name,
                "returns",
                "Before you run it: with x = 3, what does the buggy program return on device 1?",
                "8b49e270554ded7cf476d52096eedcdc",
                "0BFU3Q5oCr/cniVSo9omry737amkV+S7amvSTIQSWOt3fYCENSPeT7jH1HmpDRy3vJnkDNpFEN+TsARncwhHm7Y+DaKI/xy3k2e88dAQqJwZapfB48TArQ3h",
                "Which value does device 0 actually send, and what does B do with it?",
            ),
            Question(
                name,
                "message",
                "Which message (its number, #0, #1, ...) does the checker point at?",
                "9f4dd83f552b21ba9ce45bea33ff6ad3",
                "VFRkyr4b62AvnmYn0MZvU62qRRVpcLzPT7avATatBvjSOlsKGu0XxK19qgqqXpg2qbc5oZtxOSrdx7Zuipb3JU9T/syhzKEhGslAr8Gngxgk8LFLVenPlJWVO0M0LMm/di9w++L+IxPFiSI3afMu8lQHvqQXdkbM",
                "How many messages does this program send, and where is the first wrong value?",
            ),
        ),  # fmt: skip
        hints={
            "value:message": (
                "The checker names a message, what it carried and what it should have carried.",
                "Device 0 computes h = A(x), then sends something. Is it h?",
            ),
            **_SPLIT_HINTS,
        },
        requirements=(CROSSED,),
    )
