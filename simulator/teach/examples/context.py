"""Context-parallel scenarios: ring attention over four devices, in two chunk orders, and a mask bug.

One training step of a one-block transformer with a sequence of 32 tokens cut into 8 chunks of 4:

- cp-ring-balanced:     device i holds chunks i and 7 - i; every device computes 9 chunk pairs of attention
- cp-ring-contiguous:   device i holds chunks 2i and 2i + 1; the causal mask leaves device 0 with 3 chunk
                        pairs and device 3 with 15. The values are right; the timeline shows the other
                        devices waiting (a performance bug: the step takes as long as the busiest device)
- cp-bug-causal-offset: the data in the balanced order, but the masks computed from the positions of the
                        contiguous order (a chunk given the wrong offset): the check stops at the first
                        block of scores masked wrongly
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...checker import Split
from ...core.world import World
from ...cost.presets import classroom
from ...parallel.transformer.context import ContextSplit, RingAttention, positions
from ...parallel.transformer.model import Transformer
from ...parallel.transformer.step import TransformerStep
from ..scenario import Scenario

MODEL = Transformer(d_model=8, heads=2, d_ff=16, blocks=1)
PARAMS = MODEL.init(seed=30)
X, T = MODEL.data(1, 32, seed=31)  # 32 tokens: 8 chunks of 4
GROUP = (0, 1, 2, 3)


class ContiguousMasks(RingAttention):
    """Masks from the contiguous order's positions (member i: tokens 8i .. 8i + 7) while the tokens are
    held in the balanced order: the second chunk of every device gets the wrong offset."""

    def mask_positions(self, member: int) -> np.ndarray:
        return positions(self.split.seq_len, self.split.cp, member, "contiguous")  # BUG: not self.split.order


@dataclass(frozen=True)
class WrongOffsetSplit(ContextSplit):
    def attention(self, layer: int) -> RingAttention:
        return ContiguousMasks(self.model, self, layer)


@dataclass(frozen=True)
class WrongOffsetStep(TransformerStep):
    def split(self, dev: Any, seq_len: int) -> ContextSplit:
        return WrongOffsetSplit(self.model, tuple(self.context), dev.rank, seq_len, self.order)


BALANCED = TransformerStep(MODEL, context=GROUP, order="balanced")
CONTIGUOUS = TransformerStep(MODEL, context=GROUP, order="contiguous")


def _reference():
    return TransformerStep(MODEL).reference(PARAMS, X, T)


# the sequence in chunks over four devices: keys and values go round the ring by the program's own messages,
# the weights' gradients are all-reduced
SPLIT = Split(collectives=("all_reduce",))


def _scenario(name: str, title: str, story: str, program: Any, expect: str = "match") -> Scenario:
    tags = ("transformer", "context", "training") + (("bug",) if name.startswith("cp-bug") else ())
    world = World(4, cost=classroom())
    return Scenario(name, title, story, world, program, (PARAMS, X, T), _reference, expect, tags, SPLIT)


SCENARIOS = [
    _scenario(
        "cp-ring-balanced",
        "Ring attention over four devices, chunks in the load-balanced order",
        "The 32 tokens are cut into 8 chunks; device i keeps chunks i and 7 - i, one from each end. Keys and values "
        "go round the ring, each block sent while the previous one is computed; the causal mask skips the chunk "
        "pairs whose keys come after their queries, and every device is left with 9 of them.",
        BALANCED,
    ),
    _scenario(
        "cp-ring-contiguous",
        "Ring attention, chunks in the plain order: right values, unbalanced work",
        "Device i keeps chunks 2i and 2i + 1. Its queries see only earlier keys, so device 0 computes 3 chunk pairs "
        "and device 3 computes 15: the values are right, but the step lasts as long as device 3's attention while "
        "the others wait. Compare the timeline with cp-ring-balanced.",
        CONTIGUOUS,
    ),
    _scenario(
        "cp-bug-causal-offset",
        "Bug: the masks use the contiguous order's positions for tokens held in the balanced order",
        "Device i holds chunks i and 7 - i, but the mask is computed as if it held tokens 8i to 8i + 7: its second "
        "chunk gets the wrong offset, so some keys it may see are masked and some it may not see are used. The "
        "check stops at the first block of attention scores masked wrongly.",
        WrongOffsetStep(MODEL, context=GROUP, order="balanced"),
        "diverge",
    ),
]
