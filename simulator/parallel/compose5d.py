"""The 5-D composition: one training step of a transformer over dp x ep x pp x cp x tp devices.

The model is a stack of 2 p layers for p pipeline stages: a transformer block (attention and a dense MLP) then a
mixture-of-experts layer, on every stage. The mesh's dimensions are ("dp", "ep", "pp", "cp", "tp"). Device
(d, e, s, c, j):

- runs stage s (layers 2s and 2s + 1) of a pipeline schedule (``schedules``: 1F1B by default) with the devices
  (d, e, *, c, j), receiving its stage's input from stage s - 1 and its output gradient from stage s + 1;
- takes the sequences of replica (d, e) of the batch: both "dp" and "ep" split the batch (Megatron-Core folds
  expert parallelism into data parallelism the same way);
- holds the load-balanced context chunk c of every sequence, attention running as a ring over its "cp" group
  (``context``);
- holds heads and MLP columns j of the block, with Megatron's sequence parallelism over its "tp" group
  (``composed_split``);
- holds the experts e E/|ep| .. of its MoE layer and exchanges token rows with its "ep" group (``moe_layer``).

Every parameter's gradient is a sum over tokens: a device's is one term, all-reduced at the end over the
devices that hold the same piece of the parameter for other tokens ("dp", "ep", "cp", and "tp" for what is
applied outside the regions; an expert's over "dp", "cp", "tp"). The result is one device's gradient of the
whole batch, which ``reference`` computes (the same stack on one device, the batch in dp x ep x m
microbatches), and ``check`` compares every activation, message and gradient with it (an expert's rows, which
mix several devices' sequences, are checked through the gradients they add up to).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..checker import Reference
from ..core.device import Device, Request
from ..core.engine import RunResult
from ..core.world import World
from ..tensors.mesh import DeviceMesh
from .experts.model import MoE
from .experts.moe_layer import MoELayer, expert_names
from .mlp import split_rows
from .schedules import RECV_B, RECV_F, SEND_B, SEND_F, B, F, make_schedule
from .transformer import ops as T
from .transformer.block import Block
from .transformer.composed_split import ComposedSplit, subgroup
from .transformer.model import Transformer, input_grad_name, pname, vname
from .transformer.sequence import make_split
from .transformer.step import GradientBuffers, run_microbatches

DIMS = ("dp", "ep", "pp", "cp", "tp")
PIPE_TAG = 4096  # the pipeline's tags: below ring attention's (2**28) and the collectives' (2**30)


def stack_params(transformer: Transformer, moe: MoE, stages: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters of the 2 x ``stages`` layers: blocks on even layers, mixtures of experts on odd ones."""
    params: dict[str, np.ndarray] = {}
    for s in range(stages):
        block = Transformer(transformer.d_model, transformer.heads, transformer.d_ff).init(seed + s)
        params |= {k.replace("L0.", f"L{2 * s}.", 1): v for k, v in block.items()}
        params |= {f"L{2 * s + 1}.{k}": v for k, v in moe.init(seed + 100 + s).items()}
    return params


def stack_loss(transformer: Transformer, moe: MoE, stages: int, params: dict, x: np.ndarray, t: np.ndarray) -> float:
    """The stack's loss in plain NumPy, the whole batch at once (for finite differences; without dropout)."""
    if transformer.dropout:
        raise ValueError("stack_loss computes a stack without dropout")
    h = x
    for s in range(stages):
        block = {k.replace(f"L{2 * s}.", "L0.", 1): v for k, v in params.items() if k.startswith(f"L{2 * s}.")}
        h = transformer._block_forward(block, 0, h)[2]["y"]
        mix = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith(f"L{2 * s + 1}.")}
        flat = h.reshape(-1, h.shape[-1])
        h = (
            MoE(moe.d_model, moe.d_ff, moe.experts, moe.top_k, moe.capacity_factor, 1)
            .forward(mix, flat)
            .reshape(h.shape)
        )
    return float(T.mse_loss(1.0 / (x.shape[0] * x.shape[1]), h, t))


