"""Torch programs that split unevenly, the ``torch.chunk`` way, or reduce-scatter a list of row blocks: right ones
pass, their classic bugs FAIL (a correct uneven split was once FAILED: 3 columns on 2 ranks read as 3 blocks)."""

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn

from simulator import Reference, check, simulate_torch  # noqa: E402
from tests.report_words import words  # noqa: E402

torch.manual_seed(5)
NET = nn.Sequential()
NET.add_module("up", nn.Linear(5, 7))
NET.add_module("proj", nn.Linear(7, 3))  # 3 outputs: 2 and 1 on 2 ranks, 1 each on 3
STATE = NET.state_dict()
X = torch.randn(5, 5, generator=torch.Generator().manual_seed(1))  # 5 rows: 3 and 2 on 2 ranks, 2, 2, 1 on 3


def _model(state):
    model = nn.Sequential()
    model.add_module("up", nn.Linear(5, 7))
    model.add_module("proj", nn.Linear(7, 3))
    model.load_state_dict(state)
    return model


def column_split(state, x, bug=None):
    """proj split by output columns, torch.chunk's way; the pieces all-gathered and joined."""
    rank, p = dist.get_rank(), dist.get_world_size()
    model = _model(state)
    w, b = state["proj.weight"].chunk(p, dim=0), state["proj.bias"].chunk(p)
    model.proj = nn.Linear(7, w[rank].shape[0])
    with torch.no_grad():
        model.proj.weight.copy_(w[rank])
        model.proj.bias.copy_(b[rank])
    mine = model(x).detach()
    pieces = [torch.empty(x.shape[0], piece.shape[0]) for piece in w]
    dist.all_gather(pieces, mine)
    return torch.cat(pieces[::-1] if bug == "reversed" else pieces, dim=1)


def row_split_reduce_scatter(state, x, bug=None):
    """proj split by input rows (a partial sum on each rank), its output's rows reduce-scattered as a list."""
    rank, p = dist.get_rank(), dist.get_world_size()
    model = _model(state)
    w = state["proj.weight"].chunk(p, dim=1)[rank]
    model.proj = nn.Linear(w.shape[1], 3)
    with torch.no_grad():
        model.proj.weight.copy_(w)
        model.proj.bias.copy_(state["proj.bias"] if rank == 0 or bug == "bias on every rank" else torch.zeros(3))
    h = model.up(x)
    z = model.proj(h.chunk(p, dim=1)[rank])
    blocks = list(z.chunk(p, dim=0))
    out = torch.empty_like(blocks[rank])
    dist.reduce_scatter(out, blocks)
    return out


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("program, bug", [(column_split, "reversed"), (row_split_reduce_scatter, "bias on every rank")])
def test_uneven_splits_pass_and_their_bugs_fail(program, bug, n):
    ref = Reference.of_torch(NET, X)
    right = check(simulate_torch(program, n, STATE, X), ref)
    assert right.ok, f"{program.__name__} on {n}: {right}"
    wrong = check(simulate_torch(program, n, STATE, X, bug), ref)
    assert wrong.verdict == "FAILED" and "proj (the output of module proj" in words(wrong), f"{bug} on {n}: {wrong}"


def change_before_wait(x, bug=None):
    """Rank 0 isends x * 2 and changes the tensor before it waits on the send (bug), or after (right)."""
    if dist.get_rank() == 0:
        h = x * 2
        work = dist.isend(h, dst=1)
        if bug:
            h.mul_(0)
        work.wait()
        h.mul_(0)  # after the wait: the message is gone, the tensor is the program's again
        return None
    got = torch.empty_like(x)
    dist.recv(got, src=0)
    return got


def test_a_tensor_changed_between_its_isend_and_the_wait_is_named():
    """A real process may send the changed values; the simulation says so instead of sending the old ones."""
    assert (simulate_torch(change_before_wait, 2, torch.ones(3)).outputs[1] == 2).all()
    with pytest.raises(Exception, match=r"rank 0 changed the tensor of its send to rank 1 \(.*before the send"):
        simulate_torch(change_before_wait, 2, torch.ones(3), "bug")
