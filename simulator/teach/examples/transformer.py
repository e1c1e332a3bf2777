"""Transformer scenarios: tensor parallelism of attention by heads, Megatron sequence parallelism, two bugs.

One training step of a one-block transformer (``simulator.parallel.transformer.model``) with real arithmetic
and a hand-written backward, split over two devices and checked against the same step on one device:

- transformer-tp:  attention split by heads (Wq, Wk, Wv by columns, Wo by rows), the MLP by columns;
                   four all-reduces per block and microbatch
- transformer-sp:  the same with sequence parallelism: layer norms, dropout and residuals on each
                   device's half of the sequence; each all-reduce becomes a reduce-scatter and an
                   all-gather, the same bytes
- tp-bug-layer-norm-on-partial-sum: the all-reduce after attention is moved past the residual and the
                   second layer norm, which then normalises a partial sum
- sp-bug-reduce-scatter-wrong-dim:  the reduce-scatter after attention splits the flattened batch x
                   sequence tokens instead of each sequence: device 0 gets sequence 0 whole, not the
                   first half of every sequence, in a buffer of the right shape
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...checker import Split
from ...core.world import World
from ...parallel.transformer.model import Transformer
from ...parallel.transformer.sequence import ALL, SequenceSplit, TensorSplit, chunk
from ...parallel.transformer.step import TransformerStep
from ..scenario import Scenario

MODEL = Transformer(d_model=8, heads=2, d_ff=16, blocks=1, dropout=0.1)
PARAMS = MODEL.init(seed=20)
X, T = MODEL.data(2, 4, seed=21)  # two sequences of four tokens
GROUP = (0, 1)


# ---- bug 1: the layer norm normalises a partial sum ----------------------------------------------
@dataclass(frozen=True)
class AllReduceAfterNorm(TensorSplit):
    """Megatron's g operator (the all-reduce after the row-parallel output projection) moved to the MLP's
    entry: the residual and the second layer norm run on each device's partial sum, and the all-reduce
    then adds up t layer norms, which is not the layer norm of the sum."""

    def exit(self, dev: Any, name: str, partial: np.ndarray) -> np.ndarray:
        if ".proj." in name:
            return partial  # BUG: not added up here ...
        return super().exit(dev, name, partial)

    def enter(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        if ".ln2." in name:
            return dev.all_reduce(local, "sum", self.group, name=name)  # ... but after the layer norm
        return super().enter(dev, name, local)


# ---- bug 2: the reduce-scatter splits the wrong dimension ----------------------------------------
@dataclass(frozen=True)
class ScatterFlatTokens(SequenceSplit):
    """A reduce-scatter written for Megatron's [sequence, batch, hidden] layout, used on [batch, sequence,
    hidden] activations: it splits the flattened tokens into t contiguous pieces, so device 0 gets whole
    sequences where it should get the first chunk of every sequence, in a buffer of the expected shape."""

    def exit(self, dev: Any, name: str, partial: np.ndarray) -> np.ndarray:
        b, s, d = partial.shape
        flat = partial.reshape(b * s, d)
        pieces = [chunk(s, self.tp, m) for m in range(self.tp)]
        blocks = [
            flat[chunk(b * s, self.tp, m)].reshape(b, p.stop - p.start, d)  # BUG: chunks of the flattened tokens
            for m, p in enumerate(pieces)
        ]
        indices = [(ALL, p, ALL) for p in pieces]  # what each device believes it gets: its chunk of each sequence
        return dev.reduce_scatter(blocks, "sum", self.group, name=name, indices=indices)


@dataclass(frozen=True)
class BuggyStep(TransformerStep):
    """The tensor-parallel step with a split class of one's own."""

    split_class: type = TensorSplit

    def split(self, dev: Any, seq_len: int) -> TensorSplit:
        return self.split_class(self.model, self.tensor, dev.rank, seq_len)


TP = TransformerStep(MODEL, tensor=GROUP)
SP = TransformerStep(MODEL, tensor=GROUP, sequence_parallel=True)


def _reference():
    return TP.reference(PARAMS, X, T)


# heads or sequence split over both devices: values cross only inside the collectives that combine them
SPLIT = Split(collectives=("all_reduce", "reduce_scatter", "all_gather"), crosses={})


def _scenario(name: str, title: str, story: str, program: Any, expect: str = "match") -> Scenario:
    tags = ("transformer", "tensor", "training") + (("bug",) if expect == "diverge" else ())
    return Scenario(name, title, story, World(2), program, (PARAMS, X, T), _reference, expect, tags, SPLIT)


SCENARIOS = [
    _scenario(
        "transformer-tp",
        "A transformer block split by heads over two devices",
        "Each device holds one of the two heads (its columns of Wq, Wk, Wv and rows of Wo) and half of the MLP. "
        "The layer norms, residuals and dropout run whole on both devices; an all-reduce adds the two partial "
        "outputs of attention and of the MLP in the forward, and of their input gradients in the backward.",
        TP,
    ),
    _scenario(
        "transformer-sp",
        "Sequence parallelism: the same block, each device keeping half of every sequence outside attention",
        "Layer norm and dropout work token by token, so each device keeps only its two tokens of each sequence "
        "there. An all-gather brings the whole sequence in before attention and the MLP, a reduce-scatter adds "
        "the partial outputs and hands each device its tokens: the same bytes as the all-reduces, half the "
        "activation memory outside the regions.",
        SP,
    ),
    _scenario(
        "tp-bug-layer-norm-on-partial-sum",
        "Bug: the all-reduce after attention moved past the layer norm",
        "Each device adds its partial attention output to the residual and normalises it, and only then all-"
        "reduces: the sum of two layer norms is not the layer norm of the sum. The check stops at the first "
        "value built from a partial sum, the attention output with its bias, before the layer norm uses it.",
        BuggyStep(MODEL, tensor=GROUP, split_class=AllReduceAfterNorm),
        "diverge",
    ),
    _scenario(
        "sp-bug-reduce-scatter-wrong-dim",
        "Bug: the reduce-scatter splits the flattened tokens, not each sequence",
        "Code written for [sequence, batch, hidden] activations scatters along the first dimension of the "
        "flattened tokens. With two sequences, device 0 receives all of sequence 0 instead of the first half of "
        "both, in a buffer of the right shape, so nothing fails: the check stops at the reduce-scatter's result.",
        BuggyStep(MODEL, tensor=GROUP, sequence_parallel=True, split_class=ScatterFlatTokens),
        "diverge",
    ),
]
