"""Torch programs modelled on PyTorch's examples (``redteam5_programs.py``), each held to one verdict on every path:
the default simulated world, a world whose collectives go message by message, and real gloo ranks."""

import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, check  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from tests.torchsim import engineers as en  # noqa: E402
from tests.torchsim import redteam5_programs as rp  # noqa: E402
from tests.torchsim.test_torch_redteam4 import verdicts  # noqa: E402

X = torch.arange(16.0).reshape(8, 2) % 5 - 2


REDUCE = {  # bug -> verdict
    None: "passed",  # every non-root rank finds its own tensor untouched (the program asserts it)
    "read on every rank": "FAILED",  # a non-root rank returns its tensor as if it held the sum
}


@pytest.mark.parametrize("bug", list(REDUCE))
def test_a_reduce_leaves_a_non_root_rank_s_tensor_as_it_was(bug):
    """``dist.reduce`` on four ranks: the destination holds the sum; every other rank's tensor is its own share, as
    torch's docs and NCCL have it."""
    assert verdicts(rp.reduce_then_read, 4, (X, bug), lambda: Reference.of_torch(rp.summed, X, 4)) == {REDUCE[bug]}


@pytest.mark.slow
@pytest.mark.gloo
@pytest.mark.parametrize("bug", list(REDUCE))
def test_on_gloo_a_reduce_leaves_a_non_root_rank_s_tensor_as_simulated(bug, gloo_worlds):
    """gloo's own reduce leaves partial sums in the tensors of the ranks that are not its destination (on four ranks,
    rank 1 finds 9 where it gave 2): on real ranks the program's tensor is reduced from a copy, so the program reads
    what it reads simulated, and gets the same verdict."""
    from simulator.torchsim.simulate import run_real

    run = run_real(gloo_worlds(4, timeout=30), rp.reduce_then_read, X, bug)
    assert check(run, Reference.of_torch(rp.summed, X, 4)).verdict == REDUCE[bug]


MODEL = tp.mlp(0)
STATE = MODEL.state_dict()
XX, YY = tp.batch(1, rows=8), tp.batch(2, rows=8)
G = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
M = torch.randn(3, 4, generator=torch.Generator().manual_seed(4))

ENGINEERS = {  # name -> (world size, program, arguments, reference, verdict)
    "scatter, double, gather": (2, rp.gather_scatter_round_trip, (X,), lambda: Reference.of_torch(rp.doubled, X), "passed"),
    "scatter, gather, rank 1 adds one": (
        2, rp.gather_scatter_round_trip, (X, "rank 1 adds one"), lambda: Reference.of_torch(rp.doubled, X), "FAILED"
    ),
    "fp16 gradients averaged": (
        2, rp.half_gradients, (G, "float16"), lambda: Reference.of_torch(rp.half_mean, G, "float16"), "passed"
    ),
    "fp16 gradients summed": (
        2, rp.half_gradients, (G, "float16", "not averaged"), lambda: Reference.of_torch(rp.half_mean, G, "float16"),
        "FAILED",
    ),
    "pairs then world": (4, rp.subgroup_all_reduce, (X,), lambda: Reference.of_torch(rp.rows_summed, X[:4]), "passed"),
    "pairs then world, world first": (
        4, rp.subgroup_all_reduce, (X, "world group"), lambda: Reference.of_torch(rp.rows_summed, X[:4]), "FAILED"
    ),
    # the message is no value of the model's (a function, no modules): not verified, the result compared
    "irecv into a reused buffer": (
        2, rp.pipeline_in_place, (M,), lambda: Reference.of_torch(rp.relu_three_plus_one, M), "not verified"
    ),
    "buffer read before the wait": (
        2, rp.pipeline_in_place, (M, "waits late"), lambda: Reference.of_torch(rp.relu_three_plus_one, M), "FAILED"
    ),
    # fc1 and fc2 are split by hand (no module of the model's runs): not verified, the losses compared
    "2 x 2, Megatron by hand": (
        4, rp.dp_tp_train, (STATE, XX, YY), lambda: Reference.of_torch(en.sgd_steps, tp.mlp(0), XX, YY), "not verified"
    ),
    "2 x 2, gradients averaged over the wrong pair": (
        4, rp.dp_tp_train, (STATE, XX, YY, 2, "dp over tp"), lambda: Reference.of_torch(en.sgd_steps, tp.mlp(0), XX, YY),
        "FAILED",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ENGINEERS))
def test_engineers_programs_simulated(name):
    n, program, args, reference, verdict = ENGINEERS[name]
    assert verdicts(program, n, args, reference) == {verdict}


@pytest.mark.slow
@pytest.mark.gloo
@pytest.mark.parametrize("name", list(ENGINEERS))
def test_engineers_programs_on_gloo(name, gloo_worlds):
    from simulator.torchsim.simulate import run_real

    n, program, args, reference, verdict = ENGINEERS[name]
    assert check(run_real(gloo_worlds(n, timeout=30), program, *args), reference()).verdict == verdict
