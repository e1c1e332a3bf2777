"""The checker's walks over a columnar trace give what its walks over records give: the split check reading the
columns (a record made only where a rule must look), an op compared from its row, an index of positions keyed by
its bytes, a running sum known and added up from the sum before it. Each on wrong programs, held to the long way."""

import numpy as np
import pytest

from simulator import PerDevice, World
from simulator.checker import Reference, Split, check
from simulator.checker import reference as reference_module
from simulator.checker.compare import same
from simulator.checker.run_check import _Checker, _resolver
from simulator.checker.split_check import _SplitWalk
from simulator.teach.examples.context import SCENARIOS
from simulator.teach.exercises import EXERCISES
from tests import split_programs as P
from tests.checker.test_checker_fast_paths import as_records

PROGRAMS = [  # (exercise, program): cheats of the split catalogue, each breaking a rule, and right ones
    ("raw-input-bug", P.recompute_on_receiver),
    ("split-the-seed", P.x_crosses_and_b_does_both),
    ("split-the-seed", P.whole_model_on_device_1),
    ("split-the-seed", P.a_through_a_shared_list),
    ("split-the-seed", P.b_broadcast_by_device_0),
    ("raw-input-bug", P.b_sent_under_a_collective_label),
    ("raw-input-bug", P.b_returned_by_device_0_too),
    ("ring-all-reduce", P.ring_by_library),
    ("ring-all-reduce", P.ring_everyone_to_everyone),
    ("ring-all-reduce", P.ring_local_sum),
    ("ring-all-reduce", P.ring_through_a_shared_dict),
    ("column-split", P.column_by_swapping_weights),
    ("column-split", P.column_y_from_no_inputs),
    ("row-split", P.row_by_gather),
    ("row-split", P.row_on_the_whole_input),
    ("data-parallel-average", P.replica_on_the_whole_batch),
    ("zero-1-step", P.zero_state_under_own_name),
    ("split-the-seed", P.seed_b_from_nowhere_after_a_token),
    ("split-the-seed", P.seed_split_unnamed),
    ("ring-all-reduce", P.ring_own_names),
    ("row-split", P.row_unnamed_all_reduce),
    ("zero-1-step", P.zero_own_names),
]


def said(found) -> list:
    return [(v.kind, v.rank, v.event, v.text, type(v.record).__name__, getattr(v.record, "id", None)) for v in found]


def walked(trace, split, ref, outputs) -> tuple:
    """What the split walk knows at its end: what each device received, what its collectives brought, what it held
    or computed, the calls it took part in, what it sent; and what it found."""
    walk = _SplitWalk(trace, split, _resolver(ref), None, None)
    found = walk.walk(outputs)
    return (
        [[m.id for m in walk._got(r)] for r in range(trace.world_size)],
        [[id(v) for v in c] for c in walk.collected],
        [[(n, id(v)) for n, v in own] for own in walk.own],
        walk.own_names,
        walk.calls,
        walk.sent_bytes,
        walk.sent_messages,
        walk.over,
        said(found),
    )


@pytest.mark.parametrize("exercise, program", PROGRAMS, ids=lambda v: getattr(v, "__name__", None))
def test_the_split_walk_over_columns_breaks_the_rules_the_walk_over_records_breaks(exercise, program):
    ex = EXERCISES[exercise]()
    inputs = ex.inputs(np.random.default_rng(5))  # float data drawn at random, as a grade draws it
    split = ex.split(inputs)
    run = ex.run_program(program, inputs, split)
    ref = ex.reference(inputs)
    assert walked(run.trace, split, ref, run.outputs) == walked(as_records(run), split, ref, run.outputs)
    fast_report = check(run, ref, split=split, own_names=True)
    slow_report = check(as_records(run), ref, split=split, own_names=True)
    assert fast_report.text() == slow_report.text() and fast_report.verdict == slow_report.verdict


