"""Grading a class's folder: right, wrong, hanging and crashing student files, one CSV row each."""

import csv
import textwrap
from pathlib import Path

import pytest

from simulator.cli.main import main
from simulator.teach.grading import COLUMNS, grade_file, student_files, write_csv

ROOT = Path(__file__).resolve().parents[2]

RING_START = """
import numpy as np


def ring(dev, x):
    p, r = dev.world_size, dev.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunks = list(np.split(dev.hold(f"x[{r}]", x), p))
    for s in range(p - 1):  # reduce-scatter
        send_c, recv_c = (r - s) % p, (r - s - 1) % p
        dev.send(chunks[send_c], right, label=f"my ring reduce-scatter step {s}")
        got = dev.recv(left, shape=chunks[recv_c].shape, dtype=np.float64)
        chunks[recv_c] = dev.compute("add", np.add, got, chunks[recv_c], label="my ring")
"""
ALL_GATHER = """
    for s in range(p - 1):  # all-gather
        send_c, recv_c = (r + 1 - s) % p, (r - s) % p
        dev.send(chunks[send_c], right, label=f"my ring all-gather step {s}")
        chunks[recv_c] = dev.recv(left, shape=chunks[recv_c].shape, dtype=np.float64)
"""
RETURN = """
    return dev.compute("v", np.concatenate, chunks)
"""
RIGHT = 'EXERCISE = "ring-all-reduce"\n' + RING_START + ALL_GATHER + RETURN
WRONG = 'EXERCISE = "ring-all-reduce"\n' + RING_START + RETURN  # the starter: the all-gather left out
SCHEDULE = """
EXERCISE = "1f1b-schedule"
STUDENT = "bob"


def schedule(p, m):
    rows = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [f"{r}F{i}" for i in range(warmup)]
        for j in range(m - warmup):
            acts += [f"{r}F{warmup + j}", f"{r}B{j}"]
        rows.append(" ".join(acts + [f"{r}B{j}" for j in range(m - warmup, m)]))
    return rows


def helper():  # a second function: ANSWER says which one is graded
    pass


ANSWER = schedule
"""
FILES = {
    "alice/ring_1.py": WRONG,
    "alice/ring_2.py": RIGHT,
    "bob_schedule.py": SCHEDULE,
    "carol_hangs.py": RIGHT.replace(
        "    p, r = dev.world_size", "    while True:\n        pass\n    p, r = dev.world_size"
    ),
    "dave_exits.py": "import os\nos._exit(3)\n",
    "erin_raises.py": 'EXERCISE = "ring-all-reduce"\n\nx = 1 / 0\n',
    "frank_names_none.py": RING_START + RETURN,
    "gina_fakes.py": 'EXERCISE = "ring-all-reduce"\nimport os\nprint(\'{"verdict": "passed", "exercise": "ring-all-reduce"}\')\nos._exit(0)\n',
    "henry_two_functions.py": RIGHT + "\n\ndef helper():\n    pass\n",
    "ida_sys_exit.py": RIGHT.replace(
        "    p, r = dev.world_size", "    import sys\n    sys.exit(0)\n    p, r = dev.world_size"
    ),
    "_notes.py": "this is not a student's file",
}


@pytest.fixture
def folder(tmp_path):
    for name, text in FILES.items():
        path = tmp_path / "class" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path / "class"


def test_the_files_graded_are_the_students_in_name_order(folder):
    names = [str(p.relative_to(folder)) for p in student_files(folder)]
    assert names == sorted(n for n in FILES if not n.startswith("_")) and "_notes.py" not in names


def test_one_file_graded(folder):
    right = grade_file(folder / "alice/ring_2.py")
    assert right["verdict"] == "passed" and right["exercise"] == "ring-all-reduce" and not right["first_divergence"]
    wrong = grade_file(folder / "alice/ring_1.py")
    assert wrong["verdict"] == "FAILED" and wrong["first_divergence"] == "output v on device 0"
    assert wrong["detail"].startswith("check FAILED at the first divergence: op v on device 0 computed")
    schedule = grade_file(folder / "bob_schedule.py")
    assert schedule["verdict"] == "passed" and schedule["student"] == "bob"  # named by ANSWER
    assert grade_file(folder / "frank_names_none.py")["detail"].startswith("the file names no exercise: write EXERCISE")
    two = grade_file(folder / "henry_two_functions.py")
    assert two["verdict"] == "not graded" and "defines 2 functions (ring, helper)" in two["detail"]
    raises = grade_file(folder / "erin_raises.py")
    assert raises["verdict"] == "crashed" and raises["exercise"] == "ring-all-reduce"
    assert raises["detail"] == "the file stops when loaded: ZeroDivisionError: division by zero (line 3: x = 1 / 0)"


