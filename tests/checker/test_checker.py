"""The checker on hand-written programs: shards with index=, and the hint when index= is missing."""

import numpy as np

from simulator import World
from simulator.checker import Reference, check

X = np.arange(8.0).reshape(2, 4)
W = np.arange(24.0).reshape(4, 6)


def linear(dev):
    dev.hold("X", X)
    dev.hold("W", W)
    return dev.compute("Y", np.matmul, X, W)


def column_parallel(dev, say_index=True, scale=1.0):
    cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
    w = dev.hold("W", W[cols] * scale, index=cols)
    return dev.compute("Y", np.matmul, X, w, index=cols if say_index else None)


def test_shards_with_index_match_their_block_of_the_reference():
    run = World(2).run(column_parallel)
    report = check(run, Reference.of(linear))
    assert report.ok and report.checked == 6  # W's block, Y's block and the returned block, on each device
    np.testing.assert_array_equal(np.hstack(run.outputs), X @ W)


def test_missing_index_is_explained_with_the_fix():
    report = check(World(2).run(column_parallel, False), Reference.of(linear))
    first = report.first
    assert (first.where, first.rank, first.position) == ("input", 0, 1)
    assert "It is the block [:, 0:3] of that input" in first.explain()
    assert "index=np.s_[:, 0:3]" in first.explain()


def test_a_wrong_shard_is_flagged_where_it_is_held():
    report = check(World(2).run(column_parallel, True, 2.0), Reference.of(linear))
    first = report.first
    assert (first.where, first.rank, first.name) == ("held value", 0, "W")
    assert "2 times what it should be" in first.explain()


def test_the_walk_over_columns_gives_the_verdict_of_the_walk_over_records():
    from simulator.core.trace import Trace

    def model(dev):
        x = dev.hold("x", np.arange(8.0))
        return dev.compute("y", lambda v: 3 * v, x)

    def program(dev, bug):
        x = dev.hold("x", np.arange(8.0) / 4, partial=True)  # four terms of x
        y = dev.all_reduce(x, name="x", partials="t" if bug else None)
        y = dev.all_reduce(y * 3 if not bug else y * 2, algorithm="halving_doubling")
        return dev.compute("y", lambda v: v / 4, y)

    ref = Reference.of(model)
    for bug in (False, True):
        run = World(4).run(program, bug)
        records = Trace(run.trace.world_size)  # the same run as plain records: the walk over objects
        records.events, records.messages, records.ops = (
            list(run.trace.events),
            list(run.trace.messages),
            list(run.trace.ops),
        )
        records.outputs, records.groups = run.outputs, run.trace.groups
        assert check(run, ref).text() == check(records, ref).text()
        assert check(run, ref).ok is not bug


def test_the_walk_makes_no_record_for_a_collectives_unnamed_chunks(monkeypatch):
    from simulator.core.columnar import ColumnarTrace

    def model(dev):
        return dev.hold("x", np.full(16, 28.0))

    def program(dev):
        return dev.all_reduce(dev.hold("x", np.full(16, float(dev.rank)), partial=True))

    run = World(8).run(program)
    made = []
    for method in ("message_at_row", "op_at_row"):
        original = getattr(ColumnarTrace, method)
        monkeypatch.setattr(ColumnarTrace, method, lambda self, row, f=original: made.append(row) or f(self, row))
    assert check(run, Reference.of(model)).ok
    assert len(run.trace.messages) == 112 and len(made) <= 8 + 8  # the holds, and the results' origins at most
