"""A verdict out of the student's reach: ``grade FOLDER`` decides in its own process, and each trick a student
could try on it (a forged result, a replaced grade or numpy, the library's schedule, the teacher's solutions, another
program) is FAILED or refused. Bounds and limits: test_grading_class.py."""

import textwrap
from pathlib import Path

import pytest

from simulator.teach.grading import grade_folder, grade_one

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
    # the grade replaced in the answer's process is tampering (answer_seal); numpy there changes nothing here
    assert row.verdict == "FAILED" and "simulator.teach.exercises.grade" in row.detail, row


def test_numpy_replaced_in_the_answer_s_process_changes_nothing_where_the_verdict_is_made(tmp_path):
    row = graded(
        tmp_path,
        WRONG
        + textwrap.dedent("""
        import numpy

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


def test_an_answer_cannot_read_another_answer_s_scratch_folder_nor_another_process_s_files(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "ada.py").write_text(
        RIGHT + "\nimport os\nos.listdir(os.path.dirname(os.getcwd()))  # where the other answers are\n"
    )
    (folder / "bob.py").write_text(RIGHT + "\nimport os\nopen(f'/proc/{os.getppid()}/cmdline').read()\n")
    rows = {r.file: r for r in grade_folder(folder, timeout=30, jobs=2)}
    assert all(r.verdict == "FAILED" and "graded code may not" in r.detail for r in rows.values()), rows
