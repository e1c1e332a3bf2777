"""The cost model: how long a message or a compute step takes in simulated time.

Assumptions, stated once:
- A message of n bytes from src to dst takes ``alpha + n / bandwidth`` seconds (the alpha-beta model).
- Each directed link carries one message at a time. A message waits until its link is free, holds it
  for ``n / bandwidth`` seconds, and arrives ``alpha`` after its last byte left. So back-to-back
  messages on one link pipeline their latencies but queue their bytes (contention shows).
- A sender's ``wait`` on a send completes when the last byte has left it, not when it arrives.
- A compute step of f floating-point operations takes ``f / flops`` seconds.

A ``CostModel`` is an immutable description; ``network(world_size)`` makes the mutable per-run link
state, so two simulations never share anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    """Alpha-beta links between every pair of devices, and devices of a given speed.

    latency:   alpha, seconds per message (default 1 us, a typical NVLink/PCIe software latency)
    bandwidth: bytes per second per directed link (default 100 GB/s)
    flops:     floating-point operations per second per device (default 100 TFLOP/s)
    memory:    bytes of memory per device, or None for unlimited
    """

    latency: float = 1e-6
    bandwidth: float = 100e9
    flops: float = 100e12
    memory: float | None = None

    def __post_init__(self) -> None:
        if self.latency < 0 or not math.isfinite(self.latency):
            raise ValueError(f"CostModel.latency must be a finite number >= 0, got {self.latency!r}")
        if not self.bandwidth > 0:
            raise ValueError(f"CostModel.bandwidth must be > 0 bytes/s, got {self.bandwidth!r}")
        if not self.flops > 0:
            raise ValueError(f"CostModel.flops must be > 0 FLOP/s, got {self.flops!r}")

    def compute_time(self, flops: float) -> float:
        """Seconds a device needs for ``flops`` floating-point operations."""
        return flops / self.flops

    def message_time(self, nbytes: int, src: int = 0, dst: int = 1) -> float:
        """Seconds for one message on an idle link: alpha + n / B."""
        return self.latency + nbytes / self.bandwidth

    def network(self, world_size: int) -> Network:
        """Fresh per-run link state for ``world_size`` devices."""
        return Network(self, world_size)


class Network:
    """Per-run state of the links: when each directed link is next free."""

    __slots__ = ("_alpha", "_inv_bw", "_free")

    def __init__(self, cost: CostModel, world_size: int) -> None:
        self._alpha = cost.latency
        self._inv_bw = 1.0 / cost.bandwidth
        self._free: dict[tuple[int, int], float] = {}

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float, float]:
        """Book a message posted at time t. Returns (start, sender_done, arrival)."""
        key = (src, dst)
        start = self._free.get(key, 0.0)
        if start < t:
            start = t
        done = start + nbytes * self._inv_bw
        self._free[key] = done
        return start, done, done + self._alpha