@pytest.mark.parametrize("sc", SCENARIOS, ids=lambda sc: sc.name)
def test_a_context_parallel_step_gets_the_verdict_and_first_divergence_of_the_walk_over_records(sc):
    """Ring attention: each device's tokens picked by an array of positions (the key of its expected values), held
    to its split; the masking bug FAILS at the same block of scores both ways."""
    run, ref = sc.world.run(sc.program, *sc.args), sc.reference()
    fast, slow = check(run, ref, split=sc.split), check(as_records(run), ref, split=sc.split)
    assert fast.text() == slow.text() and fast.checked == slow.checked
    assert fast.ok is (sc.expect == "match")
    if not fast.ok:
        assert (fast.first.where, fast.first.rank, fast.first.event) == (
            slow.first.where,
            slow.first.rank,
            slow.first.event,
        )


def test_a_reduce_to_one_device_is_a_collective_on_the_device_that_only_receives():
    """Device 0 only receives in a tree reduce over two devices: its reductions are the call's own, not ops of the
    program's (the call is known to it from the messages it received)."""
    x = np.array([[1.5, -0.25], [2.0, 4.0]])

    def model(dev):
        return dev.compute("s", lambda v: v.sum(axis=0), dev.hold("x", x))

    def program(dev, part):
        mine = dev.hold("x", part, index=np.s_[dev.rank])
        return dev.reduce(mine, 0)

    split = Split(given={"x": {0: np.s_[0], 1: np.s_[1]}}, collectives=("reduce",))
    run = World(2).run(program, PerDevice(lambda r: x[r]))
    ref = Reference.of(model)
    fast, slow = walked(run.trace, split, ref, run.outputs), walked(as_records(run), split, ref, run.outputs)
    assert fast == slow and fast[4][0] and fast[1][0]  # device 0 took part in the call, and its reduction is the call's


def test_a_split_that_rules_on_every_op_and_message_gets_the_walk_over_records_verdict():
    """Owners per name, what crosses, a budget: every op and message goes the long way, and breaks the same rules."""
    x = np.array([0.3, 1.7, -2.2, 0.9])

    def model(dev):
        a = dev.compute("a", np.multiply, dev.hold("x", x), 2.0)
        return dev.compute("b", np.add, a, 1.0)

    def wrong(dev):  # device 1 holds a, made from x it was sent, and sends b back unnamed
        if dev.rank == 0:
            dev.send(dev.hold("x", x), 1)
            dev.compute("a", np.multiply, x, 2.0)
            return dev.recv(1)
        h = dev.recv(0)
        b = dev.compute("b", np.add, dev.hold("a", h * 2.0), 1.0)
        dev.send(b, 0)
        return b

    split = Split(compute={"a": 0, "b": 1}, given={"x": 0}, crosses={"a": (0, 1), "b": (1, 0)}, budget=None)
    run = World(2).run(wrong)
    ref = Reference.of(model)
    fast, slow = walked(run.trace, split, ref, run.outputs), walked(as_records(run), split, ref, run.outputs)
    assert fast == slow
    assert any("device 1 holds a, which belongs to device 0" in v[3] for v in fast[-1])


RING_NAMES = ["x[0]", "x[0]+x[1]", "x[0]+x[1]+x[2]", "x[2]+x[3]+x[0]", "x[0]+x[9]", "x[9]+x[0]", "x[0]+", "+x[0]",
              "x[0]++x[1]", "s+x[2]", "s+x[2]+x[3]", "al", "al+x[1]", "p+q", "p+q+x[1]", "y"]  # fmt: skip


