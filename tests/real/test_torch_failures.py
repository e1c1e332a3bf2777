"""Failures on real processes: a raising rank, a hang, a dying process; never a leftover child."""

import multiprocessing
import os
import time

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

from simulator import ContractError, World  # noqa: E402
from simulator.real.errors import CommTimeoutError, RankTimeoutError, RemoteRankError  # noqa: E402
from simulator.real.launch import TorchWorld  # noqa: E402
from simulator.teach.examples import seeds  # noqa: E402
from tests import demos  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


def gone(pids):
    """True when none of these processes exists any more (they were joined, so not even as zombies)."""
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


@pytest.fixture(scope="module")
def world(gloo_worlds):
    return gloo_worlds(3, timeout=3)


def test_a_raising_rank_stops_all_ranks_and_names_itself_with_its_traceback(world):
    pids = world.pids
    with pytest.raises(RemoteRankError) as info:
        world.run(demos.raise_on, 1)
    err = info.value
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert str(err).startswith("device 1 raised ValueError: rank 1 cannot continue: its shard is empty")
    assert "traceback from device 1's process" in str(err)
    assert 'demos.py", line' in err.remote_traceback and "in raise_on" in err.remote_traceback
    assert isinstance(err.__cause__, ValueError)
    assert world.pids == [] and gone(pids) and multiprocessing.active_children() == []


def test_a_hang_becomes_a_timeout_naming_the_rank(world):
    world.start()
    pids = world.pids
    t0 = time.monotonic()
    with pytest.raises(RankTimeoutError) as info:
        world.run(demos.recv_never_sent, 2)
    elapsed = time.monotonic() - t0
    err = info.value
    assert isinstance(err, TimeoutError) and isinstance(err.__cause__, CommTimeoutError)
    assert err.rank == 2
    assert "device 2: recv(src=0, tag=5) did not complete within 3 s: device 0 never sent a matching message" in str(
        err
    )
    assert "device(s) 0, 1 had finished" in str(err)
    assert (
        elapsed >= 3
    )  # it waited its 3 s timeout (an upper bound would fail on a loaded machine; a hang fails the run)
    assert gone(pids) and multiprocessing.active_children() == []


def test_a_dying_process_is_reported_with_its_exit_code(world):
    world.start()
    pids = world.pids
    with pytest.raises(RemoteRankError, match="the process of device 1 exited with code 3"):
        world.run(demos.exit_abruptly, 1)
    assert gone(pids) and multiprocessing.active_children() == []


def test_rendezvous_send_send_hangs_on_real_processes_where_the_simulator_names_the_cycle():
    from simulator import DeadlockError

    with pytest.raises(DeadlockError):
        World(2, send_mode="rendezvous").run(seeds.send_send, np.array([3.0]))
    with TorchWorld(2, timeout=2, send_mode="rendezvous") as w, pytest.raises(RankTimeoutError) as info:
        w.run(seeds.send_send, np.array([3.0]))
    assert "send(dst=" in str(info.value) and "never posted the matching recv" in str(info.value)
    # eager sends (the default) complete, as in the simulator
    with TorchWorld(2, timeout=5) as w:
        out = w.run(seeds.send_send, np.array([3.0])).outputs
    assert [float(o[0]) for o in out] == [3.0, 3.0]


def test_leftover_message_warns_and_the_next_run_gets_fresh_processes():
    from simulator import UnreceivedMessagesWarning

    with TorchWorld(2, timeout=5) as w:
        pids = w.pids
        with pytest.warns(UnreceivedMessagesWarning, match=r"message #0 from device 0 to device 1 \(tag 2\)"):
            result = w.run(demos.send_unreceived)
        assert result.trace.unreceived() == result.trace.messages
        assert gone(pids)
        assert w.run(seeds.split, np.array([3.0])).outputs[1].tolist() == [49.0]
        assert not set(w.pids) & set(pids)


def test_bad_arguments_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="choose one of"):
        TorchWorld(2, backend="mpi")
    with pytest.raises(ValueError, match="positive number"):
        TorchWorld(0)


def test_headerless_receives_need_a_contract():
    with TorchWorld(2, timeout=5, headers=False) as w:
        # declared contracts work without headers
        assert w.run(seeds.split, np.array([3.0])).outputs[1].tolist() == [49.0]
        # both ranks post undeclared receives; whichever reports first is named
        with pytest.raises(
            RemoteRankError, match=r"with headers off \(headers=False\): device [01] posts recv"
        ) as info:
            w.run(demos.exchange)
    assert isinstance(info.value.__cause__, ContractError)


def test_a_script_that_starts_ranks_at_module_level_is_told_to_guard_it(tmp_path):
    """Spawned ranks import the script's main module first: unguarded, it starts ranks again and they die before
    they can report anything. The error says where the code goes."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text("from simulator.real.launch import TorchWorld\nwith TorchWorld(2, timeout=20):\n    pass\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "ProcessDied" in done.stderr and 'if __name__ == "__main__":' in done.stderr
