"""What a new user's review found: a wrong program that passed, a right one refused, a poll that hung."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from simulator.core.errors import SimulationError
from simulator.cost.model import CostModel
from tests.report_words import words

RNG = np.random.default_rng(0)
S = RNG.standard_normal((4, 4))
MASK = np.triu(np.ones((4, 4), bool), 1)


def masked(dev, shift=0.0):
    s = dev.hold("scores", S)
    return dev.compute("masked", lambda v: np.where(MASK, -1e9, v + shift), s)


@pytest.mark.parametrize("shift", [0.09, 1e-4])
def test_one_huge_element_does_not_loosen_the_others(shift):
    """A -1e9 attention mask used to raise the tolerance of every score to 0.1."""
    report = check(World(1).run(masked, shift), Reference.of(masked))
    assert report.verdict == "FAILED" and report.first.name == "masked"
    assert check(World(1).run(masked), Reference.of(masked)).ok


def scale(dev, x, dtype=None):
    h = dev.hold("x", x if dtype is None else x.astype(dtype))
    return dev.compute("y", lambda v: 3 * v, h)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_cast_to_lower_precision_fails_and_says_so(dtype):
    x = RNG.standard_normal(5)
    report = check(World(1).run(scale, x, dtype), Reference.of(scale, x))
    assert report.verdict == "FAILED"
    assert f"It is {np.dtype(dtype)} where one device has float64: a cast lost precision." in words(report)


def test_a_message_sent_in_float32_fails():
    x = RNG.standard_normal(6)

    def model(dev):
        a = dev.hold("A", x)
        return dev.compute("B", np.tanh, a)

    def two(dev):
        if dev.rank == 0:
            dev.send(dev.hold("A", x).astype(np.float32), dst=1)
            return None
        a = dev.recv(src=0, dtype=np.float32, name="A")
        return dev.compute("B", np.tanh, a)

    report = check(World(2).run(two), Reference.of(model))
    assert report.verdict == "FAILED" and "float32 where one device has float64" in words(report)


def test_float32_against_a_float32_model_and_a_wider_result_still_pass():
    x = RNG.standard_normal(5).astype(np.float32)
    assert check(World(1).run(scale, x), Reference.of(scale, x)).ok
    assert check(World(1).run(scale, x, np.float64), Reference.of(scale, x)).ok  # more precision is no error


def test_a_wrong_shape_is_said_in_words():
    def model(dev):
        return dev.hold("y", np.ones((1, 8)))

    report = check(World(1).run(lambda dev: dev.hold("y", np.ones(8))), Reference.of(model))
    assert report.verdict == "FAILED" and "It has shape (8,) where one device has (1, 8)." in words(report)


def test_a_model_that_gives_one_name_two_values_is_refused():
    X = RNG.standard_normal((2, 3))

    def model(dev):
        return [dev.compute("y", np.tanh, dev.hold("x", X[m : m + 1])) for m in range(2)]

    with pytest.raises(ValueError, match=r"gives the name 'x' two different values.*'x\[0\]', 'x\[1\]'"):
        Reference.of(model)

    def same_weight_twice(dev):  # one name, one value, held twice: fine
        return [dev.compute(f"y[{m}]", np.tanh, dev.hold("W", X)) for m in range(2)]

    assert Reference.of(same_weight_twice).values["W"] is not None


def test_polling_without_letting_time_pass_is_an_error_not_a_hang():
    def poll(dev):
        if dev.rank == 0:
            dev.compute("work", lambda: np.ones(3), flops=1e6)
            dev.send(np.ones(3), dst=1, tag=7)
            return None
        req = dev.irecv(src=0, tag=7)
        while not dev.test(req):
            pass
        return dev.wait(req)

    with pytest.raises(SimulationError, match=r"device 1 tested recv\(src=0, tag=7\) 100,000 times.*dev.wait\(req\)"):
        World(2).run(poll)


def test_a_block_held_without_index_gets_the_index_to_write():
    x, W1 = RNG.standard_normal((1, 4)), RNG.standard_normal((4, 6))

    def model(dev):
        return dev.compute("h", np.matmul, dev.hold("x", x), dev.hold("W1", W1))

    def column_split(dev):  # the student forgot index= on the hold
        w = dev.hold("W1", W1[:, 3 * dev.rank : 3 * dev.rank + 3])
        return dev.compute("h", np.matmul, dev.hold("x", x), w)

    report = check(World(2).run(column_split), Reference.of(model))
    assert report.verdict == "FAILED" and report.first.where == "held value"
    assert (
        "It is the block [:, 0:3] of W1: say which block a device holds with dev.hold('W1', ..., index=np.s_[:, 0:3])"
        in words(report)
    )


def test_a_received_unnamed_value_returned_as_the_result_is_explained_not_a_crash():
    """A student's row split returns the partner's partial product it received (no name on the message):
    the report must fail it and say so in words (it used to raise while explaining the missing name)."""
    rng = np.random.default_rng(7)
    feats, weights = rng.standard_normal((1, 4)), rng.standard_normal((4, 6))  # batch size 1, float data

    def one_gpu(dev):
        return dev.compute("out", np.matmul, dev.hold("feats", feats), dev.hold("weights", weights))

    def swapped_partials(dev):
        half = np.s_[2 * dev.rank : 2 * dev.rank + 2]
        a = dev.hold("feats", feats[:, half], index=np.s_[:, half])
        b = dev.hold("weights", weights[half], index=half)
        mine = dev.compute("partial_out", np.matmul, a, b)
        if dev.rank == 0:
            dev.send(mine, 1)
            return dev.recv(1)  # BUG: the partner's term, never added to its own
        other = dev.recv(0)
        dev.send(mine, 0)
        return dev.compute("out", np.add, other, mine)

    report = check(World(2).run(swapped_partials), Reference.of(one_gpu))
    assert not report.ok
    assert "check FAILED at the first divergence: device 0 returned" in words(report)


XIN = np.random.default_rng(3).standard_normal((1, 5))


def two_stages(dev):
    a = dev.compute("stageA", lambda v: 2 * v + 1, dev.hold("xin", XIN))
    return dev.compute("stageB", np.square, a)


def test_a_value_twice_too_big_in_a_program_without_sums_blames_no_all_reduce():
    """Stage A computes 4x + 2 instead of 2x + 1: no collective ran, so no sum over a group is blamed."""

    def pipeline(dev):
        if dev.rank == 0:
            dev.send(dev.compute("stageA", lambda v: 4 * v + 2, dev.hold("xin", XIN)), 1)
            return None
        return dev.compute("stageB", np.square, dev.recv(0))

    report = check(World(2).run(pipeline), Reference.of(two_stages))
    assert report.verdict == "FAILED" and report.first.name == "stageA"
    text = words(report)
    assert "Every element is 2 times what it should be (a factor applied twice, or a value counted twice?)" in text
    assert "number of devices in the group" not in text and "all-reduce" not in text


def test_a_device_that_returns_an_intermediate_value_hears_which_one_it_is():
    def pipeline(dev):
        if dev.rank == 0:
            a = dev.compute("stageA", lambda v: 2 * v + 1, dev.hold("xin", XIN))
            dev.send(a, 1)
            return a  # BUG: only the last stage returns the result
        return dev.compute("stageB", np.square, dev.recv(0))

    report = check(World(2).run(pipeline), Reference.of(two_stages))
    assert report.verdict == "FAILED" and report.first.where == "result" and report.first.rank == 0
    assert "is stageA. The model's result is stageB, and this is a value on the way to it" in words(report)
    assert "(A device that holds none of the result returns None.)" in words(report)


def test_bad_packing_and_product_values_are_refused_naming_the_fix():
    with pytest.raises(ValueError, match="CostModel.packing must be True or False, got 'yes'"):
        CostModel(memory_bandwidth=1e10, packing="yes")
    with pytest.raises(ValueError, match="packing=True needs a memory_bandwidth"):
        CostModel(packing=True)

    def program(dev):
        dev.compute("y", np.matmul, np.ones((2, 2)), np.ones((2, 2)), product="no")

    with pytest.raises(SimulationError, match="op 'y' got product='no'; give True, False or None"):
        World(1).run(program)


FEATS, WEIGHTS = np.random.default_rng(1).standard_normal((1, 4)), np.random.default_rng(2).standard_normal((4, 4))


def one_device_product(dev):
    return dev.compute("outp", np.matmul, dev.hold("x", FEATS), dev.hold("w", WEIGHTS))


def row_split_term(dev, name):
    """This device's term of the row-split product, as an op ``name`` marked partial=True."""
    h = np.s_[2 * dev.rank : 2 * dev.rank + 2]
    a, b = dev.hold("x", FEATS[:, h], index=np.s_[:, h]), dev.hold("w", WEIGHTS[h], index=h)
    return dev.compute(name, np.matmul, a, b, partial=True)


