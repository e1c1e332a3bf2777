"""The exercises: every starter fails with the diagnosis it is about, every solution passes, the
predictions are checked in place, and hints get more specific with each try."""

import numpy as np
import pytest

from simulator.teach.exercises import EXERCISES, Question, start
from simulator.teach.exercises.core import NOT_ANSWERED
from tests.exercises import exercise_notebooks, run_cells, solution_cells

STARTERS = {  # notebook -> what its starter's grade must say (the bug the exercise is about)
    "01_split_the_seed.ipynb": ["FAILED", "op B on device 1 got [3.] as input 0", "is x (the model's raw input)"],
    "02_raw_input_bug.ipynb": ["FAILED", "message #0 from device 0 to device 1 (tag 0) carried [3.]", "is x"],
    "03_column_split.ipynb": ["FAILED", "It is the block [:, 0:3] of that input", "say which part with index="],
    "04_row_split.ipynb": ["FAILED", "device 0's partial sum of Y", "the all-reduce that adds the partial sums"],
    "05_ring_all_reduce.ipynb": ["FAILED", "op v on device 0 computed", "v (the sum of the four vectors)"],
    "06_1f1b_schedule.ipynb": ["FAILED", "this is not 1F1B yet: device 0 holds the activations of 4 microbatches"],
    "07_data_parallel_average.ipynb": ["FAILED", "2 times what it should be", "where an average was meant"],
    "08_zero_1_step.ipynb": ["FAILED", "device 0 holds 64 bytes of the optimizer state m"],
}


def test_there_are_eight_exercises_each_with_a_solution():
    assert exercise_notebooks() == sorted(STARTERS)
    assert len(EXERCISES) == 8
    for nb in exercise_notebooks():
        assert "starter" in solution_cells(nb)


@pytest.mark.parametrize("notebook", sorted(STARTERS))
def test_starter_fails_with_the_expected_diagnosis(notebook):
    out = run_cells(notebook, solved=False)
    assert max(len(line) for line in out["all"].splitlines()) <= 120
    grade = " ".join(out["grade"].split())  # lines are wrapped: compare the words
    assert grade.startswith("try 1: ")
    for words in STARTERS[notebook]:
        assert words in grade, (notebook, words, grade)
    assert "hint 1 of 3" in grade
    assert "Write your prediction in place of ..." in out["all"]  # the predictions wait for the student


@pytest.mark.parametrize("notebook", sorted(STARTERS))
def test_solution_passes_and_answers_every_prediction(notebook):
    out = run_cells(notebook, solved=True)
    assert out["grade"].startswith("try 1: passed: "), out["grade"]
    assert "check passed" not in out["grade"], out["grade"]  # said once
    predictions = [tag for tag in out if tag.startswith("predict-")]
    assert predictions and all(out[tag].startswith("Right.") for tag in predictions), out


def test_predictions_are_checked_in_place(capsys):
    ex = start("split-the-seed")
    ex.predict("messages")
    assert "Write your prediction" in capsys.readouterr().out and ex.answered == {}
    ex.predict("messages", 2)
    assert "Not quite: you said 2, the answer is 1. One: A's output" in " ".join(capsys.readouterr().out.split())
    ex.predict("returns", 49.0000001)
    assert ex.answered == {"messages": False, "returns": True}
    with pytest.raises(KeyError, match="has no question 'nope'"):
        ex.predict("nope", 1)
    assert Question("s", "?", (2, 6), "").is_right([2, 6]) and not Question("s", "?", (2, 6), "").is_right(3)
    assert not Question("n", "?", 4, "").is_right("four") and NOT_ANSWERED is Ellipsis


def test_hints_get_more_specific_and_stop_at_the_answer():
    ex = start("row-split")
    texts = [ex.grade(lambda dev: None).text for _ in range(4)]
    assert [t.split("\n\n")[-1][:11] for t in texts] == ["hint 1 of 3", "hint 2 of 3", "hint 3 of 3", "hint 3 of 3"]
    assert "(the last hint)" in texts[-1] and "dev.all_reduce(y" in texts[-1]
    assert all(len(line) <= 110 for t in texts for line in t.splitlines())
    assert start("row-split").tries == 0  # every notebook starts its own exercise


