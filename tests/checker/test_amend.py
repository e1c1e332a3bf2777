"""What a program learns later is said after the fact: an op that was one term of a sum (``amend_op``), a message
that carried a named value (``amend_received``). The torch backend says them so; here, plain rank programs."""

import numpy as np

from simulator import World
from simulator.checker import Reference, check

X, W = np.arange(8.0).reshape(2, 4), np.arange(24.0).reshape(4, 6)


def linear(dev):
    return dev.compute("Y", np.matmul, dev.hold("X", X), dev.hold("W", W))


def row_split(amend):
    def program(dev):
        rows = np.s_[2 * dev.rank : 2 * dev.rank + 2]
        row = dev.ops_recorded
        y = dev.compute("Y", np.matmul, X[:, rows], W[rows])  # a partial sum, not said yet
        if amend:
            dev.amend_op(row, partial=True)
        return dev.all_reduce(y)

    return program


def test_an_op_amended_as_a_partial_sum_is_checked_as_one():
    assert check(World(2).run(row_split(True)), Reference.of(linear)).ok
    assert check(World(2).run(row_split(False)), Reference.of(linear)).verdict == "FAILED"


def seed_model(dev, x):
    dev.hold("x", x)
    return dev.compute("B", np.square, dev.compute("A", lambda v: 2 * v + 1, x))


def seed(raw):
    def program(dev, x):
        if dev.rank == 0:
            dev.send(x if raw else 2 * x + 1, 1)
            return None
        req = dev.irecv(0)
        h = dev.wait(req)
        dev.amend_received(req, name="A")  # learnt once it is used: it is what B is computed from
        return dev.compute("B", np.square, h)

    return program


def test_a_message_named_after_it_arrived_is_checked_where_it_crossed():
    x = np.array([3.0])
    assert check(World(2).run(seed(False), x), Reference.of(seed_model, x)).ok
    report = check(World(2).run(seed(True), x), Reference.of(seed_model, x))
    assert report.first.where == "message" and "should have received A" in str(report)
