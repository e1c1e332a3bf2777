"""A small Llama laid out as torchtitan's (``simulator.torchsim.llama``), trained 3 AdamW steps with FSDP2 over
"dp" and tensor parallelism over "tp" on simulated ranks, checked against one device step by step: the losses
(loss parity, as torchtitan's own tests check it) and every module's output, parameter and gradient. With
pipeline parallelism added (a 3-D mesh pp x dp x tp on 8 ranks), the activations and gradients that cross
between stages are checked too."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.torchsim import llama  # noqa: E402
from tests.report_words import words  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")
MODEL = llama.llama(0)
TOKENS, LABELS = llama.batch()


@pytest.fixture(scope="module")
def ref():
    return Reference.of_torch(llama.train_one, MODEL, TOKENS, LABELS, 3)


def test_fsdp2_and_tensor_parallel_on_four_ranks_match_one_device_step_by_step(ref):
    run = simulate_torch(llama.train, 4, MODEL.state_dict(), TOKENS, LABELS, 3, (2, 2))
    for losses in run.outputs:  # loss parity: each step's loss, averaged over the replicas
        np.testing.assert_allclose(losses, ref.result, rtol=1e-5)
    assert ref.result[2] < ref.result[0]  # it trains
    report = check(run, ref)
    assert report.ok, str(report)
    names = {rec.name for kind, rec in run.trace.events if kind in ("op", "hold") and rec.rank == 3}
    assert {
        "tok_embeddings",
        "layers.0.attention.wq",
        "layers.1.feed_forward.w2 (call 3)",
        "layers.1.attention_norm.weight",
        "output.weight.grad (step 3)",
    } <= names


def test_every_replica_on_the_same_rows_is_caught_at_the_embeddings(ref):
    run = simulate_torch(llama.train, 4, MODEL.state_dict(), TOKENS, LABELS, 3, (2, 2), llama.Config(), "same rows")
    report = check(run, ref)
    assert report.verdict == "FAILED"
    assert report.first.name == "tok_embeddings"
    assert "every replica saw the same rows of the batch" in words(str(report))


@pytest.mark.slow
def test_eight_ranks_two_replicas_of_four_way_tensor_parallelism(ref):
    run = simulate_torch(llama.train, 8, MODEL.state_dict(), TOKENS, LABELS, 3, (2, 4))
    np.testing.assert_allclose(run.outputs[0], ref.result, rtol=1e-5)
    report = check(run, ref, rtol=1e-3)  # float32 sums in another order across 4-way shards
    assert report.ok, str(report)


@pytest.fixture(scope="module")
def pipelined_ref():
    return Reference.of_torch(llama.train_one_pipelined, MODEL, TOKENS, LABELS, 3)


@pytest.mark.slow
def test_fsdp2_tensor_and_pipeline_parallel_on_eight_ranks_match_one_device_step_by_step(pipelined_ref, ref):
    """A 3-D mesh (pp 2, dp 2, tp 2) under Schedule1F1B: the activations and their gradients that cross
    between stages (each tensor-parallel rank's own tokens of h) are checked with every module's values."""
    run = simulate_torch(llama.train_pipelined, 8, MODEL.state_dict(), TOKENS, LABELS, 3)
    assert run.outputs[:4] == [None] * 4  # the first stage's ranks
    for losses in run.outputs[4:]:  # loss parity with the plain single-device run too
        np.testing.assert_allclose(losses, pipelined_ref.result, rtol=1e-5)
        np.testing.assert_allclose(losses, ref.result, rtol=1e-5)
    report = check(run, pipelined_ref)
    assert report.verdict == "passed", str(report)
    assert not report.unchecked
    crossed = [m for m in run.trace.messages if {m.src, m.dst} in ({0, 4}, {1, 5}, {2, 6}, {3, 7})]
    assert {(m.src, m.dst) for m in crossed} >= {(0, 4), (4, 0), (3, 7), (7, 3)}  # forward and backward
    names = {rec.name for kind, rec in run.trace.events if kind in ("op", "hold") and rec.rank == 7}
    assert {"layers.1.feed_forward.w2 (call 6)", "output.weight.grad (step 3)"} <= names
    assert not any(name.startswith(("layers.0", "tok_embeddings")) for name in names)  # the other stage's


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bug", "first", "diagnosis"),
    [
        ("stages swapped", "layers.1.", ""),  # the first stage runs layers.1
        ("same rows", "tok_embeddings", "every replica saw the same rows of the batch"),
    ],
)
def test_a_pipelined_llama_with_a_planted_bug_fails(pipelined_ref, bug, first, diagnosis):
    args = (MODEL.state_dict(), TOKENS, LABELS, 3, "Schedule1F1B", llama.Config(), bug)
    report = check(simulate_torch(llama.train_pipelined, 8, *args), pipelined_ref)
    assert report.verdict == "FAILED", str(report)
    assert report.first.name.startswith(first)
    assert diagnosis in words(str(report))


def test_a_pipeline_mesh_dim_never_picks_a_block_of_a_tensor():
    """On a (pp, dp, tp) mesh a sequence-parallel activation (1, 4, 16) of the model's (2, 8, 16) is the block of
    the rank's "dp" row and "tp" tokens: "pp" (same size) splits layers, not tensors (it was picked for the
    tokens, and a right program FAILED)."""
    from simulator.torchsim.values import LocalPart

    part = LocalPart((1, 4, 16), rank=3, world=8, groups=((2, 0, "pp"), (2, 1, "dp"), (2, 1, "tp")))
    assert part.resolve((2, 8, 16)) == (slice(1, 2), slice(4, 8), slice(None))
    swapped = LocalPart((1, 4, 16), rank=5, world=8, groups=((2, 1, "dp"), (2, 1, "pp"), (2, 0, "tp")))
    assert swapped.resolve((2, 8, 16)) == (slice(1, 2), slice(0, 4), slice(None))
