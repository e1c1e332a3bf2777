"""Exercise: a ring all-reduce written by hand, with sends and receives.

Four devices each hold a vector x[r] of 8 numbers; afterwards every device must hold their sum v.
Cut each vector into p = 4 chunks. Reduce-scatter: in step s (s = 0 .. p - 2) device r sends chunk
(r - s) mod p of its running sums to its right neighbour and adds the chunk (r - s - 1) mod p it receives
from its left neighbour; after p - 1 steps device r holds the whole sum of chunk (r + 1) mod p. All-gather:
p - 1 more steps pass the finished chunks around the ring.

The split: device r is given its own vector x[r] only; no built-in collective may be used; and each device
may send what a ring sends, 2(p - 1) chunks, 96 bytes. So the library's all-reduce, every device sending
its whole vector to every other, and a sum taken locally all get FAILED, whatever their values.

The sends and the adds are labelled (``label="my ring ..."``), as the built-in collectives label
theirs: a labelled message or op is a step on the way, and the checker checks the sum where it ends,
in what every device returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy import allclose as _allclose  # the grader's own, taken before any student code loads

from ...checker import ALL, Budget, Reference, Split
from ...core.engine import RunResult
from .core import Exercise, Question, Requirement, returns_whole

P = 4
XS = (np.arange(P * 8, dtype=np.float64).reshape(P, 8) % 7) - 3  # device r holds XS[r]

__all__ = ["P", "XS", "one_device", "ring_all_reduce"]


def one_device(dev, xs=XS):
    """The model on one device: every vector, and their sum."""
    for r in range(P):
        dev.hold(f"x[{r}]", xs[r], doc=f"device {r}'s vector")
    return dev.compute("v", lambda: xs.sum(axis=0), doc="the sum of the four vectors")


def inputs(rng: np.random.Generator | None) -> dict[str, Any]:
    if rng is None:
        return {"xs": XS.copy()}
    return {"xs": rng.integers(-9, 10, size=(P, 8)).astype(np.float64)}


def ring_split(inputs: Mapping[str, Any]) -> Split:
    return Split(
        compute={"v": ALL},
        given={"xs": {r: np.s_[r] for r in range(P)}, **{f"x[{r}]": r for r in range(P)}},
        collectives=(),
        budget=Budget(bytes=96, messages=6, what="a ring all-reduce"),
    )


def _chunks_arrived(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
    """Each chunk of the sum reached each device in a message: finished (the all-gather), or as the other devices'
    partial sum of it, to which the device adds its own (the reduce-scatter's last step). Without that a device
    returned v made from vectors it never received: read through a variable the devices share, while its
    messages carried anything at all."""
    xs = inputs["xs"]
    v, size = xs.sum(axis=0), xs.shape[1] // P
    for rank in range(P):
        got = [np.asarray(rec.payload) for kind, rec in run.trace.events if kind == "recv" and rec.dst == rank]
        for c in range(P):
            block = np.s_[c * size : (c + 1) * size]
            finished, others = v[block], v[block] - xs[rank][block]
            if not any(g.shape == finished.shape and (_allclose(g, finished) or _allclose(g, others)) for g in got):
                return (
                    f"device {rank} never received chunk {c} of the sum (nor the other devices' partial sum of it), "
                    "yet returned v: it read the other vectors another way, which real devices cannot (a variable "
                    "the devices share works only in this simulation)"
                )
    return None


def ring_all_reduce() -> Exercise:
    name = "ring-all-reduce"
    return Exercise(
        name=name,
        title="A ring all-reduce by hand",
        size=P,
        inputs=inputs,
        arguments=("xs",),
        reference=lambda inputs: Reference.of(one_device, inputs["xs"]),
        split=ring_split,
        questions=(
            Question(
                name,
                "steps",
                "On p = 4 devices, how many steps does the ring take (reduce-scatter, then all-gather)?",
                "33b02c44d3417cda447384cc61ab8729",
                "XhR6kBt/yrOtzQWveBVOykVbW6hQsWYXe4dlkxml09e96vHw5jvt1zsHnfThrP0EsoMTCv0a1Zk2cHxeC1hGjW66qRuQp3e81M19ZUwcCJ3nAH8NEsSHryOdE4xEmsvfsqo1z2ISz9deNGlP4kaCMsDe",
                "How many steps until one chunk has visited every device? And to pass the sums back around?",
            ),
            Question(
                name,
                "messages",
                "How many messages in all?",
                "059f97347d4b8459b68188805dd13767",
                "nXovhQGduab1Eh2sHh07pnymRCxjLjtzdmaPeEaEUQT23gLGrx+Pu6rHOT6jO8gi6KThNTLJY/2jaFH+ukgvq2I=",
                "Every device sends one chunk in every step.",
            ),
            Question(
                name,
                "bytes",
                "How many bytes does each device send (each vector is 8 float64, 64 bytes)?",
                "0cdf2d6e6eba06935cd7eb3528ea34e1",
                "G7UXccpfXiushz43N/0eg5kZaxryi5vw8Nui9KbUygVm1PoSbBPrT16VktAQIlQ56gIVmQY5kCP1jILa3U+cmoHR2Fv6YmTIeE2h8ztp4vWcbvdN7058G8N+d65qGcVJtQ==",
                "A chunk is a quarter of a vector; count the chunks one device sends.",
            ),
        ),  # fmt: skip
        hints={
            "value:output": (
                "The checker compares what each device returns with the sum. Which chunks are right, which not?",
                "After the reduce-scatter loop, device r holds the finished sum of chunk (r + 1) mod p only. The "
                "all-gather phase must pass each finished chunk around the ring, p - 1 steps, replacing (not adding).",
            ),
            "split:collective": (
                "This exercise is the ring itself: the built-in collectives are off; pass chunks with dev.send and "
                "dev.recv.",
            ),
            "split:budget": (
                "A ring sends each device's chunks to its right neighbour only, one chunk per step: 2(p - 1) chunks "
                "of 16 bytes in all. Sending whole vectors, or to every device, costs more.",
            ),
            "split:given": ("Each device has only its own vector x[r]: the others' arrive chunk by chunk.",),
            "requirement:arrived": (
                "The other vectors reach a device only in the ring's messages: send the running sums of chunks, "
                "and the finished chunks, as the steps above say.",
            ),
            "unverified:unplaced message": (
                'Label your ring\'s sends (dev.send(chunk, right, label="my ring ...")): a labelled message is a '
                "step on the way, and the sum is checked where it ends.",
            ),
        },
        requirements=(
            returns_whole((8,), "v"),
            Requirement("arrived", "each chunk of the sum reaches each device in a message", _chunks_arrived),
        ),
    )
