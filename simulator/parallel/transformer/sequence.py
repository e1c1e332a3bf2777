"""How a transformer block is split over a tensor-parallel group: by heads, and optionally by sequence too.

Megatron-LM's tensor parallelism (Shoeybi et al. 2019) splits attention by heads and the MLP by its
hidden columns. Device j of a group of t holds

    Wq, Wk, Wv[:, cols_j]  (its heads: column-parallel)    Wo[cols_j, :]   (row-parallel)
    W1[:, ff_j], b1[ff_j]  (column-parallel)               W2[ff_j, :]     (row-parallel)

so each of the two regions (attention, MLP) needs its input whole on every device and leaves a
partial sum of its output on every device. Four operators join the regions to the rest of the block:

    ``enter``  going into a region         forward: f        backward: f-bar
    ``exit``   coming out of a region      forward: g        backward: g-bar

``TensorSplit`` (plain tensor parallelism): everything outside the regions (layer norms, dropout,
residuals) is whole and replicated on every device. f is the identity and its backward an all-reduce
of the input-gradient partial sums; g is an all-reduce of the output's partial sums and its backward
the identity. Per block: two all-reduces in the forward, two in the backward.

``SequenceSplit`` (sequence parallelism, Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models"): outside the regions each device keeps only its chunk of the sequence
(layer norm and dropout work token by token, so a chunk suffices). f becomes an all-gather along the
sequence and its backward a reduce-scatter; g a reduce-scatter along the sequence and its backward an
all-gather. A ring all-reduce *is* a reduce-scatter then an all-gather, so the bytes moved are the
same; what drops is the activation memory: the replicated tensors outside the regions are now 1/t
each. Two costs come with it: the gradients of the layer norms' and biases' parameters applied on
sequence chunks are partial sums over the group (one small all-reduce each at the end of the step),
and the column-parallel weight gradients need the gathered input again in the backward: keep it from
the forward (``regather=False``, the bytes stay equal) or gather it again, as Megatron-LM does
(``regather=True``: one more all-gather per region per microbatch, less memory).

With a group of one device both are the whole block on one device: the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...tensors.placements import chunk_bounds
from .model import Transformer

ALL = slice(None)
# applied whole outside the regions (the router of a mixture of experts too): a device sums over its own tokens
TOKEN_SUMMED = ("bo", "b2", "gamma1", "beta1", "gamma2", "beta2", "Wr")


def chunk(n: int, parts: int, j: int) -> slice:
    """Chunk j of n by torch.chunk's rule (the rule of ``Shard`` and of the collectives)."""
    b = chunk_bounds(n, parts)
    return slice(b[j], b[j + 1])


