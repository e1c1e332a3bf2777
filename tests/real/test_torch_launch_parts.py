"""The launcher's parts, without starting any rank process: run numbers, pickling up front, stderr tails."""

import io
import multiprocessing
import os
import sys
from dataclasses import replace

import pytest

pytest.importorskip("torch.distributed")

from simulator.real.launch import TorchWorld  # noqa: E402
from simulator.real.rankproc import RankProcess  # noqa: E402
from simulator.real.replies import Awaited, collect, where_they_waited  # noqa: E402
from simulator.real.stderr_tail import StderrTail  # noqa: E402
from simulator.real.worker import ErrorReport  # noqa: E402


class IdleProcess:
    """Stands in for a rank process that stays alive: its sentinel never becomes ready."""

    def __init__(self):
        self._never, self._keep = multiprocessing.Pipe(duplex=False)
        self.sentinel = self._never
        self.exitcode = None

    def join(self, timeout=None):
        pass

    def is_alive(self):
        return True


def test_a_reply_counts_only_for_the_run_it_answers():
    ranks, rank_ends = [], []
    for rank in range(2):
        launcher_end, rank_end = multiprocessing.Pipe()
        ranks.append(RankProcess(rank, IdleProcess(), launcher_end, None, None))
        rank_ends.append(rank_end)
    # the replies of an interrupted run 1 arrive late, before those of run 2
    for rank, end in enumerate(rank_ends):
        end.send(("done", 1, f"stale {rank}", None, 0))
        end.send(("done", 2, f"fresh {rank}", None, 0))
    replies = collect(ranks, Awaited("done", 2, 5.0, "finish", "run_timeout", 30.0), stop=lambda: None)
    assert [reply[2] for reply in replies] == ["fresh 0", "fresh 1"]


def test_a_program_that_cannot_travel_is_refused_before_any_process_starts():
    world = TorchWorld(2)
    with pytest.raises(TypeError, match=r"cannot send .*<lambda>.* must pickle: define the program at module level"):
        world.run(lambda dev: dev.rank)
    assert world.pids == [] and multiprocessing.active_children() == []


def test_bad_time_limits_are_refused():
    for kwargs in ({"timeout": 0}, {"start_timeout": -1}, {"run_timeout": True}, {"run_timeout": "60"}):
        with pytest.raises(ValueError, match="give a positive number of seconds"):
            TorchWorld(2, **kwargs)
    assert TorchWorld(2, run_timeout=None).run_timeout is None  # explicitly unbounded


def test_a_stderr_tail_passes_lines_on_and_keeps_the_last_ones(monkeypatch):
    read_fd, write_fd = os.pipe()
    seen = io.StringIO()
    monkeypatch.setattr(sys, "stderr", seen)
    tail = StderrTail(3, os.fdopen(read_fd, "rb"), keep=3)
    os.write(write_fd, "".join(f"line {i}\n" for i in range(5)).encode() + "what(): ünïcode, no newline".encode())
    os.close(write_fd)  # the process has gone
    assert tail.last_lines(wait=5) == ["line 3", "line 4", "what(): ünïcode, no newline"]
    assert seen.getvalue().startswith("line 0\nline 1\n")


def test_the_ranks_exchange_no_pickles_at_start_up(tmp_path, monkeypatch):
    """A rank unpickles only what its launcher sends over its private pipe, never what a peer sends."""
    import torch
    import torch.distributed as dist

    from simulator.real import worker

    def unpickles(*args, **kwargs):
        raise AssertionError("an object collective unpickles whatever the peers send")

    for name in ("all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list"):
        monkeypatch.setattr(dist, name, unpickles)

    class Launcher:  # the command pipe: the launcher closes the world at once
        def recv(self):
            return ("close",)

    config = worker.WorkerConfig(1, "gloo", str(tmp_path / "store"), 10.0)
    worker.join_group(0, config)
    try:
        worker.serve(0, config, torch.device("cpu"), Launcher())
    finally:
        dist.destroy_process_group()


def test_each_world_has_its_own_private_store():
    from simulator.real.loopback import PrivateStore

    a, b = PrivateStore(), PrivateStore()
    try:
        assert a.path != b.path and len(os.path.basename(a.path)) > 32  # a random secret in the name
        assert all(oct(os.stat(s.folder).st_mode & 0o777) == "0o700" for s in (a, b))
    finally:
        a.close()
        b.close()
    assert not a.folder.exists()


KILLED_LAUNCHER = """
import os, signal, sys
from simulator.real.loopback import PrivateStore
print(PrivateStore().folder, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # as a launcher killed outright: no close, no atexit
"""


def test_a_killed_launchers_store_folder_goes_at_the_next_start(tmp_path, monkeypatch):
    import subprocess
    import tempfile

    from simulator.real.loopback import PrivateStore

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    killed = subprocess.run([sys.executable, "-c", KILLED_LAUNCHER], capture_output=True, text=True, env=os.environ)
    orphan = killed.stdout.strip()
    assert killed.returncode == -9 and os.path.isdir(orphan) and orphan.startswith(str(tmp_path))
    alive = PrivateStore()  # this process's own: its launcher runs, so the next start leaves it
    try:
        assert not os.path.exists(orphan)
        later = PrivateStore()
        later.close()
        assert alive.folder.exists()
    finally:
        alive.close()


def timed_out(rank, waiting, collective, message=""):
    return ErrorReport(
        rank,
        "CommTimeoutError",
        message or f"device {rank}: {waiting} did not complete",
        "",
        1,
        True,
        0.0,
        None,
        waiting,
        collective,
    )


def test_the_timeout_report_says_where_each_device_waited_and_names_different_collectives():
    assert where_they_waited([timed_out(0, "all_reduce", True)]) == ""  # one device: its own message says it
    text = where_they_waited(
        [timed_out(1, "broadcast", True), timed_out(0, "all_reduce", True, "x\n  rank 0: all_reduce at p.py:3")]
    )
    assert text.splitlines()[2:4] == ["  device 0: all_reduce at p.py:3", "  device 1: broadcast"]
    assert "they wait in different collectives (all_reduce, broadcast)" in text
    same = where_they_waited([timed_out(0, "all_reduce", True), timed_out(1, "all_reduce", True)])
    assert "device 1: all_reduce" in same and "different" not in same  # the same call: a member missing elsewhere
    p2p = where_they_waited([timed_out(0, "send(dst=1, tag=0)", False), timed_out(1, "send(dst=0, tag=0)", False)])
    assert "device 1: send(dst=0, tag=0)" in p2p and "different" not in p2p
    # a peer whose collective failed (not timed out) when the first gave up waited somewhere too
    echo = replace(timed_out(1, "broadcast", True), exc_type="CommError", priority=0, timeout=False)
    assert "they wait in different collectives (all_reduce, broadcast)" in where_they_waited(
        [timed_out(0, "all_reduce", True), echo]
    )
