"""The training scenarios: the correct ones match one device, and each bug is caught where it starts."""

from __future__ import annotations

import pytest

from simulator.checker import check
from simulator.core.errors import DeadlockError
from simulator.parallel.schedules import ScheduleError
from simulator.teach.examples import get, training

CORRECT = [s.name for s in training.SCENARIOS if s.expect == "match"]


@pytest.mark.parametrize("name", CORRECT)
def test_correct_training_steps_match_one_device(name):
    run = get(name).run()
    assert run.as_expected and run.report.ok, run.summary()
    assert not run.report.unknown


def test_labels_of_another_microbatch_are_caught_at_the_labels():
    run = get("labels-off-by-one").run()
    assert run.as_expected
    first = run.report.first
    assert (first.where, first.rank, first.name) == ("held value", 3, "t.mb0")
    assert first.is_also == ["t.mb3"]
    text = first.explain()
    assert "device 3 holds" in text and "as t.mb0 (the targets (labels) of microbatch 0)" in text
    assert "is t.mb3 (the targets (labels) of microbatch 3)" in text
    # the forward activations of microbatch 0 were all checked, and were right, before the labels
    kinds = [(k, rec.name) for k, rec in run.result.trace.events[: first.event] if k == "op" and rec.rank == 3]
    assert ("op", "h4.mb0") in kinds


def test_a_stage_fed_by_the_wrong_stage_is_caught_at_the_message():
    run = get("wrong-upstream-stage").run()
    assert run.as_expected
    first = run.report.first
    assert first.where == "message" and (first.record.src, first.record.dst) == (0, 2)
    assert first.name == "h2.mb0" and first.is_also == ["h1.mb0"]
    assert "should have received h2.mb0 (layer 2's output for microbatch 0)" in first.explain()
    assert "is h1.mb0 (layer 1's output for microbatch 0)" in first.explain()
    # the same program with the right table matches
    scenario = get("wrong-upstream-stage")
    result = scenario.world.run(training.forward_by_table, *scenario.args[:-1], training.UPSTREAM_OK)
    assert check(result, scenario.reference()).ok


def test_summed_not_averaged_gradients_are_recognised_as_the_sum():
    run = get("dp-sum-not-average").run()
    assert run.as_expected
    first = run.report.first
    assert first.where == "output" and first.name == "dW4"
    assert first.is_also == ["dW4.sum"]
    text = first.explain()
    assert "is dW4.sum (the replicas' gradients of W4 summed but not divided by 2)" in text
    assert "Every element is 2 times what it should be" in text


def test_both_stages_sending_first_deadlocks_and_names_the_cycle():
    run = get("1f1b-blocking-deadlock").run()
    assert run.as_expected
    err = run.error
    assert isinstance(err, DeadlockError) and err.cycle == [0, 1]
    assert "wait-for cycle: device 0 -> device 1 -> device 0" in str(err)
    assert "device 0 is blocked in send(dst=1" in str(err) and "device 1 is blocked in send(dst=0" in str(err)
    # the validator finds the same cycle before anything runs
    with pytest.raises(ScheduleError) as info:
        training.HAND_WRITTEN_1F1B.validate(blocking_sends=True)
    assert info.value.cycle == [0, 1]
    assert "rank 0 waits at 0SEND_F1 for 1RECV_F1 on rank 1" in str(info.value)
    # and asynchronous sends (the runtime's default) run the same schedule to the one-device answer
    pipe = training.Pipeline(training.TWO, training.HAND_WRITTEN_1F1B)
    result = get("1f1b-blocking-deadlock").world.run(pipe, training.PARAMS2, training.X2, training.T2)
    assert check(result, pipe.reference(training.PARAMS2, training.X2, training.T2)).ok
