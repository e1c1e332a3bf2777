"""A verdict out of the student's reach: ``grade FOLDER`` decides in its own process, and each trick a student
could try on it (a forged result, a replaced grade or numpy, the library's schedule, the teacher's solutions, a
process left behind) is FAILED, refused or bounded."""

import csv
import os
import re
import textwrap
import time
from pathlib import Path

import pytest

from simulator.teach.exercises import EXERCISES
from simulator.teach.grading import grade_folder, grade_one, students_csv, write_csv, write_students
from simulator.teach.student_process import SETUP

from .test_grading import RIGHT, SCHEDULE, WRONG

ROOT = Path(__file__).resolve().parents[2]

FIND_CHANNEL = """
import sys

def channel_fd():  # walk up the stack to the frame that holds the grader's channel
    frame = sys._getframe()
    while frame is not None:
        if isinstance(frame.f_locals.get("channel"), int):
            return frame.f_locals["channel"]
        frame = frame.f_back
    raise SystemExit("no channel found")
"""


def graded(tmp_path: Path, text: str, name: str = "ada.py", timeout: float = 30):
    folder = tmp_path / "class"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return grade_one(path, folder, timeout)


# ---- forging the result ------------------------------------------------------------------------------


def test_a_passed_line_written_on_the_grader_s_channel_then_os_exit_is_FAILED(tmp_path):
    row = graded(
        tmp_path,
        WRONG
        + FIND_CHANNEL
        + textwrap.dedent("""
        import os
        fd = channel_fd()
        os.write(fd, b'{"verdict": "passed", "exercise": "ring-all-reduce", "student": "ada"}\\n')
        os._exit(0)
        """),
    )
    assert row.verdict == "FAILED" and "tampering" in row.detail, row


def test_a_well_formed_reply_forged_before_the_real_one_counts_as_the_first_and_is_FAILED(tmp_path):
    # the first reply counts: a "loaded" frame naming no answer, then the process ends: not a pass
    row = graded(
        tmp_path,
        RIGHT
        + FIND_CHANNEL
        + textwrap.dedent("""
        import os
        from simulator.teach.student_process import write_frame
        write_frame(channel_fd(), {"kind": "ran", "verdict": "passed"})
        """),
    )
    assert row.verdict == "FAILED" and "a reply to a question the grader did not ask" in row.detail, row


def test_writing_after_the_real_reply_from_atexit_is_FAILED_even_for_a_right_answer(tmp_path):
    row = graded(
        tmp_path,
        RIGHT
        + FIND_CHANNEL
        + textwrap.dedent("""
        import atexit, os
        fd = channel_fd()
        atexit.register(lambda: os.write(fd, b"passed\\n"))
        """),
    )
    assert row.verdict == "FAILED" and "after the last reply" in row.detail, row


def test_a_reply_that_would_run_code_when_read_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    row = graded(
        tmp_path,
        RIGHT
        + FIND_CHANNEL
        + textwrap.dedent(f"""
        import os, pickle, struct

        class Evil:
            def __reduce__(self):
                return (os.system, ("touch {marker}",))

        data = pickle.dumps({{"kind": "loaded", "x": Evil()}})
        os.write(channel_fd(), struct.pack(">4sQ", b"SIMR", len(data)) + data)
        os._exit(0)
        """),
    )
    assert row.verdict == "FAILED" and "not a record" in row.detail, row
    assert not marker.exists()  # the grader built nothing of the student's


def test_replacing_the_grade_or_numpy_s_comparisons_does_not_pass_the_starter(tmp_path):
    row = graded(
        tmp_path,
        WRONG
        + textwrap.dedent("""
        import numpy
        import simulator.teach.exercises as exercises
        import simulator.teach.grading as grading

        grading.grade = exercises.grade = lambda *a, **k: "passed"
        numpy.isclose = lambda *a, **k: True
        numpy.allclose = lambda *a, **k: True
        numpy.array_equal = lambda *a, **k: True
        numpy.testing.assert_allclose = lambda *a, **k: None
        """),
    )
    assert row.verdict == "FAILED" and row.first_divergence == "output v on device 0", row


def test_numpy_replaced_in_a_notebook_refuses_the_grade(monkeypatch, capsys):
    import numpy as np

    from simulator.teach.exercises import start

    ex = start("ring-all-reduce")
    monkeypatch.setattr(np, "allclose", lambda *a, **k: True)
    assert ex.grade(lambda dev, x: x).verdict == "FAILED"
    assert "numpy.allclose" in capsys.readouterr().out


# ---- the library's schedule, however reached ----------------------------------------------------------

COPIED_AT_IMPORT = """
EXERCISE = "1f1b-schedule"
from simulator.parallel.schedules import one_f_one_b
ROWS = {(p, m): [" ".join(map(str, acts)) for acts in one_f_one_b(p, m).actions.values()] for p in range(2, 5) for m in range(2, 9)}

def schedule(p, m):
    return ROWS[p, m]
"""
COPIED_IN_A_THREAD = """
EXERCISE = "1f1b-schedule"
import threading

def schedule(p, m):
    from simulator.parallel.schedules import make_schedule
    out = []
    t = threading.Thread(target=lambda: out.append(make_schedule("1f1b", p, m)))
    t.start(); t.join()
    return [" ".join(map(str, a)) for a in out[0].actions.values()]
"""
COPIED_WITH_THE_PROFILER_OFF = """
EXERCISE = "1f1b-schedule"
import sys

def schedule(p, m):
    sys.setprofile(None)
    import simulator.parallel.schedules.classic as classic
    return [" ".join(map(str, a)) for a in classic.one_f_one_b(p, m).actions.values()]
"""
COPIED_FROM_THE_SOURCE = """
EXERCISE = "1f1b-schedule"
import importlib.util, pathlib, simulator

path = pathlib.Path(simulator.__file__).parent / "parallel" / "schedules" / "classic.py"
spec = importlib.util.spec_from_file_location("simulator.parallel.schedules.mine", path)
mine = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mine)

def schedule(p, m):
    return [" ".join(map(str, a)) for a in mine.one_f_one_b(p, m).actions.values()]
"""


