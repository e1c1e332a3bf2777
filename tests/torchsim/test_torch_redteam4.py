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
