"""The checker's three verdicts on programs written the way students write them."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from tests.report_words import words

STAGES = [lambda v: v * v, lambda v: v + 3, np.sin, lambda v: 10 * v]


def four_stages(dev, x):
    """The whole model on one device: S1..S4."""
    h = dev.hold("x", x, doc="the input")
    for i, f in enumerate(STAGES):
        h = dev.compute(f"S{i + 1}", f, h)
    return h


def student_pipeline(dev, x, names="stage", bug=False):
    """One stage per device, receives without name=; with the bug, stage 3 is sent stage 1's output."""
    r = dev.rank
    h = dev.hold("x", x) if r == 0 else dev.recv(r - 1)
    out = dev.compute(f"{names}{r + 1}", STAGES[r], h)
    if r < 3:
        dev.send(h if bug and r == 1 else out, r + 1)
        return None
    return out


X4 = np.array([0.5, 1.5])


def test_a_wrong_result_never_passes_whatever_the_names():
    report = check(World(4).run(student_pipeline, X4, "stage", True), Reference.of(four_stages, X4))
    assert report.verdict == "FAILED" and not report.ok
    assert report.first.where == "result" and report.first.rank == 3
    assert "device 3 returned" in words(report) and "on one device it is" in words(report)


def test_own_names_are_not_verified_and_the_reference_names_are_suggested():
    report = check(World(4).run(student_pipeline, X4, "stage"), Reference.of(four_stages, X4))
    assert report.verdict == "not verified" and not report.ok
    text = words(report)
    assert text.startswith("check NOT VERIFIED")
    for i in range(1, 5):
        assert f"stage{i} on device {i - 1} is not a name in the reference, but it equals S{i} on one device: " in text
        assert f"name it S{i}" in text
    # S4 is the result, which device 3 returned and was compared: only S1..S3 went uncompared
    assert "no device computed S1, S2, S3 under that name" in text


def test_the_reference_names_pass():
    report = check(World(4).run(student_pipeline, X4, "S"), Reference.of(four_stages, X4))
    assert report.verdict == "passed" and report.ok
    assert words(report) == f"check passed: {report.checked} values and the result match the single-device run"


def test_the_bug_with_the_reference_names_is_caught_at_the_stage_that_gets_the_wrong_input():
    report = check(World(4).run(student_pipeline, X4, "S", True), Reference.of(four_stages, X4))
    first = report.first
    assert (first.where, first.name, first.rank, first.position) == ("input", "S3", 2, 0)
    assert first.is_also == ["S1"]


def test_an_unnamed_message_that_carries_no_reference_value_is_not_verified():
    def model(dev, x):
        dev.hold("x", x)
        return dev.compute("B", lambda v: (2 * v) ** 2, x)  # B from x; the split computes it from 2x

    def split(dev, x):
        if dev.rank == 0:
            dev.send(2 * dev.hold("x", x), dst=1)  # a value the model never names
            return None
        return dev.compute("B", np.square, dev.recv(0))

    report = check(World(2).run(split, np.array([3.0])), Reference.of(model, np.array([3.0])))
    assert report.verdict == "not verified"
    assert "message #0 from device 0 to device 1 (tag 0) has no name and carries [6.]" in words(report)


def test_a_run_without_its_outputs_is_not_verified():
    run = World(4).run(student_pipeline, X4, "S")
    run.trace.outputs = None
    report = check(run.trace, Reference.of(four_stages, X4))
    assert report.verdict == "not verified" and "return values were not recorded" in words(report)


def test_no_device_returning_the_result_is_not_verified():
    def silent(dev, x):
        student_pipeline(dev, x, "S")

    report = check(World(4).run(silent, X4), Reference.of(four_stages, X4))
    assert report.verdict == "not verified"
    assert "no device returned a value, so the model's result was not compared" in words(report)


# ---- partial sums -------------------------------------------------------------------------------
RNG = np.random.default_rng(7)
X, A, B = RNG.standard_normal((1, 4)), RNG.standard_normal((4, 6)), RNG.standard_normal((6, 4))


