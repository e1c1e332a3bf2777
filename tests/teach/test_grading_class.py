"""Grading a class that never stalls, and grades what students have: a process left behind is stopped and the
verdict kept, memory, output and processes are limited, an answer cell copied from its notebook passes, the CSVs
are escaped, tries are counted by time and each student gets a row with a hint."""

import csv
import os
import re
import textwrap
import time
from pathlib import Path

import pytest

from simulator.teach.exercises import EXERCISES
from simulator.teach.grading import grade_folder, students_csv, write_csv, write_students
from simulator.teach.student_process import SETUP

from .test_grading import RIGHT, SCHEDULE, WRONG
from .test_grading_guard import ROOT, graded

# ---- bounded -----------------------------------------------------------------------------------------


def test_a_detached_process_left_behind_is_stopped_and_the_verdict_kept(tmp_path):
    pid_file = tmp_path / "pid"
    row = graded(
        tmp_path,
        RIGHT
        + textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:  # a child in a session of its own, holding the channel open, sleeping for ever
            os.setsid()
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            while True:
                time.sleep(1)
        """),
        timeout=30,
    )
    assert row.verdict == "passed", row  # not "timed out": the wait after the last reply is bounded
    pid = int(pid_file.read_text())
    for _ in range(50):
        state = Path(f"/proc/{pid}/stat")
        if not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the detached process {pid} is still running")


def test_a_forked_child_that_fails_is_not_taken_for_the_answer(tmp_path):
    # the child's exec is refused: its copy of the grader's code must not answer too (two replies read as tampering)
    row = graded(
        tmp_path,
        RIGHT
        + textwrap.dedent("""
        import os
        if os.fork() == 0:
            os.setsid()
            os.execv("/bin/sleep", ["sleep", "10000"])
        """),
        timeout=30,
    )
    assert row.verdict == "passed", row


def test_memory_and_output_are_limited(tmp_path):
    big = graded(tmp_path, RIGHT + "\nimport numpy\nx = numpy.ones(3 * 2**30 // 8)\n", name="big.py")
    assert big.verdict == "crashed" and "MemoryError" in big.detail, big
    loud = graded(tmp_path, RIGHT + "\nfor _ in range(10**6):\n    print('x' * 100)\n", name="loud.py")
    assert loud.verdict == "crashed" and "File too large" in loud.detail, loud


# ---- answers copied from the notebooks ----------------------------------------------------------------


def _starter(solution: Path) -> str:
    text = solution.read_text()
    return text[text.index("# %% [starter]") :].split("# %% [", 2)[1].split("\n", 1)[1]


def test_a_folder_of_answer_cells_copied_from_their_notebooks_passes(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    solutions = sorted((ROOT / "instructor" / "exercises").glob("0*.py"))
    assert len(solutions) == len(EXERCISES)
    for solution, name in zip(solutions, EXERCISES):
        (folder / f"{name}.py").write_text(f'EXERCISE = "{name}"\n' + _starter(solution))
    rows = grade_folder(folder, timeout=60, jobs=2)
    assert {r.exercise: r.verdict for r in rows} == dict.fromkeys(EXERCISES, "passed"), [r.detail for r in rows]


def test_a_missing_setup_name_reads_not_graded(tmp_path):
    text = RIGHT.replace("return dev.compute", "stage_a(x)\n    return dev.compute")
    row = graded(tmp_path, text)
    assert row.verdict == "not graded" and row.detail.startswith("not graded: the setup names are missing"), row


def test_setup_names_are_the_notebooks_first_cell_imports():
    import json

    for notebook, name in zip(sorted((ROOT / "notebooks" / "exercises").glob("*.ipynb")), EXERCISES):
        cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
        setup = "".join(cells[0]["source"])
        named = {
            n.strip(): module
            for module, names in re.findall(
                r"from (simulator\.(?:teach\.exercises|parallel)\.\w+) import ([\w, ]+)", setup
            )
            for n in names.split(",")
        }
        assert SETUP[name] == named, notebook.name


# ---- the CSVs -----------------------------------------------------------------------------------------


def test_a_formula_like_name_is_escaped_in_both_csvs(tmp_path):
    row = graded(tmp_path, RIGHT + '\nSTUDENT = \'=HYPERLINK("http://x.example","click")\'\n')
    assert row.student.startswith("=HYPERLINK")
    write_csv([row], tmp_path / "g.csv")
    write_students([row], students_csv(tmp_path / "g.csv"))
    for path in (tmp_path / "g.csv", tmp_path / "g-students.csv"):
        with path.open() as f:
            (cell,) = [r["student"] for r in csv.DictReader(f)]
        assert cell == "'" + row.student, path


def test_tries_are_counted_by_time_and_each_student_gets_one_row_with_a_hint(tmp_path):
    folder = tmp_path / "class"
    (folder / "ada").mkdir(parents=True)
    (folder / "ada" / "a_late.py").write_text(RIGHT)
    (folder / "ada" / "b_early.py").write_text(WRONG)
    os.utime(folder / "ada" / "b_early.py", (1_000_000, 1_000_000))
    (folder / "bob.py").write_text(WRONG)
    rows = {r.file: r for r in grade_folder(folder, timeout=30, jobs=2)}
    assert (rows["ada/b_early.py"].try_number, rows["ada/a_late.py"].try_number) == (1, 2)
    path = write_students(list(rows.values()), tmp_path / "s.csv")
    with path.open() as f:
        got = {r["student"]: r for r in csv.DictReader(f)}
    assert (got["ada"]["passed"], got["ada"]["tries"], got["ada"]["last_verdict"], got["ada"]["hint"]) == (
        "1",
        "2",
        "passed",
        "",
    )
    assert got["bob"]["last_verdict"] == "FAILED" and got["bob"]["hint"] == rows["bob.py"].hint != ""


def test_the_grade_asks_the_answer_s_process_for_any_run_it_needs(tmp_path):
    # the boundary a check that needs more runs (the isolation check's differential runs) goes through:
    # Exercise.run_program(answer, inputs, split) runs the student's program there, on these inputs
    import numpy as np

    from simulator.teach.remote_answer import RemoteAnswer

    path = tmp_path / "ring.py"
    path.write_text(RIGHT)
    exercise = EXERCISES["ring-all-reduce"]()
    answer = RemoteAnswer(path, "ring-all-reduce", timeout=30)
    try:
        rng = np.random.default_rng(5)
        for inputs in (exercise.inputs(None), exercise.inputs(rng), exercise.inputs(rng)):
            run = exercise.run_program(answer, inputs, exercise.split(inputs))
            total = np.sum([np.asarray(v) for v in inputs.values()][0], axis=0)
            for out in run.outputs:
                np.testing.assert_allclose(out, total)
            assert answer.calls() and all(c.line for c in answer.calls())  # the student's lines, for the hint
    finally:
        answer.finish()
    assert not (answer.tampered or answer.timed_out or answer.died)


def test_a_fork_bomb_is_stopped_at_a_few_processes(tmp_path):
    row = graded(tmp_path, RIGHT + "\nimport os\nfor _ in range(50):\n    if os.fork() == 0:\n        os._exit(0)\n")
    assert row.verdict == "FAILED" and "graded code may not start more than a few processes" in row.detail, row


def test_a_crash_shows_the_last_lines_the_file_printed(tmp_path):
    row = graded(tmp_path, RIGHT + "\nimport os\nprint('about to leave')\nos._exit(4)\n")
    assert row.verdict == "crashed" and "exit status 4" in row.detail and "about to leave" in row.detail, row


def test_a_schedule_given_as_a_generator_grades_as_in_a_notebook(tmp_path):
    from simulator.teach.exercises import grade

    text = SCHEDULE.replace("    return rows", "    return (row for row in rows)")
    space: dict = {}
    exec(compile(textwrap.dedent(text), "schedule.py", "exec"), space)
    assert grade("1f1b-schedule", space["schedule"]).verdict == graded(tmp_path, text).verdict == "passed"
