"""The fifth pass on the grader in a notebook (``start(name).grade``, ``grade(name, program)``): what a gaming
student's cell or program can change around a grade, each held to FAILED with the reason; each test names what
passed before its fix. The checker's own cases: tests/checker/test_redteam5.py."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from tests.checker.test_redteam4 import a_gradient_off

REAL_MAX, REAL_ABS = builtins.max, builtins.abs
SUMS_BY_IDENTITY: dict[int, np.ndarray] = {}


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
