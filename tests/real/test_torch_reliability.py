"""Nothing lost, nothing hung, nothing open: the real-process backend under interrupts, threads, aborts and kills.

Each test names the failure it guards against. Together they start about six small gloo worlds.
"""

import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytest.importorskip("torch.distributed")

from simulator import World  # noqa: E402
from simulator.real.errors import RankTimeoutError, RemoteRankError, WorldBusyError  # noqa: E402
from simulator.real.launch import RUN_TIMEOUT, TorchWorld  # noqa: E402
from simulator.real.loopback import OWNER  # noqa: E402
from tests import demos  # noqa: E402
from tests.procs import listening, survivors  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


def assert_nothing_left(pids, listening_before):
    assert survivors(pids, within=5.0) == []
    assert multiprocessing.active_children() == []
    assert listening() <= listening_before  # no socket left listening


# ---- 1. Ctrl-C during a run ----------------------------------------------------------------------


def test_ctrl_c_during_a_run_stops_the_ranks_and_the_next_run_returns_its_own_results():
    before = listening()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal or a notebook
    try:
        with TorchWorld(2, timeout=5) as world:
            pids = world.pids
            # SIGINT to the main thread, as Ctrl-C delivers it, while it waits for the ranks
            ctrl_c = threading.Timer(0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
            ctrl_c.start()
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                world.run(demos.sleep_then_return, 30.0, "first")
            ctrl_c.join()
            assert time.monotonic() - t0 < 25  # the ranks were stopped, not waited for (they sleep 30 s)
            assert world.pids == [] and survivors(pids) == []
            # the next run starts fresh ranks and returns its own outputs, never the interrupted run's
            assert world.run(demos.sleep_then_return, 0.0, "second").outputs == ["second", "second"]
            pids = world.pids
    finally:
        signal.signal(signal.SIGINT, previous)
    assert_nothing_left(pids, before)


# ---- 2. overlapping subgroups; every wait bounded by default --------------------------------------


def test_overlapping_subgroups_do_not_hang_and_equal_the_simulation():
    before = listening()
    expected = World(3).run(demos.overlapping_subgroups).outputs
    with TorchWorld(3, timeout=5, run_timeout=60) as world:
        t0 = time.monotonic()
        found = world.run(demos.overlapping_subgroups).outputs
        assert time.monotonic() - t0 < 55  # no wait ran into the 60 s run timeout
        # twice: the groups, kept from the first run, are reused
        again = world.run(demos.overlapping_subgroups).outputs
        pids = world.pids
    for f, a, e in zip(found, again, expected):
        assert [x.tolist() for x in f] == [x.tolist() for x in a] == [x.tolist() for x in e]
    assert_nothing_left(pids, before)


def test_a_run_is_bounded_by_default_and_the_timeout_names_the_ranks_still_running():
    assert TorchWorld(2).run_timeout == RUN_TIMEOUT == 300.0
    with pytest.raises(ValueError, match="run_timeout=0"):
        TorchWorld(2, run_timeout=0)
    with TorchWorld(2, timeout=5, run_timeout=2) as world, pytest.raises(RankTimeoutError) as info:
        world.run(demos.sleep_then_return, 60.0, None, ranks=(1,))
    text = str(info.value)
    assert "device(s) 1 did not finish sleep_then_return within 2 s (run_timeout)" in text
    assert "device(s) 0 had finished" in text
    assert world.pids == []


# ---- 3. no store anyone may reach; the ranks listen on loopback only ------------------------------------


def test_the_store_is_a_private_file_and_the_ranks_listen_on_loopback_only_and_nothing_after_close():
    before = listening()
    with TorchWorld(2, timeout=5) as world:
        assert listening() - before == set()  # no store socket: a TCPStore would let any local process in
        folder = world._store.folder
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700  # only this user may enter
        # the store's file, and the file naming its launcher (so a later launcher can clean up after a SIGKILL)
        assert sorted(p.name for p in folder.iterdir()) == sorted([os.path.basename(world._store.path), OWNER])
        for pid in world.pids:  # gloo's listening sockets, in the ranks
            assert {ip for ip, _ in listening(pid)} <= {"127.0.0.1"}
        pids = world.pids
    assert_nothing_left(pids, before)
    assert not folder.exists()


# ---- 4. the ranks end when their launcher is killed ------------------------------------------------

LAUNCHER = textwrap.dedent(
    """
    import json, sys, threading
    from tests import demos
    from simulator.real.launch import TorchWorld

    def go():
        world = TorchWorld(2, timeout=5)
        world.start()
        print(json.dumps(world.pids), flush=True)
        world.run(demos.sleep_then_return, 120.0, None)

    if sys.argv[1] == "thread":  # started from a worker thread: only the lifeline pipe can tell the ranks
        t = threading.Thread(target=go)
        t.start()
        t.join()
    else:
        go()
    """
)


def test_the_ranks_exit_when_their_launcher_is_killed():
    # two launchers at once: SIGKILL to one started from its main thread, SIGTERM to one started from a
    # thread; each is killed alone (not its process group), as a crash or an out-of-memory kill would
    launchers = {
        how: subprocess.Popen([sys.executable, "-c", LAUNCHER, how], stdout=subprocess.PIPE, text=True)
        for how in ("main", "thread")
    }
    pids = {}
    try:
        for how, proc in launchers.items():
            line = proc.stdout.readline()  # the world has started
            assert line, f"the {how} launcher exited before starting its world"
            pids[how] = json.loads(line)
        launchers["main"].send_signal(signal.SIGKILL)
        launchers["thread"].send_signal(signal.SIGTERM)
        for proc in launchers.values():
            proc.wait(10)
        for how, ranks in pids.items():
            assert survivors(ranks, within=10.0) == [], f"ranks of the {how} launcher outlived it"
            for pid in ranks:  # and with them their listening sockets
                assert not _alive_listening(pid)
    finally:
        for proc in launchers.values():
            proc.kill()
            proc.wait(5)
            proc.stdout.close()


def _alive_listening(pid):
    import psutil

    try:
        return bool(listening(pid))
    except psutil.NoSuchProcess:
        return False


# ---- 5. two threads on one world -------------------------------------------------------------------


def test_a_second_thread_calling_run_gets_a_clear_error_and_the_first_its_own_result():
    before = listening()
    with TorchWorld(2, timeout=5) as world:
        results = {}
        first = threading.Thread(
            target=lambda: results.update(a=world.run(demos.sleep_then_return, 2.0, "a").outputs), name="trainer"
        )
        first.start()
        time.sleep(0.5)  # the first run is under way (its ranks sleep 2 s)
        with pytest.raises(WorldBusyError, match=r"busy \(thread 'trainer' is in run\).*its own TorchWorld"):
            world.run(demos.sleep_then_return, 0.0, "b")
        first.join(30)
        assert results["a"] == ["a", "a"]
        assert world.run(demos.sleep_then_return, 0.0, "c").outputs == ["c", "c"]  # free again
        pids = world.pids
    assert_nothing_left(pids, before)


# ---- 6. gloo's own words ---------------------------------------------------------------------------


def test_a_rank_that_gloo_aborts_reports_what_gloo_wrote_to_stderr(capfd):
    before = listening()
    with TorchWorld(2, timeout=5) as world:
        pids = world.pids
        with pytest.raises(RemoteRankError) as info:
            world.run(demos.mismatched_all_reduce)
    text = str(info.value)
    assert "exited with code -6 (killed by SIGABRT) without reporting a result" in text
    assert "the last lines it wrote to stderr:" in text and "gloo::EnforceNotMet" in text
    assert "Is there a distributed collective mismatch in your code?" in text
    assert "gloo::EnforceNotMet" in capfd.readouterr().err  # and the lines were passed on as they came
    assert_nothing_left(pids, before)
