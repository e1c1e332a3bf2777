"""Torch programs as engineers write them (``engineers.py``, ``engineers_tp.py``), checked against one device: each
right program passes at 2 and 4 ranks, each planted bug FAILS with its reason."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from simulator.torchsim.names import canonical  # noqa: E402
from tests.report_words import words  # noqa: E402
from tests.torchsim import engineers as en  # noqa: E402
from tests.torchsim import engineers_tp as et  # noqa: E402

MODEL = tp.mlp(0)
STATE = MODEL.state_dict()
X, Y = tp.batch(1, rows=8), tp.batch(2, rows=8)


@pytest.fixture(scope="module")
def sgd_ref():
    return Reference.of_torch(en.sgd_steps, MODEL, X, Y)


def failure(run, ref):
    report = check(run, ref)
    assert report.verdict == "FAILED", str(report)
    return report, words(str(report))


# ---- 1. names as real code writes them ------------------------------------------------------------------
def test_wrappers_names_are_left_out_of_a_path_as_get_model_state_dict_does():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    block = tp.Block()
    block.mlp = checkpoint_wrapper(block.mlp)
    holder = torch.nn.Module()
    holder.module = block  # a submodule a user calls "module" is no wrapper's: kept
    assert canonical(block, "mlp._checkpoint_wrapped_module.fc1") == "mlp.fc1"
    assert canonical(holder, "module.mlp._checkpoint_wrapped_module.fc2") == "module.mlp.fc2"
    assert canonical(torch.nn.DataParallel(block), "module.norm") == "norm"


@pytest.mark.parametrize("n", [2, 4])
def test_distributed_data_parallel_passes_under_the_model_s_names(n, sgd_ref):
    run = simulate_torch(en.ddp, n, STATE, X, Y)
    np.testing.assert_allclose(run.outputs[0], sgd_ref.result, rtol=1e-5)
    report = check(run, sgd_ref)
    assert report.ok, str(report)
    names = {op.name for op in run.trace.ops if op.rank == 0}
    assert {"fc1", "fc2 (call 2)"} <= names and not any(n.startswith("module") for n in names)
    held = {rec.name for kind, rec in run.trace.events if kind == "hold"}
    assert "fc1.weight.grad" in held  # the averaged gradient, compared with the whole batch's


@pytest.mark.parametrize("n", [2, 4])
def test_activation_checkpointing_under_ddp_is_one_call_per_step(n):
    torch.manual_seed(0)
    block, x, y = tp.Block(), torch.randn(8, 8), torch.randn(8, 8)
    run = simulate_torch(en.checkpointed_dp, n, block.state_dict(), x, y)
    assert check(run, Reference.of_torch(en.sgd_steps, block, x, y)).ok
    calls = [op.name for op in run.trace.ops if op.rank == 0 and op.name.startswith("mlp.fc1") and ":" not in op.name]
    assert calls == ["mlp.fc1", "mlp.fc1 (call 2)"]  # the recomputation in backward is no third call


def test_a_module_under_another_path_gets_advice_a_torch_program_can_follow():
    run = simulate_torch(en.renamed_dp, 2, STATE, X)
    report = check(run, Reference.of_torch(MODEL, X))
    assert report.verdict == "not verified"
    text = words(str(report))
    assert "layer1 on device 0 is not a name in the reference, but it equals the block [0:4, :] of fc1" in text
    assert "give the module the path it has in the single-device model, fc1" in text
    assert "index=" not in text


# ---- 2. sums as real code writes them ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp_ref():
    return Reference.of_torch(MODEL, X)


def expected_output():
    with torch.no_grad():
        return MODEL(X).numpy()


@pytest.mark.parametrize("n", [2, 4])
def test_megatron_bias_added_after_the_all_reduce_passes(n, mlp_ref):
    run = simulate_torch(et.megatron_bias_after, n, STATE, X)
    np.testing.assert_allclose(run.outputs[0], expected_output(), rtol=1e-5, atol=1e-6)
    report = check(run, mlp_ref)
    assert report.ok, str(report)
    assert "fc2 was found less its bias fc2.bias, added after the sum" in words(str(report))
    assert check(simulate_torch(et.megatron_mlp, n, STATE, X), mlp_ref).ok  # the bias inside RowParallelLinear


@pytest.mark.parametrize("n", [2, 4])
def test_megatron_bias_never_added_or_added_on_every_rank_fails(n, mlp_ref):
    report, text = failure(simulate_torch(et.megatron_bias_after, n, STATE, X, "no bias"), mlp_ref)
    assert report.first.name == "output"  # what the rank returned: the sum the bias never joined
    assert (
        "It is fc2 less its bias fc2.bias: the bias, added after the sum of a row-parallel layer, is missing?" in text
    )
    report, text = failure(simulate_torch(et.megatron_mlp, n, STATE, X, "bias before"), mlp_ref)
    assert report.first.where == "partial sums" and report.first.name == "fc2"
    assert f"It is fc2 with its bias fc2.bias counted {n} times: added by each of {n} devices before the sum" in text


@pytest.mark.parametrize("n", [2, 4])
def test_from_local_partial_is_a_term_of_a_sum_and_replicate_is_not(n, mlp_ref):
    run = simulate_torch(et.from_local_partial, n, STATE, X)
    np.testing.assert_allclose(run.outputs[0], expected_output(), rtol=1e-5, atol=1e-6)
    assert check(run, mlp_ref).ok
    fc2 = [op.partial for op in run.trace.ops if op.name == "fc2"]
    assert fc2.count(tuple(range(n))) == n  # declared partial by from_local
    report, text = failure(simulate_torch(et.from_local_partial, n, STATE, X, "replicate"), mlp_ref)
    assert report.first.name == "fc2" and report.first.where == "output"
    assert f"the values of fc2 on devices {', '.join(map(str, range(n)))} add up to fc2" in text
    assert "Or were they said to be Replicate()? (Terms of a sum are Partial()" in text


@pytest.mark.parametrize("n", [2, 4])
def test_reduce_scatter_output_is_the_rank_s_rows_of_the_sum(n, mlp_ref):
    run = simulate_torch(et.reduce_scatter_rows, n, STATE, X)
    np.testing.assert_allclose(np.concatenate(run.outputs), expected_output(), rtol=1e-5, atol=1e-6)
    assert check(run, mlp_ref).ok


MESHES = [((2, 2), ("dp", "tp")), ((2, 2), ("tp", "dp")), ((2, 1), ("dp", "tp")), ((1, 2), ("tp", "dp"))]
MESHES_3D = [((2, 2, 2), ("dp", "cp", "tp")), ((2, 2, 2), ("tp", "cp", "dp")), ((1, 2, 2), ("cp", "tp", "dp"))]
X3 = torch.randn(4, 4, 8, generator=torch.Generator().manual_seed(3))  # (batch, tokens, features)


@pytest.mark.parametrize("program", [et.mesh_mlp, et.mesh_by_hand])
@pytest.mark.parametrize("shape, names", MESHES + MESHES_3D)
def test_meshes_of_two_and_three_dims_in_any_order_pass(program, shape, names):
    x = X3 if len(shape) == 3 else X
    n = int(np.prod(shape))
    run = simulate_torch(program, n, STATE, x, shape, names)
    report = check(run, Reference.of_torch(MODEL, x))
    assert report.ok, str(report)
    fc1 = [op for op in run.trace.ops if op.name == "fc1" and op.rank == n - 1]
    assert fc1 and fc1[0].index.resolve(x.shape[:-1] + (16,)) is not None  # checked as a block, by the mesh


@pytest.mark.parametrize("program", [et.mesh_mlp, et.mesh_by_hand])
@pytest.mark.parametrize("shape, names", [MESHES[0], MESHES[1], MESHES_3D[0], MESHES_3D[1]])
def test_the_batch_split_by_the_wrong_mesh_dim_fails_saying_so(program, shape, names):
    x = X3 if len(shape) == 3 else X
    run = simulate_torch(program, int(np.prod(shape)), STATE, x, shape, names, "wrong mesh dim")
    report, text = failure(run, Reference.of_torch(MODEL, x))
    assert report.first.name == "fc1"
    assert "the block picked by its coordinate on another mesh dim (mesh['tp'] where mesh['dp'] was meant" in text


# ---- 7. diagnoses for data parallelism ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4])
def test_data_parallelism_by_hand_passes_step_by_step(n, sgd_ref):
    run = simulate_torch(en.manual_dp, n, STATE, X, Y)
    assert check(run, sgd_ref).ok
    held = {rec.name for kind, rec in run.trace.events if kind == "hold" and rec.rank == 0}
    assert {"fc1.weight.grad (step 1)", "fc2.bias.grad (step 2)"} <= held  # the gradient each step used


@pytest.mark.parametrize("n", [2, 4])
def test_every_replica_on_the_same_rows_is_named(n, sgd_ref):
    report, text = failure(simulate_torch(en.ddp, n, STATE, X, Y, 2, "same rows"), sgd_ref)
    assert report.first.name == "fc1" and report.first.rank == 1
    assert "computed the same rows: every replica saw the same rows of the batch" in text


@pytest.mark.parametrize("n", [2, 4])
def test_a_rank_s_own_gradient_not_averaged_is_named_at_the_first_step(n, sgd_ref):
    report, text = failure(simulate_torch(en.manual_dp, n, STATE, X, Y, 2, "not averaged"), sgd_ref)
    assert report.first.name == "fc1.weight.grad (step 1)" and report.first.rank == 0
    assert "It is device 0's own gradient, not averaged: the values of fc1.weight.grad (step 1) on devices" in text


# ---- 4. backward as values ---------------------------------------------------------------------------------
def test_reference_names_the_gradients_of_module_outputs_and_inputs():
    torch.manual_seed(0)
    model, x = en.Stages(), torch.randn(4, 8)
    ref = Reference.of_torch(en.stages_step, model, x, 2)
    assert {"a.grad", "b:in0.grad", "a (call 2).grad", "b.weight.grad"} <= set(ref.values) | set(ref.aliases)
    y = model.b(model.a(x[:2]))
    (y**2).sum().backward()
    np.testing.assert_allclose(ref.expected("a.grad"), (2 * y @ model.b.weight).detach().numpy(), rtol=1e-5)


def test_a_hand_written_pipeline_s_gradient_messages_are_checked():
    torch.manual_seed(0)
    model, x = en.Stages(), torch.randn(4, 8)
    ref = Reference.of_torch(en.stages_step, model, x, 2)
    run = simulate_torch(en.pipeline_fwd_bwd, 2, model.state_dict(), x, 2)
    report = check(run, ref)
    assert report.ok, str(report)
    back = [m for m in run.trace.messages if m.src == 1]
    assert [m.name for m in back] == ["a.grad", "a (call 2).grad"]  # named by the backward they fed on rank 0
    report, text = failure(simulate_torch(en.pipeline_fwd_bwd, 2, model.state_dict(), x, 2, "reversed gradients"), ref)
    assert report.first.where == "message" and report.first.name == "a.grad"
    assert "device 0 should have received a.grad (the gradient of the output of module a)" in text
    assert "is a.1 (call 2).grad" in text


# ---- the rest of the corpus: AdamW after tensor parallelism, redistribute --------------------------------------
@pytest.mark.parametrize("n", [2, 4])
def test_adamw_after_tensor_parallelism_with_clipping(n):
    ref = Reference.of_torch(et.adamw_steps, MODEL, X, Y)
    run = simulate_torch(et.adamw_tp, n, STATE, X, Y)
    np.testing.assert_allclose(run.outputs[0], ref.result, rtol=1e-5)
    assert check(run, ref).ok
    report, text = failure(simulate_torch(et.adamw_tp, n, STATE, X, Y, 2, "local norm"), ref)
    assert report.first.name == "fc1.weight.grad (step 1)"
    assert "the gradient scaled by another factor, as clipping by the norm of this rank's shards" in text


@pytest.mark.parametrize("n", [2, 4])
def test_rows_gathered_by_redistribute(n, mlp_ref):
    run = simulate_torch(et.redistribute_rows, n, STATE, X)
    np.testing.assert_allclose(run.outputs[n - 1], expected_output(), rtol=1e-5, atol=1e-6)
    assert check(run, mlp_ref).ok


@pytest.mark.parametrize("n", [2, 4])
def test_a_ring_all_reduce_by_hand_is_checked_as_partial_sums(n, mlp_ref):
    run = simulate_torch(et.ring_tp_mlp, n, STATE, X)
    np.testing.assert_allclose(run.outputs[n - 1], expected_output(), rtol=1e-5, atol=1e-6)
    report = check(run, mlp_ref)
    assert report.ok, str(report)  # the unnamed running sums placed, not NOT VERIFIED
    assert len(run.trace.messages) == 2 * (n - 1) * n
    assert "are terms of a sum the program adds up with its own messages" in words(str(report))
    report, text = failure(simulate_torch(et.ring_tp_mlp, n, STATE, X, "half a ring"), mlp_ref)
    assert report.first.name == "fc2"
    assert f"the values of fc2 on devices {', '.join(map(str, range(n)))} add up to fc2" in text


@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")
@pytest.mark.parametrize("n", [2, 4])
def test_fsdp2_passes_with_its_sharded_parameters_and_gradients(n, sgd_ref):
    run = simulate_torch(en.fsdp2, n, STATE, X, Y)
    np.testing.assert_allclose(run.outputs[0], sgd_ref.result, rtol=1e-5)
    report = check(run, sgd_ref)
    assert report.ok, str(report)
    grads = [rec for kind, rec in run.trace.events if kind == "hold" and rec.name == "fc1.weight.grad (step 1)"]
    assert len(grads) == n and all(rec.output.shape == (16 // n, 8) for rec in grads)  # each rank its shard
    report, text = failure(simulate_torch(en.fsdp2, n, STATE, X, Y, 2, "same rows"), sgd_ref)
    assert "every replica saw the same rows of the batch" in text
