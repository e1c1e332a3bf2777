"""A ring of 32 or more members that arrive together, on links free at one time, with chunks of one size, works out
each step's time once for every member (``ring_plan._times_together``): its rows, payloads and results must be the
ones the messages make, and the ones the general booking (each member's times apart) makes, byte for byte."""

import numpy as np
import pytest

import simulator.collectives.ring_plan as ring_plan
from simulator import CostModel, World

from .test_booked_payloads import same_runs

ROOFLINE = CostModel(flops=1e9, memory_bandwidth=2e9, op_latency=1e-7)


def together(dev, n, op, dtype, twice):
    """A student's program: every member arrives at t=0; then, if ``twice``, a second ring on links the first left
    busy until one time, and a third on half the devices after each does a different amount of work (apart)."""
    x = (np.sin(np.arange(n) * 12.9898 + dev.rank) * 43758.5453 % 3.0 - 1.3).astype(dtype)
    y = dev.all_reduce(x, op=op)
    if twice:
        y = dev.all_reduce(y, op=op)
        y = dev.compute("work", lambda v: v, y, seconds=1e-6 * (dev.rank % 3))
        mine = [r for r in range(dev.world_size) if r % 2 == dev.rank % 2]
        y = dev.all_reduce(y, op=op, group=mine)
    return y


def rows(run) -> tuple[bytes, bytes, bytes]:
    rec = run.trace.recorder
    return bytes(rec.msgs), bytes(rec.ops), run.trace.event_codes.tobytes()


@pytest.mark.parametrize(
    "p, n, op, dtype, cost",
    [
        (64, 64, "sum", np.float32, CostModel()),
        (40, 120, "avg", np.float64, ROOFLINE),
        (33, 7, "max", np.float32, CostModel()),  # chunks of different sizes: each member's times apart
        (64, 128, "product", np.int32, CostModel(latency=0.0)),
        (64, 0, "sum", np.float64, CostModel(latency=0.0)),  # every event at t=0: the log goes stage by stage
    ],
)
def test_members_together_make_the_messages_run(bookings, monkeypatch, p, n, op, dtype, cost):
    whole = World(p, cost=cost).run(together, n, op, dtype, True)
    assert bookings[0] == 4  # (the last ring is two: one each half)
    messages = World(p, cost=cost, book_collectives=False).run(together, n, op, dtype, True)
    same_runs(whole, messages)
    metadata = World(p, cost=cost, keep_payloads=False).run(together, n, op, dtype, True)
    # the general booking, every member's times worked out apart, writes the same bytes
    calls = []
    monkeypatch.setattr(ring_plan, "_times_together", lambda *a: calls.append(1) or ring_plan._times(*a))
    apart = World(p, cost=cost, keep_payloads=False).run(together, n, op, dtype, True)
    assert rows(apart) == rows(metadata) and apart.time == metadata.time
    assert calls if n % p == 0 else not calls  # (one chunk size is what lets members stay together)


def test_a_ring_of_members_together_is_logged_in_canonical_order(monkeypatch):
    """Its events need no sort to settle (``ring_plan._canonical_log``): each time's events member by member."""
    import simulator.core.ordering as ordering

    def program(dev):
        return dev.all_reduce(np.full(64, float(dev.rank), np.float32))

    expected = World(64, book_collectives=False).run(program)
    monkeypatch.setattr(ordering.np, "lexsort", lambda keys: pytest.fail("sorted a log in canonical order"))
    whole = World(64).run(program)
    same_runs(whole, expected)


def test_a_ring_past_a_whole_sort_settles_as_its_messages_do():
    """Over 65,536 events a settle would cut its events into windows by time; a booked ring's log, in canonical order
    already, is numbered as it stands (``ordering._parts_in_order``), block by block: the same trace, column by
    column, as the ring message by message, and as every event sorted the general way."""
    import simulator.core.ordering as ordering

    def program(dev):
        return dev.all_reduce(np.full(150, dev.rank + 0.5, np.float32))

    def columns(run):
        tr = run.trace
        return [tr.message_columns(), tr.op_columns(), {k: v for k, v in tr.event_columns().items() if k != "row"}]

    booked = World(150, keep_payloads=False).run(program)  # 111,750 events
    messages = World(150, keep_payloads=False, book_collectives=False).run(program)
    for a, b in zip(columns(booked), columns(messages), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert all(np.array_equal(u, v) for u, v in zip(booked.outputs, messages.outputs, strict=True))
    never = lambda parts: False  # noqa: E731  (the general way: windows and sorts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ordering, "_parts_in_order", never)
        general = World(150, keep_payloads=False).run(program)
    assert general.trace.event_codes.tobytes() == booked.trace.event_codes.tobytes()
