"""Long stretches of a collective's own events (a ring all-reduce booked whole: receives, unnamed chunks, its
reductions) done by the check in whole-array steps (``value_columns._bookkeeping``) leave the check where the walk
one event at a time leaves it: the same verdict, the same first divergence and report, word for word, and the same
state behind them (each device's last event, where each value a device got came from, the references in the order
they were asked for). Programs right and wrong, as students and cheats write them: a term 1e-6 or one ulp off, the
wrong chunk returned, a hard-coded result, a broadcast value changed, named and partial sums, a built-in all-reduce
where the split asks for none; each also held to the walk over plain records."""

from __future__ import annotations

import numpy as np
import pytest

import simulator.checker.value_columns as value_columns
from simulator import FlatSlice, World
from simulator.checker import Reference, check
from simulator.checker.run_check import _Checker, _resolver
from simulator.checker.split import Split
from simulator.core.rows import FREE, HOLD
from simulator.teach.examples import all_scenarios
from tests.checker.test_checker_fast_paths import as_records

P = 8  # a ring of 8: 280 events of its own, one stretch past _SPAN_LEAST


def terms(p: int, dtype=np.float64) -> np.ndarray:
    """Device r's term of x: numbers whose sums round differently in each order."""
    return (np.sin(np.arange(p * 3 * p) * 12.9898) * 43758.5453 % 3.0 - 1.3).reshape(p, 3 * p).astype(dtype)


def partial_model(dev, p, dtype=np.float64, scale=1.0):
    xs = terms(p, dtype)
    total = xs[0].copy()
    for r in range(1, p):  # (in device order, as the check adds partial terms up)
        total = total + xs[r]
    return dev.hold("x", total * scale)


def partial_program(dev, p, dtype=np.float64, bug=None):
    """A partial x on every device, all-reduced; ``bug`` says what a wrong program does instead."""
    x = terms(p, dtype)[dev.rank]
    if bug == "term 1e-6" and dev.rank == 3:
        x = x.copy()
        x[5] += 1e-6
    if bug == "term one ulp" and dev.rank == 3:
        x = x.copy()
        x[5] = np.nextafter(x[5], np.inf)
    y = dev.all_reduce(dev.hold("x", x, partial=True))
    if bug == "wrong chunk" and dev.rank == 5:
        return np.roll(y, 3)  # the chunks' places mixed up on one device
    if bug == "hard-coded":
        return np.full(y.shape, 1.5)
    if bug == "scaled result" and dev.rank == 2:
        return y * (1 + 1e-6)
    if bug == "twice":
        return dev.all_reduce(y) / p  # all-reduced twice, then divided: the same value, another way
    return y


def named_program(dev, p, dtype=np.float64, bug=None):
    """The all-reduce's result named (its all-gather's messages carry it) or its running sums named by partials."""
    held = dev.hold(f"x[{dev.rank}]", terms(p, dtype)[dev.rank])
    if bug == "off" and dev.rank == 1:
        held = held * (1 + 1e-5)  # (what it holds is right: what it all-reduces is not)
    if bug in ("partials", "partials off"):
        if bug == "partials off" and dev.rank == 1:
            held = held * (1 + 1e-5)
        return dev.all_reduce(held, partials="x", name="v")
    return dev.all_reduce(held, name="v")


def summed(dev, p, dtype=np.float64):
    xs = terms(p, dtype)
    for r in range(p):
        dev.hold(f"x[{r}]", xs[r])
    return dev.compute("v", lambda: xs.sum(axis=0))


def broadcast_program(dev, p, bug=None):
    """Device 0's x broadcast: every other device returns the very object a message gave it."""
    x = dev.hold("x", terms(p)[0]) if dev.rank == 0 else None
    if bug == "changed" and dev.rank == 0:
        x = x + 1e-3
    return dev.broadcast(x, src=0)


def broadcast_model(dev, p):
    return dev.hold("x", terms(p)[0])