@pytest.mark.parametrize(
    "text", [COPIED_AT_IMPORT, COPIED_IN_A_THREAD, COPIED_WITH_THE_PROFILER_OFF, COPIED_FROM_THE_SOURCE]
)
def test_a_library_schedule_is_refused_however_it_is_reached(tmp_path, text):
    row = graded(tmp_path, text)
    assert row.verdict == "FAILED", row
    if text is not COPIED_IN_A_THREAD:  # there the refusal stops the thread, and the answer has no rows
        assert "graded code may not" in row.detail, row


def test_the_schedule_written_by_hand_still_passes_with_the_notebook_s_tools_imported(tmp_path):
    text = SCHEDULE.replace(
        'STUDENT = "bob"',
        "from simulator.teach.exercises.schedule import pipeline_of, run_schedule\n"
        "from simulator.parallel.measure import bubble\n",
    )
    assert graded(tmp_path, text + "\nprint(pipeline_of(schedule(2, 4)).schedule.grid())\n").verdict == "passed"


def test_turning_the_profiler_off_in_a_notebook_is_refused(capsys):
    import sys

    from simulator.parallel.schedules import one_f_one_b
    from simulator.teach.exercises import start

    def schedule(p, m):
        sys.setprofile(None)
        return [" ".join(map(str, a)) for a in one_f_one_b(p, m).actions.values()]

    result = start("1f1b-schedule").grade(schedule)
    assert result.verdict == "FAILED" and "turns off the grade's watch" in result.reason


# ---- the teacher's folder and the class's files ----------------------------------------------------------


@pytest.mark.parametrize(
    "reach",
    [
        "import simulator, pathlib\n"
        "print((pathlib.Path(simulator.__file__).parents[1] / 'instructor/exercises/05_ring_all_reduce.py').read_text())",
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport instructor.exercises.answers",
        "import os\nprint(open(f'/proc/{os.getppid()}/cwd/instructor/exercises/answers.py').read())",
        "import os, simulator\nos.listdir(os.path.dirname(simulator.__file__) + '/../instructor')",
        "import builtins, os, simulator\n"  # the hook's builtins loosened: it kept its own
        "path = os.fsencode(os.path.dirname(simulator.__file__) + '/../instructor/exercises/answers.py')\n"
        "builtins.any = lambda *a: False\nbuiltins.bytes = str\nos.fsdecode = lambda p: '.'\nopen(path).read()",
    ],
)
def test_the_teacher_s_solutions_cannot_be_read_or_imported(tmp_path, reach, monkeypatch):
    monkeypatch.chdir(ROOT)  # the grader runs from the checkout: its folder is no way in
    row = graded(tmp_path, RIGHT + "\n" + reach + "\n")
    assert row.verdict == "FAILED" and "graded code may not" in row.detail, row


def test_the_file_runs_alone_in_a_scratch_folder_and_cannot_read_the_other_files(tmp_path):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "bob.py").write_text(RIGHT)
    row = graded(
        tmp_path,
        RIGHT
        + textwrap.dedent(f"""
        import os
        assert sorted(os.listdir(".")) == [".output.txt", "ada.py"], os.listdir(".")
        open({str(tmp_path / "class" / "bob.py")!r}).read()
        """),
    )
    assert row.verdict == "FAILED" and "graded code may not read" in row.detail, row


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


def test_starting_a_program_is_refused_and_the_grading_goes_on(tmp_path):
    row = graded(
        tmp_path,
        RIGHT + '\nimport subprocess\nsubprocess.Popen(["sleep", "infinity"], start_new_session=True)\n',
    )
    assert row.verdict == "FAILED" and "subprocess.Popen" in row.detail, row


@pytest.mark.parametrize(
    "start",
    [
        "import _posixsubprocess\n_posixsubprocess.fork_exec()",
        "import subprocess\nsubprocess._fork_exec()",
        "import os\nos.system('cat /etc/hostname')",
        "import os\nos.posix_spawn('/bin/true', ['true'], {})",
        "import ctypes\nctypes.CDLL('libc.so.6')",
    ],
)
def test_starting_a_program_or_loading_c_code_is_refused_however_it_is_asked(tmp_path, start):
    row = graded(tmp_path, RIGHT + "\n" + start + "\n")
    assert row.verdict == "FAILED" and "graded code may not" in row.detail, row


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


def test_an_answer_cannot_read_another_answer_s_scratch_folder_nor_another_process_s_files(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "ada.py").write_text(
        RIGHT + "\nimport os\nos.listdir(os.path.dirname(os.getcwd()))  # where the other answers are\n"
    )
    (folder / "bob.py").write_text(RIGHT + "\nimport os\nopen(f'/proc/{os.getppid()}/cmdline').read()\n")
    rows = {r.file: r for r in grade_folder(folder, timeout=30, jobs=2)}
    assert all(r.verdict == "FAILED" and "graded code may not" in r.detail for r in rows.values()), rows


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
