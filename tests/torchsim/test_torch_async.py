"""Collectives called with ``async_op=True`` in torch programs on simulated ranks: the result reaches the tensors
when the program waits on the work (``wait``, ``is_completed``, ``get_future``, ``result``), never before, so a
program that reads a tensor early sees what it held and the checker fails it; one that never waits is told which
call it left. (The same verdicts on real gloo ranks: tests/torchsim/test_torch_gloo_verdicts.py.)"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.core.errors import RankError  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402

MODEL = tp.mlp(0)
STATE, X = MODEL.state_dict(), tp.batch(1)


def collective(kind, x):
    """The collective ``kind`` on rank-dependent integer data; returns the output tensor and the work (async) or None."""
    rank, p = dist.get_rank(), dist.get_world_size()
    mine = x + 10 * rank  # float data with integer values: sums are exact
    if kind == "all_reduce":
        return mine, (mine,)
    if kind == "broadcast":
        return mine, (mine, 1)
    if kind == "reduce":
        return mine, (mine, 0)
    if kind == "all_gather_single":
        return torch.zeros(p * len(x)), (None, mine)
    if kind == "reduce_scatter_single":
        return torch.zeros(len(x) // p), (None, mine)
    if kind == "all_to_all_single":
        return torch.zeros(len(x)), (None, mine)
    raise AssertionError(kind)


def early_read(kind, x, how):
    """Call ``kind`` with async_op=True, copy its output tensor before waiting, then wait ``how``; return both."""
    out, args = collective(kind, x)
    fn = getattr(dist, kind)
    work = fn(*(out if a is None else a for a in args), async_op=True)
    before = out.clone()
    if how == "wait":
        work.wait()
    elif how == "is_completed":
        assert work.is_completed()
    elif how == "get_future":
        work.get_future().wait()
    else:
        work.result()
    return before, out


def synchronous(kind, x):
    out, args = collective(kind, x)
    getattr(dist, kind)(*(out if a is None else a for a in args))
    return out


KINDS = ["all_reduce", "broadcast", "reduce", "all_gather_single", "reduce_scatter_single", "all_to_all_single"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_async_collective_writes_its_result_when_waited_on_and_not_before(kind):
    x = torch.arange(4.0)
    expected = simulate_torch(synchronous, 2, kind, x).outputs
    run = simulate_torch(early_read, 2, kind, x, "wait")
    changed = 0
    for rank, ((before, after), want) in enumerate(zip(run.outputs, expected)):
        initial = collective_initial(kind, x, rank)
        np.testing.assert_array_equal(before, initial)  # read early: what the tensor held
        np.testing.assert_array_equal(after, want)  # after the wait: the collective's result
        changed += not np.array_equal(initial, want)
    assert changed  # (the collective changes some rank's tensor, so an early write would be seen)


def collective_initial(kind, x, rank):
    """What ``collective``'s output tensor holds before the call, on ``rank`` of 2."""
    if kind in ("all_reduce", "broadcast", "reduce"):
        return (x + 10 * rank).numpy()
    return np.zeros({"all_gather_single": 8, "reduce_scatter_single": 2, "all_to_all_single": 4}[kind], np.float32)


@pytest.mark.parametrize("how", ["is_completed", "get_future", "result"])
def test_asking_whether_it_completed_or_for_its_future_counts_as_waiting(how):
    x = torch.arange(4.0)
    run = simulate_torch(early_read, 2, "all_reduce", x, how)
    for rank, (before, after) in enumerate(run.outputs):
        np.testing.assert_array_equal(before, (x + 10 * rank).numpy())
        np.testing.assert_array_equal(after, (2 * x + 10).numpy())


def test_an_async_all_reduce_waited_on_before_use_passes_the_check():
    report = check(simulate_torch(tp.tp_mlp, 2, STATE, X, "async all-reduce"), Reference.of_torch(MODEL, X))
    assert report.ok, str(report)


def test_a_tensor_read_before_its_async_all_reduce_completes_fails_at_that_value():
    run = simulate_torch(tp.tp_mlp, 2, STATE, X, "read before wait")
    report = check(run, Reference.of_torch(MODEL, X))
    assert report.verdict == "FAILED" and report.first.name == "output", str(report)
    text = " ".join(str(report).split())
    assert "the values of output on devices 0, 1 add up to output" in text
    assert "was this value taken before the sum came? (a tensor read before work.wait()" in text
    assert "dev.all_reduce" not in text  # the simulator's own API: no way out for a torch program
    assert "fc2" in str(report)
    # what each rank returned is its own partial sum, as a real rank may return it
    with torch.no_grad():
        whole = MODEL(X).numpy()
    assert not np.allclose(run.outputs[0], whole)
    np.testing.assert_allclose(run.outputs[0] + run.outputs[1], whole, rtol=1e-5, atol=1e-5)