def test_an_all_reduce_applied_twice_is_named_and_its_chunk_shown_as_a_chunk():
    def twice(dev):
        total = dev.all_reduce(row_split_term(dev, "outp"), name="outp")
        return dev.all_reduce(total, name="outp")  # BUG: the sum is summed again

    report = check(World(2).run(twice), Reference.of(one_device_product))
    assert report.verdict == "FAILED" and report.first.where == "message"
    text = words(report)
    assert "should have received elements 0-1 (flattened) of outp = [" in text
    assert "or summed once too often (an all-reduce applied twice)?" in text


def test_a_term_of_a_sum_under_its_own_name_is_told_to_take_the_sum_s_name_not_to_say_partial_again():
    def own_name(dev):
        return dev.all_reduce(row_split_term(dev, "outp_part"), name="outp")

    report = check(World(2).run(own_name), Reference.of(one_device_product))
    assert report.verdict == "not verified"
    text = words(report)
    assert "outp_part on device 0 is not a name in the reference, and a term of a sum is named after the sum" in text
    assert "say partial=True" not in text


def test_terms_named_by_partials_the_model_lacks_are_told_where_their_names_come_from():
    def with_partials(dev):
        return dev.all_reduce(row_split_term(dev, "outp_part"), name="outp", partials="outp_part")

    report = check(World(2).run(with_partials), Reference.of(one_device_product))
    assert report.verdict == "not verified"
    text = words(report)
    assert (
        "outp_part[0] on device 1 (what message #0 from device 0 carries) is not a name in the reference: the "
        "collective names its members' terms outp_part[0], outp_part[1], ... (partials='outp_part'); give the "
        "model values of those names, or leave partials= out"
    ) in text
    assert "say partial=True" not in text


