"""Pipeline parallelism with real arithmetic: a schedule, run as one rank program per device.

The MLP's layers are split by depth into stages (``partition``); ``schedule.placement`` says which
pipeline rank holds each stage. Every rank walks its list of actions in order:

    F       forward of one microbatch through the stage's layers (the last stage adds the loss)
    I       input gradients back through the stage's layers (the last stage starts from the loss)
    W       the stage's weight and bias gradients for that microbatch, added to its gradient sums
    B       I then W
    SEND_*  post the value with isend (waited for at the end of the step, as torch's runtime does;
            ``blocking_sends=True`` uses a blocking send instead, like naive hand-written code)
    RECV_*  receive the value under its model name, with its shape and dtype declared

Every value lives in the device's memory under its model name (``h3.mb2``, ``dz3.mb2``, ...) from the
op or receive that makes it until the last action that needs it frees it, so the trace shows what
each device holds, and ``simulator.parallel.measure`` reads activation memory from it. Each op is
named as in ``simulator.parallel.mlp``, so ``check`` compares every activation and gradient with the
one-device reference. ``costs`` fixes the seconds of each action (split evenly over its ops), which
makes the bubble formulas exact; without it the cost model's FLOP rate sets the time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from ..cost import CostModel
from ..device import Device, Request
from ..engine import RunResult, World
from ..reference import Reference
from . import mlp as M
from .mlp import MLP, mb, split_rows
from .schedules import COMM_KINDS, RECV_B, RECV_F, SEND_B, SEND_F, Action, B, F, I, Schedule, W


@dataclass(frozen=True)
class ActionCosts:
    """Fixed simulated seconds per action: a forward F, the input-gradient part I, the weight part W.

    A full backward B costs I + W. ``ActionCosts.equal(f, b)`` gives F = f and B = b, split evenly.
    """

    F: float = 1.0
    I: float = 0.5  # noqa: E741
    W: float = 0.5

    @property
    def B(self) -> float:
        return self.I + self.W

    @classmethod
    def equal(cls, forward: float = 1.0, backward: float = 1.0) -> ActionCosts:
        return cls(forward, backward / 2, backward / 2)

    def of(self, kind: str) -> float:
        return {F: self.F, B: self.B, I: self.I, W: self.W}[kind]


FREE_LINKS = CostModel(latency=0.0, bandwidth=float("inf"))  # messages take no time: bubbles come from compute only


def split_layers(layers: int, stages: int) -> tuple[tuple[int, int], ...]:
    """Layers 1..L in ``stages`` contiguous groups (first, last), the first groups one longer if uneven."""
    if stages > layers:
        raise ValueError(
            f"cannot split {layers} layers into {stages} stages: every stage needs at least one layer; "
            f"use a deeper model (MLP widths with {stages + 1} entries or more) or fewer stages"
        )
    return tuple((sl.start + 1, sl.stop) for sl in split_rows(layers, stages))


@dataclass(frozen=True)
class Pipeline:
    """One training step of ``mlp`` run by ``schedule``; call it as the rank program of a World.

    partition:        (first, last) layer of each stage, 1-based inclusive; default an even split
    costs:            fixed seconds per action; None to use the cost model's FLOP rate
    blocking_sends:   run SEND actions as blocking sends (rendezvous worlds may deadlock)
    devices:          the device that plays each pipeline rank (default 0..p-1); for 2-D and 3-D meshes
    first_microbatch: the number of this pipeline's first microbatch in the step (for replicas)
    grad_suffix:      appended to the final gradient names (``dW1.replica0`` for a data-parallel replica)
    """

    mlp: MLP
    schedule: Schedule
    partition: tuple[tuple[int, int], ...] = ()
    costs: ActionCosts | None = None
    blocking_sends: bool = False
    devices: tuple[int, ...] = ()
    first_microbatch: int = 0
    grad_suffix: str = ""
    _program: Mapping[int, tuple[Action, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sched = self.schedule
        partition = self.partition or split_layers(self.mlp.layers, sched.stages)
        object.__setattr__(self, "partition", tuple(tuple(p) for p in partition))
        object.__setattr__(self, "devices", tuple(self.devices) or tuple(range(sched.ranks)))
        self._check_partition()
        if len(self.devices) != sched.ranks:
            raise ValueError(f"{sched.ranks} pipeline ranks need {sched.ranks} devices, got devices={self.devices}")
        program = sched.with_comms()
        program.validate(blocking_sends=False)
        object.__setattr__(self, "_program", program.actions)

    def _check_partition(self) -> None:
        expect = 1
        if len(self.partition) != self.schedule.stages:
            raise ValueError(f"partition has {len(self.partition)} stages, the schedule {self.schedule.stages}")
        for s, (first, last) in enumerate(self.partition):
            if first != expect or last < first:
                raise ValueError(
                    f"partition {self.partition}: stage {s} must start at layer {expect} and hold at least one "
                    f"layer; stages take consecutive layers 1..{self.mlp.layers}"
                )
            expect = last + 1
        if expect != self.mlp.layers + 1:
            raise ValueError(
                f"partition {self.partition} covers layers 1..{expect - 1}, the model has {self.mlp.layers}"
            )

    # ---- conveniences -------------------------------------------------------------------------
    def world(self, **options: Any) -> World:
        """A World with one device per pipeline rank and free links (so only compute makes time)."""
        options.setdefault("cost", FREE_LINKS)
        return World(self.schedule.ranks, **options)

    def run(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray, **world_options: Any) -> RunResult:
        return self.world(**world_options).run(self, params, x, t)

    def reference(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> Reference:
        """The one-device run with the same microbatches: what ``check`` compares this pipeline with."""
        return M.mlp_reference(self.mlp, params, x, t, self.schedule.microbatches)

    # ---- the rank program ---------------------------------------------------------------------
    def __call__(
        self, dev: Device, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray
    ) -> dict[str, np.ndarray] | None:
        """The rank program: returns the gradients of the layers this device holds (and the loss on
        the device with the last stage)."""
        if dev.rank not in self.devices:
            return None  # this device plays no part in this pipeline
        return _Runner(self, dev, params, x, t).run()

    @staticmethod
    def gathered(result: RunResult) -> dict[str, np.ndarray]:
        """Every device's returned gradients in one dict (for tests and notebooks)."""
        out: dict[str, np.ndarray] = {}
        for grads in result.outputs:
            out |= grads or {}
        return out


