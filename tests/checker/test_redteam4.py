"""Programs nobody here wrote, each held to the verdict it deserves on every path: the default World (a ring
all-reduce booked whole), message by message (``book_collectives=False``), a world that keeps no payloads, and real
gloo processes where it applies. Students' right programs in their own style, programs written to game the grader,
and torch programs as engineers write them; each test names what it found wrong before its fix."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from tests.checker.test_redteam3 import verdicts as verdicts_on

X4 = np.array([1.0, 2.0, 3.0, 4.0])


def verdicts(program, model, args=(), margs=None, p=2, **kw) -> set[str]:
    """The verdicts of one program on the default World and message by message, each on the columns and on records
    (as in test_redteam3, on two devices unless told)."""
    return verdicts_on(program, model, args, margs, p, **kw)


def doubled_then_one_more(dev):
    """The model: x, a = 2x, b = a + 1."""
    a = dev.compute("a", lambda v: v * 2.0, dev.hold("x", X4))
    return dev.compute("b", lambda v: v + 1.0, a)


def buffer_reused_before_send(dev):
    """Device 0 computes a into a view of its working buffer, writes the buffer again, then sends a."""
    if dev.rank == 0:
        x = dev.hold("x", X4)
        buf = np.empty(4)
        a = dev.compute("a", lambda v: np.multiply(v, 2.0, out=buf[:]), x)
        buf[:] = -7.0 * x  # the buffer reused before a is sent
        dev.send(a, 1)
        return None
    return dev.compute("b", lambda v: v + 1.0, dev.recv(0))


def test_an_op_s_output_is_the_same_value_whether_or_not_the_world_keeps_payloads():
    """An op's output is a value kept as it was (read-only), whatever the world records: a program that writes the
    buffer the op's output was a view of does not change that output, with payloads kept or not. (A world without
    payloads handed the program the view itself, so the same program sent -7x there and 2x where it was checked.)"""
    outputs = [World(2, keep_payloads=kp).run(buffer_reused_before_send).outputs[1] for kp in (True, False)]
    np.testing.assert_array_equal(outputs[0], X4 * 2 + 1)
    np.testing.assert_array_equal(outputs[1], outputs[0])
    assert verdicts(buffer_reused_before_send, doubled_then_one_more) == {"passed"}


@pytest.mark.slow
@pytest.mark.gloo
def test_on_real_ranks_an_op_s_output_is_the_same_value_whether_or_not_payloads_are_kept():
    """The same on gloo processes: the program computes what it computes in the simulation, with payloads or not."""
    pytest.importorskip("torch")
    from simulator.real.launch import TorchWorld

    for kp in (True, False):
        with TorchWorld(2, "gloo", timeout=20, keep_payloads=kp) as world:
            np.testing.assert_array_equal(world.run(buffer_reused_before_send).outputs[1], X4 * 2 + 1)


def vectors_and(reduce):
    """A model of four devices' vectors x[r] and their reduction v (np.max, np.min, ...)."""

    def model(dev, xs):
        for r in range(len(xs)):
            dev.hold(f"x[{r}]", xs[r])
        return dev.compute("v", lambda: reduce(xs, axis=0))

    return model


@pytest.mark.parametrize("algorithm", ["ring", "tree", "halving_doubling"])
@pytest.mark.parametrize("op, reduce", [("max", np.max), ("min", np.min), ("product", np.prod), ("sum", np.sum)])
def test_partials_name_the_terms_of_a_sum_only(op, reduce, algorithm):
    """``partials="x"`` on a max, a min or a product names the members' inputs, and no running sum on the way (a
    running max named x[0]+x[1] would be compared with a sum): the right reduction passes, booked or not."""
    xs = np.random.default_rng(4).uniform(0.5, 1.5, (4, 8))

    def program(dev, xs):
        return dev.all_reduce(
            dev.hold(f"x[{dev.rank}]", xs[dev.rank]), op=op, name="v", partials="x", algorithm=algorithm
        )

    assert verdicts(program, vectors_and(reduce), (xs,), p=4) == {"passed"}