@dataclass(frozen=True)
class Parallel5D:
    """One training step of the stack on ``mesh`` (dimensions ``DIMS``); call it as the rank program."""

    transformer: Transformer
    moe: MoE
    mesh: DeviceMesh
    microbatches: int = 2
    schedule: str = "1f1b"
    sequence_parallel: bool = True

    def __post_init__(self) -> None:
        if self.mesh.dim_names != DIMS:
            raise ValueError(f"Parallel5D needs a mesh with dim_names {DIMS}, got {self.mesh!r}")
        if self.moe.experts % self.mesh.size("ep"):
            raise ValueError(f"{self.moe.experts} experts do not spread over {self.mesh.size('ep')} devices")
        make_schedule(self.schedule, self.mesh.size("pp"), self.microbatches)  # fail now on a bad combination

    @property
    def stages(self) -> int:
        return self.mesh.size("pp")

    @property
    def replicas(self) -> int:
        return self.mesh.size("dp") * self.mesh.size("ep")

    def world(self, **options: Any) -> World:
        return World(self.mesh.size(), **options)

    def run(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, **world_options: Any) -> RunResult:
        return self.world(**world_options).run(self, params, x, t)

    def reference(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
        """The stack on one device, the batch in (dp x ep) x m microbatches; the experts' rows left out of
        what the run must compute (they mix several devices' sequences there)."""
        ref = Reference.of(
            _one_device, self.transformer, self.moe, self.stages, self.replicas * self.microbatches, params, x, t
        )
        # each replica sums its own microbatches: the one-device chain of sums (mb0+mb1+mb2...) is not anyone's
        ref.computed = [n for n in ref.computed if not expert_names(n) and "+" not in n]
        return ref

    # ---- the rank program -------------------------------------------------------------------------
    def __call__(self, dev: Device, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict:
        return _Runner(self, dev, params, x, t).run()


def _one_device(dev: Device, transformer: Transformer, moe: MoE, stages: int, microbatches: int, params, x, t) -> dict:
    split = make_split(transformer, dev.rank, x.shape[1])
    layers: list[Any] = []
    for s in range(stages):
        layers.append(Block(dev, transformer, split, 2 * s, params, x.shape))
        layers.append(MoELayer(dev, moe, split, 2 * s + 1, params, x.shape))
    return run_microbatches(dev, transformer, split, layers, x, t, microbatches)


class _Runner:
    """One device's part of the 5-D step: its stage's layers, its microbatches, its pipeline actions."""

    def __init__(self, step: Parallel5D, dev: Device, params, x, t) -> None:
        self.step, self.dev, self.x, self.t = step, dev, x, t
        mesh = step.mesh
        self.coord = dict(zip(DIMS, mesh.coordinate(dev.rank)))
        c = self.coord
        self.split = ComposedSplit.of(step.transformer, mesh, dev.rank, x.shape[1], step.sequence_parallel)
        s = self.stage = c["pp"]
        expert_dims = ("dp", "cp", "tp") if step.sequence_parallel else ("dp", "cp")
        self.layers = [
            Block(dev, step.transformer, self.split, 2 * s, params, x.shape),
            MoELayer(dev, step.moe, self.split, 2 * s + 1, params, x.shape, mesh.group("ep", dev.rank),
                     subgroup(mesh, dev.rank, expert_dims)),
        ]  # fmt: skip
        self.replica = c["dp"] * mesh.size("ep") + c["ep"]
        self.rows = split_rows(x.shape[0], step.replicas)[self.replica]
        self.buffers = GradientBuffers(dev, self.split)
        self.sends: list[Request] = []
        self.losses: list[np.ndarray] = []
        self.grads_in: dict[int, np.ndarray] = {}
        self.oi = self.split.index("outside")

    def _device(self, stage: int) -> int:
        coord = [self.coord[d] for d in DIMS]
        coord[DIMS.index("pp")] = stage
        return self.step.mesh.rank_at(coord)

    def _micro(self, i: int) -> tuple[int, slice]:
        """Microbatch i of this replica: its number in the step and its rows of the batch."""
        local = split_rows(self.rows.stop - self.rows.start, self.step.microbatches)[i]
        return self.replica * self.step.microbatches + i, slice(
            self.rows.start + local.start, self.rows.start + local.stop
        )

    def _local(self, value: np.ndarray, rows: slice) -> np.ndarray:
        return value[rows][:, self.split.seq]

    def run(self) -> dict:
        sched = make_schedule(self.step.schedule, self.step.stages, self.step.microbatches).with_comms()
        handlers = {F: self.forward, B: self.backward, SEND_F: self.send_f, SEND_B: self.send_b}
        handlers |= {RECV_F: lambda a: None, RECV_B: lambda a: None}  # received where used (named, in place)
        for action in sched.actions[self.stage]:
            handlers[action.kind](action)
        for req in self.sends:
            self.dev.wait(req)
        out = self.buffers.finish()
        if self.stage == self.step.stages - 1:
            total = sum(self.losses[1:], self.losses[0])
            group = self.split.sync_group("Wr")  # every device of the last stage that holds other tokens
            loss = self.dev.compute("loss", lambda: total, seconds=0.0, partial=group)
            out["loss"] = self.dev.all_reduce(loss, "sum", group, name="loss")
        return out

    def _shape(self, rows: slice) -> tuple[int, int, int]:
        return (rows.stop - rows.start, len(self.split.seq), self.x.shape[2])

    def forward(self, a) -> None:
        dev, (g, rows) = self.dev, self._micro(a.microbatch)
        first, last = self.layers[0].layer, self.layers[-1].layer
        if self.stage == 0:
            h = dev.hold(f"x.mb{g}", self._local(self.x, rows), index=self.oi)
        else:
            h = dev.recv(self._device(self.stage - 1), PIPE_TAG + 2 * g, shape=self._shape(rows), dtype=np.float64,
                         name=vname(first - 1, "y", g), index=self.oi)  # fmt: skip
        for layer in self.layers:
            h = layer.forward(dev, h, g, rows)
        if self.stage == self.step.stages - 1:
            factor = 1.0 / (self.x.shape[0] * self.x.shape[1])
            target = dev.hold(f"t.mb{g}", self._local(self.t, rows), index=self.oi)
            self.losses.append(
                dev.compute(f"loss.mb{g}", partial(T.mse_loss, factor), h, target, partial=self.split.param_partial)
            )
            self.grads_in[g] = dev.compute(vname(last, "dy", g), partial(T.mse_grad, factor), h, target, index=self.oi)
            for name in (f"t.mb{g}", f"loss.mb{g}", vname(last, "y", g)):
                dev.free(name)

    def send_f(self, a) -> None:
        g, _ = self._micro(a.microbatch)
        value = self.dev.memory[vname(self.layers[-1].layer, "y", g)]
        self.sends.append(self.dev.isend(value, self._device(self.stage + 1), PIPE_TAG + 2 * g, label=str(a)))

    def backward(self, a) -> None:
        dev, (g, rows) = self.dev, self._micro(a.microbatch)
        last = self.layers[-1].layer
        if self.stage == self.step.stages - 1:
            dy = self.grads_in.pop(g)
        else:
            dy = dev.recv(self._device(self.stage + 1), PIPE_TAG + 2 * g + 1, shape=self._shape(rows), dtype=np.float64,
                          name=vname(last, "dy", g), index=self.oi)  # fmt: skip
            dev.free(vname(last, "y", g))  # sent on: the next stage had it
        for layer in reversed(self.layers):
            dy, grads = layer.backward(dev, dy, g)
            self.buffers.add(layer, grads, g)
        if self.stage == 0:
            dev.free(input_grad_name(0, g))

    def send_b(self, a) -> None:
        g, _ = self._micro(a.microbatch)
        name = input_grad_name(self.layers[0].layer, g)
        self.sends.append(
            self.dev.isend(self.dev.memory[name], self._device(self.stage - 1), PIPE_TAG + 2 * g + 1, label=str(a))
        )
        self.dev.free(name)


__all__ = ["DIMS", "Parallel5D", "pname", "stack_loss", "stack_params"]


def message_counts(step: Parallel5D) -> dict[str, int]:
    """Messages of one 5-D step by kind, summed over the devices, in closed form (ring collectives; ``ring
    attention`` as in ``transformer_costs.context_volume``; the all-to-alls direct, every pair exchanging one).

    Per device and microbatch: the pipeline sends its stage's output forward and its input gradient back
    across each stage boundary; the block's four all-gathers and four reduce-scatters over "tp" (sequence
    parallelism) or four all-reduces (without: the same messages); 6c - 4 ring attention messages over "cp";
    the MoE layer's count all-gather and four all-to-alls over "ep". Once per step, each parameter's gradient is
    all-reduced over its group, and the loss over the last stage's devices.
    """
    mesh, m = step.mesh, step.microbatches
    n, pp, tp, cp, ep, dp = (mesh.size(),) + tuple(mesh.size(d) for d in ("pp", "tp", "cp", "ep", "dp"))
    per_stage = n // pp
    counts = {
        "pipeline": 2 * (pp - 1) * per_stage * m,
        "tensor parallel": 8 * (tp - 1) * n * m,
        "ring attention": (6 * cp - 4) * n * m if cp > 1 else 0,
        "expert parallel": 5 * (ep - 1) * n * m,
    }
    token_summed = (
        dp * ep * cp * (tp if step.sequence_parallel else 1)
    )  # the router, the layer norms, the d-wide biases
    sharded = dp * ep * cp  # the block's weights and b1, each device holding its tensor-parallel piece
    expert = dp * cp * (tp if step.sequence_parallel else 1)  # an expert's replicas
    experts_here = step.moe.experts // ep
    groups = [token_summed] * 7 + [sharded] * 7 + [expert] * (4 * experts_here)
    counts["gradients"] = n * sum(2 * (g - 1) for g in groups) + per_stage * 2 * (token_summed - 1)  # + the loss
    return counts


def message_kind(label: str | None) -> str:
    """Which of ``message_counts``' kinds a message of a 5-D step belongs to, from its label."""
    if label is None:
        return "?"
    if "SEND" in label:
        return "pipeline"
    if label.startswith("ring attention"):
        return "ring attention"
    return label.split("#", 1)[0]