def test_a_running_sum_is_known_and_added_up_as_the_reference_knows_and_adds_it():
    """Known from the sum before it and its last term, added from the sum before it: the same answer and the same
    bits as ``Reference.knows`` and ``Reference.expected``, on float data where the order of additions shows, with
    names the model has whole (``s`` = ``x[0]+x[1]``), aliases and terms it does not have."""
    rng = np.random.default_rng(11)
    xs = rng.normal(size=(4, 6)) * 10.0 ** rng.integers(-6, 6, size=(4, 1))

    def model(dev):
        for r in range(4):
            dev.hold(f"x[{r}]", xs[r])
        dev.hold("s", xs[0] + xs[1] + 1.0)  # a value of its own, not the sum of its terms
        dev.hold("x[0]+x[1]", xs[0] * 3.0)  # a sum's name that is a value itself
        return dev.compute("y", lambda: xs.sum(axis=0))

    ref = Reference.of(model)
    ref.aliases["al"], ref.aliases["p+q"] = "x[2]", "x[3]"  # (a torch module's input is named after its source)
    run = World(1).run(lambda dev: None)
    for order in (RING_NAMES, RING_NAMES[::-1]):  # sums met after, and before, the sums of their first terms
        checker = _Checker(run.trace, run.outputs, _resolver(ref), None, None)
        for name in order:
            assert checker._knows(ref, name) is ref.knows(name), name
            if ref.knows(name):
                for index in (None, np.s_[2:4], (np.array([5, 0, 3]),)):
                    got = checker._expect(ref, name, index)[0]
                    np.testing.assert_array_equal(got, ref.expected(name, index), err_msg=name)
                    assert got.tobytes() == np.asarray(ref.expected(name, index)).tobytes(), name


def test_an_index_of_positions_is_kept_by_what_it_selects():
    """Two arrays of positions with the same values are one key; another dtype, shape or value is another."""
    from simulator.checker.expected import _index_key

    a = np.array([0, 1, 6, 7])
    assert _index_key((slice(None), a)) == _index_key((slice(None), a.copy()))
    keys = {
        _index_key((slice(None), a)),
        _index_key((slice(None), a.astype(np.int32))),
        _index_key((slice(None), a[::-1].copy())),
        _index_key((slice(None), a.reshape(2, 2))),
        _index_key((slice(None), a > 1)),
        _index_key((slice(None), np.array([0, 1, 6]))),
    }
    assert len(keys) == 6
    mask, positions = np.array([True, False]), np.array([1, 0], dtype=np.int8)  # the same bytes, other selections
    assert _index_key((mask,)) != _index_key((positions,))
    assert _index_key((np.array([0.0, 1.0]),)) is None  # not an index of positions: not remembered
    assert _index_key((np.arange(1 << 13),)) is None  # too large to key by its bytes


def test_a_part_picked_by_positions_is_compared_with_the_model_at_those_positions_each_time():
    """Device 1 holds tokens 2, 3, 4, 5 of h, then claims positions 2, 3, 4, 6 for the same values: the first is
    passed, the second FAILS, though both are h at an array of four positions (each array its own key)."""
    h = np.linspace(-1.0, 2.0, 8) ** 3

    def model(dev):
        return dev.hold("h", h)

    def program(dev):
        right = np.array([2, 3, 4, 5])
        dev.hold("h", h[right], index=(right,))
        if dev.rank == 1:
            dev.hold("h", h[right], index=(np.array([2, 3, 4, 6]),))
        return None

    run = World(2).run(program)
    report = check(run, Reference.of(model))
    assert report.verdict == "FAILED" and (report.first.rank, report.first.event) == (1, 2)
    assert check(as_records(run), Reference.of(model)).text() == report.text()