@pytest.mark.parametrize("share, verdict", [(0.002, "passed"), (0.012, "FAILED"), (0.02, "FAILED")])
def test_a_float16_sum_is_held_to_a_few_ulps_of_its_median_near_zero(share, verdict):
    """The float16 floor lets an element near zero move by a few ulps of the median magnitude (a sum in another
    order), not by 1.2% of it: a result so far off there FAILS, booked or not; 0.2% passes."""
    xs = np.random.default_rng(7).standard_normal((4, 64)).astype(np.float16)
    total = xs.sum(axis=0, dtype=np.float16)
    k = int(np.argmin(np.abs(total)))
    off = np.float16(share * float(np.median(np.abs(total))))

    def program(dev, xs):
        v = dev.all_reduce(dev.hold(f"x[{dev.rank}]", xs[dev.rank]), name="v")
        out = v.copy()
        out[k] += off
        return out

    assert verdicts(program, vectors_and(lambda a, axis: a.sum(axis=axis, dtype=np.float16)), (xs,), p=4) == {verdict}


def a_gradient_off(dev, x, y, w):
    """The data-parallel exercise's answer with element 0 of the gradient 0.05 off."""
    from simulator.teach.exercises.data import mean_gradient

    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    x, y, w = dev.hold("X", x, index=rows), dev.hold("y", y, index=rows), dev.hold("w", w)
    g = dev.all_reduce(dev.compute("g.local", mean_gradient, x, y, w), op="avg", name="g").copy()
    g[0] += 0.05
    return g


class LargeEps:
    """``np.finfo`` as a student's cell may replace it: every dtype's eps made 10 (the floor's ulps follow it)."""

    def __init__(self, dtype):
        self._real = REAL_FINFO(dtype)

    def __getattr__(self, attr):
        return 10.0 if attr == "eps" else getattr(self._real, attr)


REAL_FINFO = np.finfo


@pytest.mark.parametrize("patch", ["finfo", "ndarray"])
def test_in_a_notebook_a_numpy_class_rebound_is_refused(monkeypatch, patch):
    """NumPy's classes are in the grader's snapshot as its functions are: ``np.finfo`` rebound to one whose eps is 10
    widened the float floor to 80 times the median and passed a gradient 0.05 off; ``np.ndarray`` rebound changes
    what every ``type(x) is np.ndarray`` reads. The grade says the grader was changed."""
    from simulator.teach.exercises import start

    ex = start("data-parallel-average")
    if patch == "finfo":
        monkeypatch.setattr(np, "finfo", LargeEps)
    else:
        monkeypatch.setattr(np, "ndarray", type("ndarray", (np.ndarray,), {}))
    result = ex.grade(a_gradient_off, seed=1)
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert f"numpy.{patch}" in result.text()


def a_sent_as_float32(dev):
    """Device 0 sends a cast down to float32; device 1 casts it back and adds one."""
    if dev.rank == 0:
        a = dev.compute("a", lambda v: v * 2.0, dev.hold("x", X4))
        dev.send(a.astype(np.float32), 1)
        return None
    return dev.compute("b", lambda v: v + 1.0, dev.recv(0).astype(np.float64))


def test_a_message_cast_down_says_which_value_it_is_in_lower_precision():
    """A message of a in float32, where the model's a is float64, prints as a does: unplaced (not verified), and
    against a split that lets only a cross (FAILED), the text says it is a cast down, not only "none of the model's
    values"."""
    from simulator.checker import Split

    run = World(2).run(a_sent_as_float32)
    ref = Reference.of(doubled_then_one_more)
    plain = check(run, ref)
    assert plain.verdict == "not verified"
    assert "a cast down to float32, where the model's a is float64" in str(plain)
    split = check(run, ref, split=Split(compute={"a": 0, "b": 1}, crosses={"a": (0, 1)}))
    assert split.verdict == "FAILED"
    assert "a cast down to float32, where the model's a is float64" in str(split)


def summed_in_float32(dev, xs):
    """The library's all-reduce of float32 copies of the vectors, cast back to float64."""
    return dev.all_reduce(xs[dev.rank].astype(np.float32)).astype(np.float64)


def test_a_result_computed_in_float32_and_cast_back_fails_saying_so():
    """A float64 result that went through float32 on the way differs in its eighth digit: FAILED, booked or not, and
    the text says every element is a float32 number (it printed two vectors alike to the eye and said nothing)."""
    xs = np.random.default_rng(5).standard_normal((4, 6))
    model = vectors_and(np.sum)
    assert verdicts(summed_in_float32, model, (xs,), p=4) == {"FAILED"}
    text = str(check(World(4).run(summed_in_float32, xs), Reference.of(model, xs)))
    assert "Every element is a float32 number" in text
    right = check(World(4).run(lambda dev, xs: dev.all_reduce(xs[dev.rank]), xs), Reference.of(model, xs))
    assert right.verdict == "passed"