def test_a_program_that_never_waits_on_its_async_collective_is_told_which_call():
    with pytest.raises(RankError) as err:
        simulate_torch(tp.tp_mlp, 2, STATE, X, "never waited")
    text = " ".join(str(err.value).split())
    assert "never waited on 1 collective(s) it called with async_op=True" in text
    assert "all_reduce on ranks [0, 1], at programs.py" in text and "Call work.wait() before using it" in text


def dtensor_step(state, x):
    return tp.dtensor_mlp(state, x)


def test_the_functional_collectives_dtensor_calls_are_not_async_calls_of_the_program():
    """C++ leaves asyncOp True on the functional collectives' options: they still complete in the call."""
    run = simulate_torch(dtensor_step, 2, STATE, X)
    assert check(run, Reference.of_torch(tp.mlp_step, MODEL, X)).ok


def unwaited(kind):
    """Call the list form of ``kind`` (or a barrier) with async_op=True and never wait on it."""
    rank, x = dist.get_rank(), torch.arange(2.0)
    if kind == "all_gather":
        dist.all_gather([torch.zeros(2), torch.zeros(2)], x, async_op=True)
    elif kind == "reduce_scatter":
        dist.reduce_scatter(torch.zeros(2), [x, x], async_op=True)
    elif kind == "all_to_all":
        dist.all_to_all([torch.zeros(2), torch.zeros(2)], [x, x + 1], async_op=True)
    elif kind == "gather":
        dist.gather(x, [torch.zeros(2), torch.zeros(2)] if rank == 0 else None, dst=0, async_op=True)
    elif kind == "scatter":
        dist.scatter(torch.zeros(2), [x, x + 1] if rank == 0 else None, src=0, async_op=True)
    else:
        dist.barrier(async_op=True)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "barrier"])
def test_every_collective_called_async_and_never_waited_on_is_named(kind):
    with pytest.raises(RankError, match=rf"never waited on 1 collective\(s\).*\n  {kind} on ranks \[0, 1\], at "):
        simulate_torch(unwaited, 2, kind)


def changed_before_wait(x, which):
    """An async collective whose tensor the program changes before waiting: the all-reduce's own tensor (a bias
    added in place while the sum is in flight), or the input of an all-gather."""
    rank, p = dist.get_rank(), dist.get_world_size()
    if which == "all_reduce":
        y = x + rank
        work = dist.all_reduce(y, async_op=True)
        y += 1  # racing the all-reduce: a real rank may send y + 1, or overwrite it with the sum
    else:
        y, mine = torch.zeros(p * len(x)), x + rank
        work = dist.all_gather_into_tensor(y, mine, async_op=True)
        mine.zero_()  # gloo may still be reading it
    work.wait()
    return y


@pytest.mark.parametrize("which", ["all_reduce", "all_gather_into_tensor"])
def test_a_tensor_changed_before_its_async_collective_is_waited_on_is_refused(which):
    with pytest.raises(RankError) as err:
        simulate_torch(changed_before_wait, 2, torch.arange(4.0), which)
    text = " ".join(str(err.value).split())
    assert "changed a tensor of a collective it called with async_op=True before waiting on it" in text, text
    assert f"({which} on ranks [0, 1], at test_torch_async.py" in text and "x.clone()" in text, text


def polled_receive(x):
    """Stage b receives a's output with irecv, computing while it polls ``is_completed()``, then reads the tensor
    without a ``wait``: on a real rank a receive that says it completed has its values in the tensor."""
    model = tp.TwoStage()
    if dist.get_rank() == 0:
        dist.send(model.a(x), dst=1)
        return None
    h = torch.zeros_like(x)
    work = dist.irecv(h, src=0)
    busy = torch.ones(8, 8)
    while not work.is_completed():
        busy = busy @ busy / 8  # overlapped compute, so simulated time passes between the polls
    return model.b(h)


def test_a_receive_that_says_it_completed_has_its_values_in_the_tensor():
    x = torch.tensor([3.0])
    run = simulate_torch(polled_receive, 2, x)
    assert run.outputs[1].tolist() == [49.0]
    assert check(run, Reference.of_torch(tp.TwoStage(), x)).ok


def written_before_received(x):
    """Stage b fills the tensor of its irecv before waiting: a real rank's message may land before or after."""
    model = tp.TwoStage()
    if dist.get_rank() == 0:
        dist.send(model.a(x), dst=1)
        return None
    h = torch.zeros_like(x)
    work = dist.irecv(h, src=0)
    h.fill_(5.0)
    work.wait()
    return model.b(h)


def test_a_tensor_written_before_its_receive_completes_is_refused():
    with pytest.raises(RankError) as err:
        simulate_torch(written_before_received, 2, torch.tensor([3.0]))
    text = " ".join(str(err.value).split())
    assert "rank 1 wrote into the tensor of its recv from rank 0 (test_torch_async.py" in text, text
    assert "before the receive completed" in text, text
