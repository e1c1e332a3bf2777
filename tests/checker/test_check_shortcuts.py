"""The check's short cuts on the pipelines give the verdicts of the long way: an op whose output is the model's byte
for byte counted with no record, an input with the model's bytes as plain as the model's own, what a device received
or computed as the model's value of a name it may hold settled as its own, an op's inputs looked at once per value.

Each is held to the walk over plain records (``as_records``), which takes none of them: on every teaching scenario
(the bugs of the catalogue too), and on pipelines (1F1B, and the V of ZBV, two stages a device) that cheat: another
stage's weight read through a dict the devices share (whole, or transposed), an activation or a received message
that never reached the device, a stage computed on the wrong device and then used there, a wrong activation, and a
right program that copies every input (nothing settled where it arrives); an activation 1e-5 off, and every one a
few units in its last place off (right)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulator import FlatSlice, World
from simulator.checker import Reference, Split, check
from simulator.checker.compare import _within, same
from simulator.checker.expected import _index_key
from simulator.teach.examples import all_scenarios, get
from tests.checker.test_checker_fast_paths import as_records

CHECKED = [sc for sc in all_scenarios().values() if sc.reference is not None and sc.expect != "error"]


def summary(report) -> tuple:
    """Everything a report says, its first divergence and broken rules by where they stand."""
    first = report.first
    return (
        report.verdict,
        report.text(),
        report.checked,
        report.notes,
        None if first is None else (first.where, first.rank, first.event, first.name),
        [(v.kind, v.rank, v.event, v.text) for v in report.broken],
    )


def both_ways(run, ref, split) -> tuple:
    """The report on the run's columns (asked twice of one reference: what it remembers reused) and on its records."""
    fast, again = check(run, ref, split=split), check(run, ref, split=split)
    slow = check(as_records(run), ref, split=split)
    assert summary(fast) == summary(again) == summary(slow)
    return fast


@pytest.mark.parametrize("sc", CHECKED, ids=lambda sc: sc.name)
def test_every_scenario_gets_the_report_of_the_walk_over_records(sc):
    run = sc.world.run(sc.program, *sc.args)
    report = both_ways(run, sc.reference(), sc.split)
    assert report.ok is (sc.expect == "match")


class _Tampered:
    """A device whose ``compute`` goes through ``cheat`` first; everything it holds, computes or receives is put in
    ``shared``, a dict all devices see (what real processes cannot have), by name and device."""

    def __init__(self, dev: Any, cheat: Any, shared: dict) -> None:
        self._dev, self._cheat, self._shared = dev, cheat, shared

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._dev, attr)

    def hold(self, name: str, value: Any, **kw: Any) -> Any:
        out = self._shared[name, self._dev.rank] = self._dev.hold(name, value, **kw)
        return out

    def recv(self, *args: Any, **kw: Any) -> Any:
        out = self._dev.recv(*args, **kw)
        self._shared[kw.get("name"), self._dev.rank] = out
        return out

    def compute(self, name: str, fn: Any, *inputs: Any, **kw: Any) -> Any:
        out = self._cheat(self._dev, self._shared, name, fn, inputs, kw)
        if out is None:
            out = self._dev.compute(name, fn, *inputs, **kw)
        self._shared[name, self._dev.rank] = out
        return out


def _owner(sc: Any, name: str) -> int:
    test = sc.split.owners(name)
    return next(r for r in range(sc.world.size) if test(r))


def _with_extra(dev, name, fn, inputs, kw, extra):
    """The op computed as the model computes it, handed one more input it does not use (read, all the same)."""
    return dev.compute(name, lambda *xs: fn(*xs[:-1]), *inputs, extra, **kw)


def another_stages_weight(sc, dev, shared, name, fn, inputs, kw):
    if name == "h2.mb0":
        return _with_extra(dev, name, fn, inputs, kw, sc.args[0]["W3"])  # (the step's parameters, all of them)


def another_stages_weight_transposed(sc, dev, shared, name, fn, inputs, kw):
    last = f"W{sc.program.mlp.layers}"
    if name == "h2.mb0":
        return _with_extra(dev, name, fn, inputs, kw, sc.args[0][last].T)


def an_activation_that_never_arrived(sc, dev, shared, name, fn, inputs, kw):
    if name == "loss.mb0":
        return _with_extra(dev, name, fn, inputs, kw, shared["h2.mb0", _owner(sc, "h2.mb0")])