def gelu(v):
    return 0.5 * v * (1 + np.tanh(0.8 * v))


def mlp(dev):
    x = dev.hold("X", X)
    h = dev.compute("H", gelu, dev.compute("XA", np.matmul, x, A))
    return dev.compute("Z", np.matmul, h, B)


def tensor_parallel_mlp(dev, name="Z", partial=True, reduce=True, late_gelu=False):
    cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
    rows = np.s_[3 * dev.rank : 3 * dev.rank + 3, :]
    x = dev.hold("X", X)
    h = dev.compute("H", gelu, dev.compute("XA", np.matmul, x, A[cols], index=cols), index=cols)
    z = dev.compute(name, np.matmul, h, B[rows], partial=partial or None)
    if late_gelu:
        return dev.compute("Z", gelu, z)
    return dev.all_reduce(z) if reduce else z


def test_declared_partial_sums_are_added_up_and_compared():
    report = check(World(2).run(tensor_parallel_mlp), Reference.of(mlp))
    assert report.ok, words(report)


def test_partial_sums_that_do_not_add_up_fail_where_the_last_one_is_computed():
    def wrong(dev):
        cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
        x = dev.hold("X", X)
        h = dev.compute("H", gelu, dev.compute("XA", np.matmul, x, A[cols], index=cols), index=cols)
        z = dev.compute("Z", np.matmul, h, B[np.s_[0:3, :]], partial=True)  # BUG: every device takes rows 0:3
        return dev.all_reduce(z)

    report = check(World(2).run(wrong), Reference.of(mlp))
    assert report.first.where == "partial sums" and report.first.rank == 1
    assert words(report).startswith(
        "check FAILED at the first divergence: the partial sums of Z on devices 0, 1 add up to"
    )


def test_a_partial_sum_returned_as_the_result_is_called_a_missing_all_reduce():
    report = check(World(2).run(tensor_parallel_mlp, reduce=False), Reference.of(mlp))
    assert report.first.where == "result"
    assert "That is device 0's partial sum of Z (one term of a sum over devices 0, 1)" in words(report)
    assert "the all-reduce that adds the partial sums is missing?" in words(report)


def test_a_report_wraps_within_120_columns_and_keeps_every_word():
    report = check(World(2).run(tensor_parallel_mlp, reduce=False), Reference.of(mlp))
    lines = str(report).splitlines()
    assert len(lines) > 2 and max(map(len, lines)) <= 120
    assert all(line.startswith("  ") for line in lines[1:])  # continuations indented under the first line
    assert words(report) == " ".join(report.text(width=None).split())


def test_a_partial_sum_fed_to_a_non_linear_op_is_named():
    report = check(World(2).run(tensor_parallel_mlp, name="Zp", late_gelu=True), Reference.of(mlp))
    text = words(report)
    assert report.verdict == "FAILED" and report.first.name == "Z"
    assert "partial sum of Zp" in text and "input 0 of op Z" in text


def test_a_partial_sum_sent_as_the_complete_value_is_named():
    def sender(dev):
        z = tensor_parallel_mlp(dev, reduce=False)
        if dev.rank == 1:
            dev.send(z, dst=0)  # BUG: its own partial sum, not the all-reduced Z
            return None
        return dev.compute("out", np.add, z, dev.recv(1, name="Z"))

    def model(dev):
        return dev.compute("out", lambda z: 2 * z, mlp(dev))

    report = check(World(2).run(sender), Reference.of(model))
    assert report.first.where == "message"
    assert "That is device 1's partial sum of Z" in words(report) and "sent to device 0 as Z" in words(report)


def test_an_undeclared_partial_sum_gets_partial_advice_not_a_whole_index():
    report = check(World(2).run(tensor_parallel_mlp, partial=False), Reference.of(mlp))
    text = words(report)
    assert "say so with partial=True" in text.replace("Say", "say")
    assert "index=np.s_[:, 0:3]" not in text  # an index would describe a block, and Z here has its full shape


