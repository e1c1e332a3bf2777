"""Torch programs modelled on PyTorch's examples (``redteam5_programs.py``), each held to one verdict on every path:
the default simulated world, a world whose collectives go message by message, and real gloo ranks."""

import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, World, check, simulate_torch  # noqa: E402
from tests.torchsim import redteam5_programs as rp  # noqa: E402

X = torch.arange(16.0).reshape(8, 2) % 5 - 2


def verdicts(program, n, args, reference) -> set[str]:
    """The verdicts of one torch program simulated, with its collectives booked and message by message."""
    found = set()
    for book in (True, False):
        run = simulate_torch(program, n, *args, world=World(n, send_mode="rendezvous", book_collectives=book))
        found.add(check(run, reference()).verdict)
    return found


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