@pytest.mark.parametrize("tolerance", [{}, {"rtol": 0.3}, {"atol": 5.0}, {"rtol": 1e-12, "atol": 1e-12}])
def test_identify_finds_every_value_a_comparison_with_each_finds(tolerance):
    """identify looks at a few elements of every candidate at once before comparing any in full: it finds what
    comparing with every value of the model finds, on floats of several widths and scales, integers, booleans,
    NaNs and infinities, values a few ulps off, and with tolerances of the caller's (a looser one too)."""
    rng = np.random.default_rng(23)
    values = {}
    for k in range(60):
        kind = k % 6
        if kind == 0:
            v = rng.normal(size=(2, 3)) * 10.0 ** rng.integers(-5, 5)
        elif kind == 1:
            v = (rng.normal(size=(2, 3)) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
        elif kind == 2:
            v = rng.integers(-3, 4, size=(2, 3))
        elif kind == 3:
            v = rng.random((2, 3)) < 0.5
        elif kind == 4:
            v = rng.normal(size=(2, 3)).astype(np.float16)
        else:
            v = rng.normal(size=(2, 3))
            v[rng.integers(2), rng.integers(3)] = rng.choice([np.nan, np.inf, -np.inf])
        values[f"v{k}"] = v
    ref = Reference(values=values)
    names = list(values)
    with np.errstate(all="ignore"):
        for trial in range(300):
            base = values[names[rng.integers(len(names))]]
            found = np.array(base, dtype=rng.choice([base.dtype, np.float64, np.float32]))
            if rng.random() < 0.6 and found.dtype.kind == "f":
                found = found * (1 + rng.choice([1e-15, 1e-9, 1e-6, 1e-3, 0.2]) * rng.normal(size=found.shape))
                found = found.astype(base.dtype if rng.random() < 0.5 else found.dtype)
            every = [n for n, v in values.items() if same(found, v, **tolerance)]
            assert ref.identify(found, **tolerance) == every, (trial, found, every)


@pytest.mark.parametrize("program", [P.ring_own_names, P.ring_local_sum], ids=lambda p: p.__name__)
def test_the_terms_of_a_sum_are_paired_from_the_index_as_from_a_scan_of_the_trace(program):
    """Each device's k-th record of a name: gathered once per check (terms.by_name), as a scan of every op finds it."""
    from simulator.checker.terms import _terms_of, by_name

    ex = EXERCISES["ring-all-reduce"]()
    inputs = ex.inputs(np.random.default_rng(2))
    run = ex.run_program(program, inputs, ex.split(inputs))
    index = by_name(run.trace)
    ops = list(run.trace.ops)
    assert any(len(_terms_of(run.trace, op)) > 1 for op in ops)
    for op in ops:
        scanned, indexed = _terms_of(run.trace, op), _terms_of(run.trace, op, index=index)
        assert scanned.keys() == indexed.keys()
        assert all(np.array_equal(scanned[r], indexed[r]) for r in scanned)


@pytest.mark.parametrize("at_once", [256, 0], ids=["every answer at once", "each as met"])
@pytest.mark.parametrize("tolerance", [{}, {"rtol": 0.3}, {"atol": 5.0}, {"rtol": 1e-12, "atol": 1e-12}])
def test_a_value_with_the_bytes_of_a_model_value_is_identified_as_a_comparison_with_each_finds(
    tolerance, at_once, monkeypatch
):
    """identify answers a value with the dtype and bytes of one of the model's from that value's answer, worked out
    once (all of one shape at once, or, past a number of them, each as it is met): the same names as comparing with
    every value, where the model holds twins under two names, a twin a few ulps off, the same numbers in another
    dtype, zeros and a NaN; asked twice, with ``exclude``, and after the model gains a value (worked out again)."""
    monkeypatch.setattr(reference_module, "_ANSWERED_AT_ONCE", at_once)
    rng = np.random.default_rng(5)
    a = rng.normal(size=(3, 4))
    nan = a.copy()
    nan[1, 2] = np.nan
    values = {
        "a": a,
        "a_twin": a.copy(),
        "a_near": a * (1 + 1e-13),
        "a32": a.astype(np.float32),
        "b": rng.normal(size=(3, 4)),
        "zeros": np.zeros((3, 4)),
        "zeros_too": np.zeros((3, 4)),
        "nan": nan,
        "ints": rng.integers(-3, 4, size=(3, 4)),
        "mask": rng.random((3, 4)) < 0.5,
    }
    ref = Reference(values=dict(values))
    for round_ in range(3):
        if round_ == 2:
            ref.values["a_later"] = a + 0.0  # a new value of the same shape: every answer worked out again
            values["a_later"] = ref.values["a_later"]
        for name, v in values.items():
            found = v.copy()
            every = [n for n, w in values.items() if same(found, w, **tolerance)]
            assert ref.identify(found, **tolerance) == every, (name, round_)
            rest = [n for n in every if n != name]
            assert ref.identify(found, exclude=name, **tolerance) == rest, (name, round_)
