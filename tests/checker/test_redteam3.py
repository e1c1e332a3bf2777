"""Right programs written as students write them, and wrong ones written to game the grader, each held to the verdict
it deserves on the default World (a ring all-reduce booked whole) and message by message (``book_collectives=False``),
on the columns and on plain records: float16 sums added in the ring's order (right) and a quarter off (wrong); an op
whose output is a view of a buffer the device reuses afterwards (right: the trace keeps what the op made); vectors
too large to compare by a copy of their bytes, one element off (wrong); a's bytes sent as integers under a's name
(wrong). Each of the checker's short cuts that these reach fails a test here when it is broken."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from tests.checker.test_checker_fast_paths import as_records

P = 4


def vectors(n: int, dtype, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((P, n)).astype(dtype)


def summed(dev, xs):
    """The model: every device's vector, and their sum."""
    for r in range(P):
        dev.hold(f"x[{r}]", xs[r])
    return dev.compute("v", lambda: xs.sum(axis=0))


def verdicts(program, model, args, margs=None, p=P, **kw) -> set[str]:
    """The verdicts of one program on the default World and message by message, each on the columns and on records."""
    found = set()
    for world in (World(p), World(p, book_collectives=False)):
        run = world.run(program, *args)
        for trace in (run, as_records(run)):
            found.add(check(trace, Reference.of(model, *(args if margs is None else margs)), **kw).verdict)
    return found


def built_in(dev, xs, name=None, off=0.0):
    """The library's all-reduce of this device's vector; ``off``: added to element 1 of the result."""
    v = dev.all_reduce(dev.hold(f"x[{dev.rank}]", xs[dev.rank]), name=name)
    if off:
        v = v.copy()
        v[1] += off
    return v


@pytest.mark.parametrize("name", [None, "v"])
@pytest.mark.parametrize("off, verdict", [(0.0, "passed"), (0.25, "FAILED")])
def test_a_float16_all_reduce_passes_where_its_sum_was_added_in_another_order(name, off, verdict):
    """float16 sums of four vectors added in the ring's order differ from the model's by an ulp or two of the partial
    sums, which is much of an element near zero: they pass; an element a quarter off FAILS."""
    xs = vectors(1000, np.float16)
    assert verdicts(built_in, summed, (xs, name, off), (xs,)) == {verdict}
    # float16's own rtol given, or a looser one, never makes the floor tighter: the right sum still passes
    for rtol in (1e-2, 2e-2):
        assert verdicts(built_in, summed, (xs, name, off), (xs,), rtol=rtol) == {verdict}


@pytest.mark.parametrize("rtol", [None, 5e-2, 1e-3])
def test_identify_and_same_agree_on_float16_values_a_few_ulps_apart(rtol):
    """float16 values whose near-zero elements are an ulp or a few off: ``identify`` (its look at three elements first,
    its answers per shape) names every value a comparison with each names, under the default, a looser and a tighter
    rtol; the median's floor (``compare.floor_share``) lets one ulp of a typical element through by default."""
    from simulator.checker.compare import same, tolerances

    rng = np.random.default_rng(3)
    base = np.array([1.5, -2.0, 0.01, 1.0, -0.75], dtype=np.float16)
    assert tolerances(base)[1] >= float(np.finfo(np.float16).eps) * 1.0  # one ulp of the median (1.0) at least
    for _ in range(200):
        ref = Reference()
        for k in range(4):
            v = base.copy()
            v[rng.integers(v.size)] += np.float16(rng.choice([0.0, 1, 3, 10, 30]) * 2.0**-10)
            ref.values[f"v{k}"] = v
        found = base.copy()
        found[rng.integers(found.size)] += np.float16(rng.choice([0.0, 1, 3, 10, 30]) * 2.0**-10)
        every = [n for n, v in ref.values.items() if same(found, v, rtol)]
        assert ref.identify(found, rtol=rtol) == every


def doubled_then_one_more(dev):
    """The model: x, a = 2x, b = a + 1."""
    a = dev.compute("a", lambda v: v * 2.0, dev.hold("x", np.array([1.0, 2.0, 3.0, 4.0])))
    return dev.compute("b", lambda v: v + 1.0, a)


@pytest.mark.parametrize(
    "view", [lambda buf: buf[:], lambda buf: buf.reshape(2, 2).reshape(4), lambda buf: buf[::-1][::-1]]
)
def test_an_op_whose_output_is_a_view_of_a_buffer_reused_later_keeps_what_it_computed(view):
    """A device computes a into a working buffer and records a view of it, sends it, then reuses the buffer: the trace
    keeps the a the op made (the program's later writes go to its buffer, not to the record), so the run passes, and
    the device may keep writing its buffer."""

    def program(dev):
        if dev.rank == 0:
            x = dev.hold("x", np.array([1.0, 2.0, 3.0, 4.0]))
            buf = np.empty(4)
            buf[:] = x * 2.0
            dev.send(dev.compute("a", lambda v: view(buf), x), 1)
            buf[:] = -1.0  # the buffer reused
            return None
        return dev.compute("b", lambda v: v + 1.0, dev.recv(0))

    assert verdicts(program, doubled_then_one_more, (), p=2) == {"passed"}


