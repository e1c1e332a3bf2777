"""Exercise: a ring all-reduce written by hand, with sends and receives.

Four devices each hold a vector x[r] of 8 numbers; afterwards every device must hold their sum v.
Cut each vector into p = 4 chunks. Reduce-scatter: in step s (s = 0 .. p - 2) device r sends chunk
(r - s) mod p of its running sums to its right neighbour and adds the chunk (r - s - 1) mod p it receives
from its left neighbour; after p - 1 steps device r holds the whole sum of chunk (r + 1) mod p. All-gather:
p - 1 more steps pass the finished chunks around the ring.

The sends and the adds are labelled (``label="my ring ..."``), as the built-in collectives label
theirs: a labelled message or op is a step on the way, and the checker checks the sum where it ends,
in what every device returns.
"""

from __future__ import annotations

import numpy as np

from ...checker import Reference
from ...core.engine import World
from .core import Exercise, Question, exchanges_messages, world_run

P = 4
XS = (np.arange(P * 8, dtype=np.float64).reshape(P, 8) % 7) - 3  # device r holds XS[r]

__all__ = ["P", "XS", "one_device", "ring_all_reduce"]


def one_device(dev):
    """The model on one device: every vector, and their sum."""
    for r in range(P):
        dev.hold(f"x[{r}]", XS[r], doc=f"device {r}'s vector")
    return dev.compute("v", lambda: XS.sum(axis=0), doc="the sum of the four vectors")


def ring_all_reduce() -> Exercise:
    return Exercise(
        name="ring-all-reduce",
        title="A ring all-reduce by hand",
        run=world_run(World(P), XS),
        reference=lambda: Reference.of(one_device),
        questions=[
            Question(
                "steps",
                "On p = 4 devices, how many steps does the ring take (reduce-scatter, then all-gather)?",
                6,
                "2(p - 1) = 6: p - 1 = 3 steps to finish one chunk's sum on each device, 3 more to pass the "
                "finished chunks around.",
            ),
            Question(
                "messages",
                "How many messages in all?",
                24,
                "Each of the 4 devices sends one chunk in each of the 6 steps: 24.",
            ),
            Question(
                "bytes",
                "How many bytes does each device send (each vector is 8 float64, 64 bytes)?",
                96,
                "2(p - 1)/p x 64 = 96: six chunks of 16 bytes. The same for any p: the ring uses every link fully.",
            ),
        ],
        hints=[
            "The checker compares what each device returns with the sum. Which chunks are right, which are not?",
            "After the reduce-scatter loop, device r holds the finished sum of chunk (r + 1) mod p only. The "
            "all-gather phase must pass each finished chunk around the ring, p - 1 steps, replacing (not adding).",
            "All-gather step s (s = 0 .. p - 2): send chunk (r + 1 - s) mod p to the right, receive chunk "
            "(r - s) mod p from the left and store it: `chunks[(r - s) % p] = got`.",
        ],
        requirements=[
            exchanges_messages(
                "the ring passes chunks from each device to the next, with dev.send and dev.recv", by_hand=True
            )
        ],
    )
