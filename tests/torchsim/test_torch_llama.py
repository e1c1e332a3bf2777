"""A small Llama laid out as torchtitan's (``simulator.torchsim.llama``), trained 3 AdamW steps with FSDP2 over
"dp" and tensor parallelism over "tp" on simulated ranks, checked against one device step by step: the losses
(loss parity, as torchtitan's own tests check it) and every module's output, parameter and gradient."""

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
