"""Message-size regimes and the roofline for ops: what calibration fits, as the simulator uses it."""

import numpy as np
import pytest

from simulator import World
from simulator.calibration.costfile import load_cost, save_cost
from simulator.cost.model import CostModel, LinkRegime, Ring
from tests.costfiles import assert_refused

REGIMES = (LinkRegime(64 << 10, 100e-6, 2e9), LinkRegime(4 << 20, 1e-3, 1e9))
COST = CostModel(latency=10e-6, bandwidth=4e9, flops=1e10, regimes=REGIMES)


def one_message(dev, n):
    if dev.rank == 0:
        dev.send(np.zeros(n, np.uint8), 1)
    else:
        dev.recv(0)


@pytest.mark.parametrize(
    ("n", "alpha", "bandwidth"),
    [(1 << 10, 10e-6, 4e9), ((64 << 10) - 1, 10e-6, 4e9), (64 << 10, 100e-6, 2e9), (16 << 20, 1e-3, 1e9)],
)
def test_a_message_costs_what_its_size_regime_says(n, alpha, bandwidth):
    assert COST.link(n) == (alpha, bandwidth)
    assert COST.message_time(n) == pytest.approx(alpha + n / bandwidth)
    msg = World(2, cost=COST).run(one_message, n).trace.messages[0]
    assert msg.t_arrive - msg.t_send == pytest.approx(alpha + n / bandwidth, rel=1e-12)
    ring = CostModel(latency=10e-6, bandwidth=4e9, regimes=REGIMES, topology=Ring())
    assert ring.message_time(n, 0, 2, world_size=4) == pytest.approx(2 * alpha + n / bandwidth)


def test_regimes_are_checked():
    with pytest.raises(ValueError, match="increasing sizes"):
        CostModel(regimes=(REGIMES[1], REGIMES[0]))
    with pytest.raises(ValueError, match="LinkRegime objects"):
        CostModel(regimes=((1, 2e-6, 1e9),))
    with pytest.raises(ValueError, match="whole number of bytes"):
        LinkRegime(0, 1e-6, 1e9)
    assert "from 64 KiB" in COST.describe() and "below 64 KiB" in COST.describe()


def test_roofline_an_addition_costs_its_memory_traffic_a_matmul_its_flops():
    cost = CostModel(flops=1e10, memory_bandwidth=1e9, op_latency=5e-6)
    a, b = np.ones(1 << 16), np.ones(1 << 16)  # 512 KiB each: the sum reads 1 MiB and writes 512 KiB
    w, m = np.ones((256, 256)), np.ones((64, 256))

    def program(dev):
        dev.compute("s", np.add, a, b)
        dev.compute("p", np.matmul, m, w)

    ops = World(1, cost=cost).run(program).trace.ops
    add, mat = (o.t_end - o.t_start for o in ops)
    assert add == pytest.approx(5e-6 + 3 * a.nbytes / 1e9)
    assert mat == pytest.approx(5e-6 + 2 * 64 * 256 * 256 / 1e10)
    assert cost.op_time(100, 0) == cost.compute_time(100)
    with pytest.raises(ValueError, match="memory_bandwidth"):
        CostModel(memory_bandwidth=0)


def test_sum_roofline_pays_arithmetic_and_memory_traffic_one_after_the_other():
    cost = CostModel(flops=1e10, memory_bandwidth=1e9, op_latency=5e-6, roofline="sum")
    m, w = np.ones((16, 512)), np.ones((512, 512))  # a few rows through a large weight

    def program(dev):
        dev.compute("p", np.matmul, m, w)

    (op,) = World(1, cost=cost).run(program).trace.ops
    work, traffic = 2 * 16 * 512 * 512 / 1e10, (m.nbytes + w.nbytes + 16 * 512 * 8) / 1e9
    assert op.t_end - op.t_start == pytest.approx(5e-6 + work + traffic)
    assert CostModel(flops=1e10, memory_bandwidth=1e9).op_time(1e6, 1e5) == pytest.approx(1e-4)  # max: the slower
    assert "one after the other" in cost.describe()
    with pytest.raises(ValueError, match="roofline must be one of"):
        CostModel(roofline="min")


