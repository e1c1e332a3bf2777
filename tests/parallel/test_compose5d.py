"""The 5-D composition: one training step of a transformer stack over dp x ep x pp x cp x tp = 32 devices.

Every gradient equals one device's (float64, 1e-9 relative), the check passes value by value, the messages
add up to the closed form kind by kind, and the one-device stack's backward equals finite differences of the
plain NumPy stack.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from simulator.checker import check
from simulator.parallel.compose5d import DIMS, Parallel5D, message_counts, message_kind, stack_loss, stack_params
from simulator.parallel.experts.model import MoE
from simulator.parallel.transformer.model import Transformer
from simulator.tensors.mesh import DeviceMesh

TRANSFORMER = Transformer(d_model=8, heads=2, d_ff=16)
MOE = MoE(d_model=8, d_ff=16, experts=2, top_k=1, capacity_factor=2.0)
X, T = TRANSFORMER.data(8, 16, seed=1)


def step_on(shape, **options) -> tuple[Parallel5D, dict]:
    step = Parallel5D(TRANSFORMER, MOE, DeviceMesh.grid(shape, DIMS), microbatches=2, **options)
    return step, stack_params(TRANSFORMER, MOE, shape[2], seed=0)


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_32_devices_compute_one_devices_gradients(sequence_parallel):
    step, params = step_on((2, 2, 2, 2, 2), sequence_parallel=sequence_parallel)
    result = step.run(params, X, T)
    reference = step.reference(params, X, T)
    report = check(result, reference)
    assert report.ok, str(report)
    assert result.trace.world_size == 32
    whole = reference.result  # the one-device step's gradients
    for rank, grads in enumerate(result.outputs):
        split_index = _param_index(step, rank)
        for name, value in grads.items():
            want = (
                whole[name] if name == "loss" else whole[name][split_index(name)] if split_index(name) else whole[name]
            )
            np.testing.assert_allclose(value, want, rtol=1e-9, atol=1e-12 * np.abs(whole[name]).max())
    # every parameter's gradient is held by some device, whole or in pieces that cover it
    held = {name for grads in result.outputs for name in grads}
    assert held == set(whole)


def _param_index(step: Parallel5D, rank: int):
    from simulator.parallel.transformer.composed_split import ComposedSplit

    split = ComposedSplit.of(TRANSFORMER, step.mesh, rank, X.shape[1], step.sequence_parallel)
    return lambda name: split.param_index(name.split(".d", 1)[1]) if ".d" in name else None


@pytest.mark.parametrize(
    "shape", [(1, 1, 2, 1, 1), (1, 2, 1, 1, 1), (2, 1, 1, 1, 1), (1, 1, 1, 2, 1), (1, 1, 1, 1, 2), (1, 2, 2, 2, 1)]
)
def test_each_dimension_alone_and_some_together(shape):
    step, params = step_on(shape)
    result = step.run(params, X, T)
    report = check(result, step.reference(params, X, T))
    assert report.ok, str(report)


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_messages_add_up_to_the_closed_form(sequence_parallel):
    step, params = step_on((2, 2, 2, 2, 2), sequence_parallel=sequence_parallel)
    result = step.run(params, X, T, keep_payloads=False)
    want = message_counts(step)
    got = Counter(message_kind(m.label) for m in result.trace.messages)
    assert len(result.trace.messages) == sum(want.values())
    assert got["pipeline"] == want["pipeline"] and got["ring attention"] == want["ring attention"]
    assert got["all_to_all"] == 4 * want["expert parallel"] // 5  # the four all-to-alls; the fifth: the counts


def test_the_stacks_backward_equals_finite_differences():
    step, params = step_on((1, 1, 2, 1, 1))
    x, t = TRANSFORMER.data(2, 6, seed=3)
    grads = step.reference(params, x, t).result
    rng = np.random.default_rng(0)
    for name in ("L0.Wq", "L0.gamma2", "L1.Wr", "L1.E1.W1", "L2.W2", "L3.E0.b2"):
        index = tuple(rng.integers(0, n) for n in params[name].shape)
        moved = []
        for sign in (1, -1):
            shifted = dict(params)
            shifted[name] = params[name].copy()
            shifted[name][index] += sign * 1e-6
            moved.append(stack_loss(TRANSFORMER, MOE, 2, shifted, x, t))
        layer, what = name.split(".", 1)
        assert grads[f"{layer}.d{what}"][index] == pytest.approx((moved[0] - moved[1]) / 2e-6, rel=1e-5, abs=1e-9), name
