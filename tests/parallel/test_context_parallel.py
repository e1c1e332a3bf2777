"""Context parallelism: ring attention over chunks of the sequence, in the balanced and the plain order.

Every gradient equals one device's; messages and bytes equal the closed form; each device's attention work
is the closed form of its chunk order (balanced: 2c + 1 chunk pairs each; plain: 4i + 3 on device i); the key
and value blocks travel while the previous block is computed; a wrong causal offset is caught at the first
block of scores it masks wrongly.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.checker import check
from simulator.cost.presets import classroom
from simulator.parallel.transformer.context import chunk_pairs, chunks_of, positions
from simulator.parallel.transformer.costs import context_volume
from simulator.parallel.transformer.model import Transformer
from simulator.parallel.transformer.step import TransformerStep
from simulator.teach.examples import get

MODEL = Transformer(d_model=8, heads=2, d_ff=16, blocks=2, dropout=0.1)
PARAMS = MODEL.init(seed=40)
X, T = MODEL.data(2, 16, seed=41)
REF = TransformerStep(MODEL, 2).reference(PARAMS, X, T)


def run(c: int, order: str, **options):
    return TransformerStep(MODEL, 2, context=tuple(range(c)), order=order).run(PARAMS, X, T, **options)


@pytest.mark.parametrize("c", [2, 4])
@pytest.mark.parametrize("order", ["balanced", "contiguous"])
def test_every_gradient_equals_one_devices(c, order):
    result = run(c, order)
    report = check(result, REF)
    assert report.ok, str(report)
    whole = MODEL.gradients(PARAMS, X, T)
    for grads in result.outputs:  # every device ends with every parameter's whole gradient
        for name, value in whole.items():
            np.testing.assert_allclose(grads[name], value, rtol=1e-9, atol=1e-12 * np.abs(value).max())


@pytest.mark.parametrize("c", [2, 4])
def test_messages_and_bytes_equal_the_closed_form(c):
    result = run(c, "balanced")
    assert (len(result.trace.messages), sum(m.nbytes for m in result.trace.messages)) == context_volume(
        MODEL, 2, 16, c, 2
    )


def test_the_orders_and_their_work_in_closed_form():
    assert chunks_of(1, 4) == (1, 6) and chunks_of(1, 4, "contiguous") == (2, 3)
    np.testing.assert_array_equal(positions(16, 4, 0), [0, 1, 14, 15])
    for c in range(1, 9):
        assert [chunk_pairs(8 * c, c, i) for i in range(c)] == [2 * c + 1] * c
        assert [chunk_pairs(8 * c, c, i, "contiguous") for i in range(c)] == [4 * i + 3 for i in range(c)]


@pytest.mark.parametrize("order", ["balanced", "contiguous"])
def test_each_device_computes_its_chunk_pairs(order):
    result = run(4, order)
    for rank in range(4):
        blocks = [r for k, r in result.trace.events if k == "op" and r.rank == rank and r.name == "L0.scores.mb0"]
        # forward and the backward's recomputation
        assert len(blocks) == 2 * chunk_pairs(16, 4, rank, order)


def test_the_next_block_travels_while_this_one_is_computed():
    result = run(4, "balanced", cost=classroom())
    kv = [m for m in result.trace.messages if m.name in ("L0.k.mb0", "L0.v.mb0")]
    assert kv
    for m in kv:
        busy = [
            r for k, r in result.trace.events
            if k == "op" and r.rank == m.dst and r.t_end > r.t_start and r.t_start < m.t_arrive and r.t_end > m.t_start
        ]  # fmt: skip
        assert busy, f"nothing computed on device {m.dst} while message #{m.id} travelled"


def test_balanced_chunks_shorten_the_step():
    times = {order: get(f"cp-ring-{order}").run().result for order in ("balanced", "contiguous")}
    busy = {
        order: [sum(r.t_end - r.t_start for k, r in res.trace.events if k == "op" and r.rank == d) for d in range(4)]
        for order, res in times.items()
    }
    assert max(busy["balanced"]) - min(busy["balanced"]) < 1e-3 * max(busy["balanced"])  # (the loss all-reduce: 1 ns)
    assert max(busy["contiguous"]) > max(busy["balanced"]) > min(busy["contiguous"])
    assert times["balanced"].time < times["contiguous"].time


def test_uneven_chunks_still_match_one_device():
    model = Transformer(d_model=4, heads=2, d_ff=8)
    params = model.init(seed=1)
    x, t = model.data(1, 10, seed=2)  # 10 tokens in 4 chunks: 3, 3, 2, 2
    step = TransformerStep(model, context=(0, 1), order="balanced")
    assert check(step.run(params, x, t), TransformerStep(model).reference(params, x, t)).ok


@pytest.mark.parametrize("seq_len", [9, 12])
@pytest.mark.parametrize("order", ["balanced", "contiguous"])
def test_empty_chunks_attend_to_nothing_and_still_match_one_device(seq_len, order):
    # torch.chunk's rule: 12 tokens in 8 chunks are six of 2 and two empty; 9 are four of 2, one of 1, three empty
    sizes = [len(positions(seq_len, 4, i, order)) for i in range(4)]
    assert sum(sizes) == seq_len and (order == "balanced" or seq_len == 12 or sizes[-1] == 0)
    x, t = MODEL.data(2, seq_len, seed=41)
    result = TransformerStep(MODEL, 2, context=(0, 1, 2, 3), order=order).run(PARAMS, x, t)
    report = check(result, TransformerStep(MODEL, 2).reference(PARAMS, x, t))
    assert report.ok, str(report)


def test_a_wrong_causal_offset_is_caught_at_the_first_wrongly_masked_block():
    report = get("cp-bug-causal-offset").run().report
    assert report.verdict == "FAILED"
    first = report.first
    assert (first.where, first.name) == ("output", "L0.scores.mb0")
    assert np.isinf(first.expected).any() != np.isinf(first.found).any() or not np.array_equal(
        np.isinf(first.expected), np.isinf(first.found)
    )  # the mask differs: keys used that must not be, or the other way


def test_the_scenarios_match():
    for name in ("cp-ring-balanced", "cp-ring-contiguous"):
        outcome = get(name).run()
        assert outcome.as_expected and outcome.report.ok, name
