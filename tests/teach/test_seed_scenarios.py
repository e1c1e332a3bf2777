"""The seed scenarios: values, the full event log, and what the checker says."""

import numpy as np
import pytest

from simulator import ContractError, DeadlockError, World
from simulator.checker import Reference, check
from simulator.teach.examples import all_scenarios, get, seeds


def test_split_event_log_in_full():
    result = get("split").run().result
    assert result.trace.log() == [
        "t=0.000us  hold  device 0  x = [3.]",
        "t=0.000us  op    device 0  A = [7.]  (1.000us)",
        "t=1.000us  send  device 0 -> 1  msg #0 tag 0 (1,) float64 = [7.]",
        "t=2.008us  recv  device 1 <- 0  msg #0 as A = [7.]",
        "t=2.008us  op    device 1  B = [49.]  (1.000us)",
    ]
    (msg,) = result.trace.messages
    assert (msg.src, msg.dst, msg.tag, msg.shape, msg.dtype, msg.nbytes) == (0, 1, 0, (1,), np.float64, 8)
    assert msg.t_send == pytest.approx(1e-6) and msg.t_arrive == pytest.approx(2.008e-6)


def test_split_values_and_check_passes():
    run = get("split").run()
    assert run.result.outputs[0] is None
    np.testing.assert_array_equal(run.result.outputs[1], [49.0])
    np.testing.assert_array_equal(run.result.trace.messages[0].payload, [7.0])
    assert (
        run.report.ok and run.report.checked == 7
    )  # x, A (sent, received), A's and B's inputs and outputs, the result
    assert (
        str(run.report)
        == "check passed: 7 values and the result match the single-device run, and the declared split is kept"
    )


def test_wrong_input_flagged_at_the_message_in_plain_words():
    run = get("wrong-input").run()
    np.testing.assert_array_equal(run.result.outputs[1], [9.0])
    first = run.report.first
    assert first.where == "message" and first.record.id == 0 and first.rank == 1
    np.testing.assert_array_equal(first.found, [3.0])
    np.testing.assert_array_equal(first.expected, [7.0])
    assert first.is_also == ["x"]
    assert first.explain() == (
        "message #0 from device 0 to device 1 (tag 0) carried [3.], but device 1 should have received "
        "A (stage A's output, 2x + 1) = [7.]. [3.] is x (the model's raw input)."
    )
    assert run.report.divergent == 4  # the message, then B's input, B's output, and the result


def test_replicated_each_device_finishes_its_own_input():
    run = get("replicated").run()
    np.testing.assert_array_equal(run.result.outputs[0], [49.0])
    np.testing.assert_array_equal(run.result.outputs[1], [81.0])
    assert run.result.trace.messages == []
    assert run.report.ok
    ops = {r: [op.name for op in run.result.trace.ops if op.rank == r] for r in (0, 1)}
    assert ops == {0: ["A", "B"], 1: ["A", "B"]}


def test_split_no_device_alone_finishes():
    result = get("split").run().result
    ops = {r: [op.name for op in result.trace.ops if op.rank == r] for r in (0, 1)}
    assert ops == {0: ["A"], 1: ["B"]}


def test_replicated_checked_against_the_wrong_reference_fails():
    run = get("replicated").run()
    report = check(run.result, Reference.of(seeds.model, np.array([3.0])))  # device 1 was fed 4
    assert not report.ok
    assert report.first.rank == 1 and report.first.name == "x"


def test_contract_violation_names_both_ends_tag_and_signatures():
    run = get("wrong-shape").run()
    assert isinstance(run.error, ContractError)
    assert str(run.error) == (
        "contract violated on message #0 from device 0 to device 1 (tag 0): device 1 declared (1,) float64, "
        "device 0 sent (1, 1) float32. Make the sender send what the receiver declares, or fix the declaration."
    )


def test_strict_mode_requires_a_declared_contract():
    def undeclared(dev):
        if dev.rank == 0:
            dev.send(np.zeros(1), dst=1)
        else:
            dev.recv(src=0)

    with pytest.raises(ContractError, match=r"strict mode: device 1 posts recv\(src=0, tag=0\) without a contract"):
        World(2, strict=True).run(undeclared)
    World(2, strict=True).run(seeds.split, np.array([3.0]))  # declares everything: fine


def test_every_scenario_behaves_as_it_says():
    for name, scenario in all_scenarios().items():
        assert scenario.run().as_expected, name


def test_send_send_with_eager_sends_completes():
    result = World(2).run(seeds.send_send, np.array([3.0]))
    assert [float(o[0]) for o in result.outputs] == [3.0, 3.0]


def test_send_send_deadlock_is_reported_not_hung():
    with pytest.raises(DeadlockError) as info:
        World(2, send_mode="rendezvous").run(seeds.send_send, np.array([3.0]))
    assert info.value.cycle == [0, 1]
