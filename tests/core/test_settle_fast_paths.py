"""The settle's short cuts (a log already in canonical order taken as it stands, ranks read with the times, a large
log's parts numbered as they stand) against the general way, which sorts every event by (time, rank): the same
order of events, code for code, on every teaching scenario and on runs made to tie (zero-time messages, ops of no
time, rings past a whole sort)."""

import numpy as np
import pytest

import simulator.core.ordering as ordering
from simulator import CostModel, World
from simulator.teach.examples import all_scenarios, get

FREE = CostModel(flops=float("inf"), memory_bandwidth=float("inf"), latency=0.0, bandwidth=float("inf"))


def codes(run) -> np.ndarray:
    return np.asarray(run.trace._codes.values).copy()


def the_general_way(monkeypatch) -> None:
    """Every settle sorts its events: no log is taken to be in order as it stands."""
    monkeypatch.setattr(ordering, "_in_order", lambda times, ranks: False)
    monkeypatch.setattr(ordering, "_times_in_order", lambda parts: False)


@pytest.mark.parametrize("name", sorted(n for n in all_scenarios() if get(n).expect != "error"))  # (those raise)
def test_every_scenario_that_runs_settles_as_the_general_way_does(name, monkeypatch):
    sc = get(name)
    fast = codes(sc.world.run(sc.program, *sc.args))
    the_general_way(monkeypatch)
    assert np.array_equal(fast, codes(sc.world.run(sc.program, *sc.args)))


def tied(dev, n):
    """A ring by hand and a built-in one, with ops of no time between: events tie at one time on every device."""
    x = np.full(n, float(dev.rank))
    p, r = dev.world_size, dev.rank
    for step in range(p - 1):
        dev.send(x, (r + 1) % p)
        x = dev.compute(f"add{step}", lambda a, b: a + b, x, dev.recv((r - 1) % p), seconds=0.0)
    return dev.all_reduce(x)


@pytest.mark.parametrize("p, book", [(4, True), (4, False), (40, True), (40, False), (150, True)])
def test_runs_made_to_tie_settle_as_the_general_way_does(p, book, monkeypatch):
    world = World(p, cost=FREE, book_collectives=book, keep_payloads=False)
    fast = codes(world.run(tied, p))
    the_general_way(monkeypatch)
    assert np.array_equal(fast, codes(World(p, cost=FREE, book_collectives=book, keep_payloads=False).run(tied, p)))
