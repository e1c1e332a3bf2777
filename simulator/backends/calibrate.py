"""Calibration: measure latency, bandwidth and compute speed on the real backend; write a cost model.

Ping-pong: ranks pair up (0 with 1, 2 with 3, ...); in each pair the even rank sends n bytes and the
odd one sends them straight back, ``repeats`` times per size, all pairs at once. One-way time =
median round trip / 2. Exchange (``pattern="exchange"``): both partners send at once, so every rank
sends and receives at the same time, as in each step of a ring collective; on a machine whose
cores are shared by the ranks this loaded bandwidth is what a collective sees. The messages go through ``TorchDevice.send``/``recv``, header and NumPy conversion
included, so the model describes exactly what a simulated message stands for.

Fit: alpha + n / B minimising the *relative* error over the sizes (plain least squares would let
the largest messages decide alpha alone). Compute: every rank times elementwise additions of float64
arrays (the operation collectives perform), and the FLOP/s is the median over ranks of elements
added per second.

    cal = calibrate(size=2)             # -> Calibration; cal.cost is a CostModel
    cal.save("cost.json")               # load_cost("cost.json") in any simulation
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..cost import CostModel
from ..device import Device
from .costfile import save_cost
from .launch import TorchWorld

# median: the typical message; mean: the expected cost, rare scheduling stalls included (a run of many
# messages pays for them, so the mean predicts a long run better on a busy machine)
STATISTICS = {"median": np.median, "mean": np.mean}
SIZES = (8, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
ADD_SIZES = (1 << 14, 1 << 16, 1 << 18)  # float64 elements per addition


def pingpong(
    dev: Device, sizes: tuple[int, ...], repeats: int, warmup: int = 3, statistic: str = "median"
) -> dict[int, float] | None:
    """Rank program: one-way seconds per size for this rank's pair (None for a rank left over)."""
    partner = dev.rank ^ 1
    if partner >= dev.world_size:
        return None
    first = dev.rank % 2 == 0
    out = {}
    for n in sizes:
        buf = np.zeros(n, dtype=np.uint8)
        trips = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            if first:
                req = dev.isend(buf, partner, tag=1)
                dev.recv(partner, tag=1, shape=(n,), dtype=np.uint8)
            else:
                dev.recv(partner, tag=1, shape=(n,), dtype=np.uint8)
                req = dev.isend(buf, partner, tag=1)
            dev.wait(req)  # already received (the reply came back), so this returns at once
            if i >= warmup:
                trips.append((time.perf_counter() - t0) / 2)
        out[n] = float(STATISTICS[statistic](trips))
    return out


def exchange(
    dev: Device, sizes: tuple[int, ...], repeats: int, warmup: int = 3, statistic: str = "median"
) -> dict[int, float] | None:
    """Rank program: like ``pingpong``, but both partners send at once (every link busy, as in a ring step).

    The time of one exchange is the one-way time of a message while the links carry as much traffic
    as a collective's steps put on them (the "Sendrecv" pattern of MPI benchmarks).
    """
    partner = dev.rank ^ 1
    if partner >= dev.world_size:
        return None
    out = {}
    for n in sizes:
        buf = np.zeros(n, dtype=np.uint8)
        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            req = dev.isend(buf, partner, tag=1)
            dev.recv(partner, tag=1, shape=(n,), dtype=np.uint8)
            dev.wait(req)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        out[n] = float(STATISTICS[statistic](times))
    return out


PATTERNS = {"pingpong": pingpong, "exchange": exchange}


def add_rate(dev: Device, sizes: tuple[int, ...] = ADD_SIZES, repeats: int = 20) -> float:
    """Rank program: elements added per second (float64 ``a + b``), as compute ops record them."""
    elements = seconds = 0.0
    for n in sizes:
        a, b = np.ones(n), np.ones(n)
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.add(a, b)
            seconds += time.perf_counter() - t0
            elements += n
    return elements / seconds


