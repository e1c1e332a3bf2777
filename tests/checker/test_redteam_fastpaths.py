"""Cheats and right programs held to the checker's fast paths (values known by their bytes, answers kept per
shape, a value looked at once per device, running sums from the sum before, a ring member's steps in one loop).

Each program is written as a student or a cheat writes it: own names, receives without name=, float32, float64
and integer data, batch size 1; a receiver that recomputes what should have crossed, a hard-coded answer, data
through a module-level dict or a class attribute, a value that equals one of the model's by its bytes but stands
in the wrong place, NaN, -0.0, zeros that equal two names, the same wrong value used twice, a running sum with a
wrong term. Each pins the verdict and the first divergence (or the rules broken); the walk over the columns, the
walk over plain records and a second check with the same reference (whose answers are then remembered) agree.
Every verdict here is the one the checker gave before the fast paths (e844411), program for program.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from simulator.checker.compare import same
from simulator.checker.split import ALL, Split
from tests.checker.test_checker_fast_paths import as_records


def stage_a(v):
    return 2 * v + 1


def two_stages(dev, x):
    return dev.compute("B", np.square, dev.compute("A", stage_a, x))


SEED = Split(compute={"A": 0, "B": 1}, given={"x": {0: ALL}}, crosses={"A": (0, 1)})


def right(dev, x):
    if dev.rank == 0:
        dev.send(dev.compute("A", stage_a, x), 1)
    else:
        return dev.compute("B", np.square, dev.recv(0))  # no name=: placed by its value


def recomputes(dev, x):
    """The receiver is sent the raw x and works A out itself."""
    if dev.rank == 0:
        dev.send(x, 1)
    else:
        return dev.compute("B", np.square, dev.compute("A", stage_a, dev.recv(0)))


def hard_coded(dev, x):
    if dev.rank == 0:
        dev.compute("A", stage_a, x)
    else:
        return dev.compute("B", lambda: np.array([49.0]))


SHARED: dict = {}  # a cheat's channel: devices share this process


def via_module_dict(dev, x):
    if dev.rank == 0:
        SHARED["h"] = dev.compute("A", stage_a, x)
        dev.send(np.zeros(1), 1)
    else:
        dev.recv(0)
        return dev.compute("B", np.square, SHARED["h"])


class Box:
    held = None


def via_class_attribute(dev, x):
    if dev.rank == 0:
        Box.held = dev.compute("A", stage_a, x)
        dev.send(Box.held * 0, 1)
    else:
        dev.recv(0)
        return dev.compute("B", np.square, Box.held)


def wrong_sent_twice(dev, x):
    """The same wrong value sent twice and named both times: its answer is remembered after the first."""
    if dev.rank == 0:
        wrong = dev.compute("A", lambda v: 2 * v + 2, x)
        dev.send(wrong, 1)
        dev.send(wrong, 1)
    else:
        dev.recv(0, name="A")
        return dev.compute("B", np.square, dev.recv(0, name="A"))


def x_sent_as_a(dev, x):
    """The raw x crosses under A's name (its bytes are the model's x, in the wrong place)."""
    if dev.rank == 0:
        dev.compute("A", stage_a, x)
        dev.send(x.copy(), 1)
    else:
        return dev.compute("B", np.square, stage_a(dev.recv(0, name="A")))


def nan_sent_as_a(dev, x):
    if dev.rank == 0:
        dev.compute("A", stage_a, x)
        dev.send(np.full_like(x, np.nan), 1)
    else:
        return dev.compute("B", np.square, dev.recv(0, name="A"))


def negated_a(dev, x):
    """-A crosses: right only where A is 0 (then -0.0, other bytes than 0.0), wrong elsewhere."""
    if dev.rank == 0:
        dev.send(-dev.compute("A", stage_a, x), 1)
    else:
        return dev.compute("B", np.square, dev.recv(0, name="A"))


def floats(dtype, n=1):
    return (np.arange(n) + 3).astype(dtype)


TWO_STAGES = [
    # (program, x, split, verdict, first (where, rank, name) or None, rules broken (kind, rank))
    (right, floats(np.float64), SEED, "passed", None, []),
    (right, floats(np.float32, 5), SEED, "passed", None, []),
    (right, floats(np.int64, 3), SEED, "passed", None, []),
    (recomputes, floats(np.float64), SEED, "FAILED", None, [("cross", 0), ("compute", 1)]),
    (recomputes, floats(np.float32, 4), SEED, "FAILED", None, [("cross", 0), ("compute", 1)]),
    (hard_coded, floats(np.float64), SEED, "FAILED", None, [("compute", 1)]),
    (via_module_dict, floats(np.float64), SEED, "FAILED", None, [("cross", 0), ("compute", 1)]),
    (via_module_dict, floats(np.float64), None, "not verified", None, []),
    (via_class_attribute, floats(np.float64, 3), SEED, "FAILED", None, [("cross", 0), ("compute", 1)]),
    (wrong_sent_twice, floats(np.float64), None, "FAILED", ("output", 0, "A"), []),
    (x_sent_as_a, floats(np.float64), None, "FAILED", ("message", 1, "A"), []),
    (x_sent_as_a, floats(np.float32, 3), None, "FAILED", ("message", 1, "A"), []),
    (nan_sent_as_a, floats(np.float64), None, "FAILED", ("message", 1, "A"), []),
    (nan_sent_as_a, np.array([np.nan, 1.0]), None, "FAILED", ("message", 1, "A"), []),
    (right, np.array([np.nan, 1.0]), SEED, "passed", None, []),  # the model's own NaN, crossing as it is
    (right, np.array([np.inf, -1.0]), SEED, "passed", None, []),
    (negated_a, np.array([-0.5, -0.5]), None, "passed", None, []),  # -0.0 for 0.0
    (negated_a, np.array([1.0, -0.5]), None, "FAILED", ("message", 1, "A"), []),
]


def verdict_of(report):
    first = None if report.first is None else (report.first.where, report.first.rank, report.first.name)
    return report.verdict, first, sorted({(v.kind, v.rank) for v in report.broken})


def checked_every_way(run, ref, **kwargs):
    """The verdict of the columnar walk, held to the walk over records and to a second check with the same
    reference (its answers remembered from the first)."""
    fast = check(run, ref, **kwargs)
    assert check(as_records(run), ref, **kwargs).text() == fast.text()
    assert check(run, ref, **kwargs).text() == fast.text()
    return verdict_of(fast)


@pytest.mark.parametrize(
    "program, x, split, verdict, first, broken",
    TWO_STAGES,
    ids=[f"{case[0].__name__}-{case[1].dtype}-{case[3]}-{k}" for k, case in enumerate(TWO_STAGES)],
)
def test_a_two_stage_program_gets_its_verdict(program, x, split, verdict, first, broken):
    got = checked_every_way(World(2).run(program, x), Reference.of(two_stages, x), split=split)
    assert got == (verdict, first, sorted(set(broken)))


def zeros_then_ones(dev, x):
    a = dev.compute("A", lambda v: v * 0, x)
    b = dev.compute("B", lambda v: v * 0 + 1, a)
    return dev.compute("C", lambda v: v + 1, b)


@pytest.mark.parametrize("swap", [False, True])
def test_zeros_and_ones_that_several_names_hold_are_told_apart_by_name(swap):
    """A's zeros cross; a cheat sends B's ones in their place (values that equal other names with these inputs)."""

    def program(dev, x):
        if dev.rank == 0:
            a = dev.compute("A", lambda v: v * 0, x)
            dev.send(np.ones_like(a) if swap else a, 1)
        else:
            b = dev.compute("B", lambda v: v * 0 + 1, dev.recv(0, name="A"))
            return dev.compute("C", lambda v: v + 1, b)

    x = floats(np.float64, 4)
    got = checked_every_way(World(2).run(program, x), Reference.of(zeros_then_ones, x))
    assert got == (("FAILED", ("message", 1, "A"), []) if swap else ("passed", None, []))


# ---- a ring all-reduce by hand, each receive named with its running sum ----------------------------------------
P = 4


def vectors(dtype):
    return (np.arange(P * 2 * P, dtype=np.float64).reshape(P, 2 * P) * 0.37 - 1.1).astype(dtype)


def summed(dev, dtype):
    xs = vectors(dtype)
    for r in range(P):
        dev.hold(f"x[{r}]", xs[r])
    return dev.compute("v", lambda: xs.sum(axis=0))


def ring(dev, dtype, bug=None, named=True):
    """bug: ("twice", device, step) adds that device's own chunk twice; ("scaled", device, step, factor) sends
    its running sum scaled by the factor (close to right, or within the tolerance)."""
    r = dev.rank
    x = dev.hold(f"x[{r}]", vectors(dtype)[r])
    size = x.size // P
    chunks = [x[c * size : (c + 1) * size].copy() for c in range(P)]
    for s in range(2 * (P - 1)):
        reducing = s < P - 1
        out_c, in_c = ((r - s) % P, (r - s - 1) % P) if reducing else ((r - s + P) % P, (r - s + P - 1) % P)
        out = chunks[out_c]
        if bug is not None and bug[0] == "scaled" and bug[1:3] == (r, s):
            out = (out * bug[3]).astype(dtype)
        dev.send(out, (r + 1) % P)
        block = np.s_[in_c * size : (in_c + 1) * size]
        if reducing:
            terms = "+".join(f"x[{(in_c + k) % P}]" for k in range(s + 1))
            got = dev.recv((r - 1) % P, name=terms, index=block) if named else dev.recv((r - 1) % P)
            twice = bug is not None and bug[0] == "twice" and bug[1:3] == (r, s)
            chunks[in_c] = got + (2 * chunks[in_c] if twice else chunks[in_c])
        else:
            chunks[in_c] = dev.recv((r - 1) % P, name="v", index=block) if named else dev.recv((r - 1) % P)
    return np.concatenate(chunks)


RINGS = [
    # (dtype, bug, named, own_names, verdict, first)
    (np.float64, None, True, False, "passed", None),
    (np.float32, None, True, False, "passed", None),
    (np.float64, ("twice", 1, 1), True, False, "FAILED", ("message", 2, "x[3]+x[0]+x[1]")),
    (np.float64, ("scaled", 2, 1, 1 + 1e-12), True, False, "passed", None),  # within float64's tolerance
    (np.float64, ("scaled", 2, 1, 1 + 1e-5), True, False, "FAILED", ("message", 3, "x[1]+x[2]")),
    (np.float32, ("scaled", 2, 1, 1 + 1e-3), True, False, "FAILED", ("message", 3, "x[1]+x[2]")),
    (np.float64, None, False, False, "not verified", None),  # running sums with no name: not placed
    (np.float64, None, False, True, "passed", None),  # the program's own steps, the result compared
    (np.float32, ("scaled", 2, 1, 1 + 1e-3), False, True, "FAILED", ("result", 0, "the result")),
]


@pytest.mark.parametrize("dtype, bug, named, own_names, verdict, first", RINGS)
def test_a_ring_by_hand_gets_its_verdict_at_its_first_wrong_running_sum(dtype, bug, named, own_names, verdict, first):
    ref = Reference.of(summed, dtype)
    got = checked_every_way(World(P).run(ring, dtype, bug, named), ref, own_names=own_names)
    assert got[:2] == (verdict, first)


def built_in(dev, dtype):
    return dev.all_reduce(dev.hold(f"x[{dev.rank}]", vectors(dtype)[dev.rank]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_built_in_all_reduce_where_one_by_hand_was_asked_fails_on_every_device(dtype):
    ref = Reference.of(summed, dtype)
    assert checked_every_way(World(P).run(built_in, dtype), ref) == ("passed", None, [])
    got = checked_every_way(World(P).run(built_in, dtype), ref, split=Split(collectives=()))
    assert got == ("FAILED", None, [("collective", r) for r in range(P)])


# ---- rows of X given to each device; an op on the whole of X breaks the split ---------------------------------
def matmul_model(dev, X, W):
    return dev.compute("Y", np.matmul, dev.hold("X", X), dev.hold("W", W))


ROWS = Split(given={"X": {0: np.s_[0:2], 1: np.s_[2:4]}, "W": ALL})
# the same split by functions of the rank, each call making new slices (a split remembers its answers per name)
ROWS_BY_FUNCTION = Split(
    compute={"Y": lambda r: r in (0, 1)}, given={"X": lambda r: np.s_[2 * r : 2 * r + 2], "W": ALL}
)
WHOLE: dict = {}


def rows(r):
    return np.s_[2 * r : 2 * r + 2]


def rows_right(dev, X, W):
    x, w = dev.hold("X", X[rows(dev.rank)], index=rows(dev.rank)), dev.hold("W", W)
    return dev.compute("Y", np.matmul, x, w, index=rows(dev.rank))


def rows_from_a_global(dev, X, W):
    if dev.rank == 0:
        WHOLE["X"] = X
    dev.hold("X", X[rows(dev.rank)], index=rows(dev.rank))
    w = dev.hold("W", W)
    y = dev.compute("Yall", np.matmul, WHOLE.get("X", X), w)
    return dev.compute("Y", lambda a: a[rows(dev.rank)], y, index=rows(dev.rank))


def rows_from_the_whole_twice(dev, X, W):
    """The same whole X (one object) used by two ops on each device: looked at once per device, told once."""
    dev.hold("X", X[rows(dev.rank)], index=rows(dev.rank))
    w = dev.hold("W", W)
    dev.compute("Y", lambda a, b: (a @ b)[rows(dev.rank)], X, w, index=rows(dev.rank))
    return dev.compute("Y", lambda a, b: (a @ b)[rows(dev.rank)], X, w, index=rows(dev.rank))


def rows_swapped(dev, X, W):
    other = rows(1 - dev.rank)
    x, w = dev.hold("X", X[other], index=rows(dev.rank)), dev.hold("W", W)
    return dev.compute("Y", np.matmul, x, w, index=rows(dev.rank))


def rows_held_whole(dev, X, W):
    x, w = dev.hold("X", X), dev.hold("W", W)
    return dev.compute("Y", lambda a, b: (a @ b)[rows(dev.rank)], x, w, index=rows(dev.rank))


def rows_from_the_whole_transposed(dev, X, W):
    """All of X, handed to an op as X.T and turned back inside it: the whole input in another shape."""
    dev.hold("X", X[rows(dev.rank)], index=rows(dev.rank))
    w = dev.hold("W", W)
    return dev.compute("Y", lambda xt, b: (xt.T @ b)[rows(dev.rank)], X.T, w, index=rows(dev.rank))


ROW_CASES = [
    (rows_right, np.float64, "passed", None, []),
    (rows_right, np.float32, "passed", None, []),
    (rows_from_a_global, np.float64, "FAILED", None, [("given", 0), ("given", 1)]),
    (rows_from_the_whole_twice, np.float64, "FAILED", None, [("given", 0), ("given", 1)]),
    (rows_swapped, np.float64, "FAILED", ("held value", 0, "X"), []),
    (rows_held_whole, np.float32, "FAILED", None, [("given", 0), ("given", 1)]),
    (rows_from_the_whole_transposed, np.float64, "FAILED", None, [("given", 0), ("given", 1)]),
]


@pytest.mark.parametrize("split", [ROWS, ROWS_BY_FUNCTION], ids=["mapping", "functions"])
@pytest.mark.parametrize(
    "program, dtype, verdict, first, broken", ROW_CASES, ids=[f"{c[0].__name__}-{c[1].__name__}" for c in ROW_CASES]
)
def test_rows_given_in_part_hold_every_device_to_its_own(program, dtype, verdict, first, broken, split):
    X = (np.arange(12, dtype=np.float64).reshape(4, 3) * 0.5 - 1).astype(dtype)
    W = (np.arange(6, dtype=np.float64).reshape(3, 2) * 0.25 + 0.1).astype(dtype)
    got = checked_every_way(World(2).run(program, X, W), Reference.of(matmul_model, X, W), split=split)
    assert got == (verdict, first, broken)


def test_the_whole_of_a_square_input_transposed_breaks_the_split():
    X, W = np.arange(16.0).reshape(4, 4) / 7 - 1, np.full((4, 2), 0.5)

    def program(dev, X, W):
        dev.hold("X", X[rows(dev.rank)], index=rows(dev.rank))
        w = dev.hold("W", W)
        return dev.compute("Y", lambda xt, b: (xt.T @ b)[rows(dev.rank)], X.T, w, index=rows(dev.rank))

    got = checked_every_way(World(2).run(program, X, W), Reference.of(matmul_model, X, W), split=ROWS)
    assert got == ("FAILED", None, [("given", 0), ("given", 1)])
    report = check(World(2).run(program, X, W), Reference.of(matmul_model, X, W), split=ROWS)
    assert "device 1 computed Y from all of X (transposed), but its part is rows 2:4" in str(report)


def test_batch_size_one_a_row_each_computed_from_the_whole_input_breaks_the_split():
    X, W = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), np.ones((3, 1))
    one_row = Split(given={"X": {0: np.s_[0:1], 1: np.s_[1:2]}, "W": ALL})

    def program(dev, X, W):
        r = dev.rank
        dev.hold("X", X[r : r + 1], index=np.s_[r : r + 1])
        w = dev.hold("W", W)
        return dev.compute("Y", lambda a, b: (a @ b)[r : r + 1], X, w, index=np.s_[r : r + 1])

    got = checked_every_way(World(2).run(program, X, W), Reference.of(matmul_model, X, W), split=one_row)
    assert got == ("FAILED", None, [("given", 0), ("given", 1)])


# ---- the right bytes in the wrong place: another microbatch's, another replica's, transposed ---------------------
def microbatches(dev, xs):
    return [dev.compute(f"B[{m}]", np.square, dev.compute(f"A[{m}]", stage_a, x)) for m, x in enumerate(xs)]


def pipelined(dev, xs, mistake=None):
    """mistake: "step" sends microbatch 0's A again in place of microbatch 1's; "transposed" sends A[1].T."""
    if dev.rank == 0:
        hs = [dev.compute(f"A[{m}]", stage_a, x) for m, x in enumerate(xs)]
        sent = [hs[0], hs[0]] if mistake == "step" else [hs[0], hs[1].T.copy()] if mistake == "transposed" else hs
        for h in sent:
            dev.send(h, 1)
    else:
        return [dev.compute(f"B[{m}]", np.square, dev.recv(0, name=f"A[{m}]")) for m in range(len(xs))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mistake", [None, "step", "transposed"])
def test_a_microbatch_sent_in_another_ones_place_fails_at_its_message(mistake, dtype):
    xs = [(np.arange(4, dtype=np.float64).reshape(2, 2) + 4 * m - 1.5).astype(dtype) for m in range(2)]
    got = checked_every_way(World(2).run(pipelined, xs, mistake), Reference.of(microbatches, xs))
    assert got == (("passed", None, []) if mistake is None else ("FAILED", ("message", 1, "A[1]"), []))


def replica(dev, x):
    return dev.compute("y", stage_a, dev.hold("x", x))


def replicas(dev, xs, swapped=False):
    """Each device computes y from its own x; device 0 sends its y to device 1, which names it "y": right only for
    device 0's reference (swapped: device 1 keeps what it received in place of its own)."""
    y = replica(dev, xs[dev.rank])
    if dev.rank == 0:
        dev.send(y, 1)
        return y
    got = dev.recv(0, name="y") if swapped else dev.recv(0)
    return got if swapped else y


