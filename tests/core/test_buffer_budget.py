"""The byte budget for message payloads the engine holds (World.max_buffered_bytes): eager sends that nobody
receives, and copies the trace keeps, end the run with an error naming the sender, the bytes and the fix."""

import numpy as np
import pytest

from simulator import MetaArray, World
from simulator.core.errors import BufferLimitError
from simulator.core.world import default_max_buffered_bytes

KIB = 1 << 10


def flood(dev, n=100, receive=False):
    """Device 0 sends a writable 8 KiB array n times; device 1 receives them all (at the end, or between)."""
    x = np.ones(KIB)  # writable: every send copies it
    for _ in range(n):
        if dev.rank == 0:
            dev.send(x, dst=1)
            if receive:
                dev.recv(src=1)
        else:
            dev.recv(src=0)
            if receive:
                dev.send(np.zeros(1), dst=0)


@pytest.mark.parametrize("keep_payloads", [True, False])
def test_a_sender_that_never_waits_is_stopped_with_the_fix(keep_payloads):
    world = World(2, keep_payloads=keep_payloads, max_buffered_bytes=64 * KIB)
    with pytest.raises(BufferLimitError) as info:
        world.run(flood)
    text = str(info.value)
    assert "device 0" in text and "over the budget of 65,536 bytes (64 KiB), World(max_buffered_bytes=...)" in text
    assert "73,728 bytes (72 KiB)" in text  # nine copies of 8 KiB: the one that passed the budget
    if keep_payloads:
        assert "keep_payloads=False" in text
    else:
        assert "device 0 has sent 9 messages that no device has received yet" in text
        assert 'send_mode="rendezvous"' in text and "receive sooner" in text


def test_messages_received_in_time_free_their_budget():
    result = World(2, keep_payloads=False, max_buffered_bytes=64 * KIB).run(flood, 1000, receive=True)
    assert len(result.trace.messages) == 2000


def test_the_trace_keeps_copies_so_they_count_for_good():
    with pytest.raises(BufferLimitError, match="the trace now keeps"):
        World(2, max_buffered_bytes=64 * KIB).run(flood, 100, receive=True)


def test_read_only_arrays_and_metadata_need_no_copy_and_do_not_count():
    def forward(dev, x):
        for _ in range(100):
            if dev.rank == 0:
                dev.send(x, dst=1)
            else:
                dev.recv(src=0)

    held = World(2, max_buffered_bytes=KIB)
    held.run(lambda dev: forward(dev, dev.hold("x", np.ones(KIB))))
    World(2, keep_payloads=False, max_buffered_bytes=KIB).run(forward, MetaArray((1 << 20,), np.float64))


def test_rendezvous_isends_count_while_they_wait():
    def isends(dev):
        if dev.rank == 0:
            reqs = [dev.isend(np.ones(KIB), dst=1) for _ in range(20)]
            for r in reqs:
                dev.wait(r)
        else:
            for _ in range(20):
                dev.recv(src=0)

    with pytest.raises(BufferLimitError, match="device 0 has sent 9 messages"):
        World(2, send_mode="rendezvous", keep_payloads=False, max_buffered_bytes=64 * KIB).run(isends)
    World(2, send_mode="rendezvous", keep_payloads=False, max_buffered_bytes=160 * KIB).run(isends)


@pytest.mark.parametrize("bad", [-1, 1.5, "1G", True])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="max_buffered_bytes"):
        World(2, max_buffered_bytes=bad)


def test_the_default_is_well_under_the_machine_memory():
    import os

    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert World(2).max_buffered_bytes == default_max_buffered_bytes() == min(512 << 20, memory // 4)


def send_view(dev, elements):
    """Device 0 sends a broadcast_to view: 8 bytes of memory standing for ``elements`` float64s."""
    if dev.rank == 0:
        dev.send(np.broadcast_to(np.float64(2.0), (elements,)), dst=1)
    else:
        return dev.recv(src=0)


@pytest.mark.parametrize("keep_payloads", [True, False])
def test_a_message_larger_than_the_budget_is_refused_before_its_copy(keep_payloads):
    import tracemalloc

    world = World(2, keep_payloads=keep_payloads, max_buffered_bytes=1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(BufferLimitError) as info:
            world.run(send_view, 64 << 20)  # 512 MiB once copied
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak:,} bytes were allocated: the view was copied before it was refused"
    text = str(info.value)
    assert "device 0: send(dst=1)" in text and "536,870,912 bytes (512 MiB)" in text
    assert "over the budget of 1,048,576 bytes (1 MiB)" in text and "nothing was copied" in text
    assert "np.broadcast_to" in text and "raise max_buffered_bytes" in text


def test_an_8_gib_view_gets_the_budget_error_not_a_memory_error():
    with pytest.raises(BufferLimitError, match=r"8,589,934,592 bytes \(8 GiB\)"):
        World(2).run(send_view, 1 << 30)


def test_a_view_within_the_budget_is_copied_and_arrives():
    result = World(2, max_buffered_bytes=1 << 20).run(send_view, 1000)
    got = result.outputs[1]
    assert got.shape == (1000,) and np.all(got == 2.0) and not got.flags.writeable
    assert result.trace.messages[0].payload.strides == (8,)  # a real copy, not the view
