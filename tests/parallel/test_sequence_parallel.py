"""Tensor parallelism of a transformer block by heads, and Megatron sequence parallelism.

Every gradient equals one device's (float64, 1e-9 relative); messages and bytes equal the closed forms
of ``transformer_costs``, the same for both splits (the ring all-reduce is a reduce-scatter and an
all-gather); the activation memory a device keeps for the backward equals its closed form and drops
with sequence parallelism; the two classroom bugs are caught at the first wrong value.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.checker import check
from simulator.parallel.transformer.costs import (
    activation_elements,
    activation_volume,
    forward_bytes,
    step_volume,
)
from simulator.parallel.transformer.model import Transformer
from simulator.parallel.transformer.sequence import make_split
from simulator.parallel.transformer.step import TransformerStep
from simulator.teach.examples import get

MODEL = Transformer(d_model=8, heads=4, d_ff=16, blocks=2, dropout=0.1)
PARAMS = MODEL.init(seed=11)
X, T = MODEL.data(4, 8, seed=12)
SPLITS = [(False, False), (True, False), (True, True)]  # plain TP, SP keeping the gathered inputs, SP regathering


def run(t: int, sp: bool, regather: bool, microbatches: int = 2):
    step = TransformerStep(MODEL, microbatches, tuple(range(t)), sp, regather)
    return step, step.run(PARAMS, X, T)


@pytest.mark.parametrize("t", [2, 4])
@pytest.mark.parametrize(("sp", "regather"), SPLITS)
def test_every_gradient_equals_one_devices(t, sp, regather):
    step, result = run(t, sp, regather)
    report = check(result, step.reference(PARAMS, X, T))
    assert report.ok, str(report)
    whole = MODEL.gradients(PARAMS, X, T)
    for rank, grads in enumerate(result.outputs):
        split = make_split(MODEL, rank, X.shape[1], tuple(range(t)), sp, regather)
        assert sorted(grads) == sorted(whole)
        for name, value in whole.items():
            index = split.param_index(name.split(".d", 1)[1]) if name != "loss" else None
            want = value if index is None else value[index]
            np.testing.assert_allclose(grads[name], want, rtol=1e-9, atol=1e-12 * np.abs(value).max())


@pytest.mark.parametrize("t", [2, 4])
@pytest.mark.parametrize(("sp", "regather"), SPLITS)
def test_messages_and_bytes_equal_the_closed_forms(t, sp, regather):
    _, result = run(t, sp, regather)
    _, messages, nbytes = step_volume(MODEL, 4, 8, t, 2, sp, regather)
    assert len(result.trace.messages) == messages
    assert sum(m.nbytes for m in result.trace.messages) == nbytes


def test_sequence_parallelism_moves_the_bytes_of_tensor_parallelism():
    for t in (2, 4, 8):
        tp = activation_volume(MODEL, 8, 16, t, 2)
        sp = activation_volume(MODEL, 8, 16, t, 2, sequence_parallel=True)
        assert (tp.messages, tp.bytes) == (sp.messages, sp.bytes)
        again = activation_volume(MODEL, 8, 16, t, 2, sequence_parallel=True, regather=True)
        assert again.bytes == tp.bytes * 10 // 8  # Megatron-LM's backward all-gathers: two more per block
    # per device, in a run: every device sends the same, equal under both splits (the loss and the layer-norm
    # gradients' all-reduces aside, which only sequence parallelism needs)
    _, plain = run(4, False, False)
    _, seq = run(4, True, False)
    big = 4 * 8 * 8 // 2 // 4 * 8  # a chunk of one activation: N / t elements, 8 bytes each
    for rank in range(4):
        a = sum(m.nbytes for m in plain.trace.messages if m.src == rank)
        b = sum(m.nbytes for m in seq.trace.messages if m.src == rank and m.nbytes == big)
        assert a == b == activation_volume(MODEL, 4, 8, 4, 2).bytes


@pytest.mark.parametrize("t", [1, 2, 4])
@pytest.mark.parametrize(("sp", "regather"), SPLITS)
def test_activation_memory_equals_the_closed_form(t, sp, regather):
    _, result = run(t, sp, regather)
    want = activation_elements(MODEL, 2, 8, t, sp, regather) * 8  # microbatches of 2 sequences, float64
    assert [forward_bytes(result.trace, d, "loss.mb0") for d in range(t)] == [want] * t


def test_activation_memory_drops_with_sequence_parallelism():
    kept = {(t, sp, rg): activation_elements(MODEL, 2, 8, t, sp, rg) for t in (1, 2, 4, 8) for sp, rg in SPLITS}
    for t in (2, 4, 8):
        assert kept[t, False, False] > kept[t, True, False] > kept[t, True, True]
    # at t = 8 what stays outside the regions is 1/8 as large: all of it, layer norms included, with regather
    outside = kept[8, False, False] - kept[8, True, True]
    n = 2 * 8 * 8
    assert outside == (2 * (2 + 2 + 2) + 2) * n * 7 // 8


def test_uneven_sequence_chunks_still_match_one_device():
    model = Transformer(d_model=4, heads=2, d_ff=8)
    params = model.init(seed=1)
    x, t = model.data(2, 5, seed=2)  # 5 tokens over 2 devices: chunks of 3 and 2
    step = TransformerStep(model, tensor=(0, 1), sequence_parallel=True)
    assert check(step.run(params, x, t), step.reference(params, x, t)).ok


def test_the_scenarios_match():
    for name in ("transformer-tp", "transformer-sp"):
        outcome = get(name).run()
        assert outcome.as_expected and outcome.report.ok, name


def test_layer_norm_of_a_partial_sum_is_caught_where_the_partial_sum_is_first_used():
    report = get("tp-bug-layer-norm-on-partial-sum").run().report
    assert report.verdict == "FAILED"
    first = report.first
    assert (first.where, first.rank, first.name) == ("input", 0, "L0.attn_out.mb0")
    text = first.explain()
    assert (
        "device 0's partial sum of L0.proj.mb0" in text
        and "the all-reduce that adds the partial sums is missing" in text
    )


def test_reduce_scatter_along_the_wrong_dimension_is_caught_at_its_result():
    report = get("sp-bug-reduce-scatter-wrong-dim").run().report
    assert report.verdict == "FAILED"
    first = report.first
    assert (first.where, first.name) == ("output", "L0.proj.mb0")
    assert first.record.label is None and first.record.index is not None  # the collective's named result
    # the first sequence's chunk is right (it is the start of the flattened tokens); the second's is not
    np.testing.assert_allclose(first.found[0], first.expected[0], rtol=1e-12)
    assert not np.allclose(first.found[1], first.expected[1])
