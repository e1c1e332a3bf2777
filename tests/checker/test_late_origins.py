"""A check reads a ring booked whole without making its payloads' objects (``value_columns.LateOrigins``): where each
value came from is kept by row until the objects are made, if they ever are. The verdict, the divergence it names and
every word must be what a check of the objects made says: programs right and wrong (a member's term off, a chunk of
the result scribbled, the last bit of an integer term flipped), on the default World and message by message."""

from __future__ import annotations

import numpy as np
import pytest

import simulator.checker.value_columns as value_columns
import simulator.collectives.ring_payloads as ring_payloads
from simulator import World
from simulator.checker import Reference, check
from simulator.core.ordering import CODE_RECV
from simulator.core.rows import Recorder
from tests.checker.test_bookkeeping_spans import mixed, partial_model, state_of, terms

P = 16  # a ring of 16: one stretch of 736 events, past _SPAN_LEAST


@pytest.fixture
def made(monkeypatch):
    """How many times a booked ring's payload objects were made."""
    calls = [0]
    objects = ring_payloads._objects
    monkeypatch.setattr(ring_payloads, "_objects", lambda *a: calls.__setitem__(0, calls[0] + 1) or objects(*a))
    return calls


def student_terms(p: int, dtype) -> np.ndarray:
    """Each device's term: floats whose sums round differently in each order, or small integers."""
    if np.dtype(dtype).kind == "f":
        return terms(p, dtype)
    return (np.arange(p * 3 * p).reshape(p, 3 * p) * 7919 % 1000 - 500).astype(dtype)


def term_model(dev, p, dtype):
    xs = student_terms(p, dtype)
    total = xs[0].copy()
    for r in range(1, p):  # (in device order, as the check adds partial terms up)
        total = total + xs[r]
    return dev.hold("x", total)


def student(dev, p, dtype, bug=None):
    """A partial x on every device, all-reduced, as a student writes it; ``bug`` says what goes wrong."""
    x = student_terms(p, dtype)[dev.rank]
    if bug == "term off" and dev.rank == 5:
        x = x + 1e-6
    if bug == "last bit" and dev.rank == 9:
        x = x.copy()
        x[-1] ^= 1  # (an integer's last bit)
    y = dev.all_reduce(dev.hold("x", x, partial=True))
    if bug == "chunk scribbled" and dev.rank == 2:
        y = y.copy()
        y[3:6] = 0  # device 3's chunk of the result overwritten
    return y


CASES = [
    (np.float64, None, "passed"),
    (np.int64, None, "passed"),
    (np.float64, "term off", "FAILED"),
    (np.float64, "chunk scribbled", "FAILED"),
    (np.int64, "chunk scribbled", "FAILED"),
    (np.int64, "last bit", "FAILED"),
]


@pytest.mark.parametrize("dtype, bug, verdict", CASES)
def test_a_partial_all_reduce_is_checked_as_with_its_objects_made(made, dtype, bug, verdict):
    ref = Reference.of(term_model, P, dtype)
    lazy = check(World(P).run(student, P, dtype, bug), ref)
    assert made[0] == 0  # (its check, right or wrong, makes none of them: nothing it reports needs one)
    eager_run = World(P).run(student, P, dtype, bug)
    assert eager_run.trace.recorder.msg_payloads  # every object made before the check: the walk reads them all
    eager = check(eager_run, ref)
    messages = check(World(P, book_collectives=False).run(student, P, dtype, bug), ref)
    assert lazy.verdict == verdict
    assert lazy.text() == eager.text() == messages.text()
    if bug is not None:
        assert lazy.first is not None and eager.first is not None
        assert (lazy.first.where, lazy.first.rank, lazy.first.name) == (eager.first.where, eager.first.rank,
                                                                        eager.first.name)  # fmt: skip


def steps(dev, p, k, wrong_at=None, name=None):
    """``k`` all-reduces one after another (a training loop's), the first of each device's term, the others averages
    of what it holds (their results named ``name``); ``wrong_at``: device 1 scribbles on its value before that step."""
    y = dev.all_reduce(dev.hold("x", student_terms(p, np.float64)[dev.rank], partial=True))
    for step in range(1, k):
        if step == wrong_at and dev.rank == 1:
            y = y + 1e-3
        y = dev.all_reduce(y, op="avg", name=name)
    return y


@pytest.mark.parametrize("name", [None, "x"])  # (named: each all-gather's messages compared, one at a time)
@pytest.mark.parametrize("wrong_at", [None, 30])
def test_many_rings_one_after_another(made, wrong_at, name):
    ref = Reference.of(term_model, P, np.float64)
    run = World(P).run(steps, P, 40, wrong_at, name)
    lazy = check(run, ref)
    assert lazy.verdict == ("passed" if wrong_at is None else "FAILED")
    assert made[0] == 0 or wrong_at is not None or name is not None
    eager_run = World(P).run(steps, P, 40, wrong_at, name)
    assert eager_run.trace.recorder.msg_payloads
    messages = World(P, book_collectives=False).run(steps, P, 40, wrong_at, name)
    assert lazy.text() == check(eager_run, ref).text() == check(messages, ref).text()