def state_of(trace, outputs, reference, **kwargs):
    """A check's report and the state its walk leaves: (report text, last events, origins, references asked)."""
    checker = _Checker(trace, outputs, _resolver(reference), kwargs.get("rtol"), kwargs.get("atol"))
    report = checker.report()
    origins = [sorted(dict.items(o)) for o in checker.origin]
    return report.text(), list(checker.last_event), origins, [id(r) for r in checker.refs.values()]


def checked_both_ways(run, reference, monkeypatch, spans=8, records=True, **kwargs):
    """The check with stretches of at least ``spans`` events done whole, held to the one with none (every event one
    at a time) and (``records``) to the walk over records; returns its report."""
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 1 << 40)
    one_by_one = check(run, reference, **kwargs)
    before = state_of(run.trace, run.outputs, reference)
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", spans)
    whole = check(run, reference, **kwargs)
    assert whole.text() == one_by_one.text()
    assert state_of(run.trace, run.outputs, reference) == before
    if records:
        assert check(as_records(run), reference, **kwargs).text() == whole.text()
    return whole


def first_of(report):
    return None if report.first is None else (report.first.where, report.first.rank, report.first.name)


def test_a_booked_ring_is_one_stretch_done_whole(monkeypatch):
    run = World(P).run(partial_program, P)
    arrays = run.trace.event_columns()
    spans = value_columns._bookkeeping_spans(arrays, run.trace.recorder.msg_extra)
    holds = np.flatnonzero(arrays["op_kind"] == HOLD)
    assert spans == [(holds[-1] + 1, len(arrays["kind"]))]  # from the last hold to the run's end: the ring's own
    assert len(arrays["kind"]) == P + 2 * 2 * P * (P - 1) + P * (P - 1)  # (P holds, the ring's sends, receives, ops)
    calls = []
    bookkeeping = _Checker._bookkeeping
    monkeypatch.setattr(_Checker, "_bookkeeping", lambda self, a, b: calls.append((a, b)) or bookkeeping(self, a, b))
    assert check(run, Reference.of(partial_model, P)).verdict == "passed"
    assert calls == spans


@pytest.mark.parametrize(
    "dtype, bug, verdict, first",
    [
        (np.float64, None, "passed", None),
        (np.float32, None, "passed", None),
        (np.float64, "term 1e-6", "FAILED", ("partial sums", 7, "x")),
        (np.float64, "term one ulp", "passed", None),  # within float64's tolerance
        (np.float64, "wrong chunk", "FAILED", ("result", 5, "the result")),
        (np.float64, "hard-coded", "FAILED", ("result", 0, "the result")),
        (np.float64, "scaled result", "FAILED", ("result", 2, "the result")),
        (np.float64, "twice", "passed", None),
    ],
)
@pytest.mark.parametrize("spans", [8, 256])
def test_a_partial_all_reduce_gets_the_one_by_one_walks_report(monkeypatch, dtype, bug, verdict, first, spans):
    run = World(P).run(partial_program, P, dtype, bug)
    report = checked_both_ways(run, Reference.of(partial_model, P, dtype), monkeypatch, spans)
    assert (report.verdict, first_of(report)) == (verdict, first)


@pytest.mark.parametrize(
    "bug, verdict, first",
    [
        (None, "passed", None),
        ("off", "FAILED", ("message", 1, "v")),  # the first finished chunk device 1 is sent
        ("partials", "passed", None),
        ("partials off", "FAILED", ("message", 2, "x[1]")),  # device 1's own term, the first message it sends
    ],
)
def test_named_sums_and_results_of_a_booked_ring_are_compared_one_by_one(monkeypatch, bug, verdict, first):
    run = World(P).run(named_program, P, np.float64, bug)
    report = checked_both_ways(run, Reference.of(summed, P), monkeypatch)
    assert (report.verdict, first_of(report)) == (verdict, first)


@pytest.mark.parametrize("bug, verdict", [(None, "passed"), ("changed", "FAILED")])
def test_a_broadcast_value_returned_as_received_is_traced_to_its_message(monkeypatch, bug, verdict):
    run = World(32).run(broadcast_program, 32, bug)
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 8)
    spans = value_columns._bookkeeping_spans(run.trace.event_columns(), {})
    assert spans == [(1, 2 * 31 + 1)]  # every message of the broadcast, after device 0's hold
    report = checked_both_ways(run, Reference.of(broadcast_model, 32), monkeypatch, spans=8)
    assert report.verdict == verdict


