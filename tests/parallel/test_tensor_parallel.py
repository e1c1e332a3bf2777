"""Tensor-parallel layers equal one device, value by value and message by message."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import World
from simulator.checker import Reference, check
from simulator.parallel import tensor as tp

ALGORITHMS = ["ring", "direct", "halving_doubling", "tree"]


@st.composite
def layer(draw):
    p = draw(st.integers(1, 6))
    b, k, n = draw(st.integers(1, 4)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    return p, rng.standard_normal((b, k)), rng.standard_normal((k, n))


def named_and_checked(result, report, algorithm="ring"):
    """Every message carried a named value and the check compared it with the single-device run.

    (halving_doubling bundles several chunks into one message; those bundles carry no name.)
    """
    assert report.ok, str(report)
    named = [m for m in result.trace.messages if m.name is not None]
    if algorithm != "halving_doubling":
        assert len(named) == len(result.trace.messages)
    assert report.checked >= len(named)


@settings(max_examples=30, deadline=None)
@given(layer(), st.sampled_from(["ring", "direct", "halving_doubling"]))
def test_column_parallel_equals_one_device(case, algorithm):
    p, X, W = case
    if algorithm == "halving_doubling" and p & (p - 1):
        algorithm = "ring"
    result = World(p).run(tp.column_parallel_program, X, W, True, algorithm)
    for y in result.outputs:
        np.testing.assert_allclose(y, X @ W, rtol=1e-12, atol=1e-12)
    named_and_checked(result, check(result, Reference.of(tp.linear_reference, X, W, p)), algorithm)


@settings(max_examples=30, deadline=None)
@given(layer())
def test_column_parallel_without_gather_leaves_column_shards(case):
    p, X, W = case
    result = World(p).run(tp.column_parallel_program, X, W, False)
    n = W.shape[1]
    for j, y in enumerate(result.outputs):
        np.testing.assert_allclose(y, (X @ W)[:, tp.split(n, p, j)], rtol=1e-12, atol=1e-12)
    labels = {m.label.split(" ")[0] for m in result.trace.messages}
    assert labels <= {"distribute"}  # the product itself needs no message


@settings(max_examples=30, deadline=None)
@given(layer(), st.sampled_from(ALGORITHMS))
def test_row_parallel_all_reduce_equals_one_device(case, algorithm):
    p, X, W = case
    result = World(p).run(tp.row_parallel_program, X, W, "all_reduce", algorithm)
    for y in result.outputs:
        np.testing.assert_allclose(y, X @ W, rtol=1e-12, atol=1e-12)
    named_and_checked(result, check(result, Reference.of(tp.linear_reference, X, W, p)), algorithm)


@settings(max_examples=30, deadline=None)
@given(layer(), st.sampled_from(["ring", "direct"]))
def test_row_parallel_reduce_scatter_gives_row_blocks(case, algorithm):
    p, X, W = case
    result = World(p).run(tp.row_parallel_program, X, W, "reduce_scatter", algorithm)
    for j, y in enumerate(result.outputs):
        np.testing.assert_allclose(y, (X @ W)[tp.split(X.shape[0], p, j)], rtol=1e-12, atol=1e-12)
    named_and_checked(result, check(result, Reference.of(tp.linear_reference, X, W, p)))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 3), st.integers(1, 5), st.integers(1, 12), st.integers(0, 2**31))
def test_megatron_mlp_equals_one_device_with_one_all_reduce(p, b, d, h, seed):
    rng = np.random.default_rng(seed)
    X, A, B = rng.standard_normal((b, d)), rng.standard_normal((d, h)), rng.standard_normal((h, d))
    result = World(p).run(tp.megatron_mlp_program, X, A, B, True)
    for out in result.outputs:
        np.testing.assert_allclose(out, X + tp.gelu(X @ A) @ B, rtol=1e-12, atol=1e-12)
    named_and_checked(result, check(result, Reference.of(tp.mlp_reference, X, A, B, p, True)))
    collectives = {(m.label.split(" ")[0]) for m in result.trace.messages if "#" in m.label}
    assert collectives <= {"all_reduce#0"}  # one all-reduce per forward, nothing else after distribution


def test_row_parallel_messages_one_by_one():
    """Two devices, ring all-reduce of the partial sums: the four messages and what each carries."""
    X = np.arange(8.0).reshape(2, 4)
    W = np.arange(12.0).reshape(4, 3)
    result = World(2).run(tp.row_parallel_program, X, W)
    ring = [m for m in result.trace.messages if m.label.startswith("all_reduce")]
    ring.sort(
        key=lambda m: (int(m.label.split(" step ")[1].split()[0]), m.src)
    )  # by step (0: reduce, 1: gather), then sender
    partial0, partial1 = X[:, :2] @ W[:2], X[:, 2:] @ W[2:]
    assert [(m.src, m.dst, m.name) for m in ring] == [
        (0, 1, "Y.partial[0]"),
        (1, 0, "Y.partial[1]"),
        (0, 1, "Y"),
        (1, 0, "Y"),
    ]
    # step 0: device 0 sends its partial sum of chunk 1 (flat elements 3:6); device 1 its chunk 0
    np.testing.assert_array_equal(ring[0].payload, partial0.reshape(-1)[3:6])
    np.testing.assert_array_equal(ring[1].payload, partial1.reshape(-1)[0:3])
    # step 1: each sends the chunk it completed
    np.testing.assert_array_equal(ring[2].payload, (X @ W).reshape(-1)[0:3])
    np.testing.assert_array_equal(ring[3].payload, (X @ W).reshape(-1)[3:6])
    assert check(result, Reference.of(tp.linear_reference, X, W, 2)).ok


def test_partial_reference_names_each_device_s_sum():
    X, W = np.ones((1, 4)), np.arange(8.0).reshape(4, 2)
    ref = Reference.of(tp.linear_reference, X, W, 2)
    np.testing.assert_array_equal(ref.values["Y.partial[0]"] + ref.values["Y.partial[1]"], ref.values["Y"])
    np.testing.assert_array_equal(ref.expected("Y.partial[0]+Y.partial[1]"), X @ W)
    assert "device 1's partial sum" in ref.describe("Y.partial[1]")


@pytest.mark.parametrize("name", ["tp-column", "tp-row", "tp-row-reduce-scatter", "tp-megatron-mlp", "tp-linear-gelu"])
def test_correct_scenarios_pass_the_check(name):
    from simulator.teach.examples import get

    run = get(name).run()
    assert run.as_expected and run.report.ok
