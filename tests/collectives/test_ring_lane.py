"""A ring's steps taken as one call each (simulator/core/lanes.py) record the trace the generic sends, receives and
reductions record: the same events in the same order, the same rows, times, payloads and results, bit for bit."""

import tracemalloc

import numpy as np
import pytest

import simulator.collectives.call as call
import simulator.core.hooks as hooks
import simulator.core.lanes as lanes
from simulator import CostModel, World
from simulator.core.errors import EventLimitError, InfiniteTimeError, OpError
from simulator.cost.model import TwoLevel
from simulator.views.stepper import Stepper


@pytest.fixture
def lanes_used(monkeypatch):
    """How many lanes the rings made (None answers not counted)."""
    count = [0]
    make = lanes.ring_lane

    def counting(*args):
        lane = make(*args)
        count[0] += lane is not None
        return lane

    monkeypatch.setattr(hooks, "_lane", counting)
    return count


def without_lanes(monkeypatch, run):
    """``run()`` with every ring step taken by the generic calls."""
    with monkeypatch.context() as m:
        m.setattr(hooks, "_lane", lambda *args: None)
        return run()


def program(dev, n, op, dtype):
    x = (np.arange(n) * (dev.rank + 1) / 7).astype(dtype)
    dev.compute("before", lambda v: v, x, seconds=1e-6 * (dev.rank % 3))  # members arrive at different times
    y = dev.all_reduce(x, op=op)
    mine = [r for r in range(dev.world_size) if r % 2 == dev.rank % 2]
    if len(mine) > 1:  # then two subgroups, each its own ring
        y = dev.all_reduce(y[: n // 2 + 1], op=op, group=mine)
    z = dev.reduce_scatter(y, op=op)
    sent = dev.isend(z, (dev.rank + 1) % dev.world_size)  # and a plain message on the ring's links after it
    got = dev.recv((dev.rank - 1) % dev.world_size)
    dev.wait(sent)
    return dev.all_gather(got.sum(keepdims=True)), z


def arrays(value):
    """Every array in a nest of lists and tuples, in order."""
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in arrays(v)]
    return [np.asarray(value)]


def same_runs(a, b) -> None:
    assert a.trace.signature() == b.trace.signature()
    ra, rb = a.trace.recorder, b.trace.recorder
    assert (ra.msgs, ra.ops, ra.recvs) == (rb.msgs, rb.ops, rb.recvs)  # the raw rows too, in the order written
    assert np.array_equal(a.trace.event_codes, b.trace.event_codes)
    for u, v in zip(arrays(a.outputs), arrays(b.outputs), strict=True):
        assert u.dtype == v.dtype and u.shape == v.shape and u.tobytes() == v.tobytes()
    if a.trace.payloads:
        for m, k in zip(a.trace.messages, b.trace.messages):
            assert m.payload.tobytes() == k.payload.tobytes()


CASES = [(2, 1, "sum", np.float64), (5, 3, "avg", np.float64), (8, 37, "max", np.float32), (6, 64, "min", np.int64)]


@pytest.mark.parametrize("p, n, op, dtype", CASES)
@pytest.mark.parametrize("keep", [False, True], ids=["metadata", "payloads"])
def test_lanes_record_what_the_generic_calls_record(monkeypatch, lanes_used, p, n, op, dtype, keep):
    def run():
        return World(p, keep_payloads=keep, book_collectives=False).run(program, n, op, dtype)

    fast = run()
    assert lanes_used[0] > 0
    same_runs(fast, without_lanes(monkeypatch, run))


@pytest.mark.parametrize("cost", [CostModel(latency=0.0, flops=1e9), CostModel(latency=3e-6, bandwidth=1e6)])
def test_lanes_under_other_prices(monkeypatch, lanes_used, cost):
    def run():
        return World(7, cost=cost, book_collectives=False).run(program, 30, "sum", np.float64)

    same_runs(run(), without_lanes(monkeypatch, run))
    assert lanes_used[0] > 0


def test_a_stepped_run_with_lanes_records_what_the_generic_calls_record(monkeypatch, lanes_used):
    def stepped():
        engine = World(6, book_collectives=False).start(program, 12, "sum", np.float64)
        for _ in Stepper(engine):
            pass
        return engine.result()

    fast = stepped()
    assert lanes_used[0] > 0
    same_runs(fast, without_lanes(monkeypatch, stepped))
    assert fast.trace.signature() == World(6).run(program, 12, "sum", np.float64).trace.signature()


@pytest.mark.parametrize(
    "world",
    [
        {"cost": CostModel(topology=TwoLevel(2, 5e-6, 10e9))},  # shared ports
        {"send_mode": "rendezvous"},
        {"cost": CostModel(flops=1e9, memory_bandwidth=2e9)},  # the roofline prices reductions
        {"program_time": True},
    ],
    ids=["two-level", "rendezvous", "roofline", "program-time"],
)
def test_where_lanes_do_not_serve_the_generic_calls_go(lanes_used, world):
    World(4, book_collectives=False, **world).run(program, 9, "sum", np.float64)
    assert lanes_used[0] == 0


def test_the_event_limit_stops_a_lane_where_it_stops_the_generic_calls(monkeypatch):
    def run():
        World(16, keep_payloads=False, book_collectives=False, max_events=500).run(
            lambda dev: dev.all_reduce(np.ones(16))
        )

    with pytest.raises(EventLimitError) as fast:
        run()
    with pytest.raises(EventLimitError) as slow:
        without_lanes(monkeypatch, run)
    assert str(fast.value) == str(slow.value)


def test_a_reduction_that_fails_in_a_lane_names_the_op(monkeypatch):
    def fails(a, b):
        raise FloatingPointError("overflow")

    monkeypatch.setitem(call.REDUCE_FNS, "max", fails)

    def run():
        World(3, book_collectives=False).run(lambda dev: dev.all_reduce(np.ones(3), op="max"))

    with pytest.raises(OpError, match="op 'all_reduce.max' on device 1 raised FloatingPointError") as fast:
        run()
    with pytest.raises(OpError) as slow:
        without_lanes(monkeypatch, run)
    assert str(fast.value) == str(slow.value)


def test_a_lane_refuses_an_infinite_reduction_time():
    with pytest.raises(InfiniteTimeError):
        World(3, cost=CostModel(flops=1e-320), book_collectives=False).run(lambda dev: dev.all_reduce(np.ones(3)))


def test_lanes_settle_on_the_way_as_the_generic_calls_do(monkeypatch, lanes_used):
    """96 members record over 2**14 events: the engine settles some while lanes run, at the same events."""

    def run():
        return World(96, keep_payloads=False, book_collectives=False).run(
            lambda dev: dev.all_reduce(np.full(96, dev.rank / 3, np.float32))
        )

    fast = run()
    assert lanes_used[0] == 2 * 96 and fast.trace.recorder.n_msgs + fast.trace.recorder.n_ops > 1 << 14
    same_runs(fast, without_lanes(monkeypatch, run))


def test_a_lane_holds_no_more_than_the_generic_calls(monkeypatch):
    """A member holds the chunk it sends next, never every step's (p² arrays over a ring of p: 11% more at 128)."""

    def peak():
        World(4, keep_payloads=False, book_collectives=False).run(lambda dev: dev.all_reduce(np.ones(4)))  # warm
        tracemalloc.start()
        World(128, keep_payloads=False, book_collectives=False).run(lambda dev: dev.all_reduce(np.ones(128)))
        high = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return high

    fast, slow = peak(), without_lanes(monkeypatch, peak)
    assert fast <= 1.05 * slow, (fast, slow)
