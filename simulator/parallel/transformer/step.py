"""One training step of a transformer on a device: microbatches through every block and back, gradients summed.

``TransformerStep(model, microbatches)`` is a rank program. On one device it is the reference (every
value named as in ``simulator.parallel.transformer.model``); with ``tensor=group`` every device of the group
runs it with its heads and MLP columns (``sequence_parallel=True`` adds Megatron-LM's sequence split;
see ``simulator.parallel.transformer.sequence``). Microbatch g takes the batch's sequences ``rows`` (an even split),
runs forward through the blocks, computes its loss, and runs backward at once (the order of one device
doing gradient accumulation). Each parameter's gradient is the sum of its microbatches' parts, kept in a
buffer named after the sum (``L0.dWq.mb0+L0.dWq.mb1``) and finally named ``L0.dWq``; the step returns
this device's part of every gradient and the loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ...checker import Reference
from ...core.device import Device
from ...core.engine import RunResult
from ...core.world import World
from ..mlp import split_rows
from . import ops as T
from .block import Block
from .context import ContextSplit
from .model import WEIGHTS, Transformer, pname, vname
from .sequence import TensorSplit, make_split


@dataclass(frozen=True)
class TransformerStep:
    """One training step of ``model`` (see the module docstring); call it as a rank program.

    tensor:            the tensor-parallel group (None: the whole model on each device that runs it)
    sequence_parallel: split the values outside attention and the MLP by sequence too (Megatron-SP)
    regather:          with sequence parallelism, gather the regions' inputs again in the backward
                       instead of keeping them from the forward (Megatron-LM's choice: less memory,
                       one more all-gather per region)
    context:           the context-parallel group instead: each device keeps some tokens of every sequence,
                       attention runs as a ring (``simulator.parallel.transformer.context``), in the chunk ``order``
                       "balanced" (device i holds chunks i and 2c - 1 - i of 2c) or "contiguous"
    """

    model: Transformer
    microbatches: int = 1
    tensor: tuple[int, ...] | None = None
    sequence_parallel: bool = False
    regather: bool = False
    context: tuple[int, ...] | None = None
    order: str = "balanced"

    def __post_init__(self) -> None:
        if self.tensor is not None and self.context is not None:
            raise ValueError(
                "TransformerStep splits over one group, tensor= or context=; the 5-D composition "
                "(simulator.parallel.compose5d) combines them"
            )

    @property
    def group(self) -> tuple[int, ...] | None:
        return self.tensor if self.tensor is not None else self.context

    def split(self, dev: Device, seq_len: int) -> TensorSplit:
        if self.context is not None:
            return ContextSplit(self.model, tuple(self.context), dev.rank, seq_len, self.order)
        return make_split(self.model, dev.rank, seq_len, self.tensor, self.sequence_parallel, self.regather)

    def world(self, **options: Any) -> World:
        return World(len(self.group) if self.group else 1, **options)

    def run(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, **world_options: Any) -> RunResult:
        return self.world(**world_options).run(self, params, x, t)

    def reference(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
        """The same step on one device, every value named."""
        return Reference.of(TransformerStep(self.model, self.microbatches), params, x, t)

    def __call__(self, dev: Device, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict:
        if self.group is not None and dev.rank not in self.group:
            return None
        model = self.model
        model.check_batch(x, t)
        split = self.split(dev, x.shape[1])
        blocks = [Block(dev, model, split, layer, params, x.shape) for layer in range(model.blocks)]
        return run_microbatches(dev, model, split, blocks, x, t, self.microbatches)


def run_microbatches(
    dev: Device, model: Transformer, split: TensorSplit, blocks: Sequence[Block], x, t, microbatches: int
) -> dict[str, np.ndarray]:
    """Forward, loss and backward of each microbatch in turn; the summed gradients and the loss."""
    oi = split.index("outside")
    factor = 1.0 / (x.shape[0] * x.shape[1])  # the loss is a mean over every token of the batch
    last = blocks[-1].layer
    buffers = GradientBuffers(dev, split)
    losses = []
    for g, rows in enumerate(split_rows(x.shape[0], microbatches)):
        local = (slice(None),) if oi is None else (slice(None), split.seq)
        h = dev.hold(f"x.mb{g}", x[rows][local], index=oi, doc=f"the inputs of microbatch {g}")
        target = dev.hold(f"t.mb{g}", t[rows][local], index=oi, doc=f"the targets of microbatch {g}")
        for block in blocks:
            h = block.forward(dev, h, g, rows)
        losses.append(dev.compute(f"loss.mb{g}", partial(T.mse_loss, factor), h, target, partial=split.param_partial))
        dy = dev.compute(vname(last, "dy", g), partial(T.mse_grad, factor), h, target, index=oi)
        dev.free(f"t.mb{g}")
        dev.free(f"loss.mb{g}")
        dev.free(vname(last, "y", g))
        for block in reversed(blocks):
            dy, grads = block.backward(dev, dy, g)
            buffers.add(block, grads, g)
        dev.free(f"dx.mb{g}")
    out = buffers.finish()
    total = sum(losses[1:], losses[0])
    loss = dev.compute("loss", lambda: total, seconds=0.0, partial=split.param_partial)
    if split.param_partial is not None:  # each device's loss covers its tokens only
        loss = dev.all_reduce(loss, "sum", split.group, name="loss")
    out["loss"] = loss
    return out


class GradientBuffers:
    """Each parameter's gradient summed over microbatches in a buffer named after the sum, then named itself.

    A layer may say otherwise: ``grad_name(what, g)`` the name of its microbatch's gradient (an expert-parallel
    layer's own, for sums that mix other devices' sequences), ``internal_grads`` the parameters whose sums are
    then its intermediates (labelled, unchecked by name), and ``sync_group(what)`` the devices its step gradient
    is summed over (default: the split's).
    """

    def __init__(self, dev: Device, split: TensorSplit) -> None:
        self.dev, self.split = dev, split
        self.sums: dict[str, np.ndarray] = {}
        self.names: dict[str, str] = {}
        self.owner: dict[str, Any] = {}

    def add(self, block: Any, grads: dict[str, np.ndarray], g: int) -> None:
        internal = getattr(block, "internal_grads", ())
        for what, value in grads.items():
            key = pname(block.layer, "d" + what)
            name_of = getattr(block, "grad_name", None)
            part = name_of(what, g) if name_of else vname(block.layer, "d" + what, g)
            if key not in self.sums:
                self.sums[key], self.names[key], self.owner[key] = value, part, block
                continue
            total = f"{self.names[key]}+{part}"
            self.sums[key] = self.dev.compute(
                total, np.add, self.sums[key], value, seconds=0.0, index=self.split.param_index(what),
                partial=None if what in internal else getattr(block, "grad_partial", self.split.grad_partial)(what),
                label=f"gradient sum L{block.layer}" if what in internal else None,
            )  # fmt: skip
            self.dev.free(self.names[key])
            self.dev.free(part)
            self.names[key] = total

    def finish(self) -> dict[str, np.ndarray]:
        """The step's gradients, named ``L0.dWq``; those that are partial sums all-reduced over their group (the
        layer's or the split's ``sync_group``: every device that holds the parameter for other tokens)."""
        out = {}
        for key, value in self.sums.items():
            what = key.split(".d", 1)[1]
            block = self.owner[key]
            sync = getattr(block, "sync_group", None) or getattr(self.split, "sync_group", self.split.grad_partial)
            group, index = sync(what), self.split.param_index(what)
            grad = self.dev.compute(key, _const(value), seconds=0.0, index=index, partial=group)
            self.dev.free(self.names[key])
            if group:  # (recorded with this device's part: an all-reduce's result carries no index)
                total = self.dev.all_reduce(grad, "sum", group)
                grad = self.dev.compute(key, _const(total), seconds=0.0, index=index)
            out[key] = grad
        return out


def _const(value: np.ndarray):
    return lambda: value


__all__ = ["WEIGHTS", "GradientBuffers", "TransformerStep", "run_microbatches"]


def transformer_reference(
    model: Transformer, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, microbatches: int = 1
) -> Reference:
    """The one-device training step, every value named: what every parallel run is checked against."""
    return Reference.of(TransformerStep(model, microbatches), params, x, t)
