"""``World(program_time=True)``: each device also pays its program's own wall time between its calls.

The wall clock is a fake one here (``clock``): a program "runs" for a time by moving it on, so every
expected time is exact and no test depends on how loaded the machine is.
"""

import numpy as np
import pytest

import simulator.core.program_time as program_time
from simulator import CostModel, World

COST = CostModel(latency=1e-3, bandwidth=1e9, flops=1e9)


class FakeClock:
    """Stands for ``time.perf_counter`` in the program-time module: it moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


CLOCK = FakeClock()


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch):
    CLOCK.now = 100.0
    monkeypatch.setattr(program_time, "perf_counter", CLOCK)


def spin(seconds: float) -> None:
    """The program runs its own code for ``seconds`` of wall time (between its calls)."""
    CLOCK.now += seconds


def work_between_ops(dev, seconds):
    dev.compute("a", np.add, np.ones(4), 1.0, seconds=1e-3)
    spin(seconds)
    dev.compute("b", np.add, np.ones(4), 1.0, seconds=1e-3)
    return dev.clock


def test_the_program_s_own_time_between_calls_moves_the_clock_only_when_asked():
    timed = World(1, cost=COST, program_time=True).run(work_between_ops, 0.05).outputs[0]
    free = World(1, cost=COST).run(work_between_ops, 0.05).outputs[0]
    assert free == pytest.approx(2e-3)  # the ops alone, as always
    assert timed == pytest.approx(2e-3 + 0.05)  # and the 50 ms the program ran between them


def slow_op(dev):
    dev.compute("slow", lambda x: (spin(0.2), x + 1)[1], np.ones(4), seconds=1e-3)
    return dev.clock


def test_an_op_costs_what_the_cost_model_says_not_what_it_took_here():
    clock = World(1, cost=COST, program_time=True).run(slow_op).outputs[0]
    assert clock == pytest.approx(1e-3)  # the op's 200 ms are its own work, priced at 1 ms


def late_sender(dev, seconds):
    if dev.rank == 1:
        spin(seconds)
        dev.send(np.ones(1000), 0)
    else:
        dev.recv(1)
    return dev.clock


def test_a_device_waiting_for_another_does_not_pay_the_other_s_program_time():
    clock0, clock1 = World(2, cost=COST, program_time=True).run(late_sender, 0.05).outputs
    message = COST.message_time(8000)
    assert clock1 == pytest.approx(0.05)  # the sender paid its own 50 ms before sending
    # the receiver waited for it, and paid none of the sender's time: the 50 ms once
    assert clock0 == pytest.approx(clock1 + message)


def busy_after_last_call(dev, seconds):
    dev.compute("a", np.add, np.ones(4), 1.0, seconds=1e-3)
    spin(seconds)


def test_the_time_after_the_last_call_is_paid_when_the_program_returns():
    engine = World(1, cost=COST, program_time=True).start(busy_after_last_call, 0.05)
    engine.finish()
    assert engine.devices[0].clock == pytest.approx(1e-3 + 0.05)


def test_program_time_is_true_or_false():
    with pytest.raises(ValueError, match=r"World\(program_time='yes'\): give True or False"):
        World(2, program_time="yes")


def slow_assembling(dev):
    x = np.arange(8.0) + dev.rank
    out = dev.all_reduce(x, algorithm="ring")
    dev.compute("after", np.negative, out, seconds=0.0)  # pays the program's time since its last call
    return out, dev.clock


def test_a_simulated_ring_pays_only_the_copy_a_real_rank_makes_of_its_result(monkeypatch):
    # a real rank copies its own block into the result and receives the other three in place; the
    # simulation assembles all four: three quarters of that copy are not the program's time
    import simulator.collectives.ring as ring

    assemble = ring._assemble

    def slow(*args):
        spin(0.05)
        return assemble(*args)

    monkeypatch.setattr(ring, "_assemble", slow)
    outputs = World(4, cost=COST, program_time=True).run(slow_assembling).outputs
    messages = 6 * COST.message_time(16)  # 2(p - 1) ring steps of one 16-byte chunk each
    for out, clock in outputs:
        np.testing.assert_array_equal(out, 4 * np.arange(8.0) + 6)
        # a quarter of the 50 ms copy, its six messages of 16 bytes and its three additions of 2 elements
        assert clock == pytest.approx(messages + 0.0125 + 3 * COST.op_time(2))


def late_to_all_reduce(dev):
    if dev.rank == 1:
        spin(0.05)
    return dev.all_reduce(np.ones(1000), algorithm="ring")


def test_a_ring_all_reduce_runs_message_by_message_so_each_member_pays_its_own_time():
    # booked whole (without payloads, eager sends), the first member would wait outside any call and pay
    # for the other's 50 ms as its own program's; message by message, the late member's messages leave late
    result = World(2, cost=COST, keep_payloads=False, program_time=True).run(late_to_all_reduce)
    np.testing.assert_array_equal(result.outputs[0], 2 * np.ones(1000))
    assert min(m.t_send for m in result.trace.messages if m.src == 1) == pytest.approx(0.05)