LARGE = 20_000  # elements: more than compare.EXACT_BY_BYTES, so the same-bytes test compares in place


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
@pytest.mark.parametrize("name", [None, "v"])
@pytest.mark.parametrize("off, verdict", [(0, "passed"), (1, "FAILED")])
def test_a_large_all_reduce_one_element_off_fails_where_a_right_one_passes(dtype, name, off, verdict):
    """Vectors too large to compare by a copy of their bytes (``compare.identical`` compares them in place): the sum
    right passes, and one element off (by 1e-3 in float64, by 1 in int64), far from the elements a first look reads,
    FAILS, booked or not."""
    xs = (vectors(LARGE, np.float64) * 100).astype(dtype)
    assert verdicts(large_off, summed, (xs, name, off * (1e-3 if dtype == np.float64 else 1)), (xs,)) == {verdict}


def large_off(dev, xs, name, off):
    v = dev.all_reduce(dev.hold(f"x[{dev.rank}]", xs[dev.rank]), name=name)
    if off:
        v = v.copy()
        v[LARGE // 3 + 7] += off
    return v


@pytest.mark.parametrize("view", [False, True])
def test_a_message_with_the_model_s_bytes_under_another_dtype_fails_at_that_message(view):
    """Device 0 sends a's bytes read as integers, under a's name, and device 1 reads them back as floats: the sum is
    right, but what crossed under a's name is not a (the same bytes are the same value only in the same dtype)."""

    def program(dev):
        if dev.rank == 0:
            a = dev.compute("a", lambda v: v * 2.0, dev.hold("x", np.array([1.0, 2.0, 3.0, 4.0])))
            dev.send(a.view(np.int64) if view else a, 1)
            return None
        got = dev.recv(0, name="a")
        return dev.compute("b", lambda v: v + 1.0, got.view(np.float64) if view else got)

    for world in (World(2), World(2, book_collectives=False)):
        run = world.run(program)
        for trace in (run, as_records(run)):
            report = check(trace, Reference.of(doubled_then_one_more))
            assert report.verdict == ("FAILED" if view else "passed"), report.text()
            assert not view or (report.first.where, report.first.name) == ("message", "a"), report.text()


def test_the_whole_of_an_input_computed_after_a_block_of_it_breaks_the_split_on_columns_too():
    """Each device holds its rows of X (by a function of the value: an index no key is made of), computes its rows of Y
    from them, then computes X whole from its argument and Y from that: more than it was given. What the walk
    remembers of a value that is the model's byte for byte (kept per name) is never its block's answer: both
    devices break the split, on the columns as on records."""
    from simulator.checker.split import ALL, Split

    rows = Split(given={"X": {0: np.s_[0:2], 1: np.s_[2:4]}, "W": ALL})
    X, W = np.arange(12.0).reshape(4, 3) * 0.5 - 1, np.arange(6.0).reshape(3, 2) * 0.25 + 0.1

    def model(dev, X, W):
        return dev.compute("Y", np.matmul, dev.hold("X", X), dev.hold("W", W))

    def program(dev, X, W):
        lo = 2 * dev.rank
        block = dev.hold("X", X[lo : lo + 2], index=lambda v: v[lo : lo + 2])
        w = dev.hold("W", W)
        dev.compute("Y", np.matmul, block, w, index=np.s_[lo : lo + 2])
        whole = dev.compute("X", lambda v: X, block)  # read from the argument, not received
        return dev.compute("Y", np.matmul, whole, w)

    run = World(2).run(program, X, W)
    for trace in (run, as_records(run)):
        report = check(trace, Reference.of(model, X, W), split=rows)
        assert [(v.kind, v.rank) for v in report.broken] == [("given", 0), ("given", 1)], report.text()


@pytest.mark.parametrize(
    "dtype, off, rtol", [(np.float32, 2e-4, "1e-3"), (np.float32, 4e-3, "1e-2"), (np.float16, 4e-3, "1e-2")]
)
def test_the_rounding_hint_names_a_tolerance_that_allows_the_differences(dtype, off, rtol):
    """Small float32 or float16 differences are told they may be rounding, with an rtol that would allow them: never
    one tighter than the differences (float16's own is 1e-2; 1e-3 would fail more)."""
    from simulator.checker.compare import difference, same

    exact = np.random.default_rng(5).standard_normal(64).astype(dtype) + np.asarray(3.0, dtype)
    found = exact.copy()
    found[3] = exact[3] * (1 + off)
    said = difference(found, exact, rtol=1e-4 if dtype == np.float16 else None)
    assert f"check(..., rtol={rtol})" in said, said
    assert same(found, exact, float(rtol))


def test_an_op_whose_output_is_a_broadcast_of_a_small_array_stays_a_view():
    """A view larger than the memory under it (a broadcast mask of 4 numbers standing for 16 million) is not copied
    whole into the trace: a copy of what a view reads is kept only where it is no larger than that memory."""

    def program(dev):
        row = np.zeros(4)  # the program's own, writable
        return dev.compute("mask", lambda: np.broadcast_to(row, (2000, 2000, 4))).strides

    assert 0 in World(1).run(program).outputs[0]
