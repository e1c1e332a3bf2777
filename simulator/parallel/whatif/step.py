"""One training step on the engine: one device per pipeline rank stands for all its replicas and tp ranks.

Every data-parallel replica, every tensor- and context-parallel rank of a pipeline stage runs the same
program at the same times, so the step simulates one device per pipeline rank (``World(pp)``) and reuses its
timeline for the ``tp * cp * dp`` devices it stands for; collectives inside those groups are priced, not
sent (``price.py``). What each device does:

- it walks its rank's actions in the schedule (``simulator.parallel.schedules``, with its sends and receives),
  each compute action taking the seconds ``price.action_costs`` gives, one op per category so the timeline
  shows them; a forward's output (or a backward's input gradient) goes to the neighbouring rank as a real
  message of b s h / tp bytes per tp rank (Megatron-LM's scatter-gather of pipeline tensors, on by default
  since February 2021, commit 72e4230bb5, and the natural shard under sequence parallelism), over the
  network port between nodes (or NVLink when neighbours share a node); a receive's wait is pipeline
  communication up to the message's own time, and bubble beyond it;
- its gradients are reduced over the data-parallel (and context-parallel) ranks: with ``dp_overlap``
  bucket by bucket (Megatron-LM's default 40 M-element buckets) as the last microbatch's backward of
  each chunk produces them, on a stream beside the compute, so only what outlasts the backward shows;
  without, after the backward. ZeRO-1/2 reduce-scatter them and all-gather the updated weights (hidden behind
  the next step's first forward with ``dp_overlap``); ZeRO-2 reduce-scatters every microbatch, ZeRO-3 also
  gathers each layer's weights for every forward and backward (its stream's excess over the compute shows);
- tied embeddings (``pp > 1``): the first and last stages all-reduce the embedding's gradient;
- the optimizer step makes the passes over its shard that Megatron-LM's mixed-precision optimizer makes
  (``optimizer_bytes``), at the achieved memory bandwidth.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ...core.device import Device
from ...core.engine import RunResult
from ...core.world import World
from ...cost.meta import MetaArray
from ...cost.model import CostModel
from ...cost.systems import System
from ..schedules import RECV_B, RECV_F, SEND_B, SEND_F, B, Schedule, W, make_schedule
from .layer import PerRank
from .memory import rank_params
from .model import Transformer
from .price import action_costs, total
from .training_setup import TrainingSetup

RECV, SEND, COMPUTE = 0, 1, 2
BUCKET = 40_000_000  # elements: Megatron-LM's default gradient bucket (--ddp-bucket-size)


# Bytes a parameter that PyTorch's Adam makes op by op over fp32 weights and gradients, as composer's
# DecoupledAdamW (composer/optim/decoupled_weight_decay.py; llm-foundry's MPT configs: weight decay 0, so no
# decay pass) and FSDP's clip_grad_norm_ run them: the gradient's norm (4) and its scaling (4 + 4); m's mul_
# (4 + 4) and add_ (4 + 4 + 4); v's mul_ (4 + 4) and addcmul_ (4 + 4 + 4); sqrt, the division by the bias
# correction and the add of eps, each 4 + 4; the weights' addcdiv_ (4 + 4 + 4 + 4). FSDP gathers the weights
# in 16 bits from these fp32 ones and frees the gradients (``set_to_none``): no copy and no zeroing.
UNFUSED_ADAM = (4 + 8) + (8 + 12) + (8 + 12) + 3 * 8 + 16


def optimizer_bytes(layout: TrainingSetup) -> int:
    """Bytes a parameter that one optimizer step moves, pass by pass as Megatron-LM's mixed-precision optimizer
    makes them (megatron/optimizer/optimizer.py, 2021-2022, with apex's FusedAdam and ``--clip-grad 1.0``):
    fp32 main gradients cast from 2-byte ones (2 + 4), fp16's unscaling with its check for inf (4 + 4), the
    gradient norm (4), Adam (parameter, gradient, m and v read, 16; parameter, m and v written, 12), the
    updated parameters copied to the model's 16-bit ones (4 + 2), and the gradients zeroed. With
    ``layout.optimizer == "unfused"``, PyTorch's Adam op by op (``UNFUSED_ADAM``)."""
    _, gb, _ = layout.bytes_per_param
    if layout.optimizer == "unfused":
        return UNFUSED_ADAM
    cast = gb + 4 if gb < 4 else 0
    unscale = 4 + 4 if layout.precision == "fp16" else 0
    return cast + unscale + 4 + (16 + 12) + (4 + 2) + gb


@dataclass
class RankTime:
    """Where one pipeline rank's step goes, in seconds by category (see ``report.KINDS``)."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    end: float = 0.0  # when its last compute action finished


def schedule_for(layout: TrainingSetup) -> Schedule:
    """The layout's schedule, with its sends and receives."""
    return make_schedule(layout.schedule, layout.pp, layout.microbatches, **layout.schedule_options).with_comms()


class StageProgram:
    """The rank program of the step (see the module docstring); call it as ``World(pp).run(program)``."""

    def __init__(self, model: Transformer, layout: TrainingSetup, system: System, schedule: Schedule) -> None:
        self.model, self.layout, self.system, self.schedule = model, layout, system, schedule
        self.costs = action_costs(model, layout, system.achieved)
        self.seconds = [{kind: total(c) for kind, c in per_kind.items()} for per_kind in self.costs]
        z = PerRank.of(model, layout)
        split = layout.tp > 1  # each tp rank sends its share (scatter-gather, or the sequence-parallel shard)
        self.message = MetaArray((int(z.T * z.h * z.e / (layout.tp if split else 1)),), np.uint8)
        achieved = system.achieved
        self.wire = achieved.p2p_time(self.message.nbytes, layout.pp_same_node)
        regather = split and not layout.sequence_parallel  # the received share is all-gathered inside the node
        self.regather = achieved.collective_time("all_gather", z.T * z.h * z.e, layout.tp) if regather else 0.0
        self.times: dict[int, RankTime] = {}

    def plan(self, rank: int) -> list[tuple]:
        """The rank's actions as (what, peer or stage, tag or kind, seconds, name, finishes a chunk) tuples.

        Messages between two stages keep their order (each stage takes its microbatches in order), so one
        tag per stage boundary and direction is enough to match them. A received share's all-gather inside
        the node (``regather``) runs as part of the compute action that uses it."""
        sched = self.schedule
        acts = sched.actions[rank]
        finishing = {a.stage: k for k, a in enumerate(acts) if a.kind in (B, W)}  # its gradients complete after it
        out = []
        pending = 0.0
        for k, a in enumerate(acts):
            kind, s = a.kind, a.stage
            if kind in (RECV_F, RECV_B):
                back = kind == RECV_B
                out.append((RECV, sched.rank_of(s + 1 if back else s - 1), 2 * s + back + 1, 0.0, "", False))
                pending += self.regather
            elif kind in (SEND_F, SEND_B):
                back = kind == SEND_B
                to = s - 1 if back else s + 1
                out.append((SEND, sched.rank_of(to), 2 * to + back + 1, 0.0, "", False))
            else:
                out.append((COMPUTE, s, kind, self.seconds[s][kind] + pending, str(a), finishing.get(s) == k))
                pending = 0.0
        return out

    def __call__(self, dev: Device) -> float:
        r = dev.rank
        time = self.times[r] = RankTime()
        chunks = [s for s in range(self.schedule.stages) if self.schedule.placement[s] == r]
        done_at: dict[int, tuple[float, float]] = {}  # chunk -> (start, end) of the action that completes its grads
        ran: dict[tuple[int, str], int] = defaultdict(int)  # (stage, kind) -> how many actions ran
        message, wire = self.message, self.wire
        pp = bubble = 0.0
        for what, peer, tag, seconds, name, finishes in self.plan(r):
            if what == COMPUTE:
                start = dev.clock
                dev.compute(name, _same, message, seconds=seconds, keep=False)
                ran[peer, tag] += 1
                if finishes:
                    done_at[peer] = (start, dev.clock)
            elif what == SEND:
                dev.send(message, peer, tag)
            else:
                t0 = dev.clock
                dev.recv(peer, tag)
                waited = dev.clock - t0
                pp += min(waited, wire) + self.regather
                bubble += waited - min(waited, wire)
        time.seconds["pp"] += pp
        time.seconds["bubble"] += bubble
        for (s, kind), count in ran.items():
            for category, seconds in self.costs[s][kind].items():
                time.seconds[category] += count * seconds
        time.end = dev.clock
        self._finish(dev, time, chunks, done_at)
        return dev.clock

    def _finish(self, dev: Device, time: RankTime, chunks: list[int], done_at: dict[int, tuple[float, float]]) -> None:
        """Gradient reduction, weight gathering and the optimizer step after the rank's last backward."""
        layout, model, achieved = self.layout, self.model, self.system.achieved
        dense, experts = rank_params(model, layout, dev.rank, self.schedule.placement)
        params = dense + experts
        _, gb, _ = layout.bytes_per_param
        if layout.grad_accumulation == "fsdp":  # FSDP reduces in the weights' 16-bit type (reduce_dtype: param_dtype)
            gb = model.itemsize
        ranks = layout.dp * layout.cp
        expert_ranks = max(1, ranks // layout.ep)  # an expert's replicas: the data-parallel ranks of its ep rank

        def coll(kind: str, elements: float, itemsize: float) -> float:
            """A collective over this rank's weights (``elements`` of them in all), dense and expert groups apart."""
            share = elements / params if params else 0.0  # a middle stage of no layers holds no weights
            dense_time = achieved.collective_time(
                kind, dense * share * itemsize, ranks, layout.per_node(layout.tp, ranks)
            )
            stride = layout.tp * layout.cp * layout.ep
            expert_group = (expert_ranks, layout.per_node(stride, expert_ranks))
            return dense_time + achieved.collective_time(kind, experts * share * itemsize, *expert_group)

        reduce_kind = "all_reduce" if layout.zero == 0 or layout.grad_reduce == "all-reduce" else "reduce_scatter"
        stream = 0.0  # when the gradient stream is next free
        beside = 0.0  # seconds of it that ran beside the backward (overlapped: the kernels there ran slower)
        counts = layout.chunk_layers(model)
        held = sum(counts[c] for c in chunks)  # this rank's layers: its chunks' gradients in proportion
        for s in sorted(done_at, key=lambda c: done_at[c][1]):
            start, end = done_at[s]
            per_chunk = params * (counts[s] / held if held else 1 / len(chunks))
            if not layout.dp_overlap or ranks == 1:
                stream = max(stream, time.end) + coll(reduce_kind, per_chunk, gb)
                continue
            if layout.zero >= 3:  # its last microbatch's reduce-scatters share the backward with the gathers
                continue
            buckets = max(1, math.ceil(per_chunk / max(BUCKET, 1_000_000 * layout.dp)))
            for k in range(buckets):
                ready = start + (end - start) * (k + 1) / buckets
                seconds = coll(reduce_kind, per_chunk / buckets, gb)
                begin = max(stream, ready)
                beside += max(0.0, min(begin + seconds, time.end) - begin)
                stream = begin + seconds
        contention = achieved.overlap_slowdown * beside
        if layout.zero >= 2:
            exposed_layers, slowed = self._sharded_layers(coll, params, max(held, 1), chunks)
            stream = max(stream, time.end) + exposed_layers
            contention += slowed
        if layout.pp > 1 and model.tied and (0 in chunks or self.schedule.stages - 1 in chunks):
            emb = model.padded_vocab(layout.tp) * model.hidden / layout.tp * gb
            together = 2 if layout.ends_share_a_node else 1  # then NVLink carries it, not the ports
            stream = max(stream, time.end) + achieved.collective_time("all_reduce", emb, 2, together)
        exposed = max(0.0, stream - time.end)
        if contention > 0:
            dev.compute("contention", _same, self.message, seconds=contention, keep=False)
            time.seconds["contention"] += contention
        if layout.zero in (1, 2):  # the updated weights, gathered back
            gather = coll("all_gather", params, 2)
            if layout.dp_overlap:
                first = sum(total(self.costs[s]["F"]) for s in chunks)
                gather = max(0.0, gather - first)
            exposed += gather
        if exposed > 0:
            dev.compute("data-parallel", _same, self.message, seconds=exposed, keep=False)
        time.seconds["dp"] += exposed
        shard = params / (ranks if layout.zero >= 1 else 1)
        optimizer = achieved.memory_time(shard * optimizer_bytes(layout))
        dev.compute("optimizer", _same, self.message, seconds=optimizer, keep=False)
        time.seconds["optimizer"] += optimizer

    def _sharded_layers(self, coll, params: float, layers: int, chunks: list[int]) -> tuple[float, float]:
        """(exposed seconds, compute slowed by the overlap) of ZeRO-2's reduce-scatters of every microbatch but
        the last (which the bucket stream prices) and ZeRO-3's weight gathers, layer by layer as PyTorch's FSDP
        runs them: each layer's all-gather is issued one layer ahead (prefetch depth 1: ``forward_prefetch``,
        ``BackwardPrefetch.BACKWARD_PRE``, and in FSDP2 the implicit prefetch), so it hides behind the previous
        layer's compute up to that compute's time; the first layer's gather has nothing before it. In the
        backward a layer's weights are gathered again (``reshard_after_forward``) and its gradients
        reduce-scattered beside the next layer's backward. Without ``dp_overlap`` nothing is hidden."""
        layout, achieved = self.layout, self.system.achieved
        m = self.schedule.microbatches
        forward = sum(total(self.costs[s]["F"]) for s in chunks) / layers
        backward = sum(total(self.costs[s]["B"]) for s in chunks) / layers
        gather = coll("all_gather", params / layers, 2) if layout.zero == 3 else 0.0
        grad_bytes = self.model.itemsize if layout.grad_accumulation == "fsdp" else layout.bytes_per_param[1]
        scatter = coll("reduce_scatter", params / layers, grad_bytes)
        if not layout.dp_overlap:  # the last microbatch's reduce-scatters go on the stream after the backward
            return 2 * m * layers * gather + (m - 1) * layers * scatter, 0.0
        # a layer's backward hides the next layer's gather and the previous layer's reduce-scatter together: they
        # share the links. ZeRO-2's last microbatch's reduce-scatters go on the bucket stream (``_finish``), which
        # times them against the pipeline's own gaps; ZeRO-3 (no pipeline) keeps them here, beside the gathers, the
        # last layer's after the backward. Until 2026-12-06 every backward hid (m - 1) / m of a reduce-scatter, and
        # the last one the bucket stream's as well: the network hidden twice behind it, so that a longer backward
        # (full recomputation's) shortened the step.
        last = scatter if layout.zero >= 3 else 0.0
        slowed_f, exposed_f = achieved.overlapped(forward, gather)
        slowed_b, exposed_b = achieved.overlapped(backward, gather + scatter)
        slowed_l, exposed_l = achieved.overlapped(backward, gather + last)
        exposed = m * (gather + (layers - 1) * exposed_f) + (m - 1) * (gather + (layers - 1) * exposed_b)
        exposed += gather + (layers - 1) * exposed_l + last
        slowed = (layers - 1) * (m * (slowed_f - forward) + (m - 1) * (slowed_b - backward) + slowed_l - backward)
        return exposed, slowed


def simulate(model: Transformer, layout: TrainingSetup, system: System) -> tuple[RunResult, StageProgram]:
    """Run the step (see the module docstring): the engine's result and the program with each rank's times."""
    layout.check(model)
    schedule = schedule_for(layout)
    program = StageProgram(model, layout, system, schedule)
    a, n = system.achieved, program.message.nbytes
    latency, bandwidth = (
        (0.0, a.bus["all_reduce"].at(n)) if layout.pp_same_node else (a.nic_latency, a.nic_p2p_bandwidth)
    )
    link = CostModel(latency=latency, bandwidth=bandwidth, flops=system.peak_flops, name=f"{system.name} pipeline")
    result = World(layout.pp, cost=link, keep_payloads=False, leftovers="error").run(program)
    return result, program


def _same(x):
    return x


__all__ = ["RankTime", "StageProgram", "optimizer_bytes", "schedule_for", "simulate"]
