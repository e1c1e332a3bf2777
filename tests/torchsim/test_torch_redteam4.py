"""Torch programs modelled on PyTorch's examples (``redteam4_programs.py``), each held to one verdict on every path:
the default simulated world, a world whose collectives go message by message, and real gloo ranks."""

import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, World, check, simulate_torch  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from tests.torchsim import engineers as en  # noqa: E402
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
def test_all_gather_into_tensor_and_reduce_scatter_tensor_by_hand(program, bug, verdict):
    """A tensor-parallel MLP by hand through the tensor forms of the collectives: the right one's result is the
    model's (its names are its own: not verified), the planted bugs FAIL, booked or message by message."""
    assert verdicts(program, 2, (STATE, X, bug), lambda: Reference.of_torch(MODEL, X)) == {verdict}
    out = simulate_torch(program, 2, STATE, X, bug).outputs[0]
    close = torch.allclose(torch.from_numpy(out), MODEL(X).detach(), atol=1e-6)
    assert close == (bug is None)


@pytest.mark.parametrize("program", [rp.colwise_gathered, rp.rowwise_scattered])
def test_the_stacked_form_gloo_refuses_is_refused_with_the_form_it_takes(program):
    """torch's docs (and NCCL) take the larger tensor stacked, (p, *piece); gloo refuses it, or stops the process: the
    simulation refuses it too, saying which form to give."""
    from simulator.core.errors import RankError

    with pytest.raises(RankError, match=r"stacked form: NCCL takes it, gloo does not; give the concatenated one"):
        simulate_torch(program, 2, STATE, X, "stacked")


TOKENS = tp.batch(1, rows=8, d=4)
EXPERTS = rp.Experts(4, 2)
MICRO = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
XX, YY = tp.batch(1, rows=8, d=8), tp.batch(2, rows=8, d=8)

ENGINEERS = {  # name -> (program, arguments, reference, verdict)
    "experts": (rp.moe, (EXPERTS.state_dict(), TOKENS), lambda: Reference.of_torch(EXPERTS, TOKENS), "passed"),
    "experts, twice": (
        rp.moe, (EXPERTS.state_dict(), TOKENS, "expert twice"), lambda: Reference.of_torch(EXPERTS, TOKENS), "FAILED"
    ),
    "gather by hand": (rp.colwise_gathered, (STATE, X), lambda: Reference.of_torch(MODEL, X), "not verified"),
    "gather by hand, wrong axis": (
        rp.colwise_gathered, (STATE, X, "wrong axis"), lambda: Reference.of_torch(MODEL, X), "FAILED"
    ),
    "scatter by hand": (rp.rowwise_scattered, (STATE, X), lambda: Reference.of_torch(MODEL, X), "not verified"),
    "batched p2p": (
        rp.two_stage_batched, (MICRO, 2), lambda: Reference.of_torch(tp.TwoStage(), MICRO, microbatches=2), "passed"
    ),
    "batched p2p, in place": (
        rp.two_stage_batched, (MICRO, 2, "in place"), lambda: Reference.of_torch(tp.TwoStage(), MICRO, microbatches=2),
        "FAILED",
    ),
    "broadcast, DP": (rp.broadcast_then_dp, (XX, YY), lambda: Reference.of_torch(rp.seeded_sgd, XX, YY), "passed"),
    "DP, one flat bucket": (
        rp.flat_bucket_dp, (STATE, XX, YY), lambda: Reference.of_torch(en.sgd_steps, MODEL, XX, YY), "passed"
    ),
    "DP, stale bucket": (
        rp.flat_bucket_dp, (STATE, XX, YY, 2, "stale bucket"), lambda: Reference.of_torch(en.sgd_steps, MODEL, XX, YY),
        "FAILED",
    ),
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


@pytest.mark.parametrize(
    "what, refused",
    [
        ("send", True),
        ("recv into", True),
        ("all_to_all_single", True),
        ("all_to_all_single, channels_last", True),  # gloo takes it, and its blocks arrive scrambled
        ("all_to_all_single into", True),  # gloo takes a transposed output, and writes it in memory order
        ("all_reduce", False),
        ("broadcast", False),
    ],
)
def test_a_non_contiguous_tensor_is_refused_where_gloo_refuses_it(what, refused):
    """gloo sends and receives only contiguous tensors ("input tensor has to be contiguous"; NCCL alike), and
    all-to-alls only a contiguous input ("Tensors must be contiguous"), while its all-reduce and broadcast take a
    transposed one: the simulation refused none, so a program passed here that stops on real ranks. Those are refused,
    naming the fix; the collectives that take it still do."""
    from simulator.core.errors import RankError

    x = torch.arange(6.0).reshape(2, 3)
    if refused:
        with pytest.raises(RankError, match=r"not contiguous.*(\.contiguous\(\)|torch\.empty\(shape\))"):
            simulate_torch(rp.non_contiguous, 2, x, what)
    else:
        out = simulate_torch(rp.non_contiguous, 2, x, what).outputs
        assert out[0].shape == (3, 2)
