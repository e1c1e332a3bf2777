"""The exercises: every starter fails with the diagnosis it is about, every solution passes (on the notebook's
inputs and random ones), the predictions are checked against sealed answers, and hints follow the diagnosis."""

import numpy as np
import pytest

from instructor.exercises.answers import ANSWERS, sealed_forms
from simulator.teach.exercises import EXERCISES, grade, start
from simulator.teach.exercises.core import NOT_ANSWERED
from tests.exercises import exercise_notebooks, run_cells, solution_cells

STARTERS = {  # notebook -> what its starter's grade must say (the bug the exercise is about)
    "01_split_the_seed.ipynb": ["FAILED", "op B on device 1 got [0.] as input 0, but on one device it is [7.]"],
    "02_raw_input_bug.ipynb": ["FAILED", "message #0 from device 0 to device 1 (tag 0) carried [3.]", "is x"],
    "03_column_split.ipynb": ["FAILED", "It is the block [:, 0:3] of that input", "say which part with index="],
    "04_row_split.ipynb": ["FAILED", "device 0's partial sum of Y", "the all-reduce that adds the partial sums"],
    "05_ring_all_reduce.ipynb": ["FAILED", "op v on device 0 computed", "v (the sum of the four vectors)"],
    "06_1f1b_schedule.ipynb": ["FAILED", "this is not 1F1B yet: device 0 holds the activations of 4 microbatches"],
    "07_data_parallel_average.ipynb": ["FAILED", "2 times what it should be", "where an average was meant"],
    "08_zero_1_step.ipynb": ["FAILED", "device 0 holds 64 bytes of the optimizer state m"],
}


def words(text: str) -> str:
    return " ".join(text.split())


def test_there_are_eight_exercises_each_with_a_solution_and_sealed_answers():
    assert exercise_notebooks() == sorted(STARTERS)
    assert len(EXERCISES) == 8 and sorted(ANSWERS) == sorted(EXERCISES)
    for nb in exercise_notebooks():
        assert "starter" in solution_cells(nb)


@pytest.mark.parametrize("notebook", sorted(STARTERS))
def test_starter_fails_with_the_expected_diagnosis(notebook):
    out = run_cells(notebook, solved=False)
    assert max(len(line) for line in out["all"].splitlines()) <= 120
    grade_text = words(out["grade"])  # lines are wrapped: compare the words
    assert grade_text.startswith("try 1: ")
    for expected in STARTERS[notebook]:
        assert expected in grade_text, (notebook, expected, grade_text)
    assert "hint: " in grade_text and "read the FAILED line" not in grade_text
    assert "Write your prediction in place of ..." in out["all"]  # the predictions wait for the student


@pytest.mark.parametrize("notebook", sorted(STARTERS))
def test_solution_passes_on_random_inputs_too_and_answers_every_prediction(notebook):
    out = run_cells(notebook, solved=True)
    assert out["grade"].startswith("try 1: passed: "), out["grade"]
    assert "random ones" in words(out["grade"]) and "check passed" not in out["grade"]
    predictions = [tag for tag in out if tag.startswith("predict-")]
    assert predictions and all(out[tag].startswith("Right.") for tag in predictions), out


def test_the_package_keeps_digests_and_sealed_whys_that_match_the_instructor_answers():
    sealed = sealed_forms()
    for name, make in EXERCISES.items():
        ex = make()
        assert {q.key for q in ex.questions} == set(ANSWERS[name])
        for q in ex.questions:
            answer, why = ANSWERS[name][q.key]
            assert (q.digest, q.why) == sealed[name][q.key]
            assert q.reveal(answer) == why and q.is_right(answer)
            assert why not in repr(ex) and repr(answer) not in q.prompt.split("?")[-1]


def test_predictions_are_checked_in_place_and_a_wrong_one_reveals_nothing(capsys):
    ex = start("split-the-seed")
    ex.predict("messages")
    assert "Write your prediction" in capsys.readouterr().out and ex.answered == {}
    ex.predict("messages", 2)
    said = words(capsys.readouterr().out)
    assert said.startswith("Not quite: you said 2.") and "A's output" not in said and "One" not in said
    ex.predict("returns", 49.0000001)
    assert words(capsys.readouterr().out).startswith("Right. A = 2 * 3 + 1 = 7")
    ex.predict("messages", 1)
    assert ex.answered == {"messages": False, "returns": True}  # the first try of each is what counts
    with pytest.raises(KeyError, match="has no question 'nope'"):
        ex.predict("nope", 1)
    rows = start("row-split").exercise.question("shape")
    assert rows.is_right([2, 6]) and rows.is_right((2, 6)) and not rows.is_right(3)
    assert not start("row-split").exercise.question("messages").is_right("four") and NOT_ANSWERED is Ellipsis


def test_hints_follow_the_diagnosis_and_get_more_specific_on_a_repeat(capsys):
    ex = start("split-the-seed")

    def never_sends(dev, x):
        if dev.rank == 0:
            dev.hold("x", x)
            dev.compute("A", lambda v: 2 * v + 1, x)
            return None
        return dev.compute("B", np.square, np.zeros(1))

    first, second = ex.grade(never_sends), ex.grade(never_sends)
    assert first.diagnosis == second.diagnosis == "value:input"
    assert "hint: Which value does device 1 square" in words(capsys.readouterr().out)

    def sends_x(dev, x):
        if dev.rank == 0:
            dev.hold("x", x)
            dev.compute("A", lambda v: 2 * v + 1, x)
            dev.send(x, dst=1)
            return None
        h = dev.recv(src=0, shape=(1,), dtype=np.float64)
        return dev.compute("B", np.square, dev.compute("A", lambda v: 2 * v + 1, h))

    g = ex.grade(sends_x)
    assert g.diagnosis == "split:compute" and "hint: Device 1 computes only B" in words(capsys.readouterr().out)
    assert g.where is not None and g.where.startswith("your line") and "dev.compute" in g.where
    assert start("split-the-seed").tries == 0  # every notebook starts its own exercise