def test_a_right_runs_check_makes_no_object_of_its_ring(made):
    run = World(P).run(student, P, np.float64)
    assert check(run, Reference.of(term_model, P, np.float64)).ok
    assert made[0] == 0 and run.trace.recorder._later  # (still to be made, if anyone reads them)
    assert run.trace.messages[-1].payload is not None
    assert made[0] == 1


def settled_state(run, reference):
    """``state_of`` a check made before the ring's objects are, with their origins settled once they are made."""
    from simulator.checker.run_check import _Checker, _resolver

    checker = _Checker(run.trace, run.outputs, _resolver(reference), None, None)
    text = checker.report().text()
    assert run.trace.recorder.msg_payloads  # now every object is made (if the check made none) ...
    checker._late.settle(checker.origin)  # ... and the rows kept become objects (if the check settled none)
    assert not checker._late.pending
    origins = [sorted(dict.items(o)) for o in checker.origin]
    return text, list(checker.last_event), origins, [id(r) for r in checker.refs.values()]


@pytest.mark.parametrize("bug", [None, "term off", "chunk scribbled"])
def test_origins_kept_by_row_become_the_walks_once_the_objects_are_made(monkeypatch, bug):
    run = World(P).run(student, P, np.float64, bug)
    ref = Reference.of(term_model, P, np.float64)
    late = settled_state(run, ref)
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 1 << 40)  # every event one at a time, reading every object
    assert late == state_of(run.trace, run.outputs, ref)


def passed_on(dev, p, dtype):
    """The all-reduce, then each device passes its result's first two elements to the right: the ring's last receives
    and the program's own messages interleave, so that short stretches of the ring's events are walked one at a time."""
    y = student(dev, p, dtype)
    dev.send(y[:2], (dev.rank + 1) % p)
    return y + 0 * dev.recv((dev.rank - 1) % p).sum()


def test_a_rings_receives_walked_one_at_a_time_among_the_programs_messages(monkeypatch):
    run = World(P).run(passed_on, P, np.float64)
    ref = Reference.of(term_model, P, np.float64)
    arrays = run.trace.event_columns()
    spans = value_columns._bookkeeping_spans(arrays, {})
    walked = np.ones(len(arrays["kind"]), bool)
    for a, b in spans:
        walked[a:b] = False
    assert spans and (walked & (arrays["kind"] == CODE_RECV) & (arrays["label"] >= 0)).any()
    late = settled_state(run, ref)
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 1 << 40)
    assert late == state_of(run.trace, run.outputs, ref)


@pytest.mark.parametrize("seed", [0, 5, 6, 8, 11, 14, 18, 21])  # (the seeds whose check keeps rows: of 24, 11 do)
def test_several_rings_and_other_collectives_kept_by_row_settle_as_the_walk_leaves_them(monkeypatch, seed):
    """A mix of collectives, wrong here and there, up to four rings booked whole in one run: some made by the check
    itself (a divergence's record, its explanation), after a stretch kept their rows; the others after it."""
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 8)
    run = World(8).run(mixed, 8, seed)
    ref = Reference.of(partial_model, 8)
    late = settled_state(run, ref)
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", 1 << 40)
    assert late == state_of(run.trace, run.outputs, ref)


def test_two_runs_checked_side_by_side_make_only_what_each_reads(made):
    ref = Reference.of(term_model, P, np.float64)
    a, b = World(P).run(student, P, np.float64), World(P).run(student, P, np.float64, "term off")
    report_a = check(a, ref)
    assert b.trace.messages[0].payload is not None  # b's objects made: a's stay unmade
    assert made[0] == 1 and a.trace.recorder._later and not b.trace.recorder._later
    assert (report_a.verdict, check(b, ref).verdict, check(a, ref).text()) == ("passed", "FAILED", report_a.text())
    assert made[0] == 1


def test_a_value_a_device_got_twice_in_kept_rows_came_from_the_later_and_the_walks_word_stands():
    rec = Recorder(True)
    x, y = np.zeros(2), np.ones(2)
    rec.keep_later(3, 1, lambda: ([x, y, x], [((x,), y)]))
    late = value_columns.LateOrigins(rec)
    late.add(np.array([0, 0, 0, 1]), np.array([0, 1, 2, 0]), np.array([False, False, False, True]))
    origin: list[dict] = [{}, {id(y): "a later event's"}]
    assert not late.settle(origin) and origin == [{}, {id(y): "a later event's"}]  # (nothing made yet)
    assert rec.msg_payloads == [x, y, x]
    assert late.settle(origin) and not late.pending
    assert origin == [{id(x): 2 << 1, id(y): 1 << 1}, {id(y): "a later event's"}]


