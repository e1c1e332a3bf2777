"""Numbers read off a finished run's trace: the pipeline bubble and memory over time.

The bubble is the time a device sits idle inside the step: the step's length minus the time its
ops ran. Two ways to quote it, both used in the literature:

    fraction = idle / step time     GPipe and 1F1B: (p - 1) / (m + p - 1)
    ratio    = idle / busy time     Megatron's interleaved: (p - 1) / (v m); ZB-H1: (p - 1) / (3 m)

Memory is replayed from the trace with the rules of ``simulator.views.memory`` (a value enters a device's
memory when an op keeps it, a hold places it or a receive names it, and leaves when it is freed;
sizes come from ``nbytes``, so metadata-only runs work too). Values named ``<name>.mb<g>`` belong to
microbatch g, so the activation memory can also be counted in microbatches; the weight-gradient
buffers (``dW3.mb0+dW3.mb1``) are not activations and are not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..core.trace import Trace
from .schedules.labels import pass_kind, pass_label

_ACTIVATION = re.compile(r"^(?!d[Wb]\d)[^+]*\.mb(\d+)$")  # per-microbatch values, not the gradient buffers


@dataclass(frozen=True)
class Bubble:
    """Idle time per device over one step."""

    step_time: float
    busy: tuple[float, ...]  # seconds of ops per device

    @property
    def idle(self) -> tuple[float, ...]:
        return tuple(self.step_time - b for b in self.busy)

    @property
    def fraction(self) -> tuple[float, ...]:
        """Idle time over the step time, per device."""
        return tuple(i / self.step_time for i in self.idle)

    @property
    def ratio(self) -> tuple[float, ...]:
        """Idle time over busy time, per device (the bubble relative to the useful work)."""
        return tuple(i / b if b else float("inf") for i, b in zip(self.idle, self.busy))

    @property
    def mean_fraction(self) -> float:
        return float(np.mean(self.fraction))


def bubble(trace: Trace, devices: list[int] | None = None) -> Bubble:
    """The bubble of each device in ``devices`` (default all) over the whole trace."""
    devices = list(range(trace.world_size)) if devices is None else devices
    busy = dict.fromkeys(devices, 0.0)
    for op in trace.ops:
        if op.rank in busy:
            busy[op.rank] += op.t_end - op.t_start
    return Bubble(trace.end_time, tuple(busy[d] for d in devices))


@dataclass(frozen=True)
class MemorySample:
    """What one device holds right after an event."""

    t: float
    nbytes: int  # bytes of all named values held
    activation_bytes: int  # bytes of the per-microbatch values
    microbatches: frozenset[int]  # microbatches that have at least one value held


def memory_over_time(trace: Trace, device: int) -> list[MemorySample]:
    """Replay ``device``'s memory, one sample per event that changes it."""
    live: dict[str, int] = {}
    samples: list[MemorySample] = []
    for kind, rec in trace.events:
        if kind == "recv":
            if rec.dst != device or rec.name is None:
                continue
            live[rec.name] = rec.nbytes
            t = rec.t_recv
        elif kind in ("op", "hold", "free"):
            if rec.rank != device or (kind == "op" and not rec.keep):
                continue
            if kind == "free":
                live.pop(rec.name, None)
            else:
                live[rec.name] = rec.nbytes
            t = rec.t_start
        else:
            continue
        mbs = frozenset(int(m[1]) for name in live if (m := _ACTIVATION.match(name)))
        act = sum(n for name, n in live.items() if _ACTIVATION.match(name))
        samples.append(MemorySample(t, sum(live.values()), act, mbs))
    return samples


def peak_activation_microbatches(trace: Trace) -> list[int]:
    """Per device, the most microbatches whose activations it held at once."""
    return [max((len(s.microbatches) for s in memory_over_time(trace, d)), default=0) for d in range(trace.world_size)]


def peak_activation_bytes(trace: Trace) -> list[int]:
    """Per device, the most bytes of per-microbatch values it held at once."""
    return [max((s.activation_bytes for s in memory_over_time(trace, d)), default=0) for d in range(trace.world_size)]


# ---- what an op is, for colours and labels in figures (one rule, in simulator.parallel.schedules.labels) ----------


def op_kind(name: str) -> str:
    """What an op of a training step does, in words: forward, input or weight gradients, or other work."""
    return pass_kind(name)


def op_label(name: str) -> str:
    """A short label for an op of a training step: its pass and microbatch, like ``F3`` or ``W0``."""
    return pass_label(name)
