"""Bad programs get clear errors, never hangs: deadlocks and unreceived messages."""

import re
import warnings

import numpy as np
import pytest

from simulator import DeadlockError, UnreceivedMessagesError, UnreceivedMessagesWarning, World


def recv_first_ring(dev):
    p = dev.world_size
    x = dev.recv(src=(dev.rank + 1) % p)
    dev.send(x, dst=(dev.rank - 1) % p)


def test_two_device_recv_recv_deadlock_names_the_cycle():
    with pytest.raises(DeadlockError) as info:
        World(2).run(recv_first_ring)
    text = str(info.value)
    assert "device 0 is blocked in recv(src=1, tag=0)" in text
    assert "device 1 is blocked in recv(src=0, tag=0)" in text
    assert "wait-for cycle: device 0 -> device 1 -> device 0" in text
    assert info.value.cycle == [0, 1]


def test_three_device_deadlock_names_the_cycle():
    with pytest.raises(DeadlockError) as info:
        World(3).run(recv_first_ring)
    assert "wait-for cycle: device 0 -> device 1 -> device 2 -> device 0" in str(info.value)
    assert info.value.cycle == [0, 1, 2]
    assert set(info.value.blocked) == {0, 1, 2}


def test_rendezvous_three_device_send_cycle():
    def sends_first(dev):
        p = dev.world_size
        dev.send(np.zeros(4), dst=(dev.rank + 1) % p)
        dev.recv(src=(dev.rank - 1) % p)

    with pytest.raises(DeadlockError, match=re.escape("device 2 is blocked in send(dst=0, tag=0)")) as info:
        World(3, send_mode="rendezvous").run(sends_first)
    assert info.value.cycle == [0, 1, 2]
    assert "rendezvous sends" in str(info.value)
    World(3).run(sends_first)  # eager sends are buffered: the same program completes


def test_waiting_on_a_finished_device_is_a_deadlock_without_cycle():
    def lonely(dev):
        if dev.rank == 1:
            dev.recv(src=0, tag=5)

    with pytest.raises(DeadlockError) as info:
        World(2).run(lonely)
    text = str(info.value)
    assert "device 1 is blocked in recv(src=0, tag=5)" in text and "(which has finished)" in text
    assert info.value.cycle is None


def test_wrong_tag_deadlocks_and_reports_the_unmatched_wait():
    def mismatched(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1), dst=1, tag=1)
            dev.recv(src=1)
        else:
            dev.recv(src=0, tag=2)
            dev.send(np.zeros(1), dst=0)

    with pytest.raises(DeadlockError, match=r"device 1 is blocked in recv\(src=0, tag=2\)"):
        World(2).run(mismatched)


def forgetful(dev):
    if dev.rank == 0:
        dev.send(np.zeros(3), dst=1, tag=4)
        dev.send(np.zeros(1), dst=1)
    else:
        dev.recv(src=0)


def test_unreceived_messages_warn_by_default():
    with pytest.warns(UnreceivedMessagesWarning, match=r"1 message\(s\) were sent but never received") as rec:
        World(2).run(forgetful)
    assert "message #0 from device 0 to device 1 (tag 4)" in str(rec[0].message)


def test_unreceived_messages_can_be_an_error_or_ignored():
    with pytest.raises(UnreceivedMessagesError, match="tag 4"):
        World(2, leftovers="error").run(forgetful)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = World(2, leftovers="ignore").run(forgetful)
    assert [m.id for m in result.trace.unreceived()] == [0]


def test_tag_mismatch_deadlock_points_at_the_unreceived_message():
    def mismatched(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1), dst=1, tag=1)
        else:
            dev.recv(src=0, tag=2)

    with pytest.raises(DeadlockError, match="device 0 did send device 1 1 message\\(s\\) with tag 1"):
        World(2).run(mismatched)


def test_recv_first_cycle_suggests_sending_first():
    with pytest.raises(DeadlockError, match="let one of them send first"):
        World(2).run(recv_first_ring)


