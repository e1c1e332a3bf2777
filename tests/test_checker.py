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
