"""The split check's memos give what asking every time gives: a value looked at once per device for whether it is
foreign there, the names a device's messages carry gathered in one set, an op's inputs passed over when none has the
shape of an input given in part, a Split's answers remembered per name, and identify's answers per reference. Each
held to the long way on the split catalogue's cheats, on every teaching scenario with a split (the bugs too), and
on a check asked twice of one reference."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, Split, check
from simulator.checker.compare import structured
from simulator.checker.run_check import _Checker, _resolver
from simulator.checker.split import _lookup
from simulator.checker.split_check import _SplitWalk
from simulator.checker.split_presence import _is_block, _transposed
from simulator.teach.examples import all_scenarios
from simulator.teach.exercises import EXERCISES
from tests.checker.test_split_columns import PROGRAMS, said

WITH_SPLITS = [sc for sc in all_scenarios().values() if sc.split is not None and sc.expect != "error"]


class _LongWay(_SplitWalk):
    """The split walk asking every question every time, as it did before its memos."""

    def _passed_over(self, rank, inputs) -> bool:
        return False  # every op with inputs through the walk over records

    def _foreign(self, *args) -> None:
        self._settled.clear()
        super()._foreign(*args)

    def _wholes_of(self, rank, ref, x) -> list:
        if structured(x):
            return []
        found, x_shape = [], np.shape(x)
        for k, (name, _, whole) in enumerate(self._parts_given(rank, ref)):
            shape = np.shape(whole)
            if x_shape == shape and name in ref.identify(x):
                found.append((k, ""))
            elif len(x_shape) >= 2 and x_shape[::-1] == shape and _transposed(x, whole):
                found.append((k, " (transposed)"))
        return found

    def _arrived(self, rank, name) -> bool:
        looked = self._looked.get((rank, name), 0)
        if looked is True:
            return True
        received = self._got(rank)
        whole = self.ref_of(rank).values.get(name)
        for msg in received[looked:]:
            if name in self._carries(msg) or (whole is not None and _is_block(msg.payload, whole)):
                self._looked[(rank, name)] = True
                return True
        self._looked[(rank, name)] = len(received)
        return False


def _fresh(split: Split) -> Split:
    """The same split with nothing remembered yet."""
    return Split(split.compute, split.given, split.crosses, split.collectives, split.budget)


def both_ways(trace, split, ref, outputs) -> tuple[list, list]:
    fast = _SplitWalk(trace, _fresh(split), _resolver(ref), None, None).walk(outputs)
    slow = _LongWay(trace, _fresh(split), _resolver(ref), None, None).walk(outputs)
    return said(fast), said(slow)


@pytest.mark.parametrize("exercise, program", PROGRAMS, ids=lambda v: getattr(v, "__name__", None))
def test_the_split_catalogue_breaks_the_rules_it_breaks_asked_every_time(exercise, program):
    ex = EXERCISES[exercise]()
    inputs = ex.inputs(np.random.default_rng(11))
    split = ex.split(inputs)
    run = ex.run_program(program, inputs, split)
    fast, slow = both_ways(run.trace, split, ex.reference(inputs), run.outputs)
    assert fast == slow


@pytest.mark.parametrize("sc", WITH_SPLITS, ids=lambda sc: sc.name)
def test_every_scenario_with_a_split_gets_the_verdict_and_first_divergence_asked_every_time(sc):
    run = sc.world.run(sc.program, *sc.args)
    ref = sc.reference()
    fast, slow = both_ways(run.trace, sc.split, ref, run.outputs)
    assert fast == slow
    first = check(run, ref, split=sc.split)  # the reference's answers worked out here, and reused below
    again = check(run, ref, split=sc.split)
    fresh = check(run, sc.reference(), split=_fresh(sc.split))
    assert first.text() == again.text() == fresh.text()
    assert first.ok is (sc.expect == "match")
    if not first.ok:
        assert [(d.where, d.rank, d.event) for d in (first.first, again.first)] == [
            (fresh.first.where, fresh.first.rank, fresh.first.event)
        ] * 2


def test_a_split_remembers_what_each_table_says_of_a_name_as_a_look_up_says_it():
    split = Split(
        compute={"h1.*": [0, 1], "w": 2, "h1.out": 3},
        given={"x*": {0: np.s_[0:2]}},
        crosses={"a": (0, 1), "a*": (1, 2)},
    )
    for name in ["h1.out", "h1.a", "w", "x", "x1", "a", "ab", "a+ab", "nothing"]:
        for _ in range(2):
            assert split.owners(name) is _lookup(split.compute, name)
            assert split.gives(name) is (_lookup(split.given, name) is not None)
            for src, dst in [(0, 1), (1, 2), (2, 0)]:
                whole = "+" not in name or _lookup(split.crosses, name) is not None
                names = [name] if whole else name.split("+")
                allowed = all((t := _lookup(split.crosses, n)) is not None and t(src, dst) for n in names)
                assert split.may_cross(name, src, dst) is allowed


def test_a_value_fine_on_its_owner_is_still_foreign_on_a_device_it_never_reached():
    """One array object read on two devices: device 0 computes a and uses it, device 1 reads the same object through
    a dict they share. What was settled on device 0 says nothing of device 1."""
    x = np.array([0.5, -1.25, 3.0])

    def model(dev):
        a = dev.compute("a", np.multiply, dev.hold("x", x), 2.0)
        c = dev.compute("c", np.add, a, 3.0)
        return dev.compute("b", np.add, a, c)

    shared = {}

    def program(dev):
        if dev.rank == 0:
            a = dev.compute("a", np.multiply, dev.hold("x", x), 2.0)
            shared["a"] = a
            c = dev.compute("c", np.add, a, 3.0)
            dev.send(c, 1)
            return None
        c = dev.recv(0, name="c")
        return dev.compute("b", np.add, shared["a"], c)

    split = Split(compute={"a": 0, "c": 0, "b": 1}, given={"x": 0})
    run = World(2).run(program)
    ref = Reference.of(model)
    fast, slow = both_ways(run.trace, split, ref, run.outputs)
    assert fast == slow
    assert [v[:2] for v in fast] == [("compute", 1)] and "never reached device 1" in fast[0][3]
    assert not check(run, ref, split=split).ok


ALL_CHECKED = [sc for sc in all_scenarios().values() if sc.reference is not None and sc.expect != "error"]


@pytest.mark.parametrize("sc", ALL_CHECKED, ids=lambda sc: sc.name)
def test_a_value_found_plain_once_gives_the_notes_and_verdict_of_looking_every_time(sc, monkeypatch):
    """The value check remembers that an op's input equals no two of the model's values (a weight read by every
    microbatch, and the model's own input, per reference and tolerance); the report is the one that looking at every
    input every time gives."""
    run, ref = sc.world.run(sc.program, *sc.args), sc.reference()
    fast = check(run, ref, split=sc.split)
    monkeypatch.setattr(_Checker, "_ambiguous", _Checker._ambiguous_now)
    monkeypatch.setattr(_Checker, "_exact_input", lambda self, ref, found, expected: None)  # (same, then _ambiguous)
    slow = check(run, ref, split=sc.split)
    assert fast.text() == slow.text() and fast.notes == slow.notes and fast.checked == slow.checked


def test_an_input_equal_to_two_values_is_noted_at_each_op_that_reads_it():
    """x equals y in the model: each op that reads it is told it cannot tell them apart, the second time too."""
    x = np.array([1.5, -2.0, 0.25])

    def model(dev):
        a = dev.hold("x", x)
        dev.hold("y", x.copy())
        b = dev.compute("b", np.multiply, a, 2.0)
        return dev.compute("c", np.add, a, b)

    run = World(1).run(model)
    report = check(run, Reference.of(model))
    said_of = [n for n in report.notes if "x and y are equal" in n]
    assert report.ok and len(said_of) == 2 and "op b" in said_of[0] and "op c" in said_of[1]