@dataclass(frozen=True)
class TensorSplit:
    """Device ``rank``'s part of a block under plain tensor parallelism over ``group`` (see the module docstring)."""

    model: Transformer
    group: tuple[int, ...]
    rank: int
    seq_len: int

    sequence_parallel = False

    def __post_init__(self) -> None:
        if self.model.heads % self.tp or self.model.d_ff % self.tp:
            raise ValueError(
                f"a tensor-parallel group of {self.tp} splits the {self.model.heads} heads and the MLP's "
                f"{self.model.d_ff} columns evenly: use a group size that divides both"
            )

    @property
    def tp(self) -> int:
        return len(self.group)

    @property
    def j(self) -> int:
        return self.group.index(self.rank)

    @property
    def partial(self) -> tuple[int, ...] | None:
        """The group over which a region's output is a partial sum (None on one device)."""
        return self.group if self.tp > 1 else None

    @property
    def param_partial(self) -> tuple[int, ...] | None:
        """The group over which the layer norms' and output biases' gradients (and the loss) are partial sums."""
        return None

    def grad_partial(self, what: str) -> tuple[int, ...] | None:
        """The group over which this device's gradient of parameter ``what`` is a partial sum (None: complete).

        Gradients are sums over tokens: a device that sees some tokens of the sequence holds one term of the
        gradient of every parameter it applies to them whole (the layer norms and output biases here)."""
        return self.param_partial if what in TOKEN_SUMMED else None

    # ---- which part of each value this device holds ----------------------------------------------
    @property
    def heads(self) -> slice:
        per = self.model.heads // self.tp
        return slice(self.j * per, (self.j + 1) * per)

    @property
    def cols(self) -> slice:
        h, dh = self.heads, self.model.head_dim
        return slice(h.start * dh, h.stop * dh)

    @property
    def ff(self) -> slice:
        per = self.model.d_ff // self.tp
        return slice(self.j * per, (self.j + 1) * per)

    @property
    def seq(self) -> slice:
        """The tokens of each sequence that the values outside the regions cover on this device."""
        return ALL

    def index(self, kind: str) -> Any:
        """The part of a (B, S, ...) value of ``kind`` this device holds, or None for all of it.

        kinds: "outside" (B, S, D) values outside the regions; "heads" q, k, v and the attention output;
        "probs" scores and probabilities (B, H, S, S); "ff" the MLP's hidden values; "region" the tokens a
        region's input and output partial sums cover.
        """
        if kind == "outside":
            return None if self.seq == ALL else (ALL, self.seq, ALL)
        if self.tp == 1 or kind == "region":  # "region": the tokens a region's partial sums cover (all of them)
            return None
        return {"heads": (ALL, ALL, self.cols), "probs": (ALL, self.heads), "ff": (ALL, ALL, self.ff)}[kind]

    def param_index(self, what: str) -> Any:
        """The part of parameter (or gradient) ``what`` (``Wq``, ``b1``, ...) this device holds."""
        if self.tp == 1:
            return None
        return {
            "Wq": (ALL, self.cols),
            "Wk": (ALL, self.cols),
            "Wv": (ALL, self.cols),
            "Wo": (self.cols, ALL),
            "W1": (ALL, self.ff),
            "b1": self.ff,
            "W2": (self.ff, ALL),
        }.get(what)

    # ---- the four operators ----------------------------------------------------------------------
    def enter(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        """f: the region's input, whole on every device (plain TP: it already is)."""
        return local

    def enter_grad(self, dev: Any, name: str, partial: np.ndarray) -> np.ndarray:
        """f-bar: the input gradient's partial sums (one per device's heads or columns), added up."""
        if self.tp == 1:
            return partial
        return dev.all_reduce(partial, "sum", self.group, name=name)

    def exit(self, dev: Any, name: str, partial: np.ndarray) -> np.ndarray:
        """g: the region's output partial sums, added up (Megatron's all-reduce after the row-parallel layer)."""
        if self.tp == 1:
            return partial
        return dev.all_reduce(partial, "sum", self.group, name=name)

    def exit_grad(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        """g-bar: the output gradient, whole on every device (plain TP: it already is)."""
        return local

    def regathered(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        """A region's input again, for its weight gradients (plain TP kept it whole)."""
        return local

    def sync_param_grad(self, dev: Any, name: str, value: np.ndarray) -> np.ndarray:
        """A layer norm's or output bias's step gradient: complete already under plain TP."""
        return value


@dataclass(frozen=True)
class SequenceSplit(TensorSplit):
    """Tensor parallelism with Megatron-LM's sequence parallelism (see the module docstring)."""

    regather: bool = False

    sequence_parallel = True

    @property
    def param_partial(self) -> tuple[int, ...] | None:
        return self.group if self.tp > 1 else None

    @property
    def seq(self) -> slice:
        return chunk(self.seq_len, self.tp, self.j) if self.tp > 1 else ALL

    def _shapes(self, local: np.ndarray) -> list[tuple[int, ...]]:
        b, _, d = local.shape
        sizes = [chunk(self.seq_len, self.tp, m) for m in range(self.tp)]
        return [(b, s.stop - s.start, d) for s in sizes]

    def _gather(self, dev: Any, name: str | None, local: np.ndarray) -> np.ndarray:
        return dev.all_gather(local, self.group, axis=1, shapes=self._shapes(local), name=name)

    def enter(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        """f: an all-gather along the sequence. Kept in memory under ``name`` (in place of this device's
        chunk), unless ``regather``: then only the chunk stays, and the backward gathers it again."""
        if self.tp == 1:
            return local
        return self._gather(dev, None if self.regather else name, local)

    def enter_grad(self, dev: Any, name: str, partial: np.ndarray) -> np.ndarray:
        """f-bar: a reduce-scatter along the sequence: each device gets its chunk of the summed gradient."""
        if self.tp == 1:
            return partial
        return dev.reduce_scatter(partial, "sum", self.group, axis=1, name=name)

    def exit(self, dev: Any, name: str, partial: np.ndarray) -> np.ndarray:
        """g: a reduce-scatter along the sequence, in place of the all-reduce."""
        if self.tp == 1:
            return partial
        return dev.reduce_scatter(partial, "sum", self.group, axis=1, name=name)

    def exit_grad(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        """g-bar: an all-gather along the sequence of the output gradient."""
        if self.tp == 1:
            return local
        return self._gather(dev, name, local)

    def regathered(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        """With ``regather``, the region's input gathered again for the weight gradients (Megatron-LM)."""
        if self.tp == 1 or not self.regather:
            return local
        return self._gather(dev, None, local)

    def sync_param_grad(self, dev: Any, name: str, value: np.ndarray) -> np.ndarray:
        """Each device summed its own tokens: the step's gradient is the sum over the group."""
        if self.tp == 1:
            return value
        return dev.all_reduce(value, "sum", self.group, name=name)


def make_split(
    model: Transformer,
    rank: int,
    seq_len: int,
    group: Sequence[int] | None = None,
    sequence_parallel: bool = False,
    regather: bool = False,
) -> TensorSplit:
    """The split of device ``rank`` (``group`` None: the whole block on this device alone)."""
    g = (rank,) if group is None else tuple(group)
    if sequence_parallel:
        return SequenceSplit(model, g, rank, seq_len, regather)
    return TensorSplit(model, g, rank, seq_len)
