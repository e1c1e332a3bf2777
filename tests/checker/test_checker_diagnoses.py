"""The checker's diagnoses hold on real float data: standard-normal values, batch sizes 1..8, groups of 2..8.

Each property runs a wrong parallel program against the one-device model and asserts the words of
the first divergence; the same comparison tolerance decides "different" and "the blocks are swapped".
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import World
from simulator.checker import Reference, check
from simulator.checker.compare import difference
from tests.report_words import words

PROPERTY = settings(max_examples=25, deadline=None)


@st.composite
def cases(draw):
    """(group size p, batch b, columns per device c, features d, generator) of standard-normal data."""
    p, b = draw(st.integers(2, 8)), draw(st.integers(1, 8))
    c, d = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    return p, b, c, d, np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


def linear(dev, X, W):
    return dev.compute("Y", np.matmul, dev.hold("X", X), dev.hold("W", W))


def columns(dev, X, W, p, join):
    """Column-parallel Y = X @ W; the shards are gathered and joined by ``join`` into Y."""
    c = W.shape[1] // p
    cols = np.s_[:, c * dev.rank : c * (dev.rank + 1)]
    w = dev.hold("W", W[cols], index=cols)
    y = dev.compute("Y", np.matmul, dev.hold("X", X), w, index=cols)
    pieces = dev.all_gather(y)
    return dev.compute("Y", join, *pieces)


def first_words(result, ref):
    report = check(result, ref)
    assert report.verdict == "FAILED", words(report)
    return report.first, words(report)


@PROPERTY
@given(cases())
def test_shards_joined_in_the_wrong_order(case):
    p, b, c, d, rng = case
    X, W = rng.standard_normal((b, d)), rng.standard_normal((d, p * c))
    ref = Reference.of(linear, X, W)
    assert check(World(p).run(columns, X, W, p, lambda *ps: np.concatenate(ps, axis=1)), ref).ok
    first, text = first_words(World(p).run(columns, X, W, p, lambda *ps: np.concatenate(ps[::-1], axis=1)), ref)
    assert first.where == "output" and first.name == "Y"
    assert f"the blocks found are blocks {list(range(p))[::-1]}" in text and "wrong order" in text


@PROPERTY
@given(cases())
def test_shards_joined_along_the_wrong_axis(case):
    p, b, c, d, rng = case
    X, W = rng.standard_normal((b, d)), rng.standard_normal((d, p * c))
    ref = Reference.of(linear, X, W)
    first, text = first_words(World(p).run(columns, X, W, p, lambda *ps: np.concatenate(ps, axis=0)), ref)
    assert f"It has shape {(p * b, c)} where one device has {(b, p * c)}" in text
    assert "joined along axis 0 instead of axis 1" in text


@PROPERTY
@given(cases())
def test_a_shard_taken_from_the_next_device(case):
    p, b, c, d, rng = case
    X, W = rng.standard_normal((b, d)), rng.standard_normal((d, p * c))

    def shifted(dev):
        mine = np.s_[:, c * dev.rank : c * (dev.rank + 1)]
        nxt = (dev.rank + 1) % p
        w = dev.hold("W", W[:, c * nxt : c * (nxt + 1)], index=mine)  # BUG: the neighbour's columns
        return dev.compute("Y", np.matmul, dev.hold("X", X), w, index=mine)

    first, text = first_words(World(p).run(shifted), Reference.of(linear, X, W))
    assert (first.where, first.name, first.rank) == ("held value", "W", 0)
    assert f"It is the block [:, {c}:{2 * c}] of W, not the block [:, 0:{c}]" in text


def mean_rows(v):
    return v.mean(axis=0)


@PROPERTY
@given(cases())
def test_local_means_summed_not_averaged_name_the_group(case):
    p, b, _, d, rng = case
    X = rng.standard_normal((p * b, d))

    def model(dev):
        return dev.compute("g", mean_rows, dev.hold("x", X))

    def replicas(dev, divide):
        rows = np.s_[b * dev.rank : b * (dev.rank + 1)]
        x = dev.hold("x", X[rows], index=rows)
        local = dev.compute("g", lambda v: mean_rows(v) / (p if divide else 1), x, partial=True)
        return dev.compute("g", np.copy, dev.all_reduce(local))

    ref = Reference.of(model)
    assert check(World(p).run(replicas, True), ref).ok
    first, text = first_words(World(p).run(replicas, False), ref)
    # the local means are terms of an average (their mean is g), so the sum shows where they are added
    assert first.where == "output" and first.name == "g"
    assert f"Every element is {p} times what it should be, and {p} is the number of devices in the group" in text


@PROPERTY
@given(cases())
def test_a_sum_over_a_subgroup_names_that_group(case):
    p, b, _, d, rng = case
    X = rng.standard_normal((p * b, d))

    def model(dev):
        return dev.compute("g", mean_rows, dev.hold("x", X))

    def two_groups(dev):  # 2 x p devices: each row of the mesh averages over its own p devices
        q, r = divmod(dev.rank, p)
        group = tuple(range(q * p, (q + 1) * p))
        rows = np.s_[b * r : b * (r + 1)]
        local = dev.compute("g.local", mean_rows, dev.hold("x", X[rows], index=rows))
        return dev.compute("g", np.copy, dev.all_reduce(local, group=group))  # BUG: not divided by p

    first, text = first_words(World(2 * p).run(two_groups), Reference.of(model))
    assert first.where == "output" and first.name == "g"
    assert f"{p} times what it should be, and {p} is the number of devices in the group" in text


@PROPERTY
@given(st.sampled_from([11, 13, 17, 19, 23, 29, 31]), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_a_value_rotated_along_an_axis(n, shift, seed):  # n prime: no split into 2..8 equal blocks
    shift = shift % n or 1
    x = np.random.default_rng(seed).standard_normal(n)

    def model(dev):
        return dev.compute("y", lambda v: 2 * v, dev.hold("x", x))

    def rolled(dev):
        return dev.compute("y", lambda v: np.roll(2 * v, shift), dev.hold("x", x))

    _, text = first_words(World(1).run(rolled), Reference.of(model))
    assert f"rotated by {shift} position(s) along axis 0" in text


def test_large_arrays_are_described_by_where_and_how_much_they_differ():
    rng = np.random.default_rng(3)
    expected = rng.standard_normal((64, 32))
    found = expected.copy()
    found[5, 9] += 0.5
    found[40, 1] -= 2.0
    text = difference(found, expected)
    assert text.startswith("Both have shape (64, 32); 2 of 2,048 elements differ (largest difference 2,")
    assert "largest relative difference" in text and "the first is at [5, 9]" in text
    assert "At [5, 7:13]: found [" in text and "expected [" in text


def test_a_large_wrong_op_output_says_where_in_the_report():
    X = np.random.default_rng(4).standard_normal((40, 8))

    def model(dev):
        return dev.compute("y", np.tanh, dev.hold("x", X))

    def wrong(dev):
        return dev.compute("y", lambda v: np.tanh(v) + (np.arange(v.size).reshape(v.shape) == 17), dev.hold("x", X))

    text = str(check(World(1).run(wrong), Reference.of(model)))
    assert "an array of shape (40, 8) (float64)" in text
    assert "1 of 320 elements differ" in text and "the first is at [2, 1]" in text


def test_differences_against_infinite_expected_values_are_said_plainly():
    expected = np.full((4, 8), -np.inf)
    expected[np.tril_indices(4)] = 1.0  # a causal mask's scores
    found = expected.copy()
    found[0, 3] = 0.5  # a masked score that leaked through
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = difference(found, expected)
    assert "1 of 32 elements differ (largest difference inf, largest relative difference inf" in text
    assert "the first is at [0, 3]" in text


def test_a_held_term_after_an_all_reduce_was_taken_before_the_sum_came():
    """The array given to dev.all_reduce (not the one it returns) held as the total: a term, read too early."""
    x = np.arange(6.0).reshape(2, 3)

    def model(dev):
        return dev.hold("total", x * 3)  # the terms x * 1 and x * 2, added

    def program(dev):
        term = dev.compute("term", lambda a: a * (dev.rank + 1), x, partial=True)
        dev.all_reduce(term)  # BUG: the sum it returns is dropped
        return dev.hold("total", term)

    report = check(World(2).run(program), Reference.of(model))
    assert report.first.where == "held value" and report.first.name == "total", str(report)
    text = words(str(report))
    assert "the values of total on devices 0, 1 add up to total" in text
    assert "Device 0 did call all_reduce: was this value taken before the sum came?" in text
