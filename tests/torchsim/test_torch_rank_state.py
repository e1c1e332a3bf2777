"""Each simulated rank has its own torch state, as each real rank is a process of its own: what a context manager
switches on for one rank (``loss_parallel``'s custom op handlers, the default dtype) is not switched off under
another rank that is still inside its own."""

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module  # noqa: E402

from simulator import Reference, check, simulate_torch  # noqa: E402


def head():
    """A language model's output layer: 8 features to 16 classes."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("out", nn.Linear(8, 16))
    return model


X = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
LABELS = torch.tensor([1, 9, 15])


def tensor_parallel_loss(state, x, labels, bug=None):
    """The classes split over the ranks (ColwiseParallel, kept as a DTensor), the loss under ``loss_parallel``."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = head()
    model.load_state_dict(state)
    parallelize_module(model, mesh, {"out": ColwiseParallel(use_local_output=False)})
    logits = model(x)
    with loss_parallel():
        loss = F.cross_entropy(logits, labels)
        if bug == "loss divided by the ranks":  # as if each rank's loss were a term of a sum
            loss = loss / dist.get_world_size()
        loss.backward()
    return loss.full_tensor()


def one_device(model, x, labels):
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    return loss


def reference():
    return Reference.of_torch(one_device, head(), X, LABELS)


@pytest.mark.parametrize("n", [2, 4])
def test_loss_parallel_runs_on_each_rank_and_matches_one_device(n):
    run = simulate_torch(tensor_parallel_loss, n, head().state_dict(), X, LABELS)
    report = check(run, reference())
    assert report.verdict == "passed", report
    np_loss = one_device(head(), X, LABELS).detach().numpy()
    for out in run.outputs:
        torch.testing.assert_close(torch.from_numpy(out), torch.from_numpy(np_loss))
    assert torch.ops.aten._log_softmax.default not in DTensor._op_dispatcher._custom_op_handlers  # none leaked


def test_a_loss_divided_by_the_ranks_under_loss_parallel_fails():
    run = simulate_torch(tensor_parallel_loss, 2, head().state_dict(), X, LABELS, "loss divided by the ranks")
    report = check(run, reference())
    assert report.verdict == "FAILED", report


def default_dtype_per_rank():
    """Rank 0 computes in float64 while rank 1, in its turn, keeps torch's default (float32)."""
    if dist.get_rank() == 0:
        torch.set_default_dtype(torch.float64)
    t = torch.ones(2)
    dist.barrier()
    t = t + torch.ones(2)  # made after the other rank's turn: still this rank's own default
    return str(t.dtype)


def test_the_default_dtype_is_each_ranks_own():
    before = torch.get_default_dtype()
    run = simulate_torch(default_dtype_per_rank, 2)
    assert run.outputs == ["torch.float64", "torch.float32"]
    assert torch.get_default_dtype() == before


def context_managers_on_each_rank():
    """Each rank enters, waits while the other enters and leaves, and leaves: what it sees is its own."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.autograd.detect_anomaly():
        dist.barrier()
        inside = torch.backends.cuda.math_sdp_enabled(), torch.is_anomaly_enabled()
        dist.barrier()
    return [*inside, torch.backends.cuda.math_sdp_enabled(), torch.is_anomaly_enabled()]


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_attention_backends_and_anomaly_mode_are_each_ranks_own():
    assert torch.backends.cuda.math_sdp_enabled() and not torch.is_anomaly_enabled()
    run = simulate_torch(context_managers_on_each_rank, 2)
    assert run.outputs == [[False, True, True, False]] * 2  # inside its own context; outside, as it started
    assert torch.backends.cuda.math_sdp_enabled() and not torch.is_anomaly_enabled()  # the caller's, untouched
