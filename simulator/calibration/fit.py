"""Fitting cost-model parameters to measured times: straight lines, and lines in pieces.

Every figure calibration fits is a straight line in some size x: a message of n bytes takes
``latency + n / bandwidth``, an addition of n bytes ``op_latency + n / memory_bandwidth``, a matrix
product of f FLOPs ``op_latency + f / flops``. ``fit_line`` fits ``t = a + b x`` minimising the
*relative* error (plain least squares would let the largest sizes decide ``a`` alone).

Message times on real processes are not one straight line over every size: small messages travel
inside one socket buffer in one go, mid-sized ones are cut into pieces the two ends pass along, and the
largest ones stream. ``fit_pieces`` fits one line per size regime (the LogGP view: a per-message cost
and a per-byte gap, each constant within a regime), choosing where the regimes change from the
measurements, and keeps a new piece only where it reduces the error clearly.

Ops are not a line in one size: a matrix product of a few rows through a large weight spends as long
on the weight's bytes as on its arithmetic. ``fit_ops`` fits ``t = latency + flops / rate + bytes /
bandwidth`` over additions and matrix products together (one CPU core does the two one after the
other). No torch here: the fits are tested on synthetic measurements with known parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class NoisyMeasurement(ValueError):
    """Times that do not grow with the work: noise (a busy machine) hid the trend; measuring again may do."""


@dataclass(frozen=True)
class Line:
    """``t = intercept + slope * x``, fitted over sizes ``lo`` .. ``hi`` (inclusive)."""

    intercept: float
    slope: float
    lo: float
    hi: float

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        return self.intercept + self.slope * np.asarray(x, dtype=float)


def fit_line(x: Sequence[float], t: Sequence[float], what: str = "the measured times") -> Line:
    """The line ``t = a + b x`` of least relative error, with ``a >= 0`` and ``b > 0``.

    Weighted least squares on ``(a + b x) / t = 1``. If the best ``a`` is negative (the smallest sizes
    cost nothing beyond their bytes), ``a`` is 0 and the slope is refitted alone.
    """
    xs, ts = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    if xs.size < 2 or np.unique(xs).size < 2:
        raise ValueError(f"fitting {what} needs at least two different sizes, got {list(xs)}")
    if not np.all(ts > 0):
        raise ValueError(f"{what} must all be > 0 seconds, got {dict(zip(xs.tolist(), ts.tolist()))}")
    w = 1.0 / ts
    (a, b), *_ = np.linalg.lstsq(np.stack([w, xs * w], axis=1), np.ones_like(ts), rcond=None)
    if a < 0:
        a, b = 0.0, float(np.sum(xs * ts * w**2) / np.sum((xs * w) ** 2))
    if b <= 0:
        raise NoisyMeasurement(
            f"{what} do not grow with the size: {dict(zip(xs.tolist(), ts.tolist()))}. Measured on a busy machine, "
            "small messages wait for the scheduler as long as large ones take: measure again with more repeats "
            "(--repeats), or when the machine is quieter"
        )
    return Line(float(a), float(b), float(xs.min()), float(xs.max()))


@dataclass(frozen=True)
class OpFit:
    """``t = latency + flops / flop_rate + nbytes / memory_bandwidth``: what one op costs."""

    latency: float
    flop_rate: float
    memory_bandwidth: float

    def __call__(self, flops: float, nbytes: float) -> float:
        return self.latency + flops / self.flop_rate + nbytes / self.memory_bandwidth


def fit_ops(flops: Sequence[float], nbytes: Sequence[float], t: Sequence[float], what: str = "the op times") -> OpFit:
    """The ``OpFit`` of least relative error with every term >= 0 (a latency of 0 where none fits better).

    Weighted least squares on ``(latency + flops * a + nbytes * b) / t = 1``, over every choice of which
    terms are free; the best choice whose terms are all >= 0 wins. Both rates need measurements that
    tell them apart: ops of different FLOPs per byte (additions and matrix products).
    """
    f, b, ts = (np.asarray(v, dtype=float) for v in (flops, nbytes, t))
    if not f.size == b.size == ts.size >= 3:
        raise ValueError(f"fitting {what} needs at least three ops with FLOPs, bytes and a time each")
    if not np.all(ts > 0):
        raise ValueError(f"{what} must all be > 0 seconds, got {ts.tolist()}")
    w = 1.0 / ts
    columns = np.stack([w, f * w, b * w], axis=1)
    best = None
    for free in ((0, 1, 2), (1, 2)):  # with a latency, or without one where it comes out negative
        coef, *_ = np.linalg.lstsq(columns[:, free], np.ones_like(ts), rcond=None)
        if np.all(coef >= 0) and coef[-2] > 0 and coef[-1] > 0:
            full = np.zeros(3)
            full[list(free)] = coef
            err = _rms(columns @ full - 1)
            if best is None or err < best[1]:
                best = (full, err)
    if best is None:
        raise NoisyMeasurement(
            f"{what} do not grow with their FLOPs and bytes (ops of more work took less time: "
            f"{_rms(ts / ts.mean() - 1):.0%} spread around {ts.mean() * 1e6:.3g} us); was the machine busy? "
            "Calibrate again on a quiet machine"
        )
    latency, a, c = best[0]
    return OpFit(float(latency), float(1 / a), float(1 / c))


def relative_errors(line_or_pieces: Line | Sequence[Line], x: Sequence[float], t: Sequence[float]) -> np.ndarray:
    """model / measured - 1 at each size (a piecewise model uses the piece each size falls in)."""
    xs, ts = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    pieces = [line_or_pieces] if isinstance(line_or_pieces, Line) else list(line_or_pieces)
    model = np.array([piece_for(pieces, v)(v) for v in xs])
    return model / ts - 1


def piece_for(pieces: Sequence[Line], x: float) -> Line:
    """The piece whose range holds x (below the first: the first; above the last: the last)."""
    for p in pieces:
        if x <= p.hi:
            return p
    return pieces[-1]


def fit_pieces(
    x: Sequence[float],
    t: Sequence[float],
    max_pieces: int = 3,
    min_points: int = 3,
    floor: float = 0.03,
    slack: float = 1.5,
    what: str = "the measured times",
) -> list[Line]:
    """Lines over consecutive ranges of sizes, split where the measurements bend.

    Every split of the sorted sizes into up to ``max_pieces`` ranges of at least ``min_points`` sizes
    is tried (the sizes are few: a dozen or two; a piece of two sizes would fit any two points exactly, so
    three is the least). The fewest pieces are kept whose root-mean-square
    relative error is within ``floor`` (the noise of a measurement) or within ``slack`` times the
    best error any number of pieces reaches: more lines are not chosen to follow noise.
    """
    xs, ts = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    order = np.argsort(xs)
    xs, ts = xs[order], ts[order]
    one = [fit_line(xs, ts, what)]
    fits = [(one, _rms(relative_errors(one, xs, ts)))]
    for k in range(2, max_pieces + 1):
        found = _best_split(xs, ts, k, min_points, what)
        if found is not None:
            fits.append(found)
    enough = max(floor, slack * min(err for _, err in fits))
    return next(pieces for pieces, err in fits if err <= enough)


def _best_split(xs: np.ndarray, ts: np.ndarray, k: int, min_points: int, what: str) -> tuple[list[Line], float] | None:
    n = xs.size
    best: tuple[list[Line], float] | None = None
    for cuts in _cuts(n, k, min_points):
        bounds = (0, *cuts, n)
        try:
            pieces = [fit_line(xs[a:b], ts[a:b], what) for a, b in zip(bounds, bounds[1:])]
        except ValueError:
            continue  # a piece whose times do not grow: not a regime of this kind
        err = _rms(relative_errors(pieces, xs, ts))
        if best is None or err < best[1]:
            best = (pieces, err)
    return best


def _cuts(n: int, k: int, min_points: int, start: int = 0) -> list[tuple[int, ...]]:
    """Every way to cut indices start..n-1 into k runs of at least ``min_points``, as the k - 1 cut positions."""
    if k == 1:
        return [()] if n - start >= min_points else []
    out = []
    for c in range(start + min_points, n - min_points * (k - 1) + 1):
        out += [(c, *rest) for rest in _cuts(n, k - 1, min_points, c)]
    return out


def _rms(errors: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(errors))))
