"""Expert parallelism: a mixture of experts (router, top-k, capacity, dropping) with its hand-written backward,
its experts spread over devices, tokens dispatched and combined by all-to-all with per-device split sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import World
from simulator.checker import check
from simulator.parallel.experts import ops as X
from simulator.parallel.experts.model import MoE
from simulator.parallel.experts.parallel import ExpertParallel, all_to_all_single, expert_volume
from simulator.teach.examples import get


def finite_differences(model, params, x, t, eps=1e-6):
    out = {}
    for name, value in params.items():
        grad = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            for sign in (1, -1):
                shifted = dict(params)
                w = value.copy()
                w[i] += sign * eps
                shifted[name] = w
                grad[i] += sign * model.loss(shifted, x, t) / (2 * eps)
        out["dWr" if name == "Wr" else name.replace(".", ".d")] = grad
    return out


@pytest.mark.parametrize(("k", "factor", "groups"), [(1, 1.25, 1), (2, 1.0, 2), (1, 0.5, 4)])
def test_backward_equals_finite_differences(k, factor, groups):
    model = MoE(d_model=4, d_ff=6, experts=4, top_k=k, capacity_factor=factor, groups=groups)
    params = model.init(seed=0, router_scale=3.0)
    x, t = model.data(8, seed=1)
    grads = model.gradients(params, x, t)
    for name, fd in finite_differences(model, params, x, t).items():
        assert np.abs(grads[name] - fd).max() <= 1e-6 * np.abs(grads[name]).max(), name


def test_capacity_and_dropping_follow_gshard():
    assert X.capacity(8, 4, 1, 1.25) == 3 and X.capacity(8, 4, 2, 1.0) == 4
    probs = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.5, 0.1, 0.4], [0.2, 0.3, 0.5]])
    r = X.route(probs, 2, 2)
    np.testing.assert_array_equal(r.choice, [[0, 1], [0, 1], [0, 2], [2, 1]])
    # expert 0 fills up with tokens 0 and 1 (first choices, in token order): token 2's first choice is dropped
    np.testing.assert_array_equal(r.kept, [[True, True], [True, True], [False, True], [True, False]])
    assert [list(rows) for rows in r.rows] == [[0, 1], [0, 1], [3, 2]]  # first choices before second choices
    np.testing.assert_allclose(r.gates.sum(axis=1), 1.0)  # top-2: renormalised (GShard)


CASES = [(2, 2, 1, 2.0), (2, 4, 1, 1.25), (4, 4, 2, 1.0), (4, 8, 2, 0.5), (3, 6, 1, 1.0)]


@pytest.mark.parametrize(("p", "experts", "k", "factor"), CASES)
def test_every_gradient_equals_one_devices_and_the_messages_their_closed_form(p, experts, k, factor):
    model = MoE(d_model=4, d_ff=6, experts=experts, top_k=k, capacity_factor=factor, groups=p)
    params = model.init(seed=p + experts, router_scale=3.0)
    x, t = model.data(4 * p, seed=k)
    ep = ExpertParallel(model)
    result = ep.run(params, x, t)
    report = check(result, ep.reference(params, x, t))
    assert report.ok, str(report)
    whole = model.gradients(params, x, t)
    got: dict[str, np.ndarray] = {}
    for out in result.outputs:
        got |= out
    for name, value in whole.items():
        if name != "dx":
            np.testing.assert_allclose(got[name], value, rtol=1e-9, atol=1e-12 * np.abs(value).max())
    counts = np.stack([r.counts() for r in model.routings(params, x)])
    assert (len(result.trace.messages), sum(m.nbytes for m in result.trace.messages)) == expert_volume(model, counts)


def test_all_to_all_single_moves_rows_by_split_sizes():
    def program(dev):
        x = np.arange(6.0).reshape(3, 2) + 10 * dev.rank
        ins = [[1, 2], [3, 0]][dev.rank]
        outs = [[1, 3], [2, 0]][dev.rank]
        return all_to_all_single(dev, x[: sum(ins)], outs, ins, (0, 1))

    a, b = World(2).run(program).outputs
    np.testing.assert_array_equal(a, [[0, 1], [10, 11], [12, 13], [14, 15]])
    np.testing.assert_array_equal(b, [[2, 3], [4, 5]])

    def bad(dev):
        return all_to_all_single(dev, np.zeros((3, 2)), [1, 1], [1, 1], (0, 1))

    with pytest.raises(Exception, match=r"split sizes \[1, 1\] add up to 2, but the input has 3 rows"):
        World(2).run(bad)


def test_popular_experts_make_their_devices_the_slowest_and_capacity_bounds_them():
    busy = {}
    for factor in (4.0, 1.0):
        model = MoE(d_model=4, d_ff=32, experts=4, top_k=1, capacity_factor=factor, groups=4)
        params = model.init(seed=3)
        params["Wr"][:, 3] += 2.0  # expert 3 is everyone's favourite
        x, t = model.data(32, seed=4)
        x[:, :] += 1.0
        result = ExpertParallel(model).run(params, x, t)
        counts = np.stack([r.counts() for r in model.routings(params, x)])
        ops = [r for kind, r in result.trace.events if kind == "op" and r.name.startswith("E")]  # the experts
        busy[factor] = [sum(r.flops for r in ops if r.rank == d) for d in range(4)]  # the experts' arithmetic
        assert counts.sum(axis=0)[3] == max(counts.sum(axis=0))
        if factor == 1.0:
            assert counts.max() <= model.capacity(32)  # at most C rows per expert per group
    assert np.argmax(busy[4.0]) == 3 and max(busy[4.0]) > 2 * min(busy[4.0])
    assert max(busy[1.0]) < max(busy[4.0])  # the capacity caps the favourite's work; the rest is dropped


def test_the_scenario_matches():
    outcome = get("ep-dispatch-combine").run()
    assert outcome.as_expected and outcome.report.ok


def test_swapped_split_sizes_are_caught_at_the_first_row_returned_wrong():
    report = get("ep-bug-swapped-splits").run().report
    assert report.verdict == "FAILED"
    assert (report.first.where, report.first.name) == ("output", "E0.out")
    # device 2 computes rows 2:4 of E0.out: the report compares them with those rows, and says so (E0.out
    # on one device has four rows, not the two it shows)
    assert "but the block [2:4] of E0.out is [[0.00246077" in report.first.explain()


def test_rows_combined_in_arrival_order_are_caught_at_the_output():
    report = get("ep-bug-combine-wrong-order").run().report
    assert report.verdict == "FAILED"
    assert (report.first.where, report.first.name, report.first.rank) == ("output", "y", 0)