def another_devices_message(sc, dev, shared, name, fn, inputs, kw):
    """The device of layer 4 reads the very array the device of layer 2 received (settled there, not here)."""
    if name == "h4.mb0":
        return _with_extra(dev, name, fn, inputs, kw, shared["h1.mb0", _owner(sc, "h2.mb0")])


def a_stage_computed_on_the_wrong_device(sc, dev, shared, name, fn, inputs, kw):
    """The device of layer 2 also computes layer 3's output (the model's value, byte for byte) and reads it."""
    if name == "h2.mb1":
        w3, b3 = sc.args[0]["W3"], sc.args[0]["b3"]
        h3 = dev.compute("h3.mb0", sc.program.mlp.forward_op(3), shared["h2.mb0", dev.rank], w3, b3)
        return _with_extra(dev, name, fn, inputs, kw, h3)


def a_wrong_activation(sc, dev, shared, name, fn, inputs, kw):
    if name == "h2.mb1":
        return dev.compute(name, lambda *xs: fn(*xs) + 1e-3, *inputs, **kw)


def a_slightly_wrong_activation(sc, dev, shared, name, fn, inputs, kw):
    """1e-5 of its size off: past float64's tolerance, within float32's."""
    if name == "h2.mb1":
        return dev.compute(name, lambda *xs: fn(*xs) * (1 + 1e-5), *inputs, **kw)


def activations_off_in_their_last_bits(sc, dev, shared, name, fn, inputs, kw):
    """Every forward output a few units in the last place off (another order of adding): right, whatever its bits."""
    if name.startswith("h"):
        return dev.compute(name, lambda *xs: fn(*xs) * (1 + 4e-16), *inputs, **kw)


def one_element_wrong_among_last_bits(sc, dev, shared, name, fn, inputs, kw):
    """Every forward output a last bit off (each taken as right as the walk meets it), and h2.mb1 1e-5 off at its
    second element, where a look at its first, middle and last sees nothing."""

    def off(*xs):
        y = fn(*xs) * (1 + 4e-16)
        if name == "h2.mb1":
            y.reshape(-1)[1] += 1e-5
        return y

    if name.startswith("h"):
        return dev.compute(name, off, *inputs, **kw)


def every_input_copied(sc, dev, shared, name, fn, inputs, kw):
    return dev.compute(name, fn, *[np.array(x, copy=True) for x in inputs], **kw)


CHEATS = [  # (the cheat, the verdict, words of the first thing the report holds against it)
    (another_stages_weight, "FAILED", "from all of W3, but only device"),
    (another_stages_weight_transposed, "FAILED", "(transposed), but only device"),
    (an_activation_that_never_arrived, "FAILED", "computed loss.mb0 from h2.mb0, which belongs to device"),
    (another_devices_message, "FAILED", "computed h4.mb0 from h1.mb0, which belongs to device 0 and never reached"),
    (a_stage_computed_on_the_wrong_device, "FAILED", "computed h3.mb0, which belongs to device"),
    (a_wrong_activation, "FAILED", "output h2.mb1"),  # (at the op that made it, before the message that carries it)
    (a_slightly_wrong_activation, "FAILED", "output h2.mb1"),
    (activations_off_in_their_last_bits, "passed", None),
    (one_element_wrong_among_last_bits, "FAILED", "output h2.mb1"),
    (every_input_copied, "passed", None),
]


@pytest.mark.parametrize("scenario", ["pipeline-1f1b", "pipeline-zbv"])
@pytest.mark.parametrize("cheat, verdict, words", CHEATS, ids=[c[0].__name__ for c in CHEATS])
def test_a_pipeline_that_cheats_gets_the_report_of_the_walk_over_records(scenario, cheat, verdict, words):
    sc = get(scenario)
    shared: dict = {}

    def program(dev, *args):
        return sc.program(_Tampered(dev, lambda *a: cheat(sc, *a), shared), *args)

    run = sc.world.run(program, *sc.args)
    report = both_ways(run, sc.reference(), sc.split)
    assert report.verdict == verdict, report.text()
    if words is not None:
        said = report.broken[0].text if report.broken else f"{report.first.where} {report.first.name}"
        assert words in said, said


def test_a_stage_computed_on_the_wrong_device_is_foreign_where_it_is_read():
    """The model's value, byte for byte, under a name its device may not compute: settled as that device's own it
    would pass; read there, it is a value that never reached the device (told beside the op that made it)."""
    sc = get("pipeline-1f1b")
    shared: dict = {}

    def program(dev, *args):
        return sc.program(_Tampered(dev, lambda *a: a_stage_computed_on_the_wrong_device(sc, *a), shared), *args)

    report = check(sc.world.run(program, *sc.args), sc.reference(), split=sc.split)
    said = [v.text for v in report.broken]
    assert any("device 1 computed h3.mb0, which belongs to device 2" in t for t in said), said
    assert any("computed h2.mb1 from h3.mb0, which belongs to device 2 and never reached" in t for t in said), said


