"""The split catalogue through ``grade FOLDER``: every cheat FAILED and every right program passed, as in-process
(tests/checker/test_split_catalogue.py), now with each answer in a process of its own and the verdict made in the
grader's."""

from pathlib import Path

import pytest

from simulator.teach.grading import grade_folder
from tests.checker.test_split_catalogue import CHEATS, CORRECT

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_catalogue_grades_through_a_folder_as_in_process(tmp_path):
    expected = {}
    for k, (exercise, program, *verdict) in enumerate([*CHEATS, *CORRECT]):
        name = f"{k:02d}_{program.__name__}.py"
        (tmp_path / name).write_text(
            f'EXERCISE = "{exercise}"\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n'
            f"from tests import split_programs\nANSWER = split_programs.{program.__name__}\n"
        )
        expected[name] = verdict[0] if verdict else "passed"
    rows = grade_folder(tmp_path, timeout=120, jobs=2)
    got = {r.file: r.verdict for r in rows}
    assert got == expected, {r.file: r.detail for r in rows if got[r.file] != expected[r.file]}