def test_partial_over_a_group_that_omits_the_device_is_refused():
    with pytest.raises(Exception, match=r"partial=\(1,\) for 'Z' must list distinct ranks.*this device \(0\)"):
        World(2).run(lambda dev: dev.compute("Z", lambda: np.ones(2), partial=(1,)) if dev.rank == 0 else None)


def test_a_partial_sum_one_member_never_computes_is_not_verified():
    def half(dev):
        if dev.rank == 0:
            dev.compute("Z", lambda: np.ones(2), partial=True)
        return None

    report = check(World(2).run(half), Reference.of(lambda dev: dev.compute("Z", lambda: np.ones(2))))
    assert report.verdict == "not verified"
    assert "were computed on devices [0] only (not on [1])" in words(report)


# ---- returned shards ----------------------------------------------------------------------------
W = np.arange(24.0).reshape(4, 6)
XS = np.arange(8.0).reshape(2, 4)


def linear(dev):
    return dev.compute("Y", np.matmul, dev.hold("X", XS), dev.hold("W", W))


def columns(dev, declare=True, only=None):
    cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
    x = dev.hold("X", XS)
    w = dev.hold("W", W[cols], index=cols)
    y = dev.compute("Y", np.matmul, x, w, index=cols if declare else None)
    return y if only is None or dev.rank == only else None


def test_returned_shards_are_compared_with_their_part_of_the_result():
    assert check(World(2).run(columns), Reference.of(linear)).ok


def test_returned_shards_that_cover_half_the_result_are_not_verified():
    report = check(World(2).run(columns, True, 0), Reference.of(linear))
    assert report.verdict == "not verified"
    assert "cover 6 of its 12 elements" in words(report)


# ---- inputs that cannot tell two values apart ------------------------------------------------------
def seed_model(dev, x):
    dev.hold("x", x, doc="the raw input")
    return dev.compute("B", np.square, dev.compute("A", lambda v: 2 * v + 1, x))


def seed_split(dev, x, bug=False):
    if dev.rank == 0:
        x = dev.hold("x", x)
        dev.send(x if bug else dev.compute("A", lambda v: 2 * v + 1, x), dst=1)
        return None
    return dev.compute("B", np.square, dev.recv(0, name="A"))


def test_an_input_that_cannot_tell_the_bug_apart_gets_a_note():
    x = np.array([-1.0])  # 2x + 1 == x
    for bug in (False, True):
        report = check(World(2).run(seed_split, x, bug), Reference.of(seed_model, x))
        assert report.notes and "try another input" in words(report)
        assert any("x and A are equal" in note for note in report.notes)
    other = np.array([3.0])
    assert check(World(2).run(seed_split, other, True), Reference.of(seed_model, other)).verdict == "FAILED"


def test_ops_that_return_several_arrays_are_compared_part_by_part():
    def model(dev):
        return dev.compute("qr", lambda: (np.ones(2), np.arange(3.0)))

    def right(dev):
        return dev.compute("qr", lambda: (np.ones(2), np.arange(3.0))) if dev.rank == 0 else None

    def wrong(dev):
        return dev.compute("qr", lambda: (np.ones(2), np.arange(3.0) + 1)) if dev.rank == 0 else None

    assert check(World(2).run(right), Reference.of(model)).ok
    report = check(World(2).run(wrong), Reference.of(model))
    assert report.verdict == "FAILED" and "computed ([1., 1.], [1., 2., 3.])" in words(report)


@pytest.mark.parametrize("own_names", [False, True])
def test_a_program_that_does_nothing_is_not_verified_not_passed(own_names):
    # no event and no result: the references were met only through events, so nothing was owed
    run = World(4).run(lambda dev, x: None, np.array([0.5]))
    report = check(run, Reference.of(four_stages, np.array([0.5])), own_names=own_names)
    assert report.verdict == "not verified", report.text()
    assert "no device returned a value" in words(report.text())
