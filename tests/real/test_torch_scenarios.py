"""Scenarios on real gloo processes equal their simulation, and the checker says the same.

The seed scenarios in detail; then every named scenario (tensor-parallel layers and their bugs,
pipeline schedules, data parallelism, ZeRO, the 3-D step) with the collectives run message by
message, so the two traces can be compared message for message.
"""

import numpy as np
import pytest

from simulator import ContractError
from simulator.checker import check
from simulator.core.trace import Trace
from simulator.teach.examples import all_scenarios, get
from tests import demos

pytest.importorskip("torch.distributed")

from simulator.real.compare_runs import compare, counterpart  # noqa: E402
from simulator.real.launch import TorchWorld  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


@pytest.fixture(scope="module")
def world(gloo_worlds):
    return gloo_worlds(2, timeout=10)


def test_split_equals_simulation_and_passes_the_check(world):
    sim, real = get("split").run(), get("split").run(on=world)
    np.testing.assert_array_equal(real.result.outputs[1], [49.0])
    assert real.report.ok and real.report.checked == sim.report.checked == 7
    assert compare(sim.result, real.result, exact=True).ok
    (msg,) = real.result.trace.messages
    assert (msg.src, msg.dst, msg.tag, msg.shape, np.dtype(msg.dtype), msg.nbytes, msg.name) == (
        0,
        1,
        0,
        (1,),
        np.float64,
        8,
        "A",
    )
    np.testing.assert_array_equal(msg.payload, [7.0])
    # measured times: one clock for both processes, so causality holds across them
    assert 0 <= msg.t_send <= msg.t_start <= msg.t_arrive == msg.t_recv
    (a,) = [op for op in real.result.trace.ops if op.name == "A"]
    (b,) = [op for op in real.result.trace.ops if op.name == "B"]
    assert a.t_end <= msg.t_send and msg.t_recv <= b.t_start <= b.t_end <= real.result.time
    assert [kind for kind, _ in real.result.trace.events] == ["hold", "op", "send", "recv", "op"]


def test_check_takes_a_real_run_result_as_it_takes_a_simulated_one(world):
    from simulator.checker import Reference, check
    from simulator.teach.examples import seeds

    real = world.run(seeds.split, seeds.X)
    report = check(real, Reference.of(seeds.model, seeds.X))
    assert report.ok and report.checked == 7


def test_the_same_tools_read_a_measured_trace(world):
    from simulator.views.plot.chrome_trace import chrome_trace
    from simulator.views.stepper import Stepper
    from simulator.views.textgrid import text_timeline

    real = get("split").run(on=world).result
    grid = text_timeline(real, 40).splitlines()
    assert grid[1].startswith("device 0") and "A" in grid[1] and grid[2].startswith("device 1") and "B" in grid[2]
    assert "in flight: #0 0->1=[7.]" in Stepper(real.trace).goto(3).render()
    events = chrome_trace(real)["traceEvents"]
    assert {e.get("name") for e in events} >= {"A", "B"}


def test_wrong_input_is_flagged_at_the_same_message(world):
    sim, real = get("wrong-input").run(), get("wrong-input").run(on=world)
    np.testing.assert_array_equal(real.result.outputs[1], [9.0])
    assert not real.report.ok and real.as_expected
    assert real.report.first.explain() == sim.report.first.explain()
    assert (real.report.first.where, real.report.first.record.id) == ("message", 0)
    assert real.report.divergent == sim.report.divergent == 4
    assert compare(sim.result, real.result, exact=True).ok


def test_replicated_gives_49_and_81_with_no_message(world):
    sim, real = get("replicated").run(), get("replicated").run(on=world)
    assert [o.tolist() for o in real.result.outputs] == [[49.0], [81.0]]
    assert real.result.trace.messages == [] and real.report.ok
    assert compare(sim.result, real.result, exact=True).ok


def test_contract_violation_is_caught_from_the_header(world):
    real = get("wrong-shape").run(on=world)
    assert real.as_expected and real.error.rank == 1
    assert isinstance(real.error.__cause__, ContractError)
    assert "device 1 declared (1,) float64, device 0 sent (1, 1) float32" in str(real.error)


