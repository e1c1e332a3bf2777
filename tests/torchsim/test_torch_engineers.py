"""Torch programs as engineers write them (``tests/torchsim/engineers.py``), checked against one device: each
right program passes at 2 and 4 ranks, each planted bug FAILS with its reason."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from simulator.torchsim.names import canonical  # noqa: E402
from tests.report_words import words  # noqa: E402
from tests.torchsim import engineers as en  # noqa: E402

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
