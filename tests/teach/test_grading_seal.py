"""The grader's code in the student's process is sealed (``simulator.teach.answer_seal``): an answer that changes
it, so that the record it hands back is not what ran, is FAILED as tampering; right answers still pass."""

import textwrap

import pytest

from .test_grading import RIGHT
from .test_grading_guard import graded

LIBRARY_RING = """
EXERCISE = "ring-all-reduce"

def ring(dev, x):  # the library's all-reduce, which this exercise does not allow
    return dev.all_reduce(dev.hold(f"x[{dev.rank}]", x), name="v")

ANSWER = ring
"""


def test_the_record_builder_rebound_to_hide_a_collective_is_tampering(tmp_path):
    row = graded(
        tmp_path,
        LIBRARY_RING
        + textwrap.dedent("""
        import sys

        _main = sys.modules["__main__"]  # the student's process: it builds the record with plain_trace
        _real = _main.plain_trace

        def _dressed(trace):  # the collective's messages relabelled as a hand-written ring's
            out = _real(trace)
            for m in out.messages:
                m.tag, m.label = 0, "my ring step"
            return out

        _main.plain_trace = _dressed
        """),
    )
    assert row.verdict == "FAILED" and "tampering" in row.detail and "__main__.plain_trace" in row.detail, row


def test_a_collective_s_tag_patched_in_the_library_is_tampering(tmp_path):
    row = graded(
        tmp_path,
        LIBRARY_RING
        + textwrap.dedent("""
        import simulator.core.messaging as messaging

        messaging.CollectiveTag = int  # its messages would then look like the student's own
        """),
    )
    assert row.verdict == "FAILED" and "simulator.core.messaging.CollectiveTag" in row.detail, row


def test_a_right_answer_that_imports_the_library_and_patches_nothing_passes(tmp_path):
    row = graded(tmp_path, "import simulator.core.messaging\nimport simulator.collectives\n" + RIGHT)
    assert row.verdict == "passed", row


def test_a_right_answer_that_imports_more_of_the_package_passes(tmp_path):
    row = graded(tmp_path, "import simulator.teach.grading\nimport simulator.views\n" + RIGHT)
    assert row.verdict == "passed", row


def test_in_a_notebook_the_library_s_collective_relabelled_is_refused(monkeypatch, capsys):
    import simulator.collectives.call as call
    from simulator.teach.exercises import start

    def ring(dev, x):  # the library's all-reduce, its messages labelled as the student's own ring
        return dev.all_reduce(dev.hold(f"x[{dev.rank}]", x), name="v")

    monkeypatch.setattr(call._Call, "label", property(lambda self: "my ring step"))
    result = start("ring-all-reduce").grade(ring, seed=1)
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert "simulator.collectives.call._Call.label" in result.text()


def test_in_a_notebook_numpy_patched_with_the_snapshot_disabled_does_not_pass_the_starter(monkeypatch, capsys):
    """The grader compares with its own NumPy functions, taken when it loaded: a notebook that turns the snapshot
    off and makes numpy's comparisons say yes still gets the partial sum FAILED."""
    import numpy as np

    from simulator.teach.exercises import grading, start

    def rows(dev, x, w):  # the starter: a partial sum returned, and a message so something "arrives"
        r = dev.rank
        x = dev.hold("X", x, index=np.s_[:, 2 * r : 2 * r + 2])
        w = dev.hold("W", w, index=np.s_[2 * r : 2 * r + 2])
        dev.send(np.zeros(12), 1 - r)
        dev.recv(1 - r, shape=(12,), dtype=np.float64)
        return dev.compute("Y", np.matmul, x, w)

    ex = start("row-split")
    monkeypatch.setattr(grading, "_CHANGED", lambda snapshot: [])  # the comparison the grade loaded with, made blind
    for name in ("isclose", "allclose", "array_equal", "all"):
        monkeypatch.setattr(np, name, lambda *a, **k: True)
    monkeypatch.setattr(np, "median", lambda *a, **k: 1e300)
    result = ex.grade(rows, seed=1)
    assert result.verdict == "FAILED" and result.diagnosis != "grader", result.text()


@pytest.mark.xfail(
    strict=True,
    reason="known gap: student code shares the process that builds the record, so it can take over the protocol "
    "(find the grader's pipes by number, answer every request itself with a relabelled record). Closing it needs "
    "the record built where no student code runs (the engine in a process of its own, the rank programs calling it)",
)
def test_an_answer_that_takes_over_the_protocol_with_a_relabelled_collective_is_FAILED(tmp_path):
    row = graded(
        tmp_path,
        LIBRARY_RING
        + textwrap.dedent("""
        import fcntl, os, stat, sys
        from pathlib import Path

        _m = sys.modules["__main__"]
        _real = _m.plain_trace

        def _dressed(trace):
            out = _real(trace)
            for msg in out.messages:
                msg.tag, msg.label = 0, "my ring step"
            return out

        _m.plain_trace = _dressed
        pipes = []
        for fd in range(3, 30):
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    pipes.append((fd, os.O_ACCMODE & fcntl.fcntl(fd, fcntl.F_GETFL)))
            except OSError:
                pass
        requests = next(fd for fd, mode in pipes if mode == os.O_RDONLY)
        channel = next(fd for fd, mode in pipes if mode == os.O_WRONLY)
        _m.write_frame(channel, {"kind": "loaded", "exercise": EXERCISE, "student": "ada", "answer": ""})
        while True:
            request = _m.read_frame(requests)
            if request["kind"] == "bye":
                os._exit(0)
            _m.write_frame(channel, _m.answer(request, ring, Path(__file__), lambda: None))
        """),
    )
    assert row.verdict == "FAILED", row


@pytest.mark.parametrize("loosen", ["RTOL[8] = 1.0", "ULP_FLOOR = 10**15"])
def test_in_a_notebook_the_checker_s_tolerance_loosened_is_refused(monkeypatch, loosen):
    """A tolerance is a constant of the checker, not a function: loosening it in place (float64's rtol made 1) or
    rebinding it would pass a gradient 0.05 off; the grade says the grader was changed."""

    import simulator.checker.compare as compare
    from simulator.teach.exercises import start
    from tests.checker.test_redteam4 import a_gradient_off as off

    ex = start("data-parallel-average")
    saved = dict(compare.RTOL)
    try:
        if loosen.startswith("RTOL"):
            compare.RTOL[8] = 1.0  # (the dict the reference's identify reads too)
        else:
            monkeypatch.setattr(compare, "ULP_FLOOR", 10**15)
        result = ex.grade(off, seed=1)
    finally:
        compare.RTOL.update(saved)
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert f"simulator.checker.compare.{loosen.split('[')[0].split(' ')[0]}" in result.text()
