"""Grading a class: every student file in a folder, each in its own process with a time limit, one CSV row each.

``python -m simulator grade FOLDER --csv grades.csv``. A student file is a Python file that names its exercise
and holds the answer, what the notebook's grading cell passes to ``ex.grade(...)``::

    EXERCISE = "ring-all-reduce"      # the exercise (python -m simulator grade --list names them)
    STUDENT = "ada"                   # optional: default, the subfolder it is in (FOLDER/ada/...), else the file's name

    import numpy as np

    def ring(dev, x):                 # the answer: the one function the file defines, or the one ANSWER names
        ...

    ANSWER = ring                     # needed only when the file defines more than one function

Each file runs in a fresh Python process, in its own folder: a file that hangs is
stopped at the time limit, one that crashes (an exception while loading, ``sys.exit``, a killed process)
becomes a row saying so, and the grading goes on. A row: the file, the student, the exercise, the verdict,
which of that student's tries at that exercise this file is (files in name order) and how many they handed
in, the first divergence, and the grade's first line.

Verdicts: the grade's own ``passed``, ``FAILED`` and ``not verified``; and ``timed out``, ``crashed`` or
``not graded`` (the file names no known exercise, or no answer) where the grade could not be made.

The grade itself is ``simulator.teach.exercises.grade(name, answer)``, used only through that call: its
verdict, its reason, and its check report (a ``SystemExit`` in the answer is a FAILED try there, as in a
notebook; one while the file loads is this file's crash). Not a sandbox: a student's file runs with your rights
(read the files you grade, or grade them in a container).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import runpy
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import FunctionType
from typing import Any

from ..core.files import atomic_write
from .exercises import EXERCISES, grade

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
    try_number: int = 1  # which of the student's files for this exercise (in name order)
    tries: int = 1  # how many files the student handed in for this exercise
    first_divergence: str = ""  # where the run first differs from one device, in words
    detail: str = ""  # the grade's first line, or why there is no grade
    seconds: float = 0.0


COLUMNS = [f.name for f in fields(Row)]


# ---- in the child process: grade one file -------------------------------------------------------------


def grade_file(path: Path) -> dict[str, Any]:
    """Load a student file, grade its answer, and say how it went (what a ``Row`` holds, less the counts)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    named = _EXERCISE.search(text)
    row = {"exercise": named[1] if named else "", "student": "", "verdict": "not graded", "first_divergence": ""}
    try:
        space = runpy.run_path(str(path), run_name="__student__")
    except BaseException as exc:  # noqa: BLE001 (any error while loading a student's file is that file's row)
        return {**row, "verdict": "crashed", "detail": f"the file stops when loaded: {_error(exc, path)}"}
    exercise = space.get("EXERCISE")
    student = space.get("STUDENT")
    row.update(exercise=str(exercise or ""), student=str(student) if student else "")
    if not isinstance(exercise, str) or exercise not in EXERCISES:
        what = "names no exercise" if exercise is None else f"names the exercise {exercise!r}, which is not one"
        return {**row, "detail": f"the file {what}: write EXERCISE = one of {', '.join(EXERCISES)}"}
    answer = space.get("ANSWER", _missing)
    if answer is _missing:
        own = [v for k, v in space.items() if isinstance(v, FunctionType) and v.__module__ == "__student__"]
        if len(own) != 1:
            defined = (
                f"defines {len(own)} functions ({', '.join(f.__name__ for f in own)})" if own else "defines no function"
            )
            return {**row, "detail": f"the file {defined}: write ANSWER = the one to grade"}
        answer = own[0]
    try:
        result = grade(exercise, answer)
    except BaseException as exc:  # noqa: BLE001 (a KeyboardInterrupt in the student's code)
        return {**row, "verdict": "crashed", "detail": f"grading stopped: {_error(exc, path)}"}
    detail = " ".join(result.text().split("\n")[0].split())  # its first line, unwrapped
    return {**row, "verdict": result.verdict, "first_divergence": _where(result.report), "detail": detail}


_missing = object()


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


def _error(exc: BaseException, path: Path) -> str:
    """An exception in one line, with the student's line where it was raised."""
    import traceback

    line = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = f" (line {frame.lineno}: {(frame.line or '').strip()})"
    if isinstance(exc, SyntaxError):
        line = f" (line {exc.lineno}: {(exc.text or '').strip()})"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{line}".strip()


