"""all_reduce(x, in_place=True): the result lands in x, as torch.distributed.all_reduce leaves it."""

import numpy as np
import pytest

from simulator import RankError, World
from simulator.checker import Reference, check
from tests import demos


@pytest.mark.parametrize("algorithm", ["ring", "tree", "halving_doubling", "direct"])
def test_the_result_lands_in_the_array_given_up_and_equals_the_functional_one(algorithm):
    data = np.random.default_rng(7).standard_normal((4, 5, 3))

    def program(dev):
        x = data[dev.rank].copy()
        out = dev.all_reduce(x, algorithm=algorithm, in_place=True)
        again = dev.all_reduce(data[dev.rank], algorithm=algorithm)
        return x, out, again

    for x, out, again in World(4).run(program).outputs:
        np.testing.assert_array_equal(x, again)  # same algorithm, same order of additions: bit for bit
        np.testing.assert_allclose(x, data.sum(axis=0), rtol=1e-12)
        assert np.shares_memory(out, x) and not x.flags.writeable and not out.flags.writeable


def test_sum_average_pieces_and_read_only_flags_hold_in_a_simulation():
    for rank, checks in enumerate(World(3).run(demos.all_reduce_check, 1000).outputs):
        assert all(checks.values()), (rank, checks)


def test_the_trace_keeps_the_input_as_it_was_and_the_checker_checks_the_result():
    def program(dev):
        grad = np.arange(4.0) * (dev.rank + 1)
        dev.hold(f"grad[{dev.rank}]", grad)
        return dev.all_reduce(grad, name="total", partials="grad", in_place=True)

    def reference(ref):
        total = 0
        for m in range(2):
            total = total + ref.hold(f"grad[{m}]", np.arange(4.0) * (m + 1))
        ref.hold("total", total)
        return total

    result = World(2).run(program)
    assert check(result.trace, Reference.of(reference)).ok
    first_sent = min(result.trace.messages, key=lambda m: m.t_send)
    assert first_sent.payload is not None and np.abs(first_sent.payload).max() <= 3 * 2  # the inputs, not the sum


@pytest.mark.parametrize(
    "x, op, words",
    [
        ([1.0, 2.0], "sum", "must be a NumPy array, got list"),
        (np.arange(4.0).view()[::2], "sum", "not contiguous"),
        (np.arange(4), "avg", "an average of integers is not an integer"),
    ],
)
def test_an_array_that_cannot_take_the_result_is_refused_with_the_fix(x, op, words):
    with pytest.raises(RankError) as err:
        World(2).run(lambda dev: dev.all_reduce(x if dev.rank else np.arange(4.0), op=op, in_place=True))
    assert words in str(err.value) and ("in_place=True" in str(err.value) or op == "avg")


def test_a_value_the_simulator_handed_back_is_read_only_and_cannot_be_given_up():
    def program(dev):
        y = dev.compute("y", lambda: np.ones(3))
        return dev.all_reduce(y, in_place=True)

    with pytest.raises(RankError) as err:
        World(2).run(program)
    assert "x is read-only" in str(err.value) and "buf = x.copy()" in str(err.value)