def test_message_by_message_collectives_and_references_per_device(monkeypatch):
    """A World that books nothing (every chunk a message) and a reference per device (two replicas' inputs)."""
    refs = {0: Reference.of(partial_model, P), 1: Reference.of(partial_model, P, np.float64, 2.0)}
    run = World(P, book_collectives=False).run(partial_program, P)
    report = checked_both_ways(run, lambda rank: refs[rank % 2], monkeypatch)
    assert report.verdict == "FAILED"  # the odd devices' reference holds twice the sum


@pytest.mark.parametrize("spans", [8, 256])
def test_a_built_in_all_reduce_where_the_split_asks_for_none_fails_on_every_device(monkeypatch, spans):
    run = World(P).run(partial_program, P)
    ref = Reference.of(partial_model, P)
    assert checked_both_ways(run, ref, monkeypatch, spans).verdict == "passed"
    report = checked_both_ways(run, ref, monkeypatch, spans, split=Split(collectives=()))
    assert report.verdict == "FAILED"
    assert sorted({(v.kind, v.rank) for v in report.broken}) == [("collective", r) for r in range(P)]


def sent_again(dev, n, wrong=False):
    """Device 0 sends one read-only array n times (the same object every time); device 1 returns the last it got."""
    if dev.rank == 0:
        x = np.arange(6.0) + (1e-3 if wrong else 0.0)
        x.setflags(write=False)
        for req in [dev.isend(x, 1) for _ in range(n)]:
            dev.wait(req)
        return None
    return [dev.recv(0) for _ in range(n)][-1]


def arange_model(dev, n):
    return dev.hold("x", np.arange(6.0))


@pytest.mark.parametrize("wrong", [False, True])
def test_a_value_received_again_and_again_came_from_the_last_message_that_gave_it(monkeypatch, wrong):
    run = World(2).run(sent_again, 20, wrong)
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 8)
    assert value_columns._bookkeeping_spans(run.trace.event_columns(), {}) == [(20, 40)]  # the 20 receives
    got = run.outputs[1]
    assert all(m.payload is got for m in run.trace.messages)  # (one object: its origin is the last of them)
    report = checked_both_ways(run, Reference.of(arange_model, 20), monkeypatch)
    assert report.verdict == ("FAILED" if wrong else "passed")


def freed_after(dev, p, scratch=False):
    """The all-reduce, then each device frees its term: the frees are in the ring's stretch, and say nothing; and
    (``scratch``) an op of the program's own, of a name the model lacks, amid the ring's last steps."""
    y = dev.all_reduce(dev.hold("x", terms(p)[dev.rank], partial=True))
    if scratch:
        dev.compute("scratch", np.negative, y)
    dev.free("x")
    return y


@pytest.mark.parametrize("scratch, verdict", [(False, "passed"), (True, "not verified")])
def test_a_free_in_a_stretch_is_no_devices_last_event(monkeypatch, scratch, verdict):
    run = World(P).run(freed_after, P, scratch)
    ref = Reference.of(partial_model, P)
    assert checked_both_ways(run, ref, monkeypatch).verdict == verdict
    if scratch:
        return
    arrays = run.trace.event_columns()
    (a, b), *_ = value_columns._bookkeeping_spans(arrays, {})
    frees = np.flatnonzero(arrays["op_kind"] == FREE)
    assert len(frees) == P and a < frees[0] and frees[-1] == b - 1 == len(arrays["kind"]) - 1  # (the last one last)


def unheld(dev, p):
    """Two all-reduces side by side of terms no device holds under a name, so that the rings' own reductions ask
    for each device's reference first: devices 4 to 7 sum a short vector (their reductions come first), 0 to 3 a
    long one."""
    if dev.rank >= 4:
        return dev.all_reduce(np.arange(8.0) + dev.rank, group=[4, 5, 6, 7])
    return dev.all_reduce(np.arange(80_000.0) + dev.rank, group=[0, 1, 2, 3])