def test_in_a_notebook_an_exercise_s_array_changed_in_place_is_refused(monkeypatch):
    """The exercises' arrays are constants of the grader too: the ring's notebook input XS changed in place (its
    numbers, not its name) is a grader changed, as a tolerance loosened is."""
    from simulator.teach.exercises import ring, start

    ex = start("ring-all-reduce")
    saved = ring.XS.copy()
    try:
        ring.XS[0, 0] += 100.0
        result = ex.grade(lambda dev, x: dev.all_reduce(x), seed=1)
    finally:
        ring.XS[...] = saved
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert "simulator.teach.exercises.ring.XS" in result.text()


def test_a_float16_sum_of_mostly_zeros_added_in_another_order_passes():
    """The float16 floor is a share of the median magnitude of the nonzero elements: a vector that is mostly exact
    zeros (a sparse gradient) keeps the floor of its nonzero ones, so its ring sum, added in another order, passes
    (with the zeros counted the median is 0, and so is the floor)."""
    rng = np.random.default_rng(11)
    xs = rng.standard_normal((4, 1000)).astype(np.float16)
    xs[:, rng.random(1000) < 0.6] = 0  # the same 60% of places zero on every device
    model = vectors_and(lambda a, axis: a.sum(axis=axis, dtype=np.float16))

    def program(dev, xs):
        return dev.all_reduce(dev.hold(f"x[{dev.rank}]", xs[dev.rank]), name="v")

    assert verdicts(program, model, (xs,), p=4) == {"passed"}


@pytest.mark.parametrize("group", [[1, 3], [3, 2, 1, 0]])
def test_partials_numbered_by_rank_in_a_group_says_they_are_numbered_by_place(group):
    """``partials="x"`` names member m's term x[m], m its place in the group: a subgroup (1, 3), or the world in
    reverse, whose members give the model's x[rank], FAILS (the names say other terms) and the text says how
    partials= numbers the terms."""
    xs = np.arange(24.0).reshape(4, 6) % 5 - 2
    total = xs[group].sum(axis=0)

    def model(dev, xs):
        for r in range(4):
            dev.hold(f"x[{r}]", xs[r])
        return dev.compute("v", lambda: total)

    def program(dev, xs):
        x = dev.hold(f"x[{dev.rank}]", xs[dev.rank])
        return dev.all_reduce(x, group=group, name="v", partials="x") if dev.rank in group else None

    assert verdicts(program, model, (xs,), p=4) == {"FAILED"}
    text = " ".join(str(check(World(4).run(program, xs), Reference.of(model, xs))).split())
    assert "names each member's term x[m] by its place m in the call's group" in text, text


def ring_never_waiting_on_its_sends(dev, xs):
    """A student's ring all-reduce that starts each send with ``isend`` and never waits on it (each receive is waited)."""
    p, r = dev.world_size, dev.rank
    buf = np.array(xs[r], dtype=np.float64)
    n = len(buf) // p

    def chunk(c):
        return slice(c * n, (c + 1) * n)

    for s in range(p - 1):
        dev.isend(buf[chunk((r - s) % p)], (r + 1) % p)
        buf[chunk((r - s - 1) % p)] += dev.recv((r - 1) % p)
    for s in range(p - 1):
        dev.isend(buf[chunk((r + 1 - s) % p)], (r + 1) % p)
        buf[chunk((r - s) % p)] = dev.recv((r - 1) % p)
    return buf


@pytest.mark.slow
@pytest.mark.gloo
@pytest.mark.parametrize("send_mode", ["eager", "rendezvous"])
def test_on_real_ranks_a_send_never_waited_on_is_delivered_as_simulated(send_mode):
    """A send started with isend and never waited on reaches its receiver in a simulation, eager or rendezvous; on
    real ranks a rendezvous one was dropped with its request (its buffers freed) and the receiver hung until the
    timeout. Real ranks keep each send until it completes, as they keep eager ones."""
    pytest.importorskip("torch")
    from simulator.real.launch import TorchWorld

    xs = np.arange(32.0).reshape(4, 8) % 7 - 3
    simulated = World(4, send_mode=send_mode).run(ring_never_waiting_on_its_sends, xs).outputs
    with TorchWorld(4, "gloo", timeout=20, send_mode=send_mode) as world:
        real = world.run(ring_never_waiting_on_its_sends, xs).outputs
    for a, b in zip(simulated, real, strict=True):
        np.testing.assert_array_equal(a, xs.sum(axis=0))
        np.testing.assert_array_equal(b, a)