def test_packing_charges_a_product_for_copying_its_operands_and_nothing_else():
    """Under ``packing`` a product pays its inputs and output, and both operands written and read once
    more; the weight gradient's product, of equal FLOPs and bytes, packs small operands and costs less."""
    cost = CostModel(flops=1e10, memory_bandwidth=1e9, op_latency=5e-6, roofline="sum", packing=True)
    x, w, b = np.ones((16, 512)), np.ones((512, 512)), np.ones(512)
    h, dz = np.ones((512, 16)), np.ones((16, 512))

    def program(dev):
        dev.compute("p", np.matmul, x, w)  # recognised as a product
        dev.compute("layer", lambda a, m, c: a @ m + c, x, w, b, flops=2 * 16 * 512 * 512, product=True)
        dev.compute("dW", np.matmul, h, dz)
        dev.compute("add", np.add, w, w)  # not a product: inputs and output once

    p, layer, dW, add = World(1, cost=cost).run(program).trace.ops
    work, out = 2 * 16 * 512 * 512 / 1e10, 16 * 512 * 8
    assert p.t_end - p.t_start == pytest.approx(5e-6 + work + (3 * (x.nbytes + w.nbytes) + out) / 1e9)
    assert layer.t_end - layer.t_start == pytest.approx(
        5e-6 + work + (3 * (x.nbytes + w.nbytes) + b.nbytes + out) / 1e9
    )
    assert dW.t_end - dW.t_start == pytest.approx(5e-6 + work + (3 * (h.nbytes + dz.nbytes) + 512 * 512 * 8) / 1e9)
    assert dW.t_end - dW.t_start < p.t_end - p.t_start
    assert add.t_end - add.t_start == pytest.approx(5e-6 + 512 * 512 / 1e10 + 3 * w.nbytes / 1e9)
    unpacked = World(1, cost=CostModel(flops=1e10, memory_bandwidth=1e9, roofline="sum")).run(program).trace.ops
    assert unpacked[0].t_end - unpacked[0].t_start == pytest.approx(work + (x.nbytes + w.nbytes + out) / 1e9)
    assert "products packing their operands" in cost.describe()


def test_cost_file_keeps_packing(tmp_path):
    cost = CostModel(flops=2e10, memory_bandwidth=8e9, roofline="sum", packing=True)
    assert load_cost(save_cost(tmp_path / "c.json", cost)).packing is True
    assert load_cost(save_cost(tmp_path / "m.json", CostModel())).packing is False
    assert_refused(tmp_path, '"packing": "yes"', '"packing" must be true or false, got "yes"')


def test_cost_file_keeps_the_roofline(tmp_path):
    cost = CostModel(flops=2e10, memory_bandwidth=8e9, roofline="sum")
    assert load_cost(save_cost(tmp_path / "c.json", cost)).roofline == "sum"
    assert load_cost(save_cost(tmp_path / "m.json", CostModel())).roofline == "max"
    assert_refused(tmp_path, '"roofline": "both"', '"roofline" must be one of')


def test_cost_file_keeps_regimes_memory_bandwidth_and_op_latency(tmp_path):
    cost = CostModel(latency=1e-5, bandwidth=3e9, flops=2e10, regimes=REGIMES, memory_bandwidth=8e9, op_latency=4e-6)
    loaded = load_cost(save_cost(tmp_path / "c.json", cost))
    assert loaded.regimes == REGIMES
    assert (loaded.memory_bandwidth, loaded.op_latency) == (8e9, 4e-6)
    assert_refused(tmp_path, '"regimes": [{"min_bytes": 8}]', '"regimes" must be a list like')
    assert_refused(
        tmp_path, '"regimes": [{"min_bytes": 8, "latency": "1", "bandwidth": 1}]', '"latency" must be a number'
    )


@pytest.mark.parametrize(
    "cost",
    [
        COST,
        CostModel(flops=1e10, memory_bandwidth=1e9, op_latency=5e-6),
        CostModel(flops=1e10, memory_bandwidth=1e9, roofline="sum", packing=True),
    ],
    ids=["regimes", "roofline", "packing"],
)
def test_runs_without_payloads_keep_regimes_and_the_roofline(cost):
    """Devices book links and time ops inline, and rings are booked whole, only under one latency and
    bandwidth and FLOP-bound ops: with regimes or a roofline, a metadata-only run times like a full one."""
    x = np.arange(3 << 17, dtype=np.float64)  # 3 MiB: its chunks fall in the middle regime

    def program(dev):
        dev.send(x[: 1 << 10], (dev.rank + 1) % 4)
        dev.recv((dev.rank - 1) % 4)
        dev.compute("p", np.matmul, x[:512].reshape(16, 32), x[:1024].reshape(32, 32))  # a product, packed or not
        return dev.all_reduce(x)

    full = World(4, cost=cost).run(program).trace
    meta = World(4, cost=cost, keep_payloads=False).run(program).trace
    times = [(m.t_send, m.t_start, m.t_arrive) for m in full.messages]
    assert [(m.t_send, m.t_start, m.t_arrive) for m in meta.messages] == times
    assert [(o.t_start, o.t_end) for o in meta.ops] == [(o.t_start, o.t_end) for o in full.ops]
    assert len({round(b - a, 12) for _, a, b in times}) > 1  # (messages of two sizes, so two regimes or speeds)
