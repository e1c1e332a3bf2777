"""Grading a class: every student file in a folder, its answer in its own process, the verdict in this one.

``python -m simulator grade FOLDER --csv grades.csv``. A student file is a Python file that names its exercise
and holds the answer, what the notebook's grading cell passes to ``ex.grade(...)``::

    EXERCISE = "ring-all-reduce"      # the exercise (python -m simulator grade --list names them)
    STUDENT = "ada"                   # optional: default, the subfolder it is in (FOLDER/ada/...), else the file's name

    import numpy as np

    def ring(dev, x):                 # the answer: the one function the file defines, or the one ANSWER names
        ...

    ANSWER = ring                     # needed only when the file defines more than one function

An answer cell copied from its notebook grades as it ran there: the names the notebook's setup cell made
(``stage_a``, ``mean_gradient``, ``BETA``, ``np``) are given to the file (``student_process.SETUP``).

This process decides every verdict and never runs student code: each file's answer runs in a process of its own
(``remote_answer``: a scratch folder holding the file alone, limits on memory, CPU, output and processes, the
teacher's folder and the class's other files out of reach), which returns the records of the runs the grade asks
for; the grade (``simulator.teach.exercises.grade``) checks them here against the single-device run and the split.
What that process prints cannot be a verdict, and anything it sends that was not asked for is tampering: FAILED.
Every wait is bounded: a file that hangs is stopped at the time limit, with whatever it started, and a verdict
that arrived is kept. A row: the file, the student, the exercise, the verdict, which of that student's tries at
that exercise this file is (by the files' times, oldest first) and how many they handed in, the first divergence,
the grade's first line and a hint. ``write_students`` writes one row per student.

Verdicts: the grade's own ``passed``, ``FAILED`` and ``not verified``; and ``timed out``, ``crashed`` or
``not graded`` (the file names no known exercise, no answer, or lacks its notebook's setup names) where the grade
could not be made.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.files import atomic_write
from .exercises import EXERCISES, Grade, grade
from .exercises.hints import generic
from .remote_answer import AnswerLost, RemoteAnswer
from .student_process import SETUP_NAMES

TIMEOUT = 60.0  # seconds a file may take: a file grades in 1 to 2 s, most of it starting Python and numpy
JOBS = min(8, os.cpu_count() or 1)  # files graded at once
VERDICTS = ("passed", "FAILED", "not verified", "timed out", "crashed", "not graded")
_EXERCISE = re.compile(r"""^EXERCISE\s*=\s*["']([^"']+)["']""", re.M)


@dataclass
class Row:
    """One graded file, as one line of the CSV."""

    file: str  # relative to the folder
    student: str
    exercise: str
    verdict: str  # one of VERDICTS
    try_number: int = 1  # which of the student's files for this exercise (oldest first)
    tries: int = 1  # how many files the student handed in for this exercise
    first_divergence: str = ""  # where the run first differs from one device, in words
    detail: str = ""  # the grade's first line, or why there is no grade
    seconds: float = 0.0
    handed_in: str = ""  # the file's modification time (local, to the second): what orders the tries
    hint: str = ""  # for a try that did not pass: what to look at (the notebook's hint for that kind of failure)


COLUMNS = [f.name for f in fields(Row)]
STUDENT_COLUMNS = ["student", "passed", "exercises_passed", "tries", "last_exercise", "last_verdict", "hint"]


# ---- one file ----------------------------------------------------------------------------------------


def student_files(folder: Path) -> list[Path]:
    """The .py files under ``folder``, in name order, skipping hidden ones, ``_private.py`` and caches."""
    files = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).parts
        if any(p.startswith((".", "_")) or p == "__pycache__" for p in parts):
            continue
        files.append(path)
    return files


def grade_one(path: Path, folder: Path, timeout: float = TIMEOUT, scratch: str | Path | None = None) -> Row:
    """Grade one file: its answer in its own process (``RemoteAnswer``, its scratch folder made in ``scratch``), the
    verdict here. A hang, a crash, a tampering or an unreadable answer is a row too."""
    rel = path.relative_to(folder)
    row = Row(str(rel), rel.parts[0] if len(rel.parts) > 1 else path.stem, _named(path), "not graded")
    t0 = time.monotonic()
    try:
        answer = RemoteAnswer(path, row.exercise, timeout=timeout, denied=[folder], scratch=scratch)
    except OSError as exc:
        row.verdict, row.detail = "crashed", f"the answer's process could not start: {exc}"
        return row
    result = None
    try:
        result = _load_and_grade(row, answer)
    except AnswerLost:
        pass  # the answer's state says why
    except Exception as exc:  # noqa: BLE001 (a record the checker cannot read: a row, and the class goes on)
        row.verdict, row.detail = "crashed", f"the grade could not check this file's runs: {type(exc).__name__}: {exc}"
    finally:
        answer.finish()
    row.seconds = round(time.monotonic() - t0, 2)
    _verdict(row, answer, result, timeout)
    row.detail = _clip(row.detail)
    return row


def _load_and_grade(row: Row, answer: RemoteAnswer) -> Grade | None:
    """The grade of a file that loaded and named an exercise and an answer; else None, with the reason in ``row``."""
    loaded = answer.loaded
    if loaded["kind"] == "load failed":
        _stopped(row, loaded["error"], "the file stops when loaded")
    if loaded["kind"] != "loaded":
        return None
    row.student = loaded["student"] or row.student
    named, row.exercise = row.exercise, loaded["exercise"] or ""
    if loaded["exercise"] in EXERCISES and loaded["exercise"] != named:  # its process was set up for another
        row.detail = f'write the exercise\'s name on a line of its own: EXERCISE = "{loaded["exercise"]}"'
    elif loaded["exercise"] not in EXERCISES:
        close = difflib.get_close_matches(str(loaded["exercise"]), EXERCISES, n=1)
        what = (
            "names no exercise"
            if loaded["exercise"] is None
            else f"names the exercise {loaded['exercise']!r}, which is not one"
            + (f" (did you mean {close[0]!r}?)" if close else "")
        )
        row.detail = f"the file {what}: write EXERCISE = one of {', '.join(EXERCISES)}"
    elif loaded["answer"]:
        row.detail = loaded["answer"] if loaded["answer"] != "not a function" else "ANSWER is not a function"
    else:
        return grade(row.exercise, answer)
    return None


def _verdict(row: Row, answer: RemoteAnswer, result: Grade | None, timeout: float) -> None:
    """The row's verdict: tampering first (whatever the grade said), then a time-out, then the grade (a verdict
    that arrived is kept), then a crash."""
    if answer.tampered:
        row.verdict, row.first_divergence, row.detail = "FAILED", "", f"FAILED: tampering: {answer.tampered}"
    elif answer.timed_out:
        row.verdict = "timed out"
        row.detail = f"stopped after {timeout:g} s: a loop that never ends, or a wait for something never sent"
    elif result is not None and not (answer.died and isinstance(result.error, AnswerLost)):
        words = getattr(result.error, "words", None)
        if words and words.get("cause") == "NameError" and words.get("missing") in SETUP_NAMES:
            _stopped(row, words, "the run stops")
        else:
            row.verdict, row.first_divergence = result.verdict, _where(result.report)
            row.detail = " ".join(result.text().split("\n")[0].split())  # its first line, unwrapped
            if not result.ok:
                row.hint = _hint(row.exercise, result.diagnosis)
    elif answer.died:
        tail = answer.printed
        row.verdict = "crashed"
        row.detail = f"the process ended ({answer.died}) before a grade" + (f": {tail}" if tail else "")


def grade_file(path: Path, timeout: float = TIMEOUT) -> dict[str, Any]:
    """One file graded as ``grade_one`` grades it, as a dict (what a ``Row`` holds)."""
    path = Path(path).resolve()
    return asdict(grade_one(path, path.parent, timeout))


def _stopped(row: Row, words: dict[str, Any], when: str) -> None:
    """An error while loading the file, or a missing setup name: the row says which, and the student's line."""
    where = f" ({words['where'].removeprefix('your ').replace('`', '')})" if words.get("where") else ""
    error = f"{words.get('cause') or words.get('type')}: {words.get('message', '')}".strip()
    if words.get("cause") == "NameError" and words.get("missing") in SETUP_NAMES:
        row.verdict = "not graded"
        row.detail = (
            f"not graded: the setup names are missing ({error}{where}): name the exercise with EXERCISE = ... "
            "so that its notebook's setup names are given to the file, or define them in it"
        )
    elif words.get("refused") or str(words.get("message", "")).startswith("graded code may not"):
        # the guard refused something only a forger or a copier does
        row.verdict = "FAILED"
        row.detail = f"FAILED: refused: {error}{where}"
    else:
        row.verdict = "crashed"
        row.detail = f"{when}: {error}{where}"


