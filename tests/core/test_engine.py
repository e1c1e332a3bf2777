"""The engine: messages, clock, isolation, determinism, two worlds side by side."""

import numpy as np
import pytest

from simulator import CostModel, RankError, SimulationError, World
from simulator.teach.examples import seeds

COST = CostModel(latency=2e-6, bandwidth=1e9, flops=1e9)


def ring_pass(dev, rounds):
    p = dev.world_size
    x = np.array([float(dev.rank)])
    for _ in range(rounds):
        dev.send(x, dst=(dev.rank + 1) % p)
        x = dev.recv(src=(dev.rank - 1) % p)
        x = dev.compute("add", lambda v: v + 1, x, flops=1000)
    return x


def test_ring_pass_values_and_times():
    p, rounds = 5, 3
    result = World(p, cost=COST).run(ring_pass, rounds)
    for r in range(p):
        assert result.outputs[r][0] == (r - rounds) % p + rounds
    # each round: one message (2us + 8ns) then 1us of compute; all devices move in lockstep
    assert result.time == pytest.approx(rounds * (2e-6 + 8 / 1e9 + 1e-6), rel=1e-12)
    assert len(result.trace.messages) == p * rounds


def test_same_program_same_trace_event_for_event():
    a = World(6, cost=COST).run(ring_pass, 4).trace.signature()
    b = World(6, cost=COST).run(ring_pass, 4).trace.signature()
    assert a == b
    assert len(a) == 6 * 4 * 3


def test_two_simulations_interleaved_in_one_process():
    live_a = World(2).start(seeds.split, np.array([3.0]))
    live_b = World(2).start(seeds.split, np.array([5.0]))
    while live_a.step() | live_b.step():
        pass
    assert live_a.finish().outputs[1][0] == 49.0
    assert live_b.finish().outputs[1][0] == 121.0


def test_receiver_cannot_mutate_sender_memory():
    def program(dev):
        if dev.rank == 0:
            w = np.array([1.0, 2.0])
            dev.hold("w", w)
            dev.send(w, dst=1)
            w[0] = 100.0  # the sender changes its own array after sending
            return dev.memory["w"]
        got = dev.recv(src=0)
        with pytest.raises(ValueError, match="read-only"):
            got[0] = -1.0
        return got

    held, received = World(2).run(program).outputs
    np.testing.assert_array_equal(held, [1.0, 2.0])  # hold() took a copy
    np.testing.assert_array_equal(received, [1.0, 2.0])  # the message took a copy


def test_point_to_point_time_is_alpha_plus_n_over_b():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1000), dst=1)
        else:
            dev.recv(src=0)
            return dev.clock

    t = World(2, cost=COST).run(program).outputs[1]
    assert t == pytest.approx(2e-6 + 8000 / 1e9, rel=1e-12)


def test_link_carries_one_message_at_a_time():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1000), dst=1)
            dev.send(np.zeros(1000), dst=1)
        else:
            dev.recv(src=0)
            first = dev.clock
            dev.recv(src=0)
            return first, dev.clock

    first, second = World(2, cost=COST).run(program).outputs[1]
    assert first == pytest.approx(2e-6 + 8e-6)
    assert second == pytest.approx(2e-6 + 16e-6)  # queued behind the first message's bytes


def test_isend_irecv_overlap_compute_with_communication():
    def program(dev):
        peer = 1 - dev.rank
        sreq = dev.isend(np.zeros(1000), dst=peer)
        rreq = dev.irecv(src=peer)
        dev.compute("work", lambda: np.zeros(1), flops=5000)  # 5 us, while 10 us of message flies
        dev.wait(sreq)
        dev.wait(rreq)
        return dev.clock

    for t in World(2, cost=COST).run(program).outputs:
        assert t == pytest.approx(2e-6 + 8e-6)  # max(compute, comm), not their sum


def test_messages_match_in_order_per_source_and_tag():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.array([1]), dst=1, tag=7)
            dev.send(np.array([2]), dst=1, tag=8)
            dev.send(np.array([3]), dst=1, tag=7)
            return None
        b = dev.recv(src=0, tag=8)
        a1 = dev.recv(src=0, tag=7)
        a2 = dev.recv(src=0, tag=7)
        return [int(a1[0]), int(b[0]), int(a2[0])]

    assert World(2).run(program).outputs[1] == [1, 2, 3]


