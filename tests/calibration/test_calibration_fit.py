"""The calibration's fits, on synthetic measurements made from known parameters plus noise (no processes)."""

import numpy as np
import pytest

from simulator.calibration.calibrate import add_work, matmul_work
from simulator.calibration.fit import Line, fit_line, fit_ops, fit_pieces, piece_for, relative_errors

SIZES = [1 << k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB


def noisy(times, rng, noise=0.02):
    return [t * (1 + noise * rng.standard_normal()) for t in times]


def test_line_recovers_latency_and_bandwidth_from_exact_times():
    line = fit_line(SIZES, [50e-6 + n / 2e9 for n in SIZES])
    assert line.intercept == pytest.approx(50e-6, rel=1e-9) and 1 / line.slope == pytest.approx(2e9, rel=1e-9)
    assert (line.lo, line.hi) == (SIZES[0], SIZES[-1])
    zero = fit_line(SIZES, [n / 1e9 for n in SIZES])  # no latency at all
    assert zero.intercept == pytest.approx(0, abs=1e-12) and 1 / zero.slope == pytest.approx(1e9, rel=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_line_recovers_parameters_through_noise(seed):
    rng = np.random.default_rng(seed)
    alpha, bandwidth = 80e-6, 1.5e9
    line = fit_line(SIZES, noisy([alpha + n / bandwidth for n in SIZES], rng))
    assert line.intercept == pytest.approx(alpha, rel=0.15)
    assert 1 / line.slope == pytest.approx(bandwidth, rel=0.05)
    assert np.all(np.abs(relative_errors(line, SIZES, [alpha + n / bandwidth for n in SIZES])) < 0.05)


def test_line_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="do not grow with the size"):
        fit_line(SIZES, [1e-3 - n * 1e-12 for n in SIZES])
    with pytest.raises(ValueError, match="two different sizes"):
        fit_line([8, 8], [1e-6, 2e-6])
    with pytest.raises(ValueError, match="must all be > 0"):
        fit_line([8, 16], [1e-6, 0.0])


def two_regimes(n):
    """Small messages: 20 us and 4 GB/s; from 256 KiB on: 150 us and 1.2 GB/s (a rendezvous, fewer copies cached)."""
    return 20e-6 + n / 4e9 if n < (256 << 10) else 150e-6 + n / 1.2e9


@pytest.mark.parametrize("seed", range(5))
def test_pieces_recover_two_regimes_and_where_they_change(seed):
    rng = np.random.default_rng(seed)
    pieces = fit_pieces(SIZES, noisy([two_regimes(n) for n in SIZES], rng, 0.01))
    assert len(pieces) == 2
    small, large = pieces
    assert small.hi < (256 << 10) <= large.lo
    assert 1 / small.slope == pytest.approx(4e9, rel=0.15)
    assert large.intercept == pytest.approx(150e-6, rel=0.3) and 1 / large.slope == pytest.approx(1.2e9, rel=0.05)
    assert piece_for(pieces, 1 << 20) is large and piece_for(pieces, 100) is small
    # one line cannot follow the bend: the mid sizes are off by far more than the noise
    assert (
        np.max(
            np.abs(
                relative_errors(
                    fit_line(SIZES, [two_regimes(n) for n in SIZES]), SIZES, [two_regimes(n) for n in SIZES]
                )
            )
        )
        > 0.2
    )
    assert np.max(np.abs(relative_errors(pieces, SIZES, [two_regimes(n) for n in SIZES]))) < 0.05


@pytest.mark.parametrize("seed", range(5))
def test_pieces_keep_one_line_where_one_line_fits(seed):
    rng = np.random.default_rng(seed)
    pieces = fit_pieces(SIZES, noisy([30e-6 + n / 2e9 for n in SIZES], rng, 0.02))
    assert len(pieces) == 1
    assert isinstance(pieces[0], Line) and 1 / pieces[0].slope == pytest.approx(2e9, rel=0.05)


def test_pieces_recover_three_regimes():
    def three(n):
        if n < (64 << 10):
            return 15e-6 + n / 6e9
        if n < (4 << 20):
            return 200e-6 + n / 2e9
        return 2e-3 + n / 1e9

    sizes = [1 << k for k in range(10, 27)]
    pieces = fit_pieces(sizes, [three(n) for n in sizes], max_pieces=3)
    assert len(pieces) == 3
    assert [1 / p.slope for p in pieces] == pytest.approx([6e9, 2e9, 1e9], rel=1e-6)
    assert [p.intercept for p in pieces] == pytest.approx([15e-6, 200e-6, 2e-3], rel=1e-6)


ADDS = [1 << k for k in range(10, 23, 2)]  # operands of 1 KiB .. 4 MiB
PRODUCTS = [(16, 512, 512), (32, 512, 512), (64, 512, 512), (512, 16, 512), (256, 512, 1024)]


def op_work():
    work = [add_work(n) for n in ADDS] + [matmul_work(*s) for s in PRODUCTS]
    return [f for f, _ in work], [b for _, b in work]


@pytest.mark.parametrize("seed", range(5))
def test_ops_fit_recovers_latency_flop_rate_and_memory_bandwidth(seed):
    """Additions (all memory traffic) and products (arithmetic and traffic) tell the two rates apart."""
    rng = np.random.default_rng(seed)
    latency, rate, bandwidth = 4e-6, 60e9, 15e9
    flops, nbytes = op_work()
    exact = [latency + f / rate + b / bandwidth for f, b in zip(flops, nbytes)]
    fit = fit_ops(flops, nbytes, noisy(exact, rng))
    assert fit.flop_rate == pytest.approx(rate, rel=0.05)
    assert fit.memory_bandwidth == pytest.approx(bandwidth, rel=0.08)
    assert fit.latency == pytest.approx(latency, rel=0.3)
    assert fit(flops[0], nbytes[0]) == pytest.approx(exact[0], rel=0.05)


def test_ops_fit_drops_a_latency_that_comes_out_negative_and_refuses_what_it_cannot_split():
    flops, nbytes = op_work()
    fit = fit_ops(flops, nbytes, [f / 50e9 + b / 20e9 for f, b in zip(flops, nbytes)])
    assert fit.latency == pytest.approx(0, abs=1e-9) and fit.flop_rate == pytest.approx(50e9, rel=1e-6)
    with pytest.raises(ValueError, match="do not grow with their FLOPs and bytes"):
        fit_ops(flops, nbytes, [1e-3] * len(ADDS) + [1e-6] * len(PRODUCTS))  # products faster than additions
    with pytest.raises(ValueError, match="at least three ops"):
        fit_ops([1.0, 2.0], [8.0, 16.0], [1e-6, 2e-6])
