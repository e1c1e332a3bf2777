"""One numbering: a run and the same program stepped event by event give the same trace and verdict."""

import warnings

import numpy as np
import pytest

from simulator import World
from simulator.errors import SimulationError
from simulator.examples import all_scenarios
from simulator.reference import check
from simulator.stepper import Stepper

SCENARIOS = all_scenarios()


def _stepped(scenario):
    """Step a live run to its end (or its error), one event at a time."""
    stepper = Stepper(scenario.start())
    try:
        while stepper.forward().position < len(stepper.trace.events) or stepper.total is None:
            pass
    except SimulationError:
        pass
    return stepper.trace


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_stepping_and_running_number_everything_the_same(name):
    scenario = SCENARIOS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ran = scenario.run()
        stepped = _stepped(scenario)
    if ran.error is not None:  # a deadlock or a broken contract: the events up to it agree
        return
    assert stepped.signature() == ran.result.trace.signature()
    assert [m.id for m in stepped.messages] == list(range(len(stepped.messages)))
    if ran.report is not None:
        again = check(stepped, scenario.reference())
        assert again.verdict == ran.report.verdict
        first, other = ran.report.first, again.first
        assert (first is None) == (other is None)
        if first is not None:
            assert (first.event, first.where, first.rank, first.name) == (
                other.event,
                other.where,
                other.rank,
                other.name,
            )


def test_a_zero_latency_message_is_received_after_it_is_sent():
    from simulator.cost import CostModel

    def ping(dev):
        if dev.rank == 1:
            dev.send(np.ones(2), dst=0)
        else:
            return dev.recv(src=1)

    trace = World(2, cost=CostModel(latency=0.0, bandwidth=float("inf"), flops=float("inf"))).run(ping).trace
    kinds = [(kind, rec.id) for kind, rec in trace.events if kind in ("send", "recv")]
    assert kinds == [("send", 0), ("recv", 0)]
    assert trace.events[0][1].t_send == trace.events[1][1].t_recv
