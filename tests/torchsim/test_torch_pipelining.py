"""``torch.distributed.pipelining`` as engineers use it, checked against the model on one device: every schedule
torch ships, at 2 and 4 ranks. A ``PipelineStage`` runs its stage once on stand-in tensors to infer shapes before
the first microbatch; that call is torch's bookkeeping, not microbatch 0 (it was counted as one, and every value
after it was compared with the previous microbatch's: a right program FAILED)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.torchsim import stage_programs as sp  # noqa: E402
from simulator.torchsim.bookkeeping import LABEL  # noqa: E402

FORWARD_ONLY = sp.SINGLE + sp.LOOPED  # the V-shaped schedules need a loss (torch: "can't steal_bwd_input")
MODEL = sp.Layers()
STATE = MODEL.state_dict()


def batch(n, seed=1):
    return torch.randn(4 * sp.microbatches_of(n), 4, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("schedule", FORWARD_ONLY)
def test_a_pipelined_forward_matches_one_device(schedule, n):
    x, m = batch(n), sp.microbatches_of(n)
    run = simulate_torch(sp.pipelined_training, n, schedule, STATE, x, None)
    report = check(run, Reference.of_torch(MODEL, x, microbatches=m))
    assert report.verdict == "passed", report
    ops = {op.name for op in run.trace.ops}
    assert f"layers.0 (call {m})" in ops and f"layers.0 (call {m + 1})" not in ops  # no call for the shapes
    assert any(msg.label == LABEL for msg in run.trace.messages)  # the shapes crossed, labelled as torch's


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("schedule", FORWARD_ONLY)
def test_stages_cut_in_the_wrong_order_fail(schedule, n):
    x = batch(n)
    run = simulate_torch(sp.pipelined_training, n, schedule, STATE, x, None, "stages swapped")
    report = check(run, Reference.of_torch(MODEL, x, microbatches=sp.microbatches_of(n)))
    assert report.verdict == "FAILED", report
    assert report.first.name.startswith("layers.")


def training_reference(x, target, n):
    return Reference.of_torch(sp.one_device_training, MODEL, x, target, sp.microbatches_of(n))


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("schedule", sp.SCHEDULES)
def test_a_pipelined_training_step_matches_one_device(schedule, n):
    """Forward and backward: every activation, parameter gradient, output, loss and every gradient that crossed
    between stages (placed by its value: the gradient of the module output it follows) is the single-device
    run's."""
    x, target = batch(n), batch(n, seed=2)
    run = simulate_torch(sp.pipelined_training, n, schedule, STATE, x, target)
    report = check(run, training_reference(x, target, n))
    assert report.verdict == "passed", report
    grads = {f"{name}.grad" for name, _ in MODEL.named_parameters()}
    held = {e.name for kind, e in run.trace.events if kind == "hold"}
    assert grads and grads <= held  # every parameter's gradient was compared
    crossed = [msg for msg in run.trace.messages if msg.label is None]
    assert crossed and not report.unchecked  # activations and gradients that crossed were all compared


@pytest.mark.parametrize("schedule", sp.SCHEDULES)
def test_a_training_step_with_stages_in_the_wrong_order_fails(schedule):
    x, target = batch(2), batch(2, seed=2)
    run = simulate_torch(sp.pipelined_training, 2, schedule, STATE, x, target, "stages swapped")
    report = check(run, training_reference(x, target, 2))
    assert report.verdict == "FAILED", report
