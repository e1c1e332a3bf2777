"""One verdict for a torch program, simulated or real: ``run_real`` records the program on gloo processes as
``simulate_torch`` records it on simulated ranks, so ``check`` says passed or FAILED alike. With the simulator's
collectives over gloo (``collectives="messages"``) the first divergence is the same event; with gloo's own
(native, whose messages nobody sees) it is the same value, where the run first shows it. Every torch twin of
the checker's catalogue (tests/torchsim/test_torch_catalogue.py), and the hand-written and ``parallelize_module`` MLPs,
the sequence-parallel block and the pipeline with their classic bugs. One TorchWorld per world size and kind
of collectives (gloo starts in seconds)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.core.errors import DeadlockError  # noqa: E402
from simulator.real.errors import RemoteRankError  # noqa: E402
from simulator.real.launch import TorchWorld  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from simulator.torchsim.simulate import run_real  # noqa: E402
from tests.torchsim.test_torch_catalogue import TWINS  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]

MODEL = tp.mlp(0)
STATE, X = MODEL.state_dict(), tp.batch(1)
XP = torch.arange(1.0, 17.0).reshape(16, 1)
BLOCK = tp.Block()
XS = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(3))


def mlp_ref():
    return Reference.of_torch(MODEL, X)


def step_ref():
    return Reference.of_torch(tp.mlp_step, MODEL, X)


PROGRAMS = {  # name -> (world size, program, its arguments, the reference)
    **{f"tp_mlp, {bug}": (n, tp.tp_mlp, (STATE, X, bug), mlp_ref)
       for n in (2, 4) for bug in (None, "missing all-reduce", "wrong shard", "bias on every rank", "barrier first")},
    **{f"tp_mlp, {bug}": (2, tp.tp_mlp, (STATE, X, bug), mlp_ref) for bug in ("async all-reduce", "read before wait")},
    **{f"tp_mlp in groups (0, 2) and (1, 3), {bug}": (4, tp.tp_mlp_in_groups, (STATE, X, True, bug), mlp_ref)
       for bug in (None, "wrong shard")},
    **{f"dtensor_mlp, {bug}": (2, tp.dtensor_mlp, (STATE, X, None, bug), step_ref)
       for bug in (None, "missing all-reduce", "wrong shard")},
    "dtensor_mlp on a 2 x 2 mesh": (4, tp.dtensor_mlp, (STATE, X, (2, 2)), step_ref),
    "sequence-parallel block": (2, tp.sequence_parallel_block, (BLOCK.state_dict(), XS),
                                lambda: Reference.of_torch(tp.mlp_step, BLOCK, XS)),
    **{f"pipeline, {bug}": (4, tp.pipeline, (XP, 2, bug), lambda: tp.pipeline_references(XP, 4, 2))
       for bug in (None, "raw input", "wrong order")},
}  # fmt: skip
CASES = {**{f"twin: {k}": v for k, v in TWINS.items()}, **PROGRAMS}


@pytest.fixture(scope="module")
def worlds(gloo_worlds):
    return lambda n, collectives="native": gloo_worlds(n, timeout=60, collectives=collectives)


def first(report):
    d = report.first
    return None if d is None else (d.where, d.name, d.rank, d.path)


@pytest.mark.parametrize("name", sorted(CASES, key=lambda k: (CASES[k][0], k)))
def test_a_torch_program_gets_one_verdict_simulated_and_real(name, worlds):
    size, program, args, reference = CASES[name]
    simulated = check(simulate_torch(program, size, *args), reference())
    for collectives in ("messages", "native"):
        real = check(run_real(worlds(size, collectives), program, *args), reference())
        why = f"{name}, {collectives} collectives\nreal: {real}\nsimulated: {simulated}"
        assert real.verdict == simulated.verdict, why
        assert [u.kind for u in real.unchecked] == [u.kind for u in simulated.unchecked], why
        if collectives == "messages":
            assert first(real) == first(simulated), why
        elif simulated.first is not None:
            assert real.first.name == simulated.first.name, why


def test_a_correct_program_passes_on_real_ranks_module_by_module(worlds):
    """What was "not verified" when real ranks were unrecorded: each module's value is compared there now."""
    run = run_real(worlds(2), tp.tp_mlp, STATE, X)
    report = check(run, mlp_ref())
    assert report.ok, str(report)
    assert {op.name for op in run.trace.ops} >= {"fc1", "fc2"}
    fc2 = [op.partial for op in run.trace.ops if op.name == "fc2"]
    assert fc2.count((0, 1)) == 2  # each rank's term of the sum, named by its all-reduce, as simulated


