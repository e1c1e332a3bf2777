"""Simulated collective times equal the alpha-beta closed forms (compute costed at zero).

Eager sends complete at once and every directed pair of devices has its own link, so one ring step
costs alpha + chunk / B and the formulas hold exactly (to rounding).
"""

import math

import numpy as np
import pytest

from simulator import CostModel, World

ALPHA, BW = 3e-6, 25e9
COST = CostModel(latency=ALPHA, bandwidth=BW, flops=float("inf"))  # reductions take no time
SIZES = list(range(2, 17)) + [24, 31, 32, 48, 64]
REL = 1e-9


def elements(p):
    return 96 * p  # divisible by p: every chunk has the same size


def run_time(p, program, *args):
    return World(p, cost=COST).run(program, *args).time


@pytest.mark.parametrize("p", SIZES)
def test_ring_all_reduce(p):
    n = elements(p)
    t = run_time(p, lambda dev: dev.all_reduce(np.ones(n, np.float32), algorithm="ring"))
    nbytes = 4 * n
    assert t == pytest.approx(2 * (p - 1) * ALPHA + 2 * (p - 1) / p * nbytes / BW, rel=REL)


@pytest.mark.parametrize("p", SIZES)
def test_ring_all_gather(p):
    n = elements(p)
    t = run_time(p, lambda dev: dev.all_gather(np.ones(n // p, np.float32), algorithm="ring"))
    assert t == pytest.approx((p - 1) * ALPHA + (p - 1) / p * 4 * n / BW, rel=REL)


@pytest.mark.parametrize("p", SIZES)
def test_ring_reduce_scatter(p):
    n = elements(p)
    t = run_time(p, lambda dev: dev.reduce_scatter(np.ones(n, np.float32), algorithm="ring"))
    assert t == pytest.approx((p - 1) * ALPHA + (p - 1) / p * 4 * n / BW, rel=REL)


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32, 64])
def test_halving_doubling_all_reduce(p):
    n = elements(p)
    t = run_time(p, lambda dev: dev.all_reduce(np.ones(n, np.float32), algorithm="halving_doubling"))
    assert t == pytest.approx(2 * math.log2(p) * ALPHA + 2 * (p - 1) / p * 4 * n / BW, rel=REL)


@pytest.mark.parametrize("nbytes", [0, 8, 4096, 1 << 20])
def test_point_to_point(nbytes):
    def prog(dev):
        if dev.rank == 0:
            dev.send(np.zeros(nbytes, np.uint8), dst=1)
        else:
            dev.recv(src=0)

    assert run_time(2, prog) == pytest.approx(ALPHA + nbytes / BW, rel=REL)


def test_reductions_cost_time_when_flops_are_finite():
    """The same ring all-reduce with slow devices takes longer by exactly the reduction ops."""
    p, n = 4, 400
    slow = CostModel(latency=ALPHA, bandwidth=BW, flops=1e9)
    t = World(p, cost=slow).run(lambda dev: dev.all_reduce(np.ones(n, np.float32))).time
    # p - 1 reductions of n/p elements each lie on the critical path
    assert t == pytest.approx(2 * (p - 1) * ALPHA + 2 * (p - 1) / p * 4 * n / BW + (p - 1) * (n / p) / 1e9, rel=REL)