@pytest.mark.parametrize("swapped", [False, True])
def test_another_replicas_value_under_this_replicas_name_is_compared_with_this_replicas(swapped):
    xs = [np.array([1.0, 2.0]), np.array([5.0, -1.0])]
    refs = {r: Reference.of(replica, xs[r]) for r in range(2)}
    got = checked_every_way(World(2).run(replicas, xs, swapped), refs, own_names=True)
    assert got == (("FAILED", ("message", 1, "y"), []) if swapped else ("passed", None, []))


# ---- identify, the answer the crossing and "foreign" rules rest on -------------------------------------------------
def test_identify_names_every_value_a_comparison_with_each_would_name():
    """Values found by their bytes, answers worked out per shape and kept per tolerance, a look at three elements
    first: the names are those a comparison with every value gives, for values of mixed dtypes (ints, bools,
    float16 to 64, complex), NaN, infinities, -0.0 and zeros of several names, under the default and a caller's
    tolerances, asked again and again of one reference."""
    rng = np.random.default_rng(11)
    dtypes = [np.float64, np.float32, np.float16, np.int64, np.int32, np.bool_, np.complex128]
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 1e30]
    for _ in range(300):
        shape = [(), (1,), (3,), (2, 2)][rng.integers(4)]
        base = rng.normal(size=shape) * 10.0 ** rng.integers(-6, 6)
        ref = Reference()
        for k in range(int(rng.integers(1, 7))):
            v = np.array(base * (1 + rng.choice([0, 0, 1e-9, 1e-6, 1e-4, 1e-2, 1]) * rng.normal(size=shape)))
            if rng.random() < 0.2 and v.size:
                v.reshape(-1)[rng.integers(v.size)] = rng.choice(specials)
            if rng.random() < 0.15:
                v = np.zeros(shape)
            with np.errstate(all="ignore"):
                ref.values[f"v{k}"] = v.astype(dtypes[rng.integers(len(dtypes))])
        values = list(ref.values.values())
        for _ in range(6):
            source = values[rng.integers(len(values))]
            with np.errstate(all="ignore"):
                found = (
                    source.copy()
                    if rng.random() < 0.5
                    else np.asarray(
                        source.real.astype(np.float64)
                        * (1 + rng.choice([1e-12, 1e-8, 1e-5, 1e-3]) * rng.normal(size=shape))
                    ).astype(dtypes[rng.integers(len(dtypes))])
                )
            rtol, atol = [None, 1e-3, 0.0][rng.integers(3)], [None, 1e-6][rng.integers(2)]
            every = [n for n, v in ref.values.items() if same(found, v, rtol, atol)]
            assert ref.identify(found, rtol=rtol, atol=atol) == every, (found, ref.values, rtol, atol)


def test_a_reference_reused_under_other_tolerances_answers_under_each():
    """A caller's looser tolerance, then the default, and again, on one reference: what it remembers is kept per
    tolerance. A running sum 1e-5 off passes under rtol=1e-3 and FAILS under float64's own, at its message when
    named, at the result when not (not verified under rtol=1e-3 then: its running sums placed by no value)."""
    ref = Reference.of(summed, np.float64)
    off = ("scaled", 2, 1, 1 + 1e-5)
    at_message, at_result = ("FAILED", ("message", 3, "x[1]+x[2]"), []), ("FAILED", ("result", 0, "the result"), [])
    passed = ("passed", None, [])
    for rtol in (1e-3, None, 1e-3, None):
        for named, own_names in [(True, False), (True, True), (False, False), (False, True)]:
            got = checked_every_way(World(P).run(ring, np.float64, off, named), ref, rtol=rtol, own_names=own_names)
            if rtol is None:
                assert got == (at_message if named else at_result)
            else:
                assert got == (("not verified", None, []) if not (named or own_names) else passed)
