"""Calibration: measure messages, reductions and matrix products on real ranks; fit a cost model.

What is measured (``probes``), and what each fit gives the ``CostModel``:

- messages of 8 B to 16 MiB (ping-pong, both partners at once, or every rank to the next at once in
  trains of a ring all-reduce's 2(p - 1) steps), each timed after a barrier from the last rank's start to
  the last rank's end: ``latency + n / bandwidth`` fitted in pieces (``fit.fit_pieces``): one line per
  size regime where the times bend, the first piece as the model's ``latency`` and ``bandwidth``, the
  others as ``LinkRegime``s;
- additions of two float64 arrays into a new one, 1 KiB to 4 MiB, through ``dev.compute`` as a
  collective's reductions run, and float64 matrix products of the shapes a training step's layers
  have (a few rows through a large weight, and the weight gradient's tall-by-wide product), each op
  finding its operands in memory, not in the cache: one fit over both
  (``fit.fit_ops``) gives ``op_latency + flops / flops + bytes / memory_bandwidth``, the cost model's
  ``roofline="sum"``: one CPU core does its arithmetic and its memory traffic one after the other (an
  addition is all memory traffic). A product first packs both operands (``packing=True``): a product of
  16 rows through a 512 x 512 weight spends about as long packing the weight as multiplying, while the
  weight gradient, of the same FLOPs and bytes but small operands, packs little.

Every fit minimises the relative error over the sizes, and the residual at each size (model /
measured - 1) is printed and written with the cost file, so a reader sees where the model holds.

    cal = calibrate(size=2)             # -> Calibration; cal.cost is a CostModel
    cal.save("cost.json")               # load_cost("cost.json") in any simulation
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..core.values import fit_lines
from ..cost.model import CostModel, LinkRegime
from ..cost.spread import MessageSpread
from ..cost.units import binary_size
from ..real.launch import TorchWorld
from .costfile import save_cost
from .fit import Line, NoisyMeasurement, OpFit, fit_line, fit_ops, fit_pieces
from .probes import PATTERNS, STATISTICS, exchange, matmuls, pingpong, reductions, repeat_seconds

__all__ = ["Calibration", "calibrate", "exchange", "fit_alpha_beta", "main_calibrate", "pingpong"]

SIZES = (8, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20)
ADD_SIZES = (1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)  # bytes of each operand
# (m, k, n): skinny products, as a microbatch of a few rows through a layer makes, and square-ish ones
MATMUL_SHAPES = ((16, 512, 512), (32, 512, 512), (64, 512, 512), (512, 16, 512), (256, 512, 1024))


def fit_alpha_beta(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """(alpha, bandwidth) of t = alpha + n / bandwidth, least relative error; alpha >= 0 (one line)."""
    line = fit_line(sizes, seconds, "the message times")
    return line.intercept, 1.0 / line.slope


@dataclass
class Calibration:
    """Measured figures, the lines fitted to them, and the cost model they make."""

    size: int
    backend: str
    pattern: str
    # message bytes -> one-way seconds: the statistic of the repeats, each timed over the ranks
    one_way: dict[int, float]
    reduce_seconds: dict[int, float]  # bytes per operand -> seconds per addition (median over ranks)
    matmul_seconds: dict[tuple[int, int, int], float]  # (m, k, n) -> seconds per product (median over ranks)
    pieces: list[Line]  # the message fit, one line per size regime
    op_fit: OpFit  # seconds against FLOPs and bytes, additions and products together
    cost: CostModel
    fit_error: dict[int, float] = field(default_factory=dict)  # message bytes -> model / measured - 1
    reduce_error: dict[int, float] = field(default_factory=dict)
    matmul_error: dict[int, float] = field(default_factory=dict)

    def save(self, path: str | Path) -> Path:
        measured = {
            "ranks": self.size,
            "backend": self.backend,
            "pattern": self.pattern,
            "one_way_seconds": _keyed(self.one_way),
            "fit_relative_error": _keyed(self.fit_error),
            "message_regimes": [
                {"from_bytes": p.lo, "to_bytes": p.hi, "latency": p.intercept, "bandwidth": 1 / p.slope}
                for p in self.pieces
            ],
            "reduce_seconds": _keyed(self.reduce_seconds),
            "reduce_relative_error": _keyed(self.reduce_error),
            "matmul_seconds_by_shape": _keyed(self.matmul_seconds),
            "matmul_relative_error": _keyed(self.matmul_error),
        }
        return save_cost(path, self.cost, measured, name=f"{self.backend}, {self.size} ranks, measured")

    def summary(self) -> str:
        c = self.cost
        lines = [
            f"calibrated on {self.size} {self.backend} ranks ({self.pattern}): {len(self.pieces)} message regime(s)",
        ]
        for k, p in enumerate(self.pieces):
            lines.append(
                f"  regime {k}: {binary_size(p.lo)} .. {binary_size(p.hi)}: latency {p.intercept * 1e6:.1f} us, "
                f"bandwidth {1 / p.slope / 1e9:.3g} GB/s"
            )
        lines.append("  bytes       measured one-way    model     error")
        for n, t in self.one_way.items():
            lines.append(f"  {n:>9}   {t * 1e6:12.1f} us  {c.message_time(n) * 1e6:9.1f} us  {self.fit_error[n]:+7.1%}")
        if c.spread is not None:
            lines.append(f"  kept: {c.spread.describe()}")
        lines.append(
            f"ops: {c.op_latency * 1e6:.1f} us + FLOPs at {c.flops / 1e9:.3g} GFLOP/s + bytes (inputs, output, and a "
            f"product's operands packed) at a memory bandwidth of {(c.memory_bandwidth or 0) / 1e9:.3g} GB/s, "
            "one after the other"
        )
        lines.append("  addition of   measured            model     error")
        for n, t in self.reduce_seconds.items():
            model = self.op_fit(*add_work(n))
            lines.append(f"  {n:>9} B   {t * 1e6:12.1f} us  {model * 1e6:9.1f} us  {self.reduce_error[n]:+7.1%}")
        lines.append("  product m,k,n   measured          model     error")
        for shape, t in self.matmul_seconds.items():
            model = self.op_fit(*matmul_work(*shape))
            what = ",".join(map(str, shape))
            lines.append(f"  {what:>13} {t * 1e6:12.1f} us  {model * 1e6:9.1f} us  {self.matmul_error[shape]:+7.1%}")
        return fit_lines("\n".join(lines))


TRIES = 3  # measurements before a noisy one is an error (each with twice the repeats of the one before)


def calibrate(
    size: int = 2,
    backend: str = "gloo",
    sizes: tuple[int, ...] = SIZES,
    repeats: int = 20,
    *,
    pattern: str = "pingpong",
    statistic: str = "median",
    add_sizes: tuple[int, ...] = ADD_SIZES,
    matmul_shapes: tuple[tuple[int, int, int], ...] = MATMUL_SHAPES,
    max_regimes: int = 3,
    spread: bool = False,
    world: TorchWorld | None = None,
    timeout: float = 60.0,
) -> Calibration:
    """Measure on ``size`` real ranks (or on ``world``, if given) and fit a cost model.

    pattern:     "pingpong" (one direction at a time) or "exchange" (both partners send at once)
    statistic:   "median" or "mean" of the repeats, per size
    max_regimes: at most this many message-size regimes (1: a single alpha-beta line)
    spread:      keep every measured message time around the fitted line in the cost model
                 (``CostModel.spread``), so that each simulated message draws its time from them;
                 False (the default): every message of a size takes the line's time
    """
    if pattern not in PATTERNS:
        raise ValueError(f"calibrate(pattern={pattern!r}): choose one of {tuple(PATTERNS)}")
    if statistic not in STATISTICS:
        raise ValueError(f"calibrate(statistic={statistic!r}): choose one of {tuple(STATISTICS)}")
    if world is None:
        with TorchWorld(size, backend, timeout=timeout, keep_payloads=False) as w:
            return calibrate(
                size,
                backend,
                sizes,
                repeats,
                pattern=pattern,
                statistic=statistic,
                add_sizes=add_sizes,
                matmul_shapes=matmul_shapes,
                max_regimes=max_regimes,
                spread=spread,
                world=w,
            )
    if world.size < 2:
        raise ValueError("calibration needs at least 2 ranks (a ping-pong pair)")
    stat = STATISTICS[statistic]
    for attempt in range(1, TRIES + 1):  # a busy machine's noise can hide the trend: measure again, longer
        try:
            samples = _durations(world.run(PATTERNS[pattern], tuple(sizes), repeats).outputs)
            one_way = {n: stat(v) for n, v in samples.items()}
            adds = _over_ranks(world.run(reductions, tuple(add_sizes), repeats).outputs, stat)
            products = _over_ranks(world.run(matmuls, tuple(matmul_shapes), max(3, repeats // 4)).outputs, stat)
            pieces = fit_pieces(list(one_way), list(one_way.values()), max_pieces=max_regimes, what="the message times")
            work = [add_work(n) for n in adds] + [matmul_work(*shape) for shape in products]
            seconds = list(adds.values()) + list(products.values())
            op_fit = fit_ops([f for f, _ in work], [b for _, b in work], seconds, "the addition and product times")
            break
        except NoisyMeasurement as noisy:
            if attempt == TRIES:
                raise
            repeats *= 2
            what = str(noisy).split(":")[0]
            print(f"calibrate: {what} (a busy machine?); measuring again with {repeats} repeats", file=sys.stderr)
    first, *rest = pieces
    cost = CostModel(
        latency=first.intercept,
        bandwidth=1.0 / first.slope,
        flops=op_fit.flop_rate,
        op_latency=op_fit.latency,
        memory_bandwidth=op_fit.memory_bandwidth,
        roofline="sum",
        packing=True,
        regimes=tuple(LinkRegime(_boundary(lower, p), p.intercept, 1.0 / p.slope) for lower, p in zip(pieces, rest)),
    )
    if spread:
        cost = replace(cost, spread=MessageSpread.measured(samples, cost.message_time))
    return Calibration(
        world.size,
        world.backend,
        pattern,
        one_way,
        adds,
        products,
        pieces,
        op_fit,
        cost,
        _errors(lambda n: cost.message_time(n), one_way),
        _errors(lambda n: op_fit(*add_work(n)), adds),
        _errors(lambda shape: op_fit(*matmul_work(*shape)), products),
    )


def add_work(nbytes: int) -> tuple[float, float]:
    """(FLOPs, bytes moved) of adding two arrays of ``nbytes`` into a new one, as the simulator counts them."""
    return nbytes / 8, 3.0 * nbytes


def matmul_work(m: int, k: int, n: int) -> tuple[float, float]:
    """(FLOPs, bytes moved) of a float64 (m, k) @ (k, n) product, as the simulator counts them under
    ``CostModel.packing``: operands and result, and both operands packed (written and read once more)."""
    return 2.0 * m * k * n, 8.0 * (m * k + k * n + m * n) + 16.0 * (m * k + k * n)


def main_calibrate(
    size: int,
    backend: str,
    out: str | None,
    repeats: int,
    pattern: str = "pingpong",
    statistic: str = "median",
    spread: bool = False,
) -> Calibration:
    """What ``python -m simulator calibrate`` runs: measure, print, write."""
    cal = calibrate(size, backend, repeats=repeats, pattern=pattern, statistic=statistic, spread=spread)
    print(cal.summary())
    if out:
        written = cal.save(out)
        print(f"wrote {written}: simulate with it by World(n, cost=load_cost({str(written)!r})), load_cost from "
              "simulator.calibration.costfile")  # fmt: skip
    return cal


def _boundary(lower: Line, upper: Line) -> int:
    """Where a regime begins: midway (geometrically) between the last size below it and its first size."""
    return int(round(np.sqrt(lower.hi * upper.lo)))


def _durations(outputs: list[dict[int, list[tuple[float, float]]] | None]) -> dict[int, list[float]]:
    """Per size, each repeat's seconds from the last measuring rank's start to the last one's end, as a
    prediction times a run (a rank left out of the pattern gives None)."""
    measured = [o for o in outputs if o is not None]
    return {n: repeat_seconds([o[n] for o in measured]) for n in measured[0]}


def _over_ranks(outputs: list[dict], stat) -> dict:
    """Per key: the statistic of each rank's repeats, then the median over ranks."""
    return {k: float(np.median([stat(o[k]) for o in outputs])) for k in outputs[0]}


def _errors(model, measured: dict[int, float]) -> dict[int, float]:
    return {k: float(model(k)) / t - 1 for k, t in measured.items()}


def _keyed(d: dict) -> dict[str, float]:
    return {str(k): v for k, v in d.items()}
