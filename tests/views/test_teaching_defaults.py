"""Defaults that teach: a student's World(n) shows its ops and messages; matrix products cost 2mnk."""

import operator

import numpy as np
import pytest

from simulator import CostModel, World
from simulator.cost.model import op_flops
from simulator.cost.presets import preset, teaching
from simulator.views.textgrid import text_timeline


def student_ring(dev):
    """What a student writes first: a value passed around four devices, one small op each."""
    x = dev.hold("x", np.arange(4.0) + dev.rank)
    y = dev.compute("y", lambda v: v * 2, x)
    dev.send(y, (dev.rank + 1) % dev.world_size)
    return dev.recv((dev.rank - 1) % dev.world_size, shape=(4,), dtype=np.float64, name="y_left")


def test_a_plain_world_uses_the_teaching_model():
    assert World(4).cost == teaching() == preset("teaching")
    assert "0.5 us per op" in World(4).cost.describe()


def test_ops_and_messages_both_show_in_a_students_timeline():
    run = World(4).run(student_ring)
    (op,) = [o for o in run.trace.ops if o.rank == 0]
    msg = run.trace.messages[0]
    assert op.t_end - op.t_start == pytest.approx(0.5e-6 + 4 / 10e9)  # a launch, then 4 operations
    assert msg.t_arrive - msg.t_start == pytest.approx(1e-6 + 32 / 1e9)  # alpha + 32 bytes at 1 GB/s
    grid = text_timeline(run, 40).splitlines()
    assert all(row.count("y") == 1 and "=" in row and "-" in row for row in grid[1:5])  # op block, then the flight


def test_matrix_products_cost_2mnk():
    a, b = np.ones((2, 4)), np.ones((4, 6))
    for fn in (np.matmul, np.dot, operator.matmul):
        assert op_flops(fn, (a, b), a @ b) == 2 * 2 * 4 * 6
    assert op_flops(np.matmul, (np.ones((3, 2, 4)), np.ones((3, 4, 5))), np.ones((3, 2, 5))) == 2 * 3 * 2 * 4 * 5
    assert op_flops(lambda u, v: u @ v, (a, b), a @ b) == 12  # unrecognised: one per output element
    run = World(1, cost=CostModel(flops=1e9)).run(lambda dev: dev.compute("Y", np.matmul, a, b))
    assert run.trace.ops[0].flops == 96 and run.trace.ops[0].t_end == pytest.approx(96e-9)


def test_op_latency_is_validated_and_off_by_default():
    assert CostModel().op_latency == 0 and CostModel().compute_time(1e12) == 0.01
    assert CostModel(flops=1e9, op_latency=1e-6).compute_time(1000) == pytest.approx(2e-6)
    with pytest.raises(ValueError, match="op_latency must be a finite number >= 0"):
        CostModel(op_latency=-1.0)