def test_a_recorder_makes_only_the_blocks_of_the_rows_asked_for():
    rec = Recorder(True)
    made = []

    def block(k):
        def make():
            made.append(k)
            return [f"m{k}a", f"m{k}b"], [((), f"o{k}")]

        return make

    rec.add_msg_payload("m")
    rec.keep_later(2, 1, block(0))  # message rows 1-2, op row 0
    rec.add_op_payload(((), "o"))
    rec.keep_later(2, 1, block(1))  # message rows 3-4, op row 2
    msgs, ops = rec.unmade(np.array([0, 1, 4, 5]), np.array([0, 1, 2]))
    assert msgs.tolist() == [False, True, True, False] and ops.tolist() == [True, False, True]
    assert rec.msg_payload(0) == "m" and rec.op_payload(1) == ((), "o") and not made
    assert rec.op_payload(2) == ((), "o1") and made == [1]
    payloads, _ = rec.make_rows(np.array([0]), np.array([], int))
    assert payloads[1] is None and made == [1]  # (row 1's block not asked for)
    rec.make_rows(np.array([2]), np.array([], int))
    assert made == [1, 0] and rec.msg_payloads == ["m", "m0a", "m0b", "m1a", "m1b"] and rec.blocks_made == 2


@pytest.mark.parametrize("spans", [8, 256])
@pytest.mark.parametrize("seed", range(12))
def test_a_mix_of_collectives_checked_lazily_says_what_it_says_with_the_objects_made(monkeypatch, seed, spans):
    """The same words whether the booked rings' objects are made before the check, never, or not booked at all."""
    monkeypatch.setattr(value_columns, "_SPAN_LEAST", spans)
    ref = Reference.of(partial_model, 8)
    lazy = check(World(8).run(mixed, 8, seed), ref)
    eager_run = World(8).run(mixed, 8, seed)
    assert eager_run.trace.recorder.msg_payloads
    assert lazy.text() == check(eager_run, ref).text()
    assert lazy.text() == check(World(8, book_collectives=False).run(mixed, 8, seed), ref).text()


class WholeMapNotWalked(dict):
    """A device's map of origins that may be looked up and added to, but not walked whole."""

    def _walked(self, *args):
        raise AssertionError("settle walked a device's whole map of origins")

    __iter__ = keys = items = values = copy = _walked


def test_settling_walks_only_what_it_settles_never_a_devices_whole_map():
    """Each settle merged by copying every device's whole map (what the walk put there was kept over the rows
    settled): a check of 400 steps of a ring kept by row, a named ring and an unnamed message of the program's own
    (which asks where a value came from) took 16.3 s, made first 0.9 s; now 1.2 s."""
    rec = Recorder(True)
    x, y = np.zeros(2), np.ones(2)
    rec.keep_later(2, 0, lambda: ([x, y], []))
    late = value_columns.LateOrigins(rec)
    late.add(np.array([0, 0]), np.array([0, 1]), np.array([False, False]))
    mine = WholeMapNotWalked({k: "an earlier object's" for k in range(-1000, 0)})
    dict.__setitem__(mine, id(y), "a later event's")
    assert rec.msg_payloads == [x, y]
    assert late.settle([mine])
    assert dict.__getitem__(mine, id(x)) == 0 << 1 and dict.__getitem__(mine, id(y)) == "a later event's"
    assert len(mine) == 1002


def test_settling_looks_again_only_at_the_stretches_with_rows_in_the_blocks_made_since(monkeypatch):
    """Each settle asked every stretch still kept by row which of its rows were made: a check of 400 rings never
    made, then 400 steps of a named ring and a message of the program's own, took 4.2 s (0.6 s with the objects made
    first); now 0.9 s. A stretch whose rows lie outside the blocks made since is not asked again."""
    rec = Recorder(True)
    objects = [np.full(2, float(k)) for k in range(50)]
    for k in range(50):  # fifty blocks of one message and one op each
        rec.keep_later(1, 1, lambda k=k: ([objects[k]], [((objects[k],), objects[k])]))
    late = value_columns.LateOrigins(rec)
    for k in range(50):  # ... each one stretch's: device k % 3 receives message k, then makes op k
        late.add(np.array([k % 3, k % 3]), np.array([k, k]), np.array([False, True]))
    asked = []
    unmade = value_columns._unmade
    monkeypatch.setattr(value_columns, "_unmade", lambda rec, rows, took: asked.append(rows) or unmade(rec, rows, took))
    assert rec.msg_payload(10) is objects[10]
    origin: list[dict] = [{}, {}, {}]
    assert late.settle(origin) and len(asked) == 1 and len(late.pending) == 49
    assert origin[1] == {id(objects[10]): 10 << 1 | 1}  # (the op, the later event, has the last word)
    assert rec.op_payload(20) == ((objects[20],), objects[20]) and late.settle(origin) and len(asked) == 2
    assert origin[2] == {id(objects[20]): 20 << 1 | 1}