@pytest.mark.slow
def test_a_folder_of_right_wrong_hanging_and_crashing_files_grades_to_a_csv(folder, tmp_path, capsys):
    out = tmp_path / "grades.csv"
    assert main(["grade", str(folder), "--csv", str(out), "--timeout", "20", "--jobs", "2"]) == 0
    with out.open() as f:
        rows = {row["file"]: row for row in csv.DictReader(f)}
    assert list(rows) == sorted(n for n in FILES if not n.startswith("_"))
    assert list(next(iter(rows.values()))) == COLUMNS
    got = {
        name: (row["student"], row["exercise"], row["verdict"], row["try_number"], row["tries"])
        for name, row in rows.items()
    }
    assert got == {
        "alice/ring_1.py": ("alice", "ring-all-reduce", "FAILED", "1", "2"),  # the subfolder names the student
        "alice/ring_2.py": ("alice", "ring-all-reduce", "passed", "2", "2"),  # her second try passed
        "bob_schedule.py": ("bob", "1f1b-schedule", "passed", "1", "1"),
        "carol_hangs.py": ("carol_hangs", "ring-all-reduce", "timed out", "1", "1"),
        "dave_exits.py": ("dave_exits", "", "crashed", "1", "1"),
        "erin_raises.py": ("erin_raises", "ring-all-reduce", "crashed", "1", "1"),
        "frank_names_none.py": ("frank_names_none", "", "not graded", "1", "1"),
        "gina_fakes.py": ("gina_fakes", "ring-all-reduce", "crashed", "1", "1"),  # a printed verdict is not one
        "henry_two_functions.py": ("henry_two_functions", "ring-all-reduce", "not graded", "1", "1"),
        "ida_sys_exit.py": ("ida_sys_exit", "ring-all-reduce", "FAILED", "1", "1"),  # sys.exit in the answer
    }
    assert rows["alice/ring_1.py"]["first_divergence"] == "output v on device 0"
    assert "stopped after 20 s" in rows["carol_hangs.py"]["detail"]
    assert "exit status 3" in rows["dave_exits.py"]["detail"]
    with (tmp_path / "grades-students.csv").open() as f:  # beside it, one row per student
        students = {row["student"]: row for row in csv.DictReader(f)}
    assert (students["alice"]["passed"], students["alice"]["tries"], students["alice"]["last_verdict"]) == (
        "1",
        "2",
        "passed",
    )
    assert students["carol_hangs"]["last_verdict"] == "timed out" and len(students) == 9
    err = capsys.readouterr()
    assert "[10/10]" in err.err and err.out.startswith(f"wrote {out}: 2 passed, 2 FAILED, 1 timed out, 3 crashed")


def test_a_folder_named_relative_to_the_working_directory_is_graded(tmp_path, monkeypatch, capsys):
    # the teachers' guide's `grade class/`: each file runs in its own folder, so its path must not be relative
    (tmp_path / "class" / "alice").mkdir(parents=True)
    (tmp_path / "class" / "alice" / "ring.py").write_text(textwrap.dedent(RIGHT))
    monkeypatch.chdir(tmp_path)
    assert main(["grade", "class", "--csv", "grades.csv", "--jobs", "1"]) == 0
    with (tmp_path / "grades.csv").open() as f:
        (row,) = csv.DictReader(f)
    assert (row["file"], row["student"], row["verdict"]) == ("alice/ring.py", "alice", "passed"), row["detail"]


def test_the_grade_help_names_the_schedule_exercise_s_answer_as_its_function():
    from simulator.cli.options import EPILOGS

    text = " ".join(EPILOGS["grade"].split())
    # a file with ANSWER = rows (a list) is refused: the grade calls schedule(p, m) for several p and m
    assert "ANSWER = schedule for the schedule exercise" in text and "ANSWER = rows" not in text


def test_bad_folders_are_refused_with_the_reason(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "missing")]) == 2
    assert "is not a folder of student files" in capsys.readouterr().err
    assert main(["grade", str(tmp_path), "--csv", str(tmp_path / "g.csv")]) == 2
    assert "no .py files in" in capsys.readouterr().err
    assert main(["grade", "--list"]) == 0 and "ring-all-reduce" in capsys.readouterr().out


def test_the_csv_is_written_whole(tmp_path):
    from simulator.teach.grading import Row

    path = write_csv([Row("a.py", "a", "ring-all-reduce", "passed")], tmp_path / "g.csv")
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS) and not list(tmp_path.glob(".*tmp"))


def test_a_misspelt_exercise_gets_the_name_it_meant(tmp_path):
    path = tmp_path / "zed.py"
    path.write_text('EXERCISE = "ring-alreduce"\n\ndef ring(dev, x):\n    return x\n')
    row = grade_file(path)
    assert row["verdict"] == "not graded"
    assert "names the exercise 'ring-alreduce', which is not one (did you mean 'ring-all-reduce'?)" in row["detail"]