def test_program_error_names_the_rank():
    def program(dev):
        if dev.rank == 1:
            raise ZeroDivisionError("boom")

    with pytest.raises(RankError, match=r"device 1 raised ZeroDivisionError: boom") as info:
        World(3).run(program)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.parametrize("peer", [2, -1, 0])
def test_bad_peer_is_a_clear_error(peer):
    def program(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1), dst=peer)

    expected = "names itself" if peer == 0 else "names no device; ranks are 0..1"
    with pytest.raises(RankError, match=expected):
        World(2).run(program)


def test_world_rejects_bad_settings():
    with pytest.raises(ValueError, match="size must be from 1 to 65,536 devices"):
        World(0)
    with pytest.raises(ValueError, match="send_mode"):
        World(2, send_mode="fast")
    with pytest.raises(ValueError, match="bandwidth"):
        CostModel(bandwidth=0)


def test_metadata_only_run_keeps_no_payloads():
    result = World(4, keep_payloads=False).run(ring_pass, 2)
    assert all(m.payload is None for m in result.trace.messages)
    assert all(m.nbytes == 8 and m.shape == (1,) for m in result.trace.messages)


def test_rendezvous_transfer_starts_when_the_receive_is_posted():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1000), dst=1)  # posted at t=0, but device 1 posts its recv at 5 us
            return dev.clock
        dev.compute("busy", lambda: np.zeros(1), flops=5000)
        dev.recv(src=0)
        return dev.clock

    sender_done, received = World(2, cost=COST, send_mode="rendezvous").run(program).outputs
    assert sender_done == pytest.approx(5e-6 + 8e-6)  # the last byte left 8 us after the start
    assert received == pytest.approx(5e-6 + 8e-6 + 2e-6)
    (msg,) = World(2, cost=COST, send_mode="rendezvous").run(program).trace.messages
    assert msg.t_send == 0.0 and msg.t_start == pytest.approx(5e-6)


def test_rendezvous_with_irecv_posted_first_does_not_deadlock():
    def program(dev):
        peer = 1 - dev.rank
        rreq = dev.irecv(src=peer)
        dev.send(np.array([dev.rank]), dst=peer)
        return int(dev.wait(rreq)[0])

    assert World(2, send_mode="rendezvous").run(program).outputs == [1, 0]


def test_waiting_twice_on_a_receive_is_an_error():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1), dst=1)
        else:
            req = dev.irecv(src=0)
            dev.wait(req)
            dev.wait(req)

    with pytest.raises(SimulationError, match="waited twice on the receive of message #0"):
        World(2).run(program)


def test_world_accepts_a_preset_name_and_refuses_other_things():
    assert World(2, cost="dgx-h100").cost.name.lower().startswith("dgx")
    with pytest.raises(ValueError, match="no cost-model preset named 'nope'"):
        World(2, cost="nope")
    with pytest.raises(TypeError, match="give a CostModel, or a preset name"):
        World(2, cost=3)


def test_python_objects_cannot_be_sent():
    def program(dev):
        if dev.rank == 0:
            dev.send({"a": 1}, dst=1)

    with pytest.raises(RankError, match="a message carries numbers"):
        World(2).run(program)


def test_none_cannot_be_sent_before_anything_was_received():
    # a device given no input (its x is None) that sends it: the same words as any object, not a TypeError
    # from inside the engine (None was taken for "what this device last received")
    def program(dev, x):
        if dev.rank == 1:
            dev.send(x, dst=0)
        else:
            dev.recv(src=1)

    with pytest.raises(RankError, match="send\\(dst=0\\) got NoneType None; a message carries numbers"):
        World(2).run(program, None)


def test_collective_shape_mismatch_names_both_calls():
    from simulator.core.errors import CollectiveMismatchError

    with pytest.raises(CollectiveMismatchError) as err:
        World(2).run(lambda dev: dev.all_reduce(np.ones(2 + dev.rank)))
    assert "device 0 calls all_reduce(op='sum', shape=(2,)" in str(err.value)
    assert "device 1 calls all_reduce(op='sum', shape=(3,)" in str(err.value)


def test_immutable_arrays_travel_without_a_copy_and_writable_ones_are_copied():
    def program(dev):
        if dev.rank == 0:
            held = dev.hold("w", np.arange(4.0))  # read-only all the way down
            dev.send(held, dst=1)
            dev.send(held[1:3], dst=1)  # a view of it: still nothing can write through it
            scratch = np.arange(4.0)
            dev.send(scratch, dst=1)
            return held, scratch
        return [dev.recv(src=0) for _ in range(3)]

    result = World(2).run(program)
    held, scratch = result.outputs[0]
    got_held, got_view, got_scratch = result.outputs[1]
    assert got_held is held and got_view.base is held.base  # the same memory, no copy
    assert got_scratch is not scratch and not np.shares_memory(got_scratch, scratch)
    assert not got_scratch.flags.writeable


