"""One numbering: a run and the same program stepped event by event give the same trace and verdict."""

import warnings

import numpy as np
import pytest

from simulator import World
from simulator.checker import check
from simulator.core.errors import SimulationError
from simulator.teach.examples import all_scenarios
from simulator.views.stepper import Stepper

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
    from simulator.cost.model import CostModel

    def ping(dev):
        if dev.rank == 1:
            dev.send(np.ones(2), dst=0)
        else:
            return dev.recv(src=1)

    trace = World(2, cost=CostModel(latency=0.0, bandwidth=float("inf"), flops=float("inf"))).run(ping).trace
    kinds = [(kind, rec.id) for kind, rec in trace.events if kind in ("send", "recv")]
    assert kinds == [("send", 0), ("recv", 0)]
    assert trace.events[0][1].t_send == trace.events[1][1].t_recv


def _poller(dev):
    """Device 0 computes in small steps and tests its receive between them, as an overlapped all-reduce does.

    It runs first: running ahead on its own, it would test before device 1 has sent anything at all.
    """
    if dev.rank == 1:
        dev.compute("slow", lambda: 0.0, seconds=5e-6)
        dev.send(np.ones(4), dst=0)
        return None
    req, polls = dev.irecv(src=1), 0
    while not dev.test(req):
        dev.compute("chunk", lambda: 0.0, seconds=1e-6)
        polls += 1
    dev.wait(req)
    return polls


def test_testing_a_request_sees_time_order_whether_run_or_stepped():
    ran = World(2).run(_poller)
    stepper = Stepper(World(2).start(_poller))
    while stepper.total is None or stepper.position < stepper.total:
        stepper.forward()
    assert ran.outputs[0] == stepper._engine.outputs[0] == 7  # 5 us of work + 1 us + 1 us latency, in 1 us steps
    assert stepper.trace.signature() == ran.trace.signature()