def both_send_first(x):
    """Each rank sends before it receives: gloo's ``dist.send`` waits for the receiver, so this hangs."""
    rank = dist.get_rank()
    dist.send(x, dst=1 - rank)
    y = torch.empty_like(x)
    dist.recv(y, src=1 - rank)
    return y


def test_ranks_that_both_send_first_are_a_deadlock_simulated_and_a_named_hang_real():
    with pytest.raises(DeadlockError, match="wait-for cycle"):
        simulate_torch(both_send_first, 2, torch.ones(2))
    with TorchWorld(2, timeout=3) as world, pytest.raises(RemoteRankError) as err:
        run_real(world, both_send_first, torch.ones(2))
    text = str(err.value)
    assert "never posted the matching recv" in text and "dist.send(x, dst=1 - rank)" in text


def exchange(x, order):
    """Each rank isends to the other and irecvs from it, then waits: the halo exchange of every ring."""
    rank = dist.get_rank()
    got = torch.empty_like(x)
    if order == "send first":
        s, r = dist.isend(x + rank, dst=1 - rank), dist.irecv(got, src=1 - rank)
        s.wait()
        r.wait()
    elif order == "recv first":
        r, s = dist.irecv(got, src=1 - rank), dist.isend(x + rank, dst=1 - rank)
        s.wait()
        r.wait()
    else:
        for work in dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, x + rank, 1 - rank), dist.P2POp(dist.irecv, got, 1 - rank)]
        ):
            work.wait()
    return got


@pytest.mark.parametrize("order", ["send first", "recv first", "batch_isend_irecv"])
def test_an_exchange_of_isends_and_irecvs_completes_simulated_and_real(order, worlds):
    """Sends wait for their receivers on real ranks, as gloo's do; a posted irecv is a receiver already there."""
    x = torch.ones(3)
    simulated = simulate_torch(exchange, 2, x, order).outputs
    for collectives in ("messages", "native"):
        real = run_real(worlds(2, collectives), exchange, x, order).outputs
        for rank in (0, 1):
            np.testing.assert_array_equal(real[rank], simulated[rank])
            np.testing.assert_array_equal(real[rank], np.full(3, 2.0 - rank))  # the other rank's x + rank


def different_collectives(x):
    """Rank 0 all-reduces while rank 1 broadcasts: a classic mismatch."""
    if dist.get_rank() == 0:
        dist.all_reduce(x)
    else:
        dist.broadcast(x, src=0)
    return x


def test_ranks_in_different_collectives_are_told_so_simulated_and_real(worlds):
    with pytest.raises(Exception, match="made different collective calls"):
        simulate_torch(different_collectives, 2, torch.ones(3))
    with pytest.raises(RemoteRankError) as err:
        run_real(worlds(2, "messages"), different_collectives, torch.ones(3))
    assert "in different collective calls" in " ".join(str(err.value).split())


def test_ranks_in_different_native_collectives_time_out_and_are_told_where_each_waited():
    """gloo's own collectives cannot see the mismatch: they hang until the timeout, then the error says it."""
    with TorchWorld(2, timeout=3, collectives="native") as world, pytest.raises(RemoteRankError) as err:
        run_real(world, different_collectives, torch.ones(3))
    text = str(err.value)
    assert "device 0: all_reduce on ranks [0, 1], at test_torch_gloo_verdicts.py" in text, text
    assert "device 1: broadcast on ranks [0, 1], at test_torch_gloo_verdicts.py" in text, text
    assert "they wait in different collectives (all_reduce, broadcast): the devices made different" in text, text