def test_a_hint_after_not_verified_never_says_read_the_failed_line(capsys):
    ex = start("split-the-seed")

    def unnamed(dev, x):
        if dev.rank == 0:  # a name the model does not have, equal to A (B, the result, is compared as returned)
            dev.send(dev.compute("A2", lambda v: 2 * v + 1, dev.hold("x", x)), dst=1)
            return None
        h = dev.recv(src=0, shape=(1,), dtype=np.float64)
        return dev.compute("B", np.square, h)

    result = ex.grade(unnamed)
    out = words(capsys.readouterr().out)
    assert result.verdict == "not verified" and "no device computed A under that name" in out
    assert "A2 on device 0 is a name of your own, not the model's: it equals A on one device (name it A" in out
    assert "FAILED" not in out and "hint: " in out


def test_a_program_that_stops_fails_with_its_error_and_its_line(capsys):
    ex = start("split-the-seed")

    def sends_nothing(dev, x):  # device 1 waits for a message that never comes
        if dev.rank == 1:
            return dev.recv(src=0, shape=(1,), dtype=np.float64)
        return None

    result = ex.grade(sends_nothing)
    assert result.verdict == "FAILED" and result.diagnosis == "deadlock"
    assert "the run stopped with DeadlockError" in words(result.text())
    boom = ex.grade(lambda dev, x: 1 / 0)
    assert "ZeroDivisionError" in boom.reason and boom.where and boom.where.startswith("your line")


@pytest.mark.parametrize("escape", [SystemExit(0), BaseException("out"), GeneratorExit()])
def test_system_exit_and_base_exceptions_are_a_failed_try_not_an_escape(escape, capsys):
    def leaves(dev, x):
        raise escape

    result = start("split-the-seed").grade(leaves)
    assert result.verdict == "FAILED" and type(escape).__name__ in result.reason


def test_the_definition_cannot_be_loosened_from_the_notebook():
    ex = start("zero-1-step")
    with pytest.raises(AttributeError, match="cannot be set"):
        ex.requirements = ()
    with pytest.raises(AttributeError):
        ex.exercise.requirements = ()  # frozen
    with pytest.raises(TypeError):
        EXERCISES["zero-1-step"] = lambda: None  # the registry is read-only
    from simulator.teach.exercises.data import one_device_step

    object.__setattr__(ex, "_make", lambda: one_device_step)  # forced past the guard: the grade refuses it
    assert ex.grade(lambda dev, p, g, m: None).diagnosis == "grader"


def test_a_patched_checker_is_refused_not_obeyed(monkeypatch):
    import simulator.checker.run_check as run_check
    import simulator.teach.exercises.grading as grading
    from simulator.checker import CheckReport
    from simulator.teach.examples.seeds import wrong_input

    passing = CheckReport(None, 7, 0)
    monkeypatch.setattr(grading, "check", lambda *a, **k: passing)
    result = grade("raw-input-bug", wrong_input)
    assert result.verdict == "FAILED" and result.diagnosis == "grader" and "the grader was changed" in result.reason
    monkeypatch.undo()
    monkeypatch.setattr(run_check._Checker, "report", lambda self: passing)
    assert grade("raw-input-bug", wrong_input).diagnosis == "grader"
    monkeypatch.undo()
    import simulator.teach.exercises as exercises

    monkeypatch.setattr(exercises, "EXERCISES", {**exercises.EXERCISES})
    assert start("raw-input-bug").grade(wrong_input).diagnosis == "grader"
    monkeypatch.undo()
    assert grade("raw-input-bug", wrong_input).diagnosis == "value:message"  # restored: graded again


def test_unknown_exercise_is_named():
    with pytest.raises(KeyError, match="choose one of: split-the-seed"):
        start("split")


def test_a_hint_is_shown_once_in_a_notebook(capsys):
    ex = start("row-split")
    ex.grade(lambda dev, x, w: None)
    capsys.readouterr()
    text = ex.hint()
    assert capsys.readouterr().out.strip() == text and text.startswith("hint: ")
    assert text._ipython_display_() is None  # the cell's value displays nothing: the hint is printed already


def test_a_hint_after_a_pass_says_nothing_is_left_to_fix(capsys):
    from simulator.teach.examples.seeds import split

    ex = start("split-the-seed")
    assert ex.grade(split).ok
    assert ex.hint().startswith("try 1 passed: there is nothing left to fix")


def test_grade_is_a_function_of_the_program_alone_for_a_folder_of_files():
    from simulator.teach.examples.seeds import split

    a, b = grade("split-the-seed", split, seed=1), grade("split-the-seed", split, seed=1)
    assert a.ok and b.ok and a.reason == b.reason and a.diagnosis == "passed"


def test_a_misspelt_exercise_name_gets_the_one_it_meant():
    with pytest.raises(KeyError, match="no exercise named 'ring_all_reduce'; did you mean 'ring-all-reduce'?"):
        start("ring_all_reduce")