def _where(report: Any) -> str:
    """The first divergence in a few words: which message or value, on which device (or the split's first broken
    rule, where that comes first)."""
    leaks = getattr(report, "leaks", None)
    if leaks:  # data that reached a device outside messages is said first (simulator.checker.isolation)
        return f"outside messages: device {leaks[0].rank}"
    broken = getattr(report, "broken", None)
    if broken and (report.first is None or report.split_first):
        return f"the split: {broken[0].kind} on device {broken[0].rank}"
    first = getattr(report, "first", None)
    if first is None:
        return ""
    rec = first.record
    if first.where == "message" and rec is not None:
        return f"message #{rec.id} from device {rec.src} to device {rec.dst} ({first.name})"
    return f"{first.where} {first.name}{first.path} on device {first.rank}"


def _hint(exercise: str, diagnosis: str) -> str:
    own = () if diagnosis == "grader" else EXERCISES[exercise]().hints.get(diagnosis, ())
    return own[0] if own else generic(diagnosis)


# ---- a folder --------------------------------------------------------------------------------------------


def grade_folder(
    folder: str | Path,
    *,
    timeout: float = TIMEOUT,
    jobs: int = JOBS,
    progress: Callable[[str], object] | None = None,
) -> list[Row]:
    """Grade every student file in ``folder`` (see the module docstring); rows in file order."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder of student files")
    files = student_files(folder)
    if not files:
        raise FileNotFoundError(f"no .py files in {folder}: put one file per student's answer there")
    done = 0

    def one(path: Path) -> Row:
        nonlocal done
        row = grade_one(path, folder, timeout, scratch)
        done += 1
        if progress:
            progress(f"[{done}/{len(files)}] {row.file}: {row.verdict} ({row.seconds:.1f} s)")
        return row

    # every answer's scratch folder in one, which each of them is kept out of (but for its own)
    with tempfile.TemporaryDirectory(prefix="simulator-grade-") as scratch, ThreadPoolExecutor(max(1, jobs)) as pool:
        rows = list(pool.map(one, files))
    when = {str(p.relative_to(folder)): _handed_in(p) for p in files}
    for row in rows:
        row.handed_in = datetime.fromtimestamp(when[row.file]).isoformat(sep=" ", timespec="seconds")
    _count_tries(rows, when)
    return rows


def _handed_in(path: Path) -> float:
    with contextlib.suppress(OSError):
        return path.stat().st_mtime
    return 0.0


def _count_tries(rows: list[Row], when: dict[str, float] | None = None) -> None:
    """Number each student's files for each exercise by when they were handed in (the files' times; name order
    where two are equal)."""
    when = when or {}
    seen: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        seen.setdefault((row.student, row.exercise), []).append(row)
    for group in seen.values():
        group.sort(key=lambda r: (when.get(r.file, 0.0), r.file))
        for k, row in enumerate(group, 1):
            row.try_number, row.tries = k, len(group)


# ---- the CSVs -----------------------------------------------------------------------------------------


def write_csv(rows: Iterable[Row], path: str | Path) -> Path:
    """The rows as CSV, with a header line, written as every output is (``simulator.core.files``: whole or not
    at all, ``-`` for standard output). Cells are escaped against spreadsheet formulas."""
    return _write(path, COLUMNS, (asdict(row) for row in rows))


def students(rows: list[Row]) -> list[dict[str, Any]]:
    """One row per student: the exercises passed, the files handed in, the last try's exercise and verdict (the
    last handed in), and the hint for that try when it did not pass."""
    by: dict[str, list[Row]] = {}
    for row in rows:
        by.setdefault(row.student, []).append(row)
    out = []
    for student, own in sorted(by.items()):
        passed = sorted({r.exercise for r in own if r.verdict == "passed"})
        last = max(own, key=lambda r: (r.handed_in, r.try_number, r.file))
        out.append(
            {
                "student": student,
                "passed": len(passed),
                "exercises_passed": " ".join(passed),
                "tries": len(own),
                "last_exercise": last.exercise,
                "last_verdict": last.verdict,
                "hint": last.hint if last.verdict != "passed" else "",
            }
        )
    return out


def write_students(rows: list[Row], path: str | Path) -> Path:
    """``students(rows)`` as CSV (escaped as ``write_csv`` escapes)."""
    return _write(path, STUDENT_COLUMNS, students(rows))


def students_csv(path: str | Path) -> Path:
    """Where the per-student CSV goes beside a per-file one: ``grades.csv`` -> ``grades-students.csv``."""
    path = Path(path)
    return path.with_name(f"{path.stem}-students{path.suffix or '.csv'}")


def escaped(value: Any) -> Any:
    """A cell a spreadsheet shows as text: a string that starts like a formula (``=``, ``+``, ``-``, ``@``, a tab or
    a carriage return) gets a leading apostrophe (OWASP's advice on CSV injection)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _write(path: str | Path, columns: list[str], rows: Iterable[dict[str, Any]]) -> Path:
    path = Path(path)
    with atomic_write(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: escaped(v) for k, v in row.items()} for row in rows)
    return path


def summary(rows: list[Row]) -> str:
    """How many files got each verdict, in one line."""
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n) + f" ({len(rows)} files)"


def _named(path: Path) -> str:
    m = _EXERCISE.search(path.read_text(encoding="utf-8", errors="replace"))
    return m[1] if m else ""


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
