"""A schedule is added by one record: every place that lists, draws, prices or compares schedules then sees it.

The test writes a schedule of its own (GPipe with the backwards last-in first-out, as a student might), adds
its record to ``SCHEDULES`` for the test only, and asks each reader of the records about it.
"""

from __future__ import annotations

import argparse
from fractions import Fraction

import pytest

from simulator.parallel.schedules import (
    SCHEDULES,
    UNIT_COSTS,
    Action,
    B,
    F,
    Schedule,
    ScheduleRecord,
    bubble_ratio,
    execute,
    make_schedule,
)
from simulator.parallel.whatif.model import Transformer
from simulator.parallel.whatif.training_setup import SetupError, TrainingSetup
from simulator.views.web import explorer


def gpipe_lifo(ranks: int, microbatches: int) -> Schedule:
    """GPipe, backwards last in first out: the newest activations are freed first."""
    acts = {
        r: tuple(Action(r, F, i) for i in range(microbatches))
        + tuple(Action(r, B, i) for i in reversed(range(microbatches)))
        for r in range(ranks)
    }
    return Schedule("GPipe LIFO", ranks, ranks, microbatches, acts)


def _record(**changes) -> ScheduleRecord:
    fields = dict(
        name="gpipe-lifo",
        make=gpipe_lifo,
        stages_per_rank=1,
        bubble=lambda p, m, v: Fraction(p - 1, m),
        formula="(p - 1) / m",
        short_formula="(p-1)/m",
    )
    return ScheduleRecord(**(fields | changes))


@pytest.fixture
def added(monkeypatch):
    record = _record()
    monkeypatch.setitem(SCHEDULES, record.name, record)
    return record


def idle_over_busy(schedule: Schedule) -> set[Fraction]:
    spans = execute(schedule, UNIT_COSTS)
    step = max(end for rows in spans.values() for _, end, _ in rows)
    return {
        Fraction(step - busy) / Fraction(busy) for busy in (sum(e - s for s, e, _ in rows) for rows in spans.values())
    }


def test_a_new_record_is_made_by_name_and_its_bubble_holds(added):
    schedule = make_schedule("gpipe-lifo", 4, 8)
    schedule.validate()
    assert schedule.actions[3][-1] == Action(3, B, 0)
    assert bubble_ratio("gpipe-lifo", 4, 8) == Fraction(3, 8)
    assert idle_over_busy(schedule) == {Fraction(3, 8)}


def test_the_explorer_offers_a_new_record(added):
    assert explorer.virtual_choices("gpipe-lifo") == (1,)
    offered = {(name, p, m, v) for name, p, m, v in explorer.offered()}
    assert ("gpipe-lifo", 4, 8, 1) in offered
    assert explorer.schedule_of("gpipe-lifo", 2, 2, 1).actions == gpipe_lifo(2, 2).actions


def test_the_whatif_prices_a_new_record_or_refuses_it_by_its_flag(added, monkeypatch):
    assert TrainingSetup(pp=2, schedule="gpipe-lifo").stages_per_rank == 1
    model = Transformer(layers=4, hidden=64, heads=4, seq=32, vocab=128)
    TrainingSetup(pp=2, schedule="gpipe-lifo").check(model)
    with pytest.raises(SetupError, match="holds one stage per rank"):
        TrainingSetup(pp=2, schedule="gpipe-lifo", virtual_stages=2).check(model)
    monkeypatch.setitem(SCHEDULES, "gpipe-lifo", _record(whatif=False))
    with pytest.raises(SetupError, match="TrainingSetup\\(schedule='gpipe-lifo'\\)"):
        TrainingSetup(pp=2, schedule="gpipe-lifo")


def test_the_whatif_command_lists_a_new_record(added):
    from simulator.cli.whatif import add_whatif_args

    parser = argparse.ArgumentParser()
    add_whatif_args(parser)
    assert parser.parse_args(["--schedule", "gpipe-lifo"]).schedule == "gpipe-lifo"


def test_a_record_without_a_torch_class_is_not_compared_with_torch(added):
    from simulator.torchsim.schedules import torch_order, torch_schedules

    assert "gpipe-lifo" not in torch_schedules()
    assert "1f1b" in torch_schedules()
    with pytest.raises(KeyError, match="schedule 'gpipe-lifo' has no torch class"):
        torch_order("gpipe-lifo", 2, 2)


def test_every_shipped_record_is_complete():
    for name, record in SCHEDULES.items():
        assert record.name == name
        assert record.formula and record.short_formula and record.title
        assert record.placement in ("loop", "v")
        v = 2 if record.looped else 1
        schedule = make_schedule(name, 4, 8, virtual=v) if record.looped else make_schedule(name, 4, 8)
        assert schedule.stages == 4 * record.stages_on_each_rank(v)


@pytest.mark.browser
def test_the_explorer_page_draws_a_new_record_from_its_stored_orders(added, tmp_path):
    from simulator.views.web.browser import find_chromium, headless

    found = find_chromium()
    if isinstance(found, str):
        pytest.skip(f"no headless browser: {found}")
    assert "gpipe-lifo" not in explorer.ported()
    path = explorer.write_explorer(tmp_path / "explore.html")
    with headless(1280, 720) as driver:
        driver.get(path.resolve().as_uri())
        ask = "return window.explorer.model(arguments[0])"
        shown = driver.execute_script(ask, {"schedule": "gpipe-lifo", "p": 4, "m": 8, "v": 1, **UNIT_COSTS})
        too_big = driver.execute_script(ask, {"schedule": "gpipe-lifo", "p": 16, "m": 8, "v": 1, **UNIT_COSTS})
    spans = execute(gpipe_lifo(4, 8), UNIT_COSTS)
    assert [[(a["stage"], a["kind"], a["mb"]) for _, _, a in rows] for rows in shown["times"]] == [
        [(a.stage, a.kind, a.microbatch) for _, _, a in spans[r]] for r in spans
    ]
    assert shown["step"] == max(e for rows in spans.values() for _, e, _ in rows)
    assert "p 2 to 8 and m 1 to 16 only" in too_big["error"]
