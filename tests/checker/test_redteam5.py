"""The fifth pass: programs nobody here wrote, each held to the verdict it deserves on every path (the default World,
message by message, on the columns and on records, and real gloo processes where it applies). Each test names what
it found wrong before its fix. The grader in a notebook: tests/teach/test_grading_redteam5.py."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check


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


@pytest.mark.parametrize(
    "algorithm, function",
    [
        ("tree", "simulator.collectives.tree._all_reduce_tree"),
        ("direct", "simulator.collectives.direct._all_reduce_direct"),
        ("halving_doubling", "simulator.collectives.halving_doubling._all_reduce_halving_doubling"),
    ],
)
@pytest.mark.parametrize("book", [True, False])
def test_the_library_s_other_all_reduces_under_a_program_s_tag_are_refused(algorithm, function, book):
    """The ring's sends were refused under a tag of the program's, but the tree's, the direct and the halving-doubling
    all-reduce send through ``_Call.send``, which took any tag: the library's tree all-reduce called through its
    internals with its tag set to 7 passed a split that allows no collective (its messages the program's own)."""
    import importlib

    from simulator.checker import Split
    from simulator.collectives.call import _Call
    from simulator.core.errors import RankError
    from simulator.teach.exercises.ring import XS, one_device

    module, name = function.rsplit(".", 1)
    all_reduce = getattr(importlib.import_module(module), name)

    def program(dev):
        call = _Call(dev, "my sum", None, algorithm, op="sum")
        call.tag = 7
        return all_reduce(call, XS[dev.rank])

    with pytest.raises(RankError, match="sends under its call's own tag .* call a collective through the device"):
        run = World(4, book_collectives=book).run(program)
        check(run, Reference.of(one_device), split=Split(collectives=()), own_names=True)


def computes_with_torch(dev, xs):
    """An engineer's program that computes with torch tensors inside its ops, then all-reduces the result."""
    import torch

    t = dev.compute("t", lambda: torch.as_tensor(xs[dev.rank]) * 2.0)
    u = dev.compute("u", lambda a: torch.relu(a - 1.0), t)  # a torch function of the op before's tensor
    return dev.all_reduce(u.numpy())


def relu_summed(dev, xs):
    return dev.hold("v", sum(np.maximum(2.0 * x - 1.0, 0.0) for x in xs))


@pytest.mark.parametrize("book", [True, False])
def test_an_op_s_torch_tensor_stays_a_tensor_for_the_program(book):
    """Reading every op's output that NumPy can read when the op returns made a torch tensor a NumPy array: the next
    op's torch.relu then raised TypeError (must be Tensor, not numpy.ndarray). A torch tensor stays one; an object of
    another class is still read when the op returns (test_an_op_whose_output_answers_what_the_check_holds_fails)."""
    pytest.importorskip("torch")
    xs = np.arange(32.0).reshape(4, 8) % 7 - 3
    run = World(4, book_collectives=book).run(computes_with_torch, xs)
    assert check(run, Reference.of(relu_summed, xs), own_names=True).verdict == "passed"


@pytest.mark.slow
@pytest.mark.gloo
def test_on_gloo_an_op_s_torch_tensor_stays_a_tensor_for_the_program(gloo_worlds):
    xs = np.arange(32.0).reshape(4, 8) % 7 - 3
    run = gloo_worlds(4, timeout=30).run(computes_with_torch, xs)
    assert check(run, Reference.of(relu_summed, xs), own_names=True).verdict == "passed"