def _timings(trace):
    msgs = sorted((m.src, m.dst, m.tag, m.t_send, m.t_start, m.t_arrive, m.t_recv) for m in trace.messages)
    ops = sorted((op.rank, op.name, op.t_start, op.t_end) for op in trace.ops)
    return msgs, ops


def _time_of(kind, rec):
    return rec.t_send if kind == "send" else rec.t_recv if kind == "recv" else rec.t_start


def test_running_ahead_changes_no_simulated_time():
    def busy_ring(dev, rounds):  # uneven compute, so devices drift apart
        p = dev.world_size
        x = np.array([float(dev.rank)])
        for k in range(rounds):
            dev.compute("work", lambda v: v * 2, x, flops=1000 * (1 + (dev.rank * k) % 3))
            dev.send(x, dst=(dev.rank + 1) % p)
            x = dev.recv(src=(dev.rank - 1) % p)
        return dev.all_reduce(x)

    world = World(7, cost=COST)
    stepped = world.start(busy_ring, 5)  # stepping keeps every device in time order
    while stepped.step():
        pass
    in_order = stepped.finish()
    ahead = world.run(busy_ring, 5)  # a full run lets devices run ahead on private links
    assert _timings(ahead.trace) == _timings(in_order.trace)
    for a, b in zip(ahead.outputs, in_order.outputs):
        np.testing.assert_array_equal(a, b)
    times = [_time_of(k, r) for k, r in ahead.trace.events]
    assert times == sorted(times)  # the log is in time order either way


@pytest.mark.parametrize("overlap", [False, True])
def test_running_ahead_keeps_rendezvous_times(overlap):
    from simulator.teach.figures.programs import stream_chunks

    chunks = [np.full(1000, float(k)) for k in range(5)]
    world = World(2, cost=COST, send_mode="rendezvous")
    stepped = world.start(stream_chunks, chunks, 6e-6, overlap)
    while stepped.step():
        pass
    assert _timings(world.run(stream_chunks, chunks, 6e-6, overlap).trace) == _timings(stepped.finish().trace)


def test_shared_links_keep_devices_in_time_order():
    from simulator.cost.model import Ring

    ring = CostModel(latency=1e-6, bandwidth=1e9, topology=Ring())
    result = World(6, cost=ring).run(ring_pass, 3)
    times = [_time_of(k, r) for k, r in result.trace.events]
    assert times == sorted(times)


def test_waiting_the_torch_way_names_the_device_call():
    """req.wait() is torch's idiom; here the device waits: the error says what to write."""

    def program(dev):
        if dev.rank == 0:
            dev.isend(np.ones(2), dst=1).wait()
        else:
            dev.recv(src=0)

    with pytest.raises(RankError, match=r"write dev\.wait\(req\), not req\.wait\(\)"):
        World(2).run(program)


@pytest.mark.parametrize(
    "contract, says", [(dict(dtype="flaot64"), "not a NumPy dtype"), (dict(shape="ab"), "whole numbers")]
)
def test_a_receive_contract_that_is_not_one_names_the_receive(contract, says):
    def program(dev):
        if dev.rank == 0:
            dev.send(np.ones(2), dst=1)
        else:
            dev.recv(src=0, **contract)

    with pytest.raises(SimulationError, match=rf"device 1: recv\(src=0, .*{says}"):
        World(2).run(program)


@pytest.mark.parametrize("x, axis", [(np.ones(2), 2), (np.float64(1.0), 0)])
def test_all_gather_on_an_axis_the_piece_lacks_names_the_call(x, axis):
    with pytest.raises(RankError, match=rf"all_gather\(axis={axis}\) on a piece of shape"):
        World(2).run(lambda dev: dev.all_gather(x, axis=axis))


def test_a_lone_number_in_a_verdict_reads_as_a_number():
    from simulator import Reference, check

    def model(dev, x):
        return dev.compute("A", lambda v: 2 * v + 1, dev.hold("x", x))

    def wrong(dev, x):
        return dev.compute("A", lambda v: v, dev.hold("x", x))

    text = str(check(World(1).run(wrong, np.array(3.0)), Reference.of(model, np.array(3.0))))
    assert "computed 3.0, but A is 7.0 on one device. 3.0 is x." in text
