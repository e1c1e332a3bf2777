"""Every device simulated: one 1F1B training step of GPT-3's layer shapes on up to 4,096 devices (the engine's scale).

No values are computed: activations, weights and gradients are ``MetaArray`` s (shapes and dtypes),
ops take the seconds their FLOPs need on the cost model's devices, and every message is booked with
its real size. The mesh is dp x pp x tp, tensor parallelism innermost, so that with the ``dgx-h100``
preset each tensor-parallel group is one node (NVLink) and pipeline and data-parallel traffic goes
through the nodes' InfiniBand ports. Device (d, s, t) has rank ``(d * pp + s) * tp + t``.

Each device runs its own program, as a real one would (Megatron-LM's layout, Narayanan et al. 2021):

- pipeline rank s of replica d holds layers ``s * L / pp`` .. of the model and walks the 1F1B schedule
  (``simulator.parallel.schedules``), receiving its input from stage s - 1 and sending its output to
  stage s + 1 (and the gradients back);
- each layer is split Megatron-style over its tp group: a forward is the attention block, an
  all-reduce of its output, the MLP block, another all-reduce; a backward the same in reverse (the
  all-reduces of the input gradients). The all-reduces are rings inside a node, booked whole;
- activations for the backward are held per microbatch (selective recomputation: ``s*b*h*(10 +
  24/t)`` bytes per layer, Korthikanti et al. 2022, Table 2) and freed by its backward; weights
  (fp16), gradients (fp16) and Adam's state (fp32 master, m and v: 12 bytes a parameter) are held
  throughout;
- after its last backward, each device all-reduces its gradients with its data-parallel group
  (a ring over 32 nodes' ports), then takes an Adam step (memory-bound: the state read and written
  once at HBM speed).

FLOPs per layer and microbatch of T = b*s tokens (Narayanan et al. 2021): forward 24*T*h^2 + 4*T*s*h,
split over tp; backward twice that. ``gpt3_step`` runs the whole step; ``benchmarks/whatif_gpt3.py``
runs it from 64 to 4,096 devices and draws the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.device import Device
from ...core.engine import RunResult
from ...core.world import World
from ...cost.meta import MetaArray
from ..schedules import RECV_B, RECV_F, SEND_B, SEND_F, B, F, make_schedule
from .model import Transformer

HBM_BYTES_PER_S = 3.35e12  # H100 SXM HBM3 bandwidth (H100 datasheet): what an Adam step is bound by


@dataclass(frozen=True)
class Step3D:
    """One 1F1B training step of ``model`` on a dp x pp x tp mesh with ``microbatches`` microbatches of
    ``batch`` sequences each per replica; call it as the rank program (``World(dp*pp*tp).run(step)``)."""

    model: Transformer
    dp: int
    pp: int
    tp: int
    microbatches: int
    batch: int = 1

    def __post_init__(self) -> None:
        # every replica's stage s runs the same actions: made once, not once per device
        object.__setattr__(self, "_actions", make_schedule("1f1b", self.pp, self.microbatches).with_comms().actions)
        if self.model.layers % self.pp:
            raise ValueError(f"{self.model.layers} layers do not split evenly over {self.pp} pipeline stages")
        if self.model.hidden % self.tp or self.model.heads % self.tp:
            raise ValueError(f"width {self.model.hidden} and {self.model.heads} heads do not split over tp={self.tp}")

    @property
    def devices(self) -> int:
        return self.dp * self.pp * self.tp

    def coordinate(self, rank: int) -> tuple[int, int, int]:
        """(d, s, t) of a rank."""
        return rank // (self.pp * self.tp), rank // self.tp % self.pp, rank % self.tp

    def rank(self, d: int, s: int, t: int) -> int:
        return (d * self.pp + s) * self.tp + t

    def local_params(self, s: int) -> int:
        """Parameters device (., s, .) holds: its layers' share, and the embedding or head on the ends."""
        m = self.model
        n = m.layers // self.pp * m.layer_params
        if s in (0, self.pp - 1):
            n += m.vocab * m.hidden  # the token embedding on the first stage, the output head on the last
        return n // self.tp

    def __call__(self, dev: Device) -> float:
        m, tp = self.model, self.tp
        d, s, t = self.coordinate(dev.rank)
        layers = m.layers // self.pp
        tokens = self.batch * m.seq
        act = MetaArray((tokens, m.hidden), m.dtype)  # a stage's input and output, on every tp rank
        tp_group = [self.rank(d, s, j) for j in range(tp)]
        dp_group = [self.rank(k, s, t) for k in range(self.dp)]
        params = self.local_params(s)
        dev.hold("weights", MetaArray(params, m.dtype))
        dev.hold("grads", MetaArray(params, m.dtype))
        dev.hold("adam", MetaArray(3 * params, np.float32))  # fp32 master weights, first and second moments
        forward = m.forward_flops(tokens) / tp
        stash = MetaArray(layers * m.activation_bytes(tokens, tp), np.uint8)
        head = 2 * tokens * m.hidden * m.vocab / tp  # the logits' matmul (and its share of the backward)
        sends = []
        for a in self._actions[s]:
            k = a.microbatch
            if a.kind == RECV_F:
                act = dev.recv(self.rank(d, s - 1, t), k, shape=act.shape, dtype=act.dtype)
            elif a.kind == RECV_B:
                act = dev.recv(self.rank(d, s + 1, t), k, shape=act.shape, dtype=act.dtype)
            elif a.kind == SEND_F:
                sends.append(dev.isend(act, self.rank(d, s + 1, t), k))
            elif a.kind == SEND_B:
                sends.append(dev.isend(act, self.rank(d, s - 1, t), k))
            elif a.kind == F:  # (ops keep=False: what the backward needs is held as the stash below)
                for _ in range(layers):
                    act = dev.compute("fwd attention", _same, act, flops=forward / 3, keep=False)
                    act = dev.all_reduce(act, group=tp_group)  # the attention block's row-parallel output
                    act = dev.compute("fwd mlp", _same, act, flops=forward * 2 / 3, keep=False)
                    act = dev.all_reduce(act, group=tp_group)
                if s == self.pp - 1:
                    dev.compute("fwd head", _same, act, flops=head, keep=False)
                dev.hold(f"activations mb{k}", stash)
            elif a.kind == B:
                if s == self.pp - 1:
                    dev.compute("bwd head", _same, act, flops=2 * head, keep=False)
                for _ in range(layers):
                    act = dev.compute("bwd mlp", _same, act, flops=2 * forward * 2 / 3, keep=False)
                    act = dev.all_reduce(act, group=tp_group)  # the input gradient of the column-parallel part
                    act = dev.compute("bwd attention", _same, act, flops=2 * forward / 3, keep=False)
                    act = dev.all_reduce(act, group=tp_group)
                dev.free(f"activations mb{k}")
        for req in sends:
            dev.wait(req)
        if self.dp > 1:
            dev.all_reduce(MetaArray(params, m.dtype), group=dp_group)
        state = params * (2 + 2 + 12)  # weights, gradients and Adam's state, read and written once
        dev.compute("adam", _same, act, seconds=2 * state / HBM_BYTES_PER_S, keep=False)
        return dev.clock


def _same(x: Any) -> Any:
    return x


def gpt3_step(dp: int = 32, pp: int = 16, tp: int = 8, microbatches: int = 16, **world: Any) -> RunResult:
    """One training step of GPT-3's shapes on dp x pp x tp devices of the ``dgx-h100`` preset, metadata only."""
    job = Step3D(Transformer.gpt3(), dp, pp, tp, microbatches)
    options = {"cost": "dgx-h100", "keep_payloads": False, **world}
    return World(job.devices, **options).run(job)
