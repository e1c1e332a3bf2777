"""Torch programs modelled on PyTorch's examples (``redteam4_programs.py``), each held to one verdict on every path:
the default simulated world, a world whose collectives go message by message, and real gloo ranks."""

import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, World, check, simulate_torch  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from tests.torchsim import redteam4_programs as rp  # noqa: E402

MODEL = tp.mlp(0)
STATE = MODEL.state_dict()
X = tp.batch(1, rows=4, d=8)


def verdicts(program, n, args, reference) -> set[str]:
    """The verdicts of one torch program simulated, with its collectives booked and message by message."""
    found = set()
    for book in (True, False):
        run = simulate_torch(program, n, *args, world=World(n, send_mode="rendezvous", book_collectives=book))
        found.add(check(run, reference()).verdict)
    return found


@pytest.mark.parametrize(
    "program, bug, verdict",
    [
        (rp.colwise_gathered, None, "not verified"),  # right: no module of the model's, so its names are not compared
        (rp.colwise_gathered, "wrong axis", "FAILED"),
        (rp.rowwise_scattered, None, "not verified"),
        (rp.rowwise_scattered, "bias on every term", "FAILED"),
    ],
)
def test_a_stacked_output_of_all_gather_into_tensor_and_input_of_reduce_scatter_tensor_are_taken(program, bug, verdict):
    """torch takes the larger tensor of ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` stacked, (p, *piece), as
    well as concatenated: the simulated ranks take it too (they refused it, failing a right program), and the result
    is the model's (the right program's values all match; its result is compared)."""
    assert verdicts(program, 2, (STATE, X, bug), lambda: Reference.of_torch(MODEL, X)) == {verdict}
    out = simulate_torch(program, 2, STATE, X, bug).outputs[0]
    close = torch.allclose(torch.from_numpy(out), MODEL(X).detach(), atol=1e-6)
    assert close == (bug is None)


TOKENS = tp.batch(1, rows=8, d=4)
EXPERTS = rp.Experts(4, 2)
MICRO = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
XX, YY = tp.batch(1, rows=8, d=8), tp.batch(2, rows=8, d=8)

ENGINEERS = {  # name -> (program, arguments, reference, verdict)
    "experts": (rp.moe, (EXPERTS.state_dict(), TOKENS), lambda: Reference.of_torch(EXPERTS, TOKENS), "passed"),
    "experts, twice": (
        rp.moe, (EXPERTS.state_dict(), TOKENS, "expert twice"), lambda: Reference.of_torch(EXPERTS, TOKENS), "FAILED"
    ),
    "stacked gather": (rp.colwise_gathered, (STATE, X), lambda: Reference.of_torch(MODEL, X), "not verified"),
    "stacked gather, wrong axis": (
        rp.colwise_gathered, (STATE, X, "wrong axis"), lambda: Reference.of_torch(MODEL, X), "FAILED"
    ),
    "stacked scatter": (rp.rowwise_scattered, (STATE, X), lambda: Reference.of_torch(MODEL, X), "not verified"),
    "batched p2p": (
        rp.two_stage_batched, (MICRO, 2), lambda: Reference.of_torch(tp.TwoStage(), MICRO, microbatches=2), "passed"
    ),
    "batched p2p, in place": (
        rp.two_stage_batched, (MICRO, 2, "in place"), lambda: Reference.of_torch(tp.TwoStage(), MICRO, microbatches=2),
        "FAILED",
    ),
    "broadcast, DP": (rp.broadcast_then_dp, (XX, YY), lambda: Reference.of_torch(rp.seeded_sgd, XX, YY), "passed"),
    "DP, no broadcast": (
        rp.broadcast_then_dp, (XX, YY, 2, "no broadcast"), lambda: Reference.of_torch(rp.seeded_sgd, XX, YY), "FAILED"
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ENGINEERS))
def test_engineers_programs_simulated(name):
    program, args, reference, verdict = ENGINEERS[name]
    assert verdicts(program, 2, args, reference) == {verdict}


@pytest.mark.slow
@pytest.mark.gloo
@pytest.mark.parametrize("name", list(ENGINEERS))
def test_engineers_programs_on_gloo(name, gloo_worlds):
    from simulator.torchsim.simulate import run_real

    program, args, reference, verdict = ENGINEERS[name]
    assert check(run_real(gloo_worlds(2, timeout=30), program, *args), reference()).verdict == verdict