# The child's command: the student's folder is its working directory but not on its path (a student's numpy.py
# must not stand in for numpy, nor a simulator.py for the grader).
_CHILD = "import sys; del sys.path[0]; from simulator.teach.grading import _child; sys.exit(_child())"


def _child() -> int:
    """The child process (``_CHILD``, with the file's path as its argument): the nonce from stdin, then one line on stdout: the nonce and
    the result as JSON. What the student's code prints goes to stderr."""
    nonce = sys.stdin.readline().strip()
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the student's prints: stderr, whose tail the parent keeps
    result = grade_file(Path(sys.argv[1]))
    channel.write(nonce + json.dumps(result) + "\n")
    channel.flush()
    return 0


# ---- in the parent: every file, one process each --------------------------------------------------------


def student_files(folder: Path) -> list[Path]:
    """The .py files under ``folder``, in name order, skipping hidden ones, ``_private.py`` and caches."""
    files = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).parts
        if any(p.startswith((".", "_")) or p == "__pycache__" for p in parts):
            continue
        files.append(path)
    return files


def grade_one(path: Path, folder: Path, timeout: float = TIMEOUT) -> Row:
    """Grade one file in a child process; a hang, a crash or an unreadable answer is a row too."""
    nonce = secrets.token_hex(16)
    rel = path.relative_to(folder)
    default_student = rel.parts[0] if len(rel.parts) > 1 else path.stem
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path.resolve())],  # the child runs in the file's folder
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=path.parent,
        env=env,
        start_new_session=True,  # its own process group: a timeout stops whatever the file started, too
    )
    try:
        out, err = proc.communicate((nonce + "\n").encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        row = Row(str(rel), default_student, _named(path), "timed out")
        row.detail = f"stopped after {timeout:g} s: a loop that never ends, or a wait for something never sent"
        row.seconds = round(time.monotonic() - t0, 2)
        return row
    finally:
        _kill(proc)  # anything the file left running in its group
    seconds = round(time.monotonic() - t0, 2)
    lines = [line for line in out.decode("utf-8", "replace").splitlines() if line.startswith(nonce)]
    if not lines:
        tail = " | ".join(err.decode("utf-8", "replace").strip().splitlines()[-3:])
        status = (
            f"exit status {proc.returncode}"
            if proc.returncode >= 0
            else f"killed by {signal.Signals(-proc.returncode).name}"
        )
        row = Row(
            str(rel),
            default_student,
            _named(path),
            "crashed",
            detail=f"the process ended ({status}) before a grade" + (f": {tail}" if tail else ""),
        )
        row.seconds = seconds
        return row
    result = json.loads(lines[-1][len(nonce) :])
    return Row(
        file=str(rel),
        student=result["student"] or default_student,
        exercise=result["exercise"],
        verdict=result["verdict"],
        first_divergence=result["first_divergence"],
        detail=_clip(result.get("detail", "")),
        seconds=seconds,
    )


def grade_folder(
    folder: str | Path,
    *,
    timeout: float = TIMEOUT,
    jobs: int = JOBS,
    progress: Callable[[str], object] | None = None,
) -> list[Row]:
    """Grade every student file in ``folder`` (see the module docstring); rows in file order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder of student files")
    files = student_files(folder)
    if not files:
        raise FileNotFoundError(f"no .py files in {folder}: put one file per student's answer there")
    done = 0

    def one(path: Path) -> Row:
        nonlocal done
        row = grade_one(path, folder, timeout)
        done += 1
        if progress:
            progress(f"[{done}/{len(files)}] {row.file}: {row.verdict} ({row.seconds:.1f} s)")
        return row

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        rows = list(pool.map(one, files))
    _count_tries(rows)
    return rows


def _count_tries(rows: list[Row]) -> None:
    """Number each student's files for each exercise, in file order."""
    seen: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        seen.setdefault((row.student, row.exercise), []).append(row)
    for group in seen.values():
        for k, row in enumerate(group, 1):
            row.try_number, row.tries = k, len(group)


def write_csv(rows: Iterable[Row], path: str | Path) -> Path:
    """The rows as CSV, with a header line, written as every output is (``simulator.core.files``: whole or not
    at all, ``-`` for standard output)."""
    path = Path(path)
    with atomic_write(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)
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


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group has ended already
        os.killpg(proc.pid, signal.SIGKILL)