def test_what_a_reference_keeps_is_asked_again_under_another_tolerance():
    """m and p differ by 1e-4: under float64's tolerance the op reads m alone, under rtol=1e-3 it reads a value that
    equals p too (given to device 0 only: the whole of it, on device 1), and its input cannot tell m from p. One
    reference checked under each in turn says what a fresh one says under each."""
    m = np.array([1.0, 2.0, 3.0])

    def model(dev):
        a = dev.hold("m", m)
        dev.hold("p", m + 1e-4)
        return dev.compute("b", np.multiply, a, 2.0)

    def program(dev):
        if dev.rank == 0:
            dev.hold("p", m + 1e-4)
            return None
        return dev.compute("b", np.multiply, dev.hold("m", m), 2.0)

    split = Split(compute={"b": 1}, given={"m": 1, "p": 0})
    run, kept = World(2).run(program), Reference.of(model)
    said = []
    for tolerance in [{}, {"rtol": 1e-3}, {}, {"rtol": 1e-3}]:
        report = check(run, kept, split=split, **tolerance)
        assert summary(report) == summary(check(run, Reference.of(model), split=split, **tolerance))
        said.append((report.verdict, any("m and p are equal" in n for n in report.notes)))
    assert said == [("passed", False), ("FAILED", True)] * 2


def test_a_small_float64_comparison_element_by_element_answers_as_numpy_does():
    """Up to 32 elements are compared in Python floats: the same answer as NumPy's expression (the same array
    repeated past 32 elements takes it), on values that differ in their last bits, plainly, by an infinity or a
    NaN, at -0.0, past the largest double, and under a negative atol."""
    rng = np.random.default_rng(3)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308, 5e-324]
    answers = set()
    for _ in range(400):
        n = int(rng.integers(1, 33))
        y = rng.normal(size=n) * 10.0 ** rng.integers(-3, 4)
        a = y + rng.choice([0.0, 1e-12, 1e-6, 1.0], size=n) * rng.normal(size=n)
        for arr in (a, y):
            if rng.random() < 0.3:
                arr[rng.integers(n)] = rng.choice(specials)
        tol = (float(rng.choice([1e-7, 1e-3])), float(rng.choice([0.0, 1e-9, -1e-9])))
        small, large = _within(a, y, tol), _within(np.tile(a, 40), np.tile(y, 40), tol)
        assert small is large, (a, y, tol)
        answers.add(small)
    assert answers == {True, False, None}
    y = np.array([0.0, 1e-3, -2.5])  # under a negative atol only equal elements pass, as isclose's own test says
    for a, answer in [(y.copy(), True), (y + [0.0, 1e-15, 0.0], False)]:
        assert _within(a, y, (1e-7, -1e-9)) is _within(np.tile(a, 40), np.tile(y, 40), (1e-7, -1e-9)) is answer


def test_identify_names_what_a_comparison_with_each_names_on_float64_values_made_ready_in_one_go():
    """Values of one shape, all float64, are made ready together (samples, scales): a value 1e-7 off where the model's
    is 0 (within the floor its 1,000s give the tolerance) is still found there, and only there."""
    b = np.array([0.0, -1000.0, -1000.0, 0.0, -1000.0, -1000.0, 0.0])  # (zeros where identify samples first)
    values = {"b": b, "c": b * 2, "d": -b, "e": np.full(7, 3.0), "f": b.copy()}
    found = b + np.array([1e-7, 0.0, 0.0, 1e-7, 0.0, 0.0, 1e-7])
    for tolerance in [{}, {"rtol": 1e-9}, {"atol": 1e-12}]:
        want = [n for n, v in values.items() if same(found, v, **tolerance)]
        assert Reference(values=dict(values)).identify(found, **tolerance) == want
    assert [n for n, v in values.items() if same(found, v)] == ["b", "f"]


def test_zeros_that_two_names_hold_read_by_an_op_make_no_note_and_ones_do():
    """Zeros equal each other in every model (a fresh buffer, a zero gradient): an op reading them is not told that it
    cannot tell them apart; ones that two names hold are told, at each op that reads them."""

    def model(dev, fill):
        a = dev.hold("a", np.full(3, fill))
        dev.hold("b", np.full(3, fill))
        return dev.compute("c", np.add, a, 1.0)

    for fill, noted in [(0.0, False), (1.0, True)]:
        run, ref = World(1).run(model, fill), Reference.of(model, fill)
        for report in (check(run, ref), check(run, ref), check(as_records(run), ref)):
            assert report.ok and any("a and b are equal" in n for n in report.notes) is noted, report.notes