# ---- a second review: a student's own names, receives without name=, float data, batch size 1 ----------------
X1 = RNG.standard_normal((1, 3))


def model_ab(dev, x):
    x = dev.hold("x", x, doc="the model's raw input")
    a = dev.compute("A", lambda v: 2 * v + 1, x, doc="stage A's output, 2x + 1")
    return dev.compute("B", np.square, a)


def student_pipeline(send="hidden", stage_a=lambda v: 2 * v + 1, stage_b=np.square, returns="sq"):
    def program(dev, x):
        if dev.rank == 0:
            inp = dev.hold("inp", x)
            hidden = dev.compute("hidden", stage_a, inp)
            dev.send({"hidden": hidden, "inp": inp}[send], dst=1)
            return None
        got = dev.recv(src=0)
        sq = dev.compute("sq", stage_b, got)
        return {"sq": sq, "got": got}[returns]

    return program


@pytest.mark.parametrize(
    "bug, words_expected",
    [
        (
            {"send": "inp"},
            "Op sq on device 1 computed it from x (the model's raw input), which arrived in message #0 from device 0, "
            "where the model computes B from A (stage A's output, 2x + 1): check what device 0 sends.",
        ),
        (
            {"stage_a": lambda v: 2 * v},
            "Op sq on device 1 computed it from a value the model does not have, which arrived in message #0 from "
            "device 0, where the model computes B from A",
        ),
        (
            {"stage_b": lambda v: 2 * v},
            "Op sq on device 1 was fed what the model's B is fed (A), but computed another value: its own arithmetic "
            "differs from B's.",
        ),
        ({"returns": "got"}, "is A (stage A's output, 2x + 1). The model's result is B, and this is a value on the"),
    ],
)
def test_a_wrong_pipeline_under_a_students_own_names_is_explained_by_what_fed_the_result(bug, words_expected):
    report = check(World(2).run(student_pipeline(**bug), X1), Reference.of(model_ab, X1))
    assert report.verdict == "FAILED" and report.first.where == "result" and report.first.rank == 1
    assert words_expected in words(report)
    right = check(World(2).run(student_pipeline(), X1), Reference.of(model_ab, X1))
    assert right.verdict == "not verified"  # right, but under other names: told which names to use


W1 = RNG.standard_normal((4, 6))


def test_an_average_where_a_sum_was_meant_is_not_called_missing_partial_sums():
    x = RNG.standard_normal((1, 4))

    def model(dev):
        return dev.compute("Y", np.matmul, dev.hold("X", x), dev.hold("W", W1))

    def row_split(dev):
        r = np.s_[2 * dev.rank : 2 * dev.rank + 2]
        part = dev.compute("part", np.matmul, dev.hold("xs", x[:, r]), dev.hold("ws", W1[r]))
        return dev.all_reduce(part, op="avg")  # BUG: a row split adds its partial sums

    text = words(check(World(2).run(row_split), Reference.of(model)))
    assert "Every element is 1/2 of what it should be, and 2 is the number of devices in the group" in text
    assert "(op='avg' for op='sum'?)" in text and "partial sum" not in text