class _Runner:
    """One device's part of one pipeline step: its stages, its actions, its gradient sums."""

    def __init__(self, pipe: Pipeline, dev: Device, params, x, t) -> None:
        self.pipe, self.dev, self.mlp = pipe, dev, pipe.mlp
        self.sched = pipe.schedule
        self.prank = pipe.devices.index(dev.rank)
        self.x, self.t = x, t
        pipe.mlp.check_batch(x, t)
        self.rows = split_rows(x.shape[0], self.sched.microbatches)
        self.scale = 1.0 / x.shape[0]
        self.stages = [s for s, r in enumerate(self.sched.placement) if r == self.prank]
        self.params: dict[str, np.ndarray] = {}
        for s in self.stages:
            for k in self._layers(s):
                for p in ("W", "b"):
                    self.params[f"{p}{k}"] = dev.hold(f"{p}{k}", params[f"{p}{k}"], doc=f"stage {s}'s layer {k}")
        self.grads: dict[str, np.ndarray] = {}
        self.losses: list[np.ndarray] = []
        self.sends: list[Request] = []

    def _layers(self, s: int) -> range:
        first, last = self.pipe.partition[s]
        return range(first, last + 1)

    def g(self, i: int) -> int:
        return self.pipe.first_microbatch + i

    def seconds(self, kind: str, n_ops: int) -> float | None:
        costs = self.pipe.costs
        return None if costs is None else costs.of(kind) / n_ops

    def run(self) -> dict[str, np.ndarray]:
        """Walk the action list; return this device's step gradients (and the loss, on the last stage)."""
        handlers = {F: self.forward, I: self.input_grad, W: self.weight_grad, B: self.backward}
        handlers |= {k: self.communicate for k in COMM_KINDS}
        for a in self.pipe._program[self.prank]:
            handlers[a.kind](a)
        for req in self.sends:
            self.dev.wait(req)
        suffix = self.pipe.grad_suffix
        out = {}
        for name in sorted(self.grads, key=_grad_order):
            out[name] = self.dev.compute(name + suffix, _const(self.grads[name]), seconds=0.0)
        if self.sched.stages - 1 in self.stages:
            total = sum(self.losses[1:], self.losses[0])
            out["loss"] = self.dev.compute("loss" + suffix, _const(total), seconds=0.0)
        return out

    # ---- compute actions ----------------------------------------------------------------------
    def forward(self, a: Action) -> None:
        dev, s, i = self.dev, a.stage, a.microbatch
        g = self.g(i)
        layers = self._layers(s)
        last = s == self.sched.stages - 1
        n_ops = len(layers) + (1 if last else 0)
        if s == 0:
            h = dev.hold(mb("x", g), self.x[self.rows[i]], doc=f"the inputs of microbatch {g}")
        else:
            h = self._need(mb(M.act_name(layers[0] - 1), g), a)
        for k in layers:
            h = dev.compute(
                mb(f"h{k}", g),
                self.mlp.forward_op(k),
                h,
                self.params[f"W{k}"],
                self.params[f"b{k}"],
                flops=M.matmul_flops(h.shape[0], *self.params[f"W{k}"].shape),
                seconds=self.seconds(F, n_ops),
            )
        if last:
            labels = dev.hold(mb("t", g), self.t[self.rows[i]], doc=f"the targets of microbatch {g}")
            loss = dev.compute(
                mb("loss", g), partial(M.loss_value, self.scale), h, labels, seconds=self.seconds(F, n_ops)
            )
            self.losses.append(loss)

    def input_grad(self, a: Action) -> None:
        dev, s, i = self.dev, a.stage, a.microbatch
        g = self.g(i)
        layers = self._layers(s)
        L = self.mlp.layers
        last = s == self.sched.stages - 1
        n_ops = sum((k < L) + (k > 1) for k in layers) + (1 if last else 0)
        secs = self.seconds(I, n_ops)
        top = layers[-1]
        if last:
            y, labels = self._need(mb(f"h{L}", g), a), self._need(mb("t", g), a)
            dh = dev.compute(mb(f"dh{L}", g), partial(M.loss_grad, self.scale), y, labels, seconds=secs)
            dev.free(mb("t", g))
            dev.free(mb("loss", g))
        else:
            dh = self._need(mb(f"dh{top}", g), a)
        for k in reversed(layers):
            if k < L:
                h = self._need(mb(f"h{k}", g), a)
                dz = dev.compute(mb(f"dz{k}", g), self.mlp.backward_op(k), dh, h, seconds=secs)
                dev.free(mb(f"dh{k}", g))  # dz replaces it
            else:
                dz = dh  # the last layer has no activation: its dz is dh itself
            if k == top:
                dev.free(mb(f"h{k}", g))  # no W needs a stage's own output
            if k > 1:
                W_ = self.params[f"W{k}"]
                dh = dev.compute(
                    mb(f"dh{k - 1}", g),
                    M.input_grad,
                    dz,
                    W_,
                    flops=M.matmul_flops(dz.shape[0], *W_.shape[::-1]),
                    seconds=secs,
                )

    def weight_grad(self, a: Action) -> None:
        dev, s, i = self.dev, a.stage, a.microbatch
        g = self.g(i)
        layers = self._layers(s)
        L = self.mlp.layers
        secs = self.seconds(W, 2 * len(layers))
        for k in reversed(layers):
            h_prev = self._need(mb(M.act_name(k - 1), g), a)
            dz_name = mb(f"dz{k}" if k < L else f"dh{k}", g)
            dz = self._need(dz_name, a)
            dW = dev.compute(
                mb(f"dW{k}", g),
                M.weight_grad,
                h_prev,
                dz,
                flops=M.matmul_flops(h_prev.shape[1], h_prev.shape[0], dz.shape[1]),
                seconds=secs,
                keep=False,
            )
            db = dev.compute(mb(f"db{k}", g), M.bias_grad, dz, seconds=secs, keep=False)
            for name, value in ((f"dW{k}", dW), (f"db{k}", db)):
                self.grads[name] = value if name not in self.grads else self.grads[name] + value
            dev.free(dz_name)
            dev.free(mb(M.act_name(k - 1), g))

    def backward(self, a: Action) -> None:
        self.input_grad(a)
        self.weight_grad(a)

    # ---- communication ------------------------------------------------------------------------
    def communicate(self, a: Action) -> None:
        s, i = a.stage, a.microbatch
        g = self.g(i)
        first, last = self.pipe.partition[s]
        dev = self.dev
        if a.kind == SEND_F:
            self._send(self._need(mb(f"h{last}", g), a), s + 1, self._tag(s, i, F), f"{a}")
        elif a.kind == SEND_B:
            name = mb(f"dh{first - 1}", g)
            self._send(self._need(name, a), s - 1, self._tag(s, i, B), f"{a}")
            dev.free(name)  # the message carries a copy
        elif a.kind == RECV_F:
            width = self.mlp.widths[first - 1]
            dev.recv(
                self._device(s - 1),
                self._tag(s - 1, i, F),
                shape=(self._rows(i), width),
                dtype=np.float64,
                name=mb(M.act_name(first - 1), g),
            )
        elif a.kind == RECV_B:
            width = self.mlp.widths[last]
            dev.recv(
                self._device(s + 1),
                self._tag(s + 1, i, B),
                shape=(self._rows(i), width),
                dtype=np.float64,
                name=mb(f"dh{last}", g),
            )

    def _send(self, value: np.ndarray, stage: int, tag: int, label: str) -> None:
        dst = self._device(stage)
        if self.pipe.blocking_sends:
            self.dev.send(value, dst, tag, label=label)
        else:
            self.sends.append(self.dev.isend(value, dst, tag, label=label))

    def _device(self, stage: int) -> int:
        return self.pipe.devices[self.sched.rank_of(stage)]

    def _rows(self, i: int) -> int:
        sl = self.rows[i]
        return sl.stop - sl.start

    def _tag(self, sending_stage: int, i: int, direction: str) -> int:
        """An int tag unique per value (the torch backend needs int tags)."""
        return (self.g(i) * self.sched.stages + sending_stage) * 2 + (direction == B)

    def _need(self, name: str, a: Action) -> np.ndarray:
        memory = self.dev.memory
        if name not in memory:
            raise RuntimeError(
                f"device {self.dev.rank} runs {a} and needs {name}, which it does not hold; it holds "
                f"{sorted(memory)}. Check the schedule's order and that the value was received first."
            )
        return memory[name]


def _const(value: np.ndarray):
    return lambda: value


def _grad_order(name: str) -> tuple[int, str]:
    """Gradients reported from the last layer down, as the reference computes them."""
    return (-int(name[2:]), name[:2])
