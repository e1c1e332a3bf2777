"""Stepping through runs: live, forward and back, memory and messages in flight."""

import numpy as np

from simulator.teach.examples import get
from simulator.views.stepper import Stepper


def test_live_stepping_advances_the_simulation_one_event_at_a_time():
    engine = get("split").start()
    stepper = Stepper(engine)
    snap = stepper.forward()
    assert snap.position == 1 and snap.total is None  # still running
    assert list(snap.memory[0]) == ["x"] and snap.memory[1] == {}
    kinds = [stepper.forward().last_event[0] for _ in range(4)]
    assert kinds == ["op", "send", "recv", "op"]
    assert stepper.forward().position == 5  # nothing more
    assert stepper.total == 5


def test_message_in_flight_then_in_receiver_memory():
    stepper = Stepper(get("split").run().result.trace)
    after_send = stepper.goto(3)
    assert [m.id for m in after_send.in_flight] == [0]
    assert "A" not in after_send.memory[1]
    after_recv = stepper.forward()
    assert after_recv.in_flight == []
    np.testing.assert_array_equal(after_recv.memory[1]["A"], [7.0])


def test_back_replays_the_earlier_state():
    stepper = Stepper(get("wrong-input").run().result.trace)
    stepper.goto(5)
    snap = stepper.back(4)
    assert snap.position == 1 and list(snap.memory[0]) == ["x"]
    assert stepper.back(10).position == 0


def test_render_reads_well():
    stepper = Stepper(get("wrong-input").run().result.trace)
    assert stepper.goto(3).render() == (
        "step 3/5  t=1.000us  send  device 0 -> 1  msg #0 tag 0 (1,) float64\n"
        "  device 0 | x=[3.]  A=[7.]\n"
        "  device 1 | (empty)\n"
        "  in flight: #0 0->1=[3.]"
    )


def test_an_events_numbers_go_on_a_line_of_their_own_when_its_line_has_no_room():
    from simulator.teach.examples import get

    stepper = Stepper(get("tp-row").run().result)
    stepper.goto(12)
    first, second = stepper.snapshot().render(120).splitlines()[:2]
    assert first.endswith("Y.partial[0]+Y.partial[1] elements 6-11 (flattened)  (0.006us)") and len(first) <= 120
    assert second == "    = [-0.75, 0.9375, 1.25, -0.1875, -0.625, -2.25]"