def fit_alpha_beta(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """(alpha, bandwidth) of t = alpha + n / bandwidth, least relative error; alpha >= 0."""
    n, t = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    w = 1.0 / t
    (alpha, inv_bw), *_ = np.linalg.lstsq(np.stack([w, n * w], axis=1), np.ones_like(t), rcond=None)
    if alpha < 0:  # the smallest messages are pure latency: refit the slope with alpha = 0
        alpha, inv_bw = 0.0, float(np.sum(n * t * w**2) / np.sum((n * w) ** 2))
    if inv_bw <= 0:
        raise ValueError(f"the measured times do not grow with the message size: {dict(zip(sizes, seconds))}")
    return float(alpha), float(1.0 / inv_bw)


@dataclass
class Calibration:
    """Measured figures and the cost model fitted to them."""

    size: int
    backend: str
    pattern: str
    one_way: dict[int, float]  # bytes -> median one-way seconds (pair of ranks 0 and 1)
    add_rates: list[float]  # per rank, elements added per second
    cost: CostModel
    fit_error: dict[int, float] = field(default_factory=dict)  # bytes -> model / measured - 1

    def save(self, path: str | Path) -> Path:
        measured = {
            "ranks": self.size,
            "backend": self.backend,
            "pattern": self.pattern,
            "one_way_seconds": {str(k): v for k, v in self.one_way.items()},
            "add_elements_per_second": self.add_rates,
            "fit_relative_error": {str(k): v for k, v in self.fit_error.items()},
        }
        return save_cost(path, self.cost, measured, name=f"{self.backend}, {self.size} ranks, measured")

    def summary(self) -> str:
        c = self.cost
        lines = [
            f"calibrated on {self.size} {self.backend} ranks ({self.pattern}): latency {c.latency * 1e6:.1f} us, "
            f"bandwidth {c.bandwidth / 1e9:.3g} GB/s, compute {c.flops / 1e9:.3g} GFLOP/s (elementwise add)",
            "  bytes       measured one-way    model     error",
        ]
        for n, t in self.one_way.items():
            lines.append(f"  {n:>9}   {t * 1e6:12.1f} us  {c.message_time(n) * 1e6:9.1f} us  {self.fit_error[n]:+7.1%}")
        return "\n".join(lines)


def calibrate(
    size: int = 2,
    backend: str = "gloo",
    sizes: tuple[int, ...] = SIZES,
    repeats: int = 20,
    *,
    pattern: str = "pingpong",
    statistic: str = "median",
    world: TorchWorld | None = None,
    timeout: float = 60.0,
) -> Calibration:
    """Measure on ``size`` real ranks (or on ``world``, if given) and fit a cost model.

    pattern:   "pingpong" (one direction at a time) or "exchange" (both partners send at once)
    statistic: "median" or "mean" of the repeats, per size
    """
    if pattern not in PATTERNS:
        raise ValueError(f"calibrate(pattern={pattern!r}): choose one of {tuple(PATTERNS)}")
    if statistic not in STATISTICS:
        raise ValueError(f"calibrate(statistic={statistic!r}): choose one of {tuple(STATISTICS)}")
    if world is None:
        with TorchWorld(size, backend, timeout=timeout, keep_payloads=False) as w:
            return calibrate(size, backend, sizes, repeats, pattern=pattern, statistic=statistic, world=w)
    if world.size < 2:
        raise ValueError("calibration needs at least 2 ranks (a ping-pong pair)")
    one_way = world.run(PATTERNS[pattern], tuple(sizes), repeats, statistic=statistic).outputs[0]
    rates = world.run(add_rate).outputs
    alpha, bandwidth = fit_alpha_beta(list(one_way), list(one_way.values()))
    cost = CostModel(latency=alpha, bandwidth=bandwidth, flops=float(np.median(rates)))
    error = {n: cost.message_time(n) / t - 1 for n, t in one_way.items()}
    return Calibration(world.size, world.backend, pattern, one_way, [float(r) for r in rates], cost, error)


def main_calibrate(
    size: int, backend: str, out: str | None, repeats: int, pattern: str = "pingpong", statistic: str = "median"
) -> Calibration:
    """What ``python -m simulator calibrate`` runs: measure, print, write."""
    cal = calibrate(size, backend, repeats=repeats, pattern=pattern, statistic=statistic)
    print(cal.summary())
    if out:
        print(f"wrote {cal.save(out)}")
    return cal