@pytest.mark.parametrize(
    "off, verdict",
    [  # (where the model has 0: past the lower bound, within the median's floor; a NaN where the model has one, the
        # rest a last bit off; plainly past float64's tolerance where the walk's first look does not see it, and where
        # it does)
        ([0.0, 1e-12] + [0.0] * 7, "passed"),
        ([np.nan] + [0.0] * 8, "passed"),
        ([0.0, 1e-5] + [0.0] * 7, "FAILED"),
        ([0.0] * 4 + [1e-5] + [0.0] * 4, "FAILED"),
    ],
    ids=["between the bounds", "NaN", "wrong", "wrong where it looks"],
)
def test_values_taken_as_right_and_found_not_plainly_close_are_compared_as_the_walk_compares_them(off, verdict):
    """The columnar walk takes float64 values off in their last bits as right and holds them all to it at its end: one
    past the lower bound is compared under its own tolerance, and one that is not the same after all sends the check
    back to compare each value as it comes. The report is the walk over records' each time."""
    x = np.array([3.0, 0.0, -2.0, 7.0, 1.5, -0.5, 2.5, 4.0, -6.0])

    def model(dev):
        a = dev.compute("a", np.multiply, dev.hold("x", x), 2.0)
        return dev.compute("b", np.add, a, 1.0)

    def program(dev):
        if dev.rank == 0:
            a = dev.compute("a", lambda v: v * 2.0 * (1 + 2e-16) + np.array(off), dev.hold("x", x))
            dev.send(a, 1)
            return None
        return dev.compute("b", np.add, dev.recv(0, name="a"), 1.0)

    if np.isnan(off[0]):
        x[0] = np.nan
    run, ref = World(2).run(program), Reference.of(model)
    report = both_ways(run, ref, None)
    assert report.verdict == verdict, report.text()


def test_a_message_a_last_bit_off_that_equals_two_values_is_noted_as_the_walk_over_records_notes_it():
    """A named message whose value is the model's a last bit off, where the model's x and y are equal: right, and
    noted as one that cannot tell x from y; the same a last bit off where they are not: right, and nothing noted."""
    x = np.array([1.5, -2.25, 4.0, 0.5, 3.0])

    def model(dev, twin):
        a = dev.hold("x", x)
        dev.hold("y", x.copy() if twin else x + 1.0)
        return dev.compute("b", np.add, a, 1.0)

    def program(dev, twin):
        if dev.rank == 0:
            dev.send(dev.hold("x", x) * (1 + 2e-16), 1)
            dev.hold("y", x.copy() if twin else x + 1.0)
            return None
        return dev.compute("b", np.add, dev.recv(0, name="x"), 1.0)

    for twin in (True, False):
        run, ref = World(2).run(program, twin), Reference.of(model, twin)
        report = both_ways(run, ref, None)
        assert report.ok and any("x and y" in n for n in report.notes) is twin, report.notes


@pytest.mark.parametrize("sent, said, verdict", [(0, 0, "passed"), (4, 4, "passed"), (4, 0, "FAILED")])
def test_a_chunk_named_by_its_place_in_the_flattened_value_is_compared_with_that_place(sent, said, verdict):
    """A message named x with index=FlatSlice(...) (a collective's chunk) is compared with that chunk of x: each chunk
    its own expected value, a chunk sent under another's place FAILS there, both ways."""
    x = np.arange(8.0).reshape(2, 4) * 0.5 - 1.0

    def model(dev):
        return dev.compute("y", np.multiply, dev.hold("x", x), 1.0)

    def program(dev):
        if dev.rank == 0:
            for start in (0, 4):
                dev.send(x.reshape(-1)[sent if start == said else start :][:4].copy(), 1)
            return None
        for start in (0, 4):
            dev.recv(0, name="x", index=FlatSlice(start, start + 4))
        return dev.compute("y", np.multiply, dev.hold("x", x), 1.0)

    run, ref = World(2).run(program), Reference.of(model)
    report = both_ways(run, ref, None)
    assert report.verdict == verdict, report.text()
    assert _index_key(FlatSlice(0, 4)) == _index_key(FlatSlice(0, 4)) != _index_key(FlatSlice(4, 8))