def test_a_reference_given_as_a_function_of_the_rank_is_asked_once_per_rank():
    xb, t, w = RNG.standard_normal((2, 4)), RNG.standard_normal((2, 1)), RNG.standard_normal((4, 1))

    def grad_fn(x, t, w):
        return x.T @ (x @ w - t) / x.shape[0]

    def model_for(dev, r):  # each replica's own local gradient, and the averaged one
        x, tt, ww = dev.hold("X", xb), dev.hold("T", t), dev.hold("w", w)
        dev.compute("g_local", grad_fn, xb[r : r + 1], t[r : r + 1], w)
        return dev.compute("grad", grad_fn, x, tt, ww)

    def replica(dev):
        i = np.s_[dev.rank : dev.rank + 1]
        x, tt = dev.hold("X", xb[i], index=i), dev.hold("T", t[i], index=i)
        g = dev.compute("g_local", grad_fn, x, tt, dev.hold("w", w))
        return dev.all_reduce(g, op="avg", name="grad")

    calls = []

    def reference(rank):
        calls.append(rank)
        return Reference.of(model_for, rank)

    run = World(2).run(replica)
    assert check(run, reference).ok and sorted(calls) == [0, 1]
    assert check(run, {r: Reference.of(model_for, r) for r in range(2)}).ok


def test_an_all_reduce_whose_result_is_dropped_is_told_apart_from_a_missing_one():
    x, w = RNG.standard_normal((1, 4)), RNG.standard_normal((4, 6))

    def model(dev):
        return dev.compute("Y", np.matmul, dev.hold("X", x), dev.hold("W", w))

    def row_split(dev, reduce=True):
        r = np.s_[2 * dev.rank : 2 * dev.rank + 2]
        y = dev.compute("part", np.matmul, dev.hold("xs", x[:, r]), dev.hold("ws", w[r]))
        if reduce:
            dev.all_reduce(y)  # BUG: as in torch, where y would now hold the sum
        return y

    dropped = words(check(World(2).run(row_split), Reference.of(model)))
    assert "device 0 called all_reduce: it returns the sum as a new array" in dropped
    assert "y = dev.all_reduce(y)" in dropped and "is missing" not in dropped
    missing = words(check(World(2).run(row_split, False), Reference.of(model)))
    assert "(the all-reduce that adds them is missing?)" in missing and "called all_reduce" not in missing


@pytest.mark.parametrize("op", ["avg", "sum"])
def test_replicas_gradients_marked_partial_are_terms_of_an_average(op):
    xb, t, w = RNG.standard_normal((2, 4)), RNG.standard_normal((2, 1)), RNG.standard_normal((4, 1))

    def grad_fn(x, t, w):
        return x.T @ (x @ w - t) / x.shape[0]

    def model(dev):
        return dev.compute("grad", grad_fn, dev.hold("X", xb), dev.hold("T", t), dev.hold("w", w))

    def replica(dev):
        i = np.s_[dev.rank : dev.rank + 1]
        x, tt = dev.hold("X", xb[i], index=i), dev.hold("T", t[i], index=i)
        g = dev.compute("grad", grad_fn, x, tt, dev.hold("w", w), partial=True)  # as the checker's advice says
        return dev.all_reduce(g, op=op)

    report = check(World(2).run(replica), Reference.of(model))
    if op == "avg":
        assert report.ok, report
    else:  # summed where the average was meant: caught at the result, with the cause
        assert report.verdict == "FAILED" and report.first.where == "result"
        assert "2 times what it should be" in words(report) and "where an average was meant" in words(report)


def test_a_list_of_pieces_where_one_array_was_meant_is_told_the_axis():
    x, w = RNG.standard_normal((1, 4)), RNG.standard_normal((4, 8))

    def model(dev):
        return dev.compute("Y", np.matmul, dev.hold("X", x), dev.hold("W", w))

    def column_split(dev, axis):
        cols = np.s_[:, 4 * dev.rank : 4 * dev.rank + 4]
        y = dev.compute("part", np.matmul, dev.hold("xx", x), dev.hold("ww", w[cols]))
        return dev.all_gather(y, axis=axis)

    listed = words(check(World(2).run(column_split, None), Reference.of(model)))
    assert "It is a list of 2 pieces that, joined along axis 1, make the value: all_gather(x, axis=1)" in listed
    wrong_axis = words(check(World(2).run(column_split, 0), Reference.of(model)))
    assert wrong_axis.count("It has shape (2, 4) where one device has (1, 8)") == 1  # said once


