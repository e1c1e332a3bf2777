"""Ring all-reduces booked whole make the trace the messages would have made (their payloads, where kept:
test_booked_payloads.py)."""

import numpy as np
import pytest

from simulator import CostModel, World
from simulator.core.errors import DeadlockError, EventLimitError
from simulator.cost.model import TwoLevel
from simulator.views.stepper import Stepper


def staggered(dev, n, op, dtype, groups):
    x = (np.arange(n) * (dev.rank + 1) / 7).astype(dtype)
    dev.compute("before", lambda v: v, x, seconds=1e-6 * (dev.rank % 3))  # members arrive at different times
    y = dev.all_reduce(x, op=op)
    if groups:  # then two subgroups, each its own ring
        mine = [r for r in range(dev.world_size) if r % 2 == dev.rank % 2]
        y = dev.all_reduce(y[: n // 2 + 1], op=op, group=mine)
    return y


CASES = [  # (devices, elements, op, dtype): a few members go in plain Python, from 32 on in NumPy steps
    (2, 1, "sum", np.float64),
    (5, 3, "avg", np.float64),
    (8, 37, "max", np.float32),
    (6, 64, "min", np.int64),
    (33, 1, "sum", np.float64),
    (40, 1000, "avg", np.float32),
    (64, 64, "sum", np.float16),
]
ROOFLINE = CostModel(flops=1e9, memory_bandwidth=2e9)  # the reductions' bytes, not their FLOPs, set their time
COSTS = [
    CostModel(),
    CostModel(latency=0.0, flops=1e9),
    CostModel(topology=TwoLevel(4, 5e-6, 10e9)),
    ROOFLINE,
    CostModel(flops=1e9, memory_bandwidth=2e9, roofline="sum", op_latency=1e-7),
]


@pytest.mark.parametrize("p, n, op, dtype", CASES)
@pytest.mark.parametrize("cost", COSTS, ids=["fully-connected", "zero-latency", "two-level", "roofline", "sum"])
def test_booked_rings_equal_their_messages(p, n, op, dtype, cost):
    groups = p < 32
    with_payloads = World(p, cost=cost).run(staggered, n, op, dtype, groups)
    metadata_only = World(p, cost=cost, keep_payloads=False).run(staggered, n, op, dtype, groups)
    assert metadata_only.trace.signature() == with_payloads.trace.signature()
    for a, b in zip(with_payloads.outputs, metadata_only.outputs):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert metadata_only.outputs[0] is not metadata_only.outputs[1]  # each device its own result


@pytest.mark.parametrize("p", [5, 40])
def test_rings_are_booked_under_a_roofline_too(bookings, p):
    """Memory bandwidth changes what a reduction costs, not which links a ring books: still booked whole."""
    run = World(p, cost=ROOFLINE, keep_payloads=False).run(staggered, 1000, "avg", np.float32, False)
    assert bookings[0] == 1
    reduce_ops = [op for op in run.trace.ops if op.name.startswith("all_reduce")]
    assert reduce_ops and all(op.t_end - op.t_start > op.flops / 1e9 for op in reduce_ops)  # bytes-bound


def test_only_private_rings_are_booked(bookings):
    World(8, keep_payloads=False).run(staggered, 9, "sum", np.float64, True)
    assert bookings[0] == 3  # the whole ring and both subgroups
    World(8).run(staggered, 9, "sum", np.float64, True)
    assert bookings[0] == 6  # payloads kept: booked with them (tests/collectives/test_booked_payloads.py)
    two_level = CostModel(topology=TwoLevel(4, 5e-6, 10e9))
    World(8, cost=two_level, keep_payloads=False).run(staggered, 9, "sum", np.float64, True)
    assert bookings[0] == 6  # every ring crosses the nodes' ports: message by message
    World(4, cost=two_level, keep_payloads=False).run(staggered, 9, "sum", np.float64, False)
    assert bookings[0] == 7  # inside one node
    World(4, keep_payloads=False, send_mode="rendezvous").run(staggered, 9, "sum", np.float64, False)
    assert bookings[0] == 7


def test_book_collectives_false_runs_every_ring_message_by_message(bookings):
    booked_run = World(8, keep_payloads=False).run(staggered, 9, "sum", np.float64, True)
    assert bookings[0] == 3
    by_message = World(8, keep_payloads=False, book_collectives=False).run(staggered, 9, "sum", np.float64, True)
    assert bookings[0] == 3  # none booked: the same trace, message by message
    assert by_message.trace.signature() == booked_run.trace.signature()
    with pytest.raises(ValueError, match="book_collectives"):
        World(2, book_collectives=1)


def test_stepping_a_booked_run_numbers_it_as_running_does(bookings):
    stepped = World(6, keep_payloads=False).start(staggered, 12, "sum", np.float64, True)
    steps = Stepper(stepped)
    for _ in steps:
        pass
    ran = World(6, keep_payloads=False).run(staggered, 12, "sum", np.float64, True)
    assert bookings[0] == 6 and stepped.trace.signature() == ran.trace.signature()


def test_a_member_that_never_comes_is_a_deadlock():
    def program(dev):
        if dev.rank != 2:
            dev.all_reduce(np.ones(4))

    with pytest.raises(DeadlockError) as err:
        World(4, keep_payloads=False).run(program)
    text = str(err.value)
    assert "device 3 is blocked in all_reduce#0 ring (its recv from device 2)" in text
    assert "device 2 finished without calling it" in text


def test_a_booked_ring_counts_against_the_event_limit():
    with pytest.raises(EventLimitError):
        World(16, keep_payloads=False, max_events=500).run(lambda dev: dev.all_reduce(np.ones(16)))
