"""The transformer block: its hand-written backward against finite differences, and its one-device run."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.checker import check
from simulator.parallel.transformer import ops as T
from simulator.parallel.transformer.model import Transformer, pname
from simulator.parallel.transformer.step import TransformerStep, transformer_reference


def finite_differences(model: Transformer, params, x, t, eps: float = 1e-6) -> dict[str, np.ndarray]:
    out = {}
    for name, value in params.items():
        grad = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            shifted = dict(params)
            for sign in (1, -1):
                w = value.copy()
                w[i] += sign * eps
                shifted[name] = w
                grad[i] += sign * model.loss(shifted, x, t) / (2 * eps)
        layer, what = name.split(".")
        out[f"{layer}.d{what}"] = grad
    return out


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_backward_equals_finite_differences(dropout):
    model = Transformer(d_model=4, heads=2, d_ff=6, blocks=2, dropout=dropout)
    params = model.init(seed=3)
    x, t = model.data(2, 5, seed=4)
    grads = model.gradients(params, x, t)
    assert float(grads["loss"]) == pytest.approx(model.loss(params, x, t), rel=1e-14)
    for name, fd in finite_differences(model, params, x, t).items():
        scale = np.abs(grads[name]).max()
        assert np.abs(grads[name] - fd).max() <= 1e-6 * scale, name


def test_causal_attention_sees_only_the_past():
    model = Transformer(d_model=4, heads=1, d_ff=4)
    params = model.init(seed=0)
    x, _ = model.data(1, 6, seed=1)
    later = x.copy()
    later[:, 4:] += 1.0  # change the last two tokens
    first = model._block_forward(params, 0, x)[2]["y"]
    second = model._block_forward(params, 0, later)[2]["y"]
    np.testing.assert_array_equal(first[:, :4], second[:, :4])
    assert not np.allclose(first[:, 4:], second[:, 4:])


def test_softmax_of_a_fully_masked_row_is_zero():
    s = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    np.testing.assert_array_equal(T.softmax(s), [[0.0, 0.0], [1.0, 0.0]])


def test_dropout_masks_are_one_function_of_the_whole_batch():
    model = Transformer(dropout=0.5, seed=7)
    mask = model.mask(0, 1, (2, 6, 8))
    assert set(np.unique(mask)) == {0.0, 2.0}
    np.testing.assert_array_equal(mask, model.mask(0, 1, (2, 6, 8)))
    assert not np.array_equal(mask, model.mask(0, 2, (2, 6, 8)))  # each site its own mask
    assert Transformer().mask(0, 1, (2, 6, 8)) is None


@pytest.mark.parametrize("microbatches", [1, 2])
def test_the_one_device_step_equals_plain_numpy(microbatches):
    model = Transformer(d_model=8, heads=2, d_ff=16, blocks=2, dropout=0.1)
    params = model.init(seed=5)
    x, t = model.data(4, 6, seed=6)
    result = TransformerStep(model, microbatches).run(params, x, t)
    grads = result.outputs[0]
    whole = model.gradients(params, x, t)
    assert sorted(grads) == sorted(whole)
    for name, value in whole.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-12, atol=1e-14)
    # the reference is this run, every value named: it checks against itself
    ref = transformer_reference(model, params, x, t, microbatches)
    assert check(result, ref).ok
    assert f"{pname(1, 'probs')}.mb0" in ref.values and pname(0, "dWq") in ref.values


def test_bad_shapes_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="does not split into 3 heads"):
        Transformer(d_model=8, heads=3)
    model = Transformer()
    x, t = model.data(2, 4)
    with pytest.raises(ValueError, match=r"this transformer takes \(batch, seq, 8\)"):
        model.gradients(model.init(), x[..., :4], t)
