"""Simulated times are finite: a cost model that would make a message or an op take forever is refused where
the time arises, naming the cost field, so no view ever meets an infinite time."""

import numpy as np
import pytest

from simulator import CostModel, World
from simulator.core.errors import InfiniteTimeError
from simulator.cost.model import LinkRegime, Ring, TwoLevel


def one_message_one_op(dev):
    if dev.rank == 0:
        dev.send(np.ones(4), dst=1)
    else:
        dev.recv(src=0)
    return dev.compute("a", np.add, np.ones(3), 1.0)


@pytest.mark.parametrize("send_mode", ["eager", "rendezvous"])
@pytest.mark.parametrize("topology", [None, Ring()])
def test_a_message_that_would_take_forever_names_the_bandwidth(send_mode, topology):
    cost = CostModel(bandwidth=1e-308) if topology is None else CostModel(bandwidth=1e-308, topology=topology)
    with pytest.raises(InfiniteTimeError) as info:
        World(2, cost=cost, send_mode=send_mode).run(one_message_one_op)
    text = str(info.value)
    assert "device 0's message of 32 bytes to device 1 would arrive at t = inf s" in text
    assert "32 bytes at CostModel.bandwidth = 1e-308 bytes/s take inf s on the wire" in text


def test_a_regime_and_a_second_level_are_named_as_such():
    regime = CostModel(regimes=(LinkRegime(16, 1e-6, 1e-308),))
    with pytest.raises(InfiniteTimeError, match="its LinkRegime's bandwidth = 1e-308"):
        World(2, cost=regime).run(one_message_one_op)
    two_level = CostModel(topology=TwoLevel(1, 1e-6, 1e-308))
    with pytest.raises(InfiniteTimeError, match="TwoLevel.inter_bandwidth = 1e-308"):
        World(2, cost=two_level).run(one_message_one_op)


def test_an_op_that_would_take_forever_names_the_flops():
    with pytest.raises(InfiniteTimeError) as info:
        World(2, cost=CostModel(flops=1e-320)).run(one_message_one_op)
    assert "op 'a' on device 0 would end at t = inf s: 3 FLOPs at CostModel.flops = 1e-320 FLOP/s" in str(info.value)


def test_a_clock_that_would_pass_the_largest_float_is_refused():
    def long_ops(dev):
        for _ in range(3):
            dev.compute("slow", np.negative, np.ones(1), seconds=1e308)

    with pytest.raises(InfiniteTimeError, match="passes the largest float"):
        World(1).run(long_ops)


@pytest.mark.parametrize("devices", [2, 4, 40])
@pytest.mark.parametrize(
    "cost, field", [(CostModel(bandwidth=1e-308), "bandwidth"), (CostModel(flops=1e-320), "flops")]
)
def test_an_all_reduce_booked_whole_is_refused_too(devices, cost, field):
    with pytest.raises(InfiniteTimeError, match=f"CostModel.{field} = 1e-3"):
        World(devices, cost=cost).run(lambda dev: dev.all_reduce(np.ones(8)))
    with pytest.raises(InfiniteTimeError, match=f"CostModel.{field} = 1e-3"):  # booked whole, without payloads
        World(devices, cost=cost, keep_payloads=False).run(lambda dev: dev.all_reduce(np.ones(8)))


def test_a_bandwidth_too_small_to_invert_is_refused_by_the_cost_model():
    with pytest.raises(ValueError, match="bandwidth 5e-324 bytes/s is too small to compute with"):
        CostModel(bandwidth=5e-324)