def sum_model(dev, high):
    return dev.compute(
        "v", lambda: sum(np.arange(8.0 if high else 80_000.0) + r for r in range(4 * high, 4 * high + 4))
    )


def test_references_per_device_first_asked_in_a_stretch_are_asked_in_the_walks_order(monkeypatch):
    asked: list[int] = []
    refs = [Reference.of(sum_model, r >= 4) for r in range(P)]  # one per device

    def reference(rank):
        asked.append(rank)
        return refs[rank]

    run = World(P).run(unheld, P)
    one_by_one = state_of(run.trace, run.outputs, reference)
    order, asked[:] = list(asked), []
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 8)
    assert state_of(run.trace, run.outputs, reference) == one_by_one
    assert asked == order and order[:4] == [4, 5, 6, 7]  # (the walk's order: those that reduced first, first)
    assert one_by_one[0].startswith("check passed")


SCENARIOS = [sc for sc in all_scenarios().values() if sc.reference is not None and sc.expect != "error"]


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc.name for sc in SCENARIOS])
def test_every_teaching_scenario_with_stretches_of_eight_gets_the_one_by_one_walks_report(monkeypatch, sc):
    """Right and wrong (the tp, sp, cp, ep and ZeRO bugs among them), with their splits: stretches of 8 events
    done whole (the ring attention scenarios have dozens) change nothing the check says or keeps."""
    ref, run = sc.reference(), sc.world.run(sc.program, *sc.args)
    report = checked_both_ways(run, ref, monkeypatch, spans=8, split=sc.split, records=False)
    assert report.ok is (sc.expect == "match")


def flat_chunks(dev, p, wrong=False):
    """Chunks of v held by their flattened elements (``FlatSlice``), two from the same first element, two to the same
    last one: each compared with its own part of v (a chunk's expected value is kept by its first and last)."""
    v = terms(p).sum(axis=0)
    dev.hold("v", v[:3], index=FlatSlice(0, 3))
    dev.hold("v", v[:5] + (1e-3 if wrong else 0.0), index=FlatSlice(0, 5))
    dev.hold("v", v[2:5], index=FlatSlice(2, 5))  # (and two to the same last one)
    dev.hold("v", v[3:], index=FlatSlice(3, v.size))
    return dev.compute("v", lambda: v)


@pytest.mark.parametrize("wrong, verdict", [(False, "passed"), (True, "FAILED")])
def test_chunks_by_flattened_elements_are_each_compared_with_their_own_part(wrong, verdict):
    report = check(World(1).run(flat_chunks, P, wrong), Reference.of(sum_model_of_terms, P))
    assert report.verdict == verdict and report.checked >= 3


def sum_model_of_terms(dev, p):
    return dev.compute("v", lambda: terms(p).sum(axis=0))


def mixed(dev, p, seed):
    """A program of one seed's mix of collectives, booked or not, named or not, a device's value now and then
    changed: whatever the verdict, stretches done whole must say and keep what one event at a time does."""
    rng = np.random.default_rng(seed)
    v = dev.hold("x", terms(p)[dev.rank], partial=True)
    for _ in range(4):
        what = rng.integers(5)
        if rng.random() < 0.3 and dev.rank == rng.integers(p):
            v = v + 1e-4
        if what == 0:
            v = dev.all_reduce(v, name="x" if rng.random() < 0.5 else None)
        elif what == 1:
            v = np.concatenate([v, dev.reduce_scatter(v)])[: 3 * p]
        elif what == 2:
            v = np.concatenate(dev.all_gather(v[:3]))[: 3 * p]
        elif what == 3:
            v = dev.broadcast(v, src=int(rng.integers(p)))
        else:
            v = np.concatenate(dev.all_to_all(list(v.reshape(p, 3))))
    return v


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("booked", [True, False])
def test_a_mix_of_collectives_gets_the_one_by_one_walks_report(monkeypatch, seed, booked):
    run = World(P, book_collectives=booked).run(mixed, P, seed)
    checked_both_ways(run, Reference.of(partial_model, P), monkeypatch, spans=8, records=seed < 3)