def test_a_program_that_stops_fails_with_its_error(capsys):
    ex = start("split-the-seed")

    def sends_nothing(dev, x):  # device 1 waits for a message that never comes
        if dev.rank == 1:
            return dev.recv(src=0, shape=(1,), dtype=np.float64)
        return None

    grade = ex.grade(sends_nothing)
    assert grade.verdict == "FAILED" and "the run stopped with DeadlockError" in " ".join(grade.text.split())
    boom = " ".join(ex.grade(lambda dev, x: 1 / 0).text.split())
    assert "ZeroDivisionError" in boom and "(in your code: line" in boom


def test_not_verified_is_said_with_what_was_not_compared():
    ex = start("split-the-seed")

    def unnamed(dev, x):
        if dev.rank == 0:
            dev.send(dev.compute("A", lambda v: 2 * v + 1, x), dst=1)
            return None
        h = dev.recv(src=0, shape=(1,), dtype=np.float64)
        return dev.compute("B2", lambda v: v**2, h)  # a name the model does not have

    grade = ex.grade(unnamed)
    text = " ".join(grade.text.split())
    assert grade.verdict == "not verified" and "B2 on device 1 is not a name in the reference" in text


def test_unknown_exercise_is_named():
    with pytest.raises(KeyError, match="choose one of: split-the-seed"):
        start("split")


def _no_split_matmul(dev):  # the whole W on every device, nothing sent: right values, not the exercise
    from simulator.teach.exercises.tensor import W, X

    return dev.compute("Y", np.matmul, dev.hold("X", X), dev.hold("W", W))


def _ring_without_messages(dev, xs):
    from simulator.teach.exercises.ring import XS

    dev.hold(f"x[{dev.rank}]", XS[dev.rank])
    return dev.compute("v", lambda: XS.sum(axis=0))


def _ring_by_the_library(dev, xs):
    from simulator.teach.exercises.ring import XS

    return dev.all_reduce(dev.hold(f"x[{dev.rank}]", XS[dev.rank]), name="v")


def _replica_on_the_whole_batch(dev):
    from simulator.teach.exercises.data import W, X, Y, mean_gradient

    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    dev.hold("X", X), dev.hold("y", Y), dev.hold("w", W)
    dev.compute("g.local", mean_gradient, X[rows], Y[rows], W)
    return dev.compute("g", mean_gradient, X, Y, W)


def _seed_on_one_device(dev, x):
    h = dev.compute("A", lambda v: 2 * v + 1, dev.hold("x", x))
    return dev.compute("B", np.square, h) if dev.rank == 1 else None


@pytest.mark.parametrize(
    "exercise, program, words",
    [
        ("column-split", _no_split_matmul, "no message crossed between the devices: each device computes its own"),
        ("row-split", _no_split_matmul, "no message crossed between the devices: each device multiplies its own"),
        ("ring-all-reduce", _ring_without_messages, "no message crossed between the devices: the ring passes"),
        ("ring-all-reduce", _ring_by_the_library, "its messages all come from a collective call: the ring passes"),
        ("data-parallel-average", _replica_on_the_whole_batch, "no message crossed between the devices: each replica"),
        ("split-the-seed", _seed_on_one_device, "no message crossed between the devices: stage A runs on device 0"),
    ],
)
def test_a_program_that_gets_the_values_without_the_parallelism_fails(exercise, program, words, capsys):
    grade = start(exercise).grade(program)
    assert grade.verdict == "FAILED" and "the values match the single-device run, but" in " ".join(grade.text.split())
    assert words in " ".join(grade.text.split())


def test_a_hint_is_shown_once_in_a_notebook(capsys):
    ex = start("row-split")
    text = ex.hint()
    assert capsys.readouterr().out.strip() == text and text.startswith("hint 1 of 3")
    assert text._ipython_display_() is None  # the cell's value displays nothing: the hint is printed already


def test_a_hint_after_a_pass_says_nothing_is_left_to_fix(capsys):
    from simulator.teach.examples.seeds import split

    ex = start("split-the-seed")
    assert ex.grade(split).ok
    assert ex.hint().startswith("try 1 passed: there is nothing left to fix")
