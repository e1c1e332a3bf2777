"""The same verdict on real ranks (gloo) as simulated, for torch programs written as engineers write them:
``torch.distributed.pipelining`` under its schedules (forward only, and a training step), ``loss_parallel``,
each with a planted bug; a send to a rank that is not there, refused alike (gloo itself crashes on it); and a
rank that sleeps, stopped at its line after the world's timeout."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.real.errors import RemoteRankError  # noqa: E402
from simulator.torchsim import stage_programs as sp  # noqa: E402
from simulator.torchsim.simulate import run_real  # noqa: E402
from tests.torchsim import test_torch_rank_state as lp  # noqa: E402
from tests.torchsim.test_torch_stops import last_rank_sleeps, sends_to_seven  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]

MODEL = sp.Layers()


def batch(n, seed=1):
    return torch.randn(4 * sp.microbatches_of(n), 4, generator=torch.Generator().manual_seed(seed))


def forward_case(n, schedule, bug=None):
    x = batch(n)
    return (
        n,
        sp.pipelined_training,
        (schedule, MODEL.state_dict(), x, None, bug),
        lambda: Reference.of_torch(MODEL, x, microbatches=sp.microbatches_of(n)),
    )


def training_case(n, schedule, bug=None):
    x, target = batch(n), batch(n, seed=2)
    return (
        n,
        sp.pipelined_training,
        (schedule, MODEL.state_dict(), x, target, bug),
        lambda: Reference.of_torch(sp.one_device_training, MODEL, x, target, sp.microbatches_of(n)),
    )


def loss_case(n, bug=None):
    return n, lp.tensor_parallel_loss, (lp.head().state_dict(), lp.X, lp.LABELS, bug), lp.reference


CASES = {  # name -> (world size, program, its arguments, the reference)
    "GPipe, forward": forward_case(2, "ScheduleGPipe"),
    "Interleaved1F1B, forward": forward_case(4, "ScheduleInterleaved1F1B"),
    "Interleaved1F1B, forward, stages swapped": forward_case(2, "ScheduleInterleaved1F1B", "stages swapped"),
    "1F1B, training": training_case(4, "Schedule1F1B"),
    "ZBVZeroBubble, training": training_case(2, "ScheduleZBVZeroBubble"),
    "DualPipeV, training, stages swapped": training_case(2, "ScheduleDualPipeV", "stages swapped"),
    "loss_parallel": loss_case(2),
    "loss_parallel, 4 ranks": loss_case(4),
    "loss_parallel, loss divided by the ranks": loss_case(2, "loss divided by the ranks"),
}


@pytest.fixture(scope="module")
def worlds(gloo_worlds):
    return lambda n: gloo_worlds(n, timeout=60, collectives="messages")


@pytest.mark.parametrize("name", sorted(CASES, key=lambda k: (CASES[k][0], k)))
def test_one_verdict_simulated_and_real(name, worlds):
    size, program, args, reference = CASES[name]
    simulated = check(simulate_torch(program, size, *args), reference())
    real = check(run_real(worlds(size), program, *args), reference())
    why = f"{name}\nreal: {real}\nsimulated: {simulated}"
    assert real.verdict == simulated.verdict, why
    assert [u.kind for u in real.unchecked] == [u.kind for u in simulated.unchecked], why
    d, e = real.first, simulated.first
    assert (d and (d.where, d.name, d.rank)) == (e and (e.where, e.name, e.rank)), why
    if "swapped" in name or "divided" in name:
        assert simulated.verdict == "FAILED", why
    else:
        assert simulated.verdict == "passed", why


def test_a_send_to_a_rank_that_is_not_there_is_refused_on_real_ranks_too(worlds):
    with pytest.raises(RemoteRankError, match=r"invalid destination rank: 7 \(send at test_torch_stops.py:"):
        run_real(worlds(2), sends_to_seven)


def test_a_sleeping_rank_is_stopped_at_its_line_on_real_ranks(gloo_worlds):
    with pytest.raises(RemoteRankError) as info:
        run_real(gloo_worlds(2, timeout=3), last_rank_sleeps)
    text = str(info.value)
    assert "device 1 raised NoProgressError: rank 1 made no torch.distributed call for 3 s" in text
    assert "rank 1: computes, outside torch.distributed, at test_torch_stops.py:" in text and "time.sleep(3600)" in text
    assert "its last calls: all_reduce on ranks [0, 1]" in text