def test_a_posted_receive_that_nothing_matches_is_reported():
    def dangling(dev):
        if dev.rank == 1:
            dev.irecv(src=0, tag=3)  # never waited on, and device 0 never sends

    with pytest.warns(UnreceivedMessagesWarning, match=r"device 1: irecv\(src=0, tag=3\)"):
        World(2).run(dangling)


def test_a_missing_collective_call_is_named_not_shown_as_a_raw_tag():
    def only_rank_0(dev):
        return dev.all_reduce(np.ones(3)) if dev.rank == 0 else None

    with pytest.raises(DeadlockError) as info:
        World(2).run(only_rank_0)
    text = str(info.value)
    assert "device 0 is blocked in all_reduce#0 ring (its recv from device 1)" in text
    assert "device 1 finished without calling it" in text
    assert "tag=" not in text and "1073" not in text


def test_a_collective_message_nobody_received_is_named_by_its_call():
    def mismatched(dev):
        if dev.rank == 0:
            dev.all_reduce(np.ones(3))
        else:
            dev.recv(src=0, tag=3)

    with pytest.raises(DeadlockError) as info:
        World(2, book_collectives=False).run(mismatched)  # message by message: its first chunk is sent
    text = str(info.value)
    assert "device 0 did send device 1 1 message(s) of all_reduce#0 ring" in text
    assert "device 1 is blocked in recv(src=0, tag=3)" in text and "1073" not in text
    with pytest.raises(DeadlockError) as info:
        World(2).run(mismatched)  # booked whole (simulator/collectives/booked.py): it waits for its members first
    text = str(info.value)
    assert "device 0 is blocked in all_reduce#0 ring (its recv from device 1)" in text
    assert "device 1 is blocked in recv(src=0, tag=3)" in text and "1073" not in text
    # both ways, the fix names the member that waits elsewhere (not "let one of them send first")
    assert "device 1 is a member of all_reduce#0 ring of group (0, 1) but waits in recv(src=0, tag=3)" in text
    assert "send first" not in text


def test_an_unreceived_collective_message_is_named_by_its_call_and_the_fix_says_who_never_called_it():
    def root_only(dev):
        if dev.rank == 0:
            dev.broadcast(np.ones(2), 0)

    with pytest.warns(UnreceivedMessagesWarning) as rec:
        World(2).run(root_only)
    text = str(rec[0].message)
    assert "message #0 from device 0 to device 1 (broadcast#0 tree step 0 chunk all)" in text
    assert "the destination never called broadcast#0" in text and "tag 1073741824" not in text


def test_a_deadlock_keeps_the_run_up_to_it():
    """What each device did before it blocked: the trace so far, a None output for each unfinished device."""

    def compute_then_send_first(dev):
        x = dev.compute("A", lambda: np.full(2, dev.rank + 1.0))
        dev.send(x, dst=1 - dev.rank)
        return dev.recv(src=1 - dev.rank)

    with pytest.raises(DeadlockError) as err:
        World(2, send_mode="rendezvous").run(compute_then_send_first)
    partial = err.value.partial
    assert partial.outputs == [None, None]
    assert [(op.rank, op.name) for op in partial.trace.ops] == [(0, "A"), (1, "A")]
    np.testing.assert_array_equal(partial.trace.ops[1].output, [2.0, 2.0])
    assert [(m.src, m.dst) for m in partial.trace.messages] == [(0, 1), (1, 0)]  # posted, never taken


def test_the_timeline_of_a_deadlocked_scenario_shows_the_run_up_to_it(capsys):
    from simulator.cli.main import main

    assert main(["timeline", "1f1b-blocking-deadlock", "--columns", "100"]) == 0
    said = capsys.readouterr()
    assert "device 0  F0" in said.out and "B0" in said.out
    row0 = next(line for line in said.out.splitlines() if line.startswith("device 0"))
    assert row0.endswith(">>>>")  # device 0 blocked in its send from then to the end, drawn as sending
    assert "showing the run up to there" in said.err and "wait-for cycle: device 0 -> device 1" in said.err
