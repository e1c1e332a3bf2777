"""A torch program on simulated ranks never hangs: a rank that makes no torch.distributed call for ``timeout``
seconds (it sleeps, or loops) is stopped with a report of where each rank was; no rank thread survives any
stop, Ctrl-C included; a rank that is not in the group is refused as torch names it."""

import os
import signal
import threading
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from simulator import simulate_torch  # noqa: E402
from simulator.core.errors import RankError  # noqa: E402
from simulator.torchsim.stops import NoProgressError  # noqa: E402

LIMIT = 4.0  # seconds: far above what a rank of these programs computes between two calls, even on a busy machine


def rank_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("simulated rank")]


def last_rank_sleeps():
    t = torch.ones(3)
    dist.all_reduce(t)
    if dist.get_rank() == dist.get_world_size() - 1:
        time.sleep(3600)  # waits for something no torch.distributed call brings
    dist.all_reduce(t)
    return t


@pytest.mark.parametrize("n", [2, 4])
def test_a_sleeping_rank_is_stopped_with_where_each_rank_was(n):
    with pytest.raises(NoProgressError) as info:
        simulate_torch(last_rank_sleeps, n, timeout=LIMIT)
    e, last = info.value, n - 1
    assert e.rank == last and sorted(e.where) == list(range(n))
    text = str(e)
    assert f"rank {last} made no torch.distributed call for 4 s" in text
    assert f"rank {last}: computes, outside torch.distributed, at test_torch_stops.py:" in text
    assert "`time.sleep(3600)  # waits for something no torch.distributed call brings`" in text
    for r in range(n - 1):  # the others wait in the second all-reduce; each did the first
        assert e.where[r].startswith(f"waits in all_reduce on ranks {list(range(n))}")
        assert "its last calls: all_reduce" in e.where[r]
    assert "its last calls: all_reduce" in e.where[last]
    assert "timeout=seconds" in text
    assert rank_threads() == []


def first_rank_loops():
    t = torch.zeros(2)
    if dist.get_rank() == 0:
        flag = [False]  # another rank's change never reaches this rank's memory
        while not flag[0]:
            t = t + 1
    dist.broadcast(t, src=0)
    return t


def test_a_looping_rank_is_stopped_and_the_ranks_not_started_are_named():
    with pytest.raises(NoProgressError) as info:
        simulate_torch(first_rank_loops, 4, timeout=LIMIT)
    e = info.value
    assert e.rank == 0 and "`t = t + 1`" in e.where[0] and "its last calls: none" in e.where[0]
    assert all(e.where[r].startswith("has not started") for r in (1, 2, 3))
    assert rank_threads() == []


def test_a_run_stopped_by_ctrl_c_leaves_no_rank_thread():
    def interrupt():
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(LIMIT, interrupt)  # the sleeping rank holds the run; no timeout stops it
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            simulate_torch(last_rank_sleeps, 2, timeout=None)
    finally:
        timer.cancel()
    assert rank_threads() == []


def test_the_timeout_is_a_number_of_seconds():
    with pytest.raises(ValueError, match=r"timeout=0\)"):
        simulate_torch(last_rank_sleeps, 2, timeout=0)


def sends_to(dst):
    def program():
        t = torch.ones(2)
        if dist.get_rank() == 0:
            dist.send(t, dst=dst)
        else:
            dist.recv(t, src=0)
        return t

    return program


def sends_to_seven():  # importable by real ranks (tests/torchsim/test_torch_gloo_stages.py)
    return sends_to(7)()


@pytest.mark.parametrize("dst", [7, -1])
def test_a_send_to_a_rank_that_is_not_there_is_named_as_torch_names_it(dst):
    with pytest.raises(RankError) as info:
        simulate_torch(sends_to(dst), 2)
    text = str(info.value)
    assert f"invalid destination rank: {dst} (send at test_torch_stops.py:" in text and "dist.send(t, dst=dst)" in text
    assert "the world has ranks 0 to 1" in text
    assert rank_threads() == []


def receives_from_and_broadcasts(src, root):
    def program():
        t = torch.ones(2)
        if dist.get_rank() == 1:
            dist.recv(t, src=src)
        dist.broadcast(t, src=root)
        return t

    return program


def test_a_receive_or_a_root_outside_the_world_is_named():
    with pytest.raises(RankError, match="invalid source rank: 2 \\(recv at"):
        simulate_torch(receives_from_and_broadcasts(2, 0), 2)
    with pytest.raises(RankError, match="invalid root rank: 5 \\(broadcast at"):
        simulate_torch(receives_from_and_broadcasts(0, 5), 2, timeout=LIMIT)
    assert rank_threads() == []