def test_ring_pass_and_exchange_equal_the_simulation_bit_for_bit(world):
    from simulator import World

    for program, args in ((demos.ring_pass, (np.arange(5),)), (demos.exchange, ())):
        sim, real = World(2).run(program, *args), world.run(program, *args)
        diff = compare(sim, real, exact=True)
        assert diff.ok, str(diff)
    from_0 = [m for m in real.trace.messages if m.src == 0]  # the two ranks' sends interleave in time
    assert [m.dtype for m in from_0] == [
        np.dtype("int64"),
        np.dtype("float64"),
        np.dtype("float32"),
        np.dtype(bool),
    ]


def test_compare_reports_a_difference(world):
    from simulator import World

    sim = World(2).run(demos.ring_pass, np.arange(3))
    real = world.run(demos.ring_pass, np.arange(3) + 1)
    diff = compare(sim, real, exact=True)
    assert not diff.ok
    assert "channel 0->1 tag 0, message 0: payload [0, 1, 2] simulated, [1, 2, 3] measured" in str(diff)


def scenarios_of(size, *, exclude=("send-send-deadlock", "1f1b-blocking-deadlock")):
    return [s for s in all_scenarios().values() if s.world.size == size and s.name not in exclude]


def same_as_simulated(scenario, world):
    """Run on real processes; assert what the simulation says, event for event (times aside)."""
    sim, real = scenario.run(), scenario.run(on=world)
    assert real.as_expected, scenario.name
    if sim.result is None:  # a scenario that stops with an error
        assert real.error is not None, scenario.name
        return
    diff = compare(sim.result, real.result)
    assert diff.ok, f"{scenario.name}: {diff}"
    if sim.report is not None and not sim.report.ok:
        first, found = sim.report.first, real.report.first
        assert found.where == first.where and sim.report.divergent == real.report.divergent, scenario.name
        twin = counterpart(found.record, real.result.trace, sim.result.trace)
        if twin is not first.record:
            # Two devices diverge concurrently, and the real clocks ordered them the other way. Ask
            # the checker about the simulated counterpart first: it must diverge, explained the same way.
            events = list(sim.result.trace.events)
            moved = next(e for e in events if e[1] is twin and e[0] != "recv")
            events.remove(moved)
            events.insert(first.event, moved)
            retied = Trace(sim.result.trace.world_size)
            retied.events = events
            first = check(retied, scenario.reference()).first
        assert found.explain().replace(f"#{found.record.id}", "#") == first.explain().replace(
            f"#{getattr(first.record, 'id', '')}", "#"
        ), scenario.name


def test_every_two_rank_scenario_equals_its_simulation_message_for_message():
    names = {s.name for s in scenarios_of(2)}
    assert {"tp-column", "tp-row", "tp-megatron-mlp", "tp-bug-wrong-order", "data-parallel"} <= names
    with TorchWorld(2, "gloo", timeout=20, collectives="messages") as w:
        for scenario in scenarios_of(2):
            same_as_simulated(scenario, w)


def test_pipeline_schedules_on_three_and_four_ranks_equal_their_simulation():
    for size in (3, 4):
        with TorchWorld(size, "gloo", timeout=20, collectives="messages") as w:
            for scenario in scenarios_of(size):
                same_as_simulated(scenario, w)
    assert {"pipeline-gpipe", "pipeline-1f1b", "labels-off-by-one"} <= {s.name for s in scenarios_of(4)}


def test_the_3d_step_on_eight_processes_equals_its_simulation():
    with TorchWorld(8, "gloo", timeout=60, collectives="messages") as w:
        same_as_simulated(get("3d-step"), w)


def test_deadlock_scenarios_time_out_on_real_processes():
    from simulator.real.errors import RankTimeoutError

    with TorchWorld(2, "gloo", timeout=2) as w:
        for name in ("send-send-deadlock", "1f1b-blocking-deadlock"):
            real = get(name).run(on=w)
            assert real.as_expected and isinstance(real.error, RankTimeoutError), name