def test_a_program_that_never_waits_on_an_async_collective_is_told_so_simulated_and_real(worlds):
    expected = "never waited on 1 collective(s) it called with async_op=True"
    with pytest.raises(Exception) as simulated:
        simulate_torch(tp.tp_mlp, 2, STATE, X, "never waited")
    with pytest.raises(RemoteRankError) as real:
        run_real(worlds(2), tp.tp_mlp, STATE, X, "never waited")
    for err in (simulated, real):
        text = " ".join(str(err.value).split())
        assert expected in text and "all_reduce on ranks [0, 1], at programs.py" in text, text


def test_a_tensor_changed_before_its_async_all_reduce_is_waited_on_is_refused_simulated_and_real(worlds):
    from tests.torchsim.test_torch_async import changed_before_wait

    expected = "changed a tensor of a collective it called with async_op=True before waiting on it"
    with pytest.raises(Exception) as simulated:
        simulate_torch(changed_before_wait, 2, torch.arange(4.0), "all_reduce")
    with pytest.raises(RemoteRankError) as real:
        run_real(worlds(2), changed_before_wait, torch.arange(4.0), "all_reduce")
    for err in (simulated, real):
        text = " ".join(str(err.value).split())
        assert expected in text and "(all_reduce on ranks [0, 1], at test_torch_async.py" in text, text


def test_a_receive_written_before_it_completes_is_refused_simulated_and_real(worlds):
    from tests.torchsim.test_torch_async import written_before_received

    for run in (lambda: simulate_torch(written_before_received, 2, torch.tensor([3.0])),
                lambda: run_real(worlds(2), written_before_received, torch.tensor([3.0]))):  # fmt: skip
        with pytest.raises(Exception) as err:
            run()
        assert "wrote into the tensor of its recv from rank 0" in " ".join(str(err.value).split())


def test_a_receive_polled_with_is_completed_passes_simulated_and_is_named_not_hung_real():
    """gloo says a receive completed only once it is waited on: polling it on real ranks would spin forever, so
    after the communication timeout the rank is told to wait (simulated, the poll sees the message arrive)."""
    from tests.torchsim.test_torch_async import polled_receive

    x = torch.tensor([3.0])
    assert simulate_torch(polled_receive, 2, x).outputs[1].tolist() == [49.0]
    with TorchWorld(2, timeout=2) as world, pytest.raises(RemoteRankError) as err:
        run_real(world, polled_receive, x)
    text = " ".join(str(err.value).split())
    assert "has tested recv(src=0, tag=0) for 2 s (the timeout) and it is still pending" in text, text
    assert "Wait on it: dev.wait(req) (torch: work.wait())" in text and "test_torch_async.py" in text, text


def test_a_declared_split_gets_one_verdict_simulated_and_real(worlds):
    from tests.torchsim.test_torch_checked import SEED_SPLIT, raw_input_recomputed, whole_model_on_rank_1

    x = torch.tensor([3.0])
    ref = Reference.of_torch(tp.TwoStage(), x)
    for program in (tp.seed_split, whole_model_on_rank_1, raw_input_recomputed):
        simulated = check(simulate_torch(program, 2, x), ref, split=SEED_SPLIT)
        real = check(run_real(worlds(2), program, x), ref, split=SEED_SPLIT)
        assert real.verdict == simulated.verdict == ("passed" if program is tp.seed_split else "FAILED"), str(real)
        assert [v.text for v in real.broken] == [v.text for v in simulated.broken], f"{real}\n{simulated}"


def test_a_message_fills_a_flat_tensor_simulated_and_real(worlds):
    from tests.torchsim.test_torch_errors import receive_into

    for collectives in ("messages", "native"):
        real = run_real(worlds(2, collectives), receive_into, (4,)).outputs[1]
        np.testing.assert_array_equal(real, simulate_torch(receive_into, 2, (4,)).outputs[1])
        np.testing.assert_array_equal(real, np.arange(4.0, dtype=np.float32))


def test_without_headers_a_real_receive_declares_its_tensor_s_shape():
    """With headers off nothing says a message's shape: the receive declares its tensor's, as in strict mode."""
    from tests.torchsim.test_torch_errors import receive_into

    with TorchWorld(2, timeout=20, headers=False) as world:
        assert run_real(world, receive_into, (2, 2)).outputs[1].tolist() == [[0.0, 1.0], [2.0, 3.0]]