def test_partials_in_the_world_s_order_with_a_neighbour_s_term_gets_no_word_on_places():
    """Where every member's place is its rank, a member that gives its neighbour's term is a wrong input, not a
    numbering: FAILED, and nothing said about places."""
    xs = np.arange(24.0).reshape(4, 6) % 5 - 2

    def program(dev, xs):
        x = dev.hold(f"x[{dev.rank}]", xs[dev.rank])
        if dev.rank == 1:
            x = xs[2]  # the neighbour's vector
        return dev.all_reduce(x, name="v", partials="x")

    model = vectors_and(np.sum)
    assert verdicts(program, model, (xs,), p=4) == {"FAILED"}
    text = " ".join(str(check(World(4).run(program, xs), Reference.of(model, xs))).split())
    assert "by its place" not in text, text


def test_a_float32_result_computed_in_float16_fails_saying_so():
    """The same for a float32 model whose result went through float16 (an autocast by hand): FAILED, saying every
    element is a float16 number."""
    xs = np.random.default_rng(6).standard_normal((4, 6)).astype(np.float32)

    def in_half(dev, xs):
        return dev.all_reduce(xs[dev.rank].astype(np.float16)).astype(np.float32)

    model = vectors_and(np.sum)
    assert verdicts(in_half, model, (xs,), p=4) == {"FAILED"}
    text = " ".join(str(check(World(4).run(in_half, xs), Reference.of(model, xs))).split())
    assert "Every element is a float16 number" in text and "cast back to float32" in text, text


def test_partial_true_where_each_tensor_parallel_pair_sums_its_own_names_the_pair():
    """Two replicas of a row-parallel matmul on a 2 x 2 world, each pair's products all-reduced in the pair, declared
    partial=True (every device): the four terms add up to 2Y, FAILED, and the text names the pair to declare
    (it said "summed over the 2 devices where an average was meant")."""
    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((2, 4)), rng.standard_normal((4, 6))

    def model(dev):
        return dev.compute("Y", np.matmul, dev.hold("X", X), dev.hold("W", W))

    def program(dev, partial):
        tp = dev.rank % 2
        pair, rows = [dev.rank - tp, dev.rank - tp + 1], np.s_[2 * tp : 2 * tp + 2]
        x = dev.hold("X", X[:, rows], index=np.s_[:, rows])
        w = dev.hold("W", W[rows], index=rows)
        y = dev.compute("Y", np.matmul, x, w, partial=pair if partial == "pair" else True)
        return dev.all_reduce(y, group=pair, name="Y")

    assert verdicts(program, model, ("pair",), (), p=4) == {"passed"}
    assert verdicts(program, model, ("all",), (), p=4) == {"FAILED"}
    text = " ".join(str(check(World(4).run(program, "all"), Reference.of(model))).split())
    assert "The terms of devices 0, 1 alone add up to Y" in text and "partial=(0, 1)" in text, text


def one_f_one_b_rows(p: int, m: int) -> list[list[str]]:
    """1F1B with each rank's actions as a list of short forms (a schedule as data: a list of actions per rank)."""
    rows = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        actions = [f"{r}F{i}" for i in range(warmup)]
        for j in range(m - warmup):
            actions += [f"{r}F{warmup + j}", f"{r}B{j}"]
        rows.append(actions + [f"{r}B{j}" for j in range(m - warmup, m)])
    return rows


def test_a_schedule_written_as_lists_of_actions_is_graded():
    """The 1F1B exercise's answer with each rank's actions in a list, not a line: graded as the line is (it stopped
    with "'list' object has no attribute 'split'"); a row of another kind is refused, saying the two forms."""
    from simulator.parallel.schedules.schedule import Schedule
    from simulator.teach.exercises import grade

    assert grade("1f1b-schedule", one_f_one_b_rows).verdict == "passed"
    with pytest.raises(TypeError, match=r"row for rank 1 is int 7: give one line of actions per rank"):
        Schedule.from_text(["0F0 0B0", 7], microbatches=1)
    with pytest.raises(TypeError, match=r"row for rank 0 is list"):
        Schedule.from_text([["0F0", 3]], microbatches=1)


def test_a_wrong_value_past_float16_s_range_is_explained_without_a_warning():
    """The lower-precision hint casts to float16: a value past its range (1e6) overflowed there, and a RuntimeWarning
    was printed under the verdict (under -W error the check crashed)."""
    import warnings

    xs = np.array([1e6, 2.0, 3.0, 4.0])

    def model(dev):
        return dev.compute("b", lambda v: v * 2.0, dev.hold("x", xs))

    def off_by_one(dev):
        return dev.compute("b", lambda v: v * 2.0 + np.array([0, 0, 0, 1.0]), dev.hold("x", xs))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check(World(1).run(off_by_one), Reference.of(model)).verdict == "FAILED"