def test_a_result_computed_from_a_devices_share_of_the_input_asks_for_the_combining_collective():
    xb, w = RNG.standard_normal((2, 4)), RNG.standard_normal((4, 1))

    def model(dev):
        return dev.compute("g", lambda x, w: x.T @ (x @ w) / len(x), dev.hold("X", xb), dev.hold("W", w))

    def replica(dev):  # BUG: no all-reduce
        return dev.compute("local", lambda x, w: x.T @ (x @ w) / len(x), xb[dev.rank : dev.rank + 1], w)

    text = words(check(World(2).run(replica), Reference.of(model)))
    assert "Op local on device 0 computed it from the block [0:1, :] of X, where the model computes g" in text
    assert "the devices' results are to be combined (an all-reduce, an all-gather?)" in text


def test_small_float32_differences_are_told_they_may_be_rounding():
    from simulator.checker.compare import difference

    exact = RNG.standard_normal(64)
    found = exact.astype(np.float32)
    found[3] *= 1 + 2e-4
    assert "what float32 gives when a long sum is added in another order" in difference(found, exact.astype(np.float32))
    assert "check(..., rtol=1e-3)" in difference(found, exact.astype(np.float32))
    big = found.copy()
    big[3] *= 2
    assert "long sum" not in difference(big, exact.astype(np.float32))  # a real difference is not excused
    assert "long sum" not in difference(found.astype(np.float64) * 1.0, exact * (1 + 0))  # float64: not said


def test_a_batch_of_one_split_along_axis_0_is_named_when_the_gather_disagrees():
    from simulator.core.errors import CollectiveMismatchError

    def program(dev):
        part = dev.reduce_scatter(np.ones((1, 8)) * (dev.rank + 1))  # axis=0 of a batch of 1: device 1 gets nothing
        return dev.all_gather(part, axis=0)

    with pytest.raises(CollectiveMismatchError, match="a shape with no elements") as err:
        World(2).run(program)
    assert "split it along another axis=" in str(err.value) and max(map(len, str(err.value).splitlines())) <= 120

    def other_mismatch(dev):  # shapes with elements on both: no word about empty shapes (group=(0, 1) is not one)
        return dev.all_gather(np.ones((dev.rank + 1, 8)), axis=0)

    with pytest.raises(CollectiveMismatchError) as err:
        World(2).run(other_mismatch)
    assert "group=(0, 1)" in str(err.value) and "a shape with no elements" not in str(err.value)


def test_a_failed_report_that_shows_some_unchecked_things_says_where_the_rest_are():
    report = check(World(2).run(student_pipeline(send="inp"), X1), Reference.of(model_ab, X1))
    assert len(report.unchecked) > 3
    assert f"... and {len(report.unchecked) - 3} more (report.unchecked lists every one)" in words(report)


def test_two_large_arrays_of_one_shape_are_not_described_alike():
    big = RNG.standard_normal((4, 8))

    def model(dev):
        return dev.compute("y", np.negative, dev.hold("x", big))

    def wrong(dev):
        return dev.compute("y", np.positive, dev.hold("x", big))

    text = words(check(World(1).run(wrong), Reference.of(model)))
    assert "computed an array of shape (4, 8) (float64), but y is an array of that shape with other values" in text
    assert "32 of 32 elements differ" in text


# ---- a third review: a receive without name= is checked where its value is used -----------------------------
def seed_without_names(dev, x, send_raw=False):
    if dev.rank == 0:
        dev.hold("x", x)
        h = dev.compute("A", lambda v: 2 * v + 1, x)
        dev.send(x if send_raw else h, dst=1)
        return None
    h = dev.recv(src=0, shape=x.shape, dtype=x.dtype)  # no name=: the message is placed by its value
    return dev.compute("B", np.square, h)


def test_the_raw_input_sent_to_an_unnamed_receive_points_at_the_message():
    x = np.array([3.0])
    assert check(World(2).run(seed_without_names, x), Reference.of(model_ab, x)).ok
    report = check(World(2).run(seed_without_names, x, send_raw=True), Reference.of(model_ab, x))
    assert report.verdict == "FAILED" and report.first.where == "input"
    assert (
        "op B on device 1 got [3.] as input 0, but on one device it is [7.]. [3.] is x (the model's raw input). "
        "It arrived in message #0 from device 0 (tag 0): check what device 0 sends, and which of device 1's "
        "receives takes it."
    ) in words(report)
