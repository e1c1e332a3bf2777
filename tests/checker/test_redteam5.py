"""The fifth pass: programs nobody here wrote, each held to the verdict it deserves on every path (the default World,
message by message, on the columns and on records, and real gloo processes where it applies). Each test names what
it found wrong before its fix."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from tests.checker.test_redteam4 import a_gradient_off

REAL_MAX, REAL_ABS = builtins.max, builtins.abs


def max_that_widens_a_floor(*args, **kwargs):
    """``max`` as a gaming student's cell may rebind it: the tolerance's ``max(atol or 0.0, floor)`` gives 10."""
    if len(args) == 2 and args[0] == 0.0 and type(args[1]) is float:
        return 10.0
    return REAL_MAX(*args, **kwargs)


def abs_of_nothing(v):
    """``abs`` that says every float difference is 0 (the checker compares small float64 arrays element by element)."""
    return 0.0 if type(v) is float else REAL_ABS(v)


@pytest.mark.parametrize(
    "name, fake",
    [("max", max_that_widens_a_floor), ("abs", abs_of_nothing), ("float", type("float", (float,), {}))],
)
def test_in_a_notebook_a_builtin_rebound_is_refused(monkeypatch, name, fake):
    """Python's builtins are the grader's too: ``builtins.max`` rebound to give 10 where the checker takes the larger
    of atol and the float floor passed a gradient 0.05 off (so did ``abs`` giving 0 for floats). The grade says the
    grader was changed, naming it."""
    from simulator.teach.exercises import start

    ex = start("data-parallel-average")
    monkeypatch.setattr(builtins, name, fake)
    result = ex.grade(a_gradient_off, seed=1)
    monkeypatch.undo()
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert f"builtins.{name}" in result.text()


def test_in_a_notebook_a_builtin_added_or_the_last_value_set_changes_nothing(monkeypatch):
    """What a notebook adds to builtins (IPython's ``display``) or the prompt's last value ``_`` (a class, say) is not a
    change of the grader: the right answer still passes."""
    from simulator.teach.exercises import start

    ex = start("data-parallel-average")
    monkeypatch.setattr(builtins, "display", print, raising=False)
    monkeypatch.setattr(builtins, "_", int, raising=False)
    assert ex.grade(gradients_averaged, seed=1).verdict == "passed"


def gradients_averaged(dev, x, y, w):
    """The data-parallel exercise's answer, right."""
    from simulator.teach.exercises.data import mean_gradient

    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    x, y, w = dev.hold("X", x, index=rows), dev.hold("y", y, index=rows), dev.hold("w", w)
    return dev.all_reduce(dev.compute("g.local", mean_gradient, x, y, w), op="avg", name="g")


def library_ring_under_another_name(dev, x, tag=None):
    """The ring exercise's answer as a gaming student writes it: the library's own ring all-reduce, called through its
    internals with a kind of the student's ("my ring"), so that its messages' labels name no collective; ``tag``:
    the call's tag then set to one a program's send may use."""
    from simulator.collectives.call import _Call
    from simulator.collectives.ring import _all_reduce_ring

    call = _Call(dev, "my ring", None, "ring", op="sum")
    if tag is not None:
        call.tag = tag
    return _all_reduce_ring(call, x)


@pytest.mark.parametrize("tag", [7, "CollectiveTag(7)"])
def test_the_library_s_ring_under_a_program_s_tag_is_refused(tag):
    """The same ring with its call's tag set to 7 (or a CollectiveTag of 7) sent its messages as a program's own:
    the grade passed. A call's sends are refused under any tag but its own, saying how to call the collective."""
    from simulator.core.tags import CollectiveTag
    from simulator.teach.exercises import grade

    tag = CollectiveTag(7) if tag == "CollectiveTag(7)" else tag
    result = grade("ring-all-reduce", lambda dev, x: library_ring_under_another_name(dev, x, tag), seed=1)
    assert result.verdict == "FAILED", result.text()
    assert "sends under its call's own tag" in result.text() and "through the device" in result.text(), result.text()


def test_the_library_s_ring_under_another_name_breaks_a_split_that_allows_no_collective():
    """A collective's messages carry a collective's tag (from TAG_BASE, which no program's send may use): the library's
    ring called under a label of the student's own was taken for a ring by hand, and passed the ring exercise, in a
    notebook and through ``grade FOLDER``. The split now reads the tag: FAILED, naming the call, on every path."""
    from simulator.checker import Split
    from simulator.teach.exercises import grade
    from simulator.teach.exercises.ring import XS, one_device
    from tests.checker.test_checker_fast_paths import as_records

    result = grade("ring-all-reduce", library_ring_under_another_name, seed=1)
    assert result.verdict == "FAILED", result.text()
    assert "my ring" in result.text() and "allows no collective" in result.text(), result.text()
    for book in (True, False):
        run = World(4, book_collectives=book).run(lambda dev: library_ring_under_another_name(dev, XS[dev.rank]))
        for trace in (run, as_records(run)):
            report = check(trace, Reference.of(one_device), split=Split(collectives=()), own_names=True)
            assert report.verdict == "FAILED", report


SUMS_BY_IDENTITY: dict[int, np.ndarray] = {}


def sum_kept_by_the_inputs_identity(dev, x):
    """A gaming student's ring: every device's vector read from the grader's frame, their sum kept by the identity of
    the array found there (the isolation check's reruns change that array in place: the same object, so the sum kept
    from the first run answers), and the finished chunks passed round the ring so that each device receives each."""
    frame = dev._engine._sched.gr_frame  # the scheduler's frame, below the grader's
    while "inputs" not in frame.f_locals:
        frame = frame.f_back
    xs = frame.f_locals["inputs"]["xs"]
    v = SUMS_BY_IDENTITY.setdefault(id(xs), np.array(xs).sum(axis=0))
    p, r = dev.world_size, dev.rank
    got = []
    for chunk in np.split(v, p):
        dev.send(chunk, (r + 1) % p)
        got.append(dev.recv((r - 1) % p))
    return np.concatenate(got)


def test_a_sum_kept_by_the_identity_of_the_inputs_it_found_fails_the_ring():
    """The isolation check's reruns change the inputs in place, so a sum kept from the first run under the identity of
    the array the program found in the grader's frame stayed as it was, and nothing seemed to depend on another
    device's vector: the answer passed. The grade's later input sets are written into the same arrays, so the kept
    sum answers for numbers it was not made from: FAILED."""
    from simulator.teach.exercises import grade

    SUMS_BY_IDENTITY.clear()
    result = grade("ring-all-reduce", sum_kept_by_the_inputs_identity, seed=1)
    assert result.verdict == "FAILED" and result.error is None, result.text()
    assert "(this is with other inputs than the notebook's" in result.text(), result.text()


class NotebookNumbers:
    """A random generator as a gaming student's cell may hand the grader: every draw of integers is the ring
    notebook's vectors (so every random input set is the notebook's own), anything else from a real generator."""

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        from simulator.teach.exercises.ring import XS

        return np.resize(XS, size).astype(dtype)

    def __getattr__(self, name):
        return getattr(np.random.Generator(np.random.PCG64(0)), name)


def sum_written_in(dev, x):
    """The ring exercise's answer hard-coded: the notebook's sum, whatever the vectors; the finished chunks passed
    round the ring so that each device receives each."""
    from simulator.teach.exercises.ring import XS

    v = XS.sum(axis=0)
    p, r = dev.world_size, dev.rank
    for chunk in np.split(v, p):
        dev.send(chunk, (r + 1) % p)
        dev.recv((r - 1) % p)
    return v.copy()


def test_in_a_notebook_numpy_s_random_generator_rebound_is_refused(monkeypatch):
    """A grade's random input sets come from ``np.random.default_rng``: rebound to a generator that draws the
    notebook's numbers, every set was the notebook's and a hard-coded answer passed the ring. numpy.random is in the
    grader's snapshot: the grade says the grader was changed."""
    from simulator.teach.exercises import start

    ex = start("ring-all-reduce")
    assert ex.grade(sum_written_in, seed=1).verdict == "FAILED"
    monkeypatch.setattr(np.random, "default_rng", lambda *args, **kwargs: NotebookNumbers())
    result = ex.grade(sum_written_in, seed=1)
    monkeypatch.undo()
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert "numpy.random.default_rng" in result.text()


@pytest.mark.parametrize("book", [True, False])
def test_an_all_gather_of_pieces_of_different_sizes_says_to_give_shapes(book):
    """A student's reduce-scatter of 10 numbers over 4 devices (torch.chunk's pieces: 3, 3, 3, 1), then an all-gather
    of the pieces: each member takes every piece to be the size of its own, and the calls differ. The error said only
    that every member must pass the same shapes; it says now to give every member the same shapes=, and with them the
    sum comes back whole."""
    from simulator.core.errors import CollectiveMismatchError

    xs = np.arange(40.0).reshape(4, 10) % 7 - 3

    def gathered(dev, xs, shapes=None):
        return dev.all_gather(dev.reduce_scatter(xs[dev.rank]), axis=0, shapes=shapes)

    with pytest.raises(CollectiveMismatchError, match=r"pieces of different sizes: give every member the same shapes="):
        World(4, book_collectives=book).run(gathered, xs)
    run = World(4, book_collectives=book).run(gathered, xs, [(3,), (3,), (3,), (1,)])
    for out in run.outputs:
        np.testing.assert_array_equal(out, xs.sum(axis=0))


def ring_of_uneven_chunks(dev, xs):
    """A student's ring all-reduce, no names, chunks by np.array_split (sizes that do not divide), receives without
    a contract, the running sums kept in a list."""
    p, r = dev.world_size, dev.rank
    parts = [c.copy() for c in np.array_split(dev.hold(f"x[{r}]", xs[r]), p)]
    for s in range(p - 1):
        dev.send(parts[(r - s) % p], (r + 1) % p)
        j = (r - s - 1) % p
        parts[j] = parts[j] + dev.recv((r - 1) % p)
    for s in range(p - 1):
        dev.send(parts[(r + 1 - s) % p], (r + 1) % p)
        parts[(r - s) % p] = dev.recv((r - 1) % p)
    return np.concatenate(parts)


def doubling_in_place(dev, xs):
    """Recursive doubling by hand: isend a copy to the partner at distance 1, 2, ..., receive its sum, add in place."""
    p, r = dev.world_size, dev.rank
    buf = np.array(dev.hold(f"x[{r}]", xs[r]))
    d = 1
    while d < p:
        req = dev.isend(buf.copy(), r ^ d)
        got = dev.recv(r ^ d)
        dev.wait(req)
        buf += got
        d *= 2
    return buf


def max_reduced_then_broadcast(dev, xs):
    """The built-in reduce (op max) to device 0, then its broadcast, both named."""
    v = dev.reduce(dev.hold(f"x[{dev.rank}]", xs[dev.rank]), 0, op="max", name="v")
    return dev.broadcast(v, 0, name="v")


def reduced_by(reduce, p):
    def model(dev, xs):
        for r in range(p):
            dev.hold(f"x[{r}]", xs[r])
        return dev.compute("v", lambda: reduce(xs))

    return model


RNG = np.random.default_rng(1)
STUDENTS = {  # name -> (devices, program, data, model, verdict)
    # the running sums carry no name: not verified, the result compared
    "ring, uneven chunks, float32": (
        3, ring_of_uneven_chunks, RNG.standard_normal((3, 7)).astype(np.float32),
        reduced_by(lambda a: a.sum(axis=0), 3), "not verified",
    ),
    "recursive doubling, float16": (
        4, doubling_in_place, RNG.standard_normal((4, 64)).astype(np.float16),
        reduced_by(lambda a: a.sum(axis=0, dtype=np.float16), 4), "not verified",
    ),
    "max reduced, broadcast": (
        4, max_reduced_then_broadcast, RNG.uniform(0.5, 1.5, (4, 6)), reduced_by(lambda a: a.max(axis=0), 4), "passed",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(STUDENTS))
def test_students_programs_simulated(name):
    p, program, xs, model, verdict = STUDENTS[name]
    for book in (True, False):
        assert check(World(p, book_collectives=book).run(program, xs), Reference.of(model, xs)).verdict == verdict


@pytest.mark.slow
@pytest.mark.gloo
@pytest.mark.parametrize("name", list(STUDENTS))
def test_students_programs_on_gloo(name, gloo_worlds):
    p, program, xs, model, verdict = STUDENTS[name]
    assert check(gloo_worlds(p, timeout=30).run(program, xs), Reference.of(model, xs)).verdict == verdict


@pytest.mark.parametrize("disarm", ["Snapshot.changed", "integrity._take"])
def test_in_a_notebook_the_snapshot_s_own_code_rebound_is_refused(monkeypatch, disarm):
    """The snapshot that refuses a changed grader was not in itself: ``Snapshot.changed`` made to say nothing changed
    (or the module's ``_take`` made to hand the snapshot back), then ``builtins.max`` rebound, passed a gradient 0.05
    off. The grade keeps the comparison it loaded with, and names the rebinding."""
    from simulator.teach.exercises import integrity, start

    ex = start("data-parallel-average")
    if disarm == "Snapshot.changed":
        monkeypatch.setattr(integrity.Snapshot, "changed", lambda self: [])
    else:
        monkeypatch.setattr(integrity, "_take", lambda: ex._snapshot.taken)
    monkeypatch.setattr(builtins, "max", max_that_widens_a_floor)
    result = ex.grade(a_gradient_off, seed=1)
    monkeypatch.undo()
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert "builtins.max" in result.text() and f"integrity.{disarm.removeprefix('integrity.')}" in result.text()


class TakesWhatItIsComparedWith:
    """A result that a gaming student returns: NumPy reads it as the model's value, found in the frame that reads it
    (``expected``, inside the check), or as zeros anywhere else."""

    def __array__(self, dtype=None, copy=None):
        import sys

        frame = sys._getframe(1)
        while frame is not None:
            v = frame.f_locals.get("expected")
            if isinstance(v, np.ndarray):
                return v
            frame = frame.f_back
        return np.zeros(8)


class EqualToAnything:
    """A result whose == says True to anything."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def summed_vectors(dev, xs):
    for r in range(len(xs)):
        dev.hold(f"x[{r}]", xs[r])
    return dev.compute("v", lambda: xs.sum(axis=0))


def summed_to_a_number(dev, xs):
    for r in range(len(xs)):
        dev.hold(f"x[{r}]", xs[r])
    return dev.compute("v", lambda: float(xs.sum()))


@pytest.mark.parametrize(
    "liar, model", [(TakesWhatItIsComparedWith, summed_vectors), (EqualToAnything, summed_to_a_number)]
)
def test_a_result_that_answers_what_the_check_holds_fails(liar, model):
    """A device that computes nothing and returns an object read as an array only when the check reads it (then it
    takes the model's value from the check's frame), or one whose == says yes to anything: both passed the check.
    What a device returns is read when it returns, and a number is matched by numbers only: FAILED, booked or not,
    columns or records, and on gloo ranks alike (their results are read where they return)."""
    from tests.checker.test_checker_fast_paths import as_records

    xs = np.arange(32.0).reshape(4, 8) % 7 - 3
    for book in (True, False):
        run = World(4, book_collectives=book).run(lambda dev, xs: liar(), xs)
        for trace in (run, as_records(run)):
            assert check(trace, Reference.of(model, xs)).verdict == "FAILED"


def returns_what_it_is_compared_with(dev, xs):
    return TakesWhatItIsComparedWith()


@pytest.mark.slow
@pytest.mark.gloo
def test_on_gloo_a_result_that_answers_what_the_check_holds_fails(gloo_worlds):
    xs = np.arange(32.0).reshape(4, 8) % 7 - 3
    run = gloo_worlds(4, timeout=30).run(returns_what_it_is_compared_with, xs)
    assert check(run, Reference.of(summed_vectors, xs)).verdict == "FAILED"


def names_what_it_is_compared_with(dev, xs):
    """The library's all-reduce for the result, and an op named v that computes nothing but the object above."""
    dev.compute("v", lambda: TakesWhatItIsComparedWith())
    return dev.all_reduce(xs[dev.rank])


def test_an_op_whose_output_answers_what_the_check_holds_fails():
    """An op's output is read when the op returns too: an op v that made only such an object passed as v."""
    xs = np.arange(32.0).reshape(4, 8) % 7 - 3
    for book in (True, False):
        run = World(4, book_collectives=book).run(names_what_it_is_compared_with, xs)
        assert check(run, Reference.of(summed_vectors, xs)).verdict == "FAILED"


def zeroes_the_grader_s_inputs(dev, x):
    """A gaming student's ring: every input found in the grader's frames set to zero (the model's sum is then zero),
    zeros passed round the ring, zeros returned."""
    frame = dev._engine._sched.gr_frame
    while frame is not None:
        found = frame.f_locals.get("inputs")
        if isinstance(found, dict) and "xs" in found:
            found["xs"][...] = 0.0
        frame = frame.f_back
    p, r = dev.world_size, dev.rank
    for _ in range(p):
        dev.send(np.zeros(2), (r + 1) % p)
        dev.recv((r - 1) % p)
    return np.zeros(8)


def loosens_the_grader_s_split(dev, x):
    """The library's all-reduce, after the split found in the grader's frames is made to allow any collective."""
    from simulator.checker import Split

    frame = dev._engine._sched.gr_frame
    while frame is not None:
        found = frame.f_locals.get("split")
        if isinstance(found, Split):
            object.__setattr__(found, "collectives", None)
            object.__setattr__(found, "budget", None)
        frame = frame.f_back
    return dev.all_reduce(dev.hold(f"x[{dev.rank}]", x), name="v")


@pytest.mark.parametrize("program", [zeroes_the_grader_s_inputs, loosens_the_grader_s_split])
def test_a_program_that_changes_what_it_is_graded_against_is_refused(program):
    """The inputs and the split a grade checks a run against were the objects the program could find in the grader's
    frames: zeroed inputs made the model's sum zero, as the program's was; a split made to allow any collective let
    the library's all-reduce through. Both passed the ring. What the run is graded against is noted, as values,
    before it runs and compared after: FAILED, saying the program changed it."""
    from simulator.teach.exercises import grade

    result = grade("ring-all-reduce", program, seed=1)
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert "changed the exercise's inputs, its split or its definition" in result.text()
