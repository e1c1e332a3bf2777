"""Data parallelism: replicas, bucketed all-reduce (overlapped or not), equal to one device's gradient."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import CostModel
from simulator.checker import check
from simulator.parallel.data import DP_TAG, DataParallel, bucket_layout
from simulator.parallel.mlp import MLP
from simulator.parallel.pipeline import ActionCosts

MLP4 = MLP((4, 6, 6, 6, 2))
PARAMS = MLP4.init(seed=3)
X, T = MLP4.data(24, seed=4)
WHOLE = MLP4.gradients(PARAMS, X, T)
GRADS = [k for k in WHOLE if k != "loss"]


def assert_whole_batch_gradients(result) -> None:
    for out in result.outputs:
        for name in GRADS:
            np.testing.assert_allclose(out[name], WHOLE[name], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("microbatches", [1, 3])
def test_replicas_average_to_the_whole_batch_gradient(replicas, microbatches):
    dp = DataParallel(MLP4, replicas, microbatches=microbatches)
    result = dp.run(PARAMS, X, T)
    report = check(result, dp.reference(PARAMS, X, T))
    assert report.ok, str(report)
    assert not report.unknown  # every message of the all-reduce is named and compared too
    assert_whole_batch_gradients(result)


@pytest.mark.parametrize("algorithm", ["ring", "direct", "tree", "halving_doubling"])
def test_blocking_all_reduce_with_any_algorithm(algorithm):
    dp = DataParallel(MLP4, 4, overlap=False, algorithm=algorithm)
    result = dp.run(PARAMS, X, T)
    assert check(result, dp.reference(PARAMS, X, T)).ok
    assert_whole_batch_gradients(result)


def test_buckets_follow_the_backward_order():
    assert bucket_layout(MLP4, range(1, 5), 0) == [["dW4", "db4"], ["dW3", "db3"], ["dW2", "db2"], ["dW1", "db1"]]
    # 6x2+2 = 14 numbers, then 6x6+6 = 42: a cap of 50 closes a bucket once it holds 50 or more
    assert bucket_layout(MLP4, range(1, 5), 50) == [["dW4", "db4", "dW3", "db3"], ["dW2", "db2", "dW1", "db1"]]
    assert bucket_layout(MLP4, range(1, 5), 10**6) == [["dW4", "db4", "dW3", "db3", "dW2", "db2", "dW1", "db1"]]


@pytest.mark.parametrize(("cap", "buckets"), [(0, 4), (50, 2), (10**6, 1)])
def test_a_ring_sends_2_p_minus_1_messages_per_bucket_per_device(cap, buckets):
    n = 4
    dp = DataParallel(MLP4, n, bucket_elements=cap)
    result = dp.run(PARAMS, X, T)
    assert check(result, dp.reference(PARAMS, X, T)).ok
    msgs = result.trace.messages
    assert all(m.tag >= DP_TAG and m.dst == (m.src + 1) % n for m in msgs)  # a ring: each to its right
    assert len(msgs) == n * 2 * (n - 1) * buckets


def test_overlap_hides_communication_under_the_backward():
    cost = CostModel(latency=1e-6, bandwidth=2e8)  # slow links: one layer's bucket takes microseconds
    costs = ActionCosts.equal(4e-6, 8e-6)
    runs = {
        overlap: DataParallel(MLP4, 4, overlap=overlap, costs=costs).run(PARAMS, X, T, cost=cost)
        for overlap in (True, False)
    }
    assert runs[True].time < runs[False].time
    # with overlap, the last layer's bucket is on the wire before the backward is over
    trace = runs[True].trace
    backward_end = max(op.t_end for op in trace.ops if op.rank == 0 and op.name.startswith("dW1.mb"))
    first_send = min(m.t_send for m in trace.messages if m.src == 0)
    assert first_send < backward_end
    # without overlap, nothing is sent before the backward ends
    trace = runs[False].trace
    backward_end = max(op.t_end for op in trace.ops if op.rank == 0 and op.name.startswith("dW1.mb"))
    assert min(m.t_send for m in trace.messages if m.src == 0) >= backward_end
    for run in runs.values():
        assert_whole_batch_gradients(run)


def test_packing_and_averaging_cost_an_op_under_the_cost_models_rates_and_nothing_under_fixed_costs():
    """Packing the gradients into a bucket and dividing the sum by the replicas are real work on a real
    rank: under the cost model's rates each takes an op's time; under fixed action costs (their formulas
    count F and B only) none."""
    cost = CostModel(flops=1e9, latency=1e-6, bandwidth=1e9, op_latency=1e-6)
    names = {f"{p}{k}" for p in "Wb" for k in range(1, MLP4.layers + 1)}

    def averages(run):
        return [op for op in run.trace.ops if op.name in {"d" + n for n in names} or op.name.endswith(".packed")]

    rated = averages(DataParallel(MLP4, 2).run(PARAMS, X, T, cost=cost))
    assert rated and all(op.t_end - op.t_start >= 1e-6 for op in rated)
    fixed = averages(DataParallel(MLP4, 2, costs=ActionCosts.equal(4e-6, 8e-6)).run(PARAMS, X, T, cost=cost))
    assert fixed and all(op.t_end == op.t_start for op in fixed)


def test_rendezvous_sends_do_not_deadlock_the_overlapped_ring():
    dp = DataParallel(MLP4, 3, microbatches=2)
    result = dp.run(PARAMS, X, T, send_mode="rendezvous", strict=True)
    assert check(result, dp.reference(PARAMS, X, T)).ok


def test_a_batch_that_does_not_split_is_refused():
    from simulator import RankError

    with pytest.raises(RankError, match="24 rows does not split evenly over 5 replicas"):
        DataParallel(MLP4, 5).run(PARAMS, X, T)
