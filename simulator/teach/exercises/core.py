"""What every exercise has: predictions checked in place, a grading cell that runs the checker, and hints
that get more specific with each try.

An ``Exercise`` is made fresh by each notebook (``simulator.teach.exercises.start(name)``), so its count of
tries lives in the notebook, not in this package. In a notebook::

    ex = start("split-the-seed")
    ex.predict("messages", ...)   # replace ... with a prediction, run the cell: right or not, and why
    ex.grade(split)               # run the program, check it against one device: passed / FAILED / not verified
    ex.hint()                     # the next hint (a failed grade shows one by itself)

``grade`` answers in the checker's three words. A program that stops (a deadlock, an exception) has
FAILED, with the error; an exercise may add requirements the values alone cannot show (a schedule's
memory bound, a sharded optimizer state), each a FAILED with its reason when unmet.
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...checker import CheckReport, References, check
from ...checker.comm_summary import message_kind
from ...collectives.algorithms import ALGORITHMS
from ...core.engine import RunResult, World
from ...core.values import fit_lines

NOT_ANSWERED = Ellipsis  # what a prediction cell holds until the student writes an answer


@dataclass(frozen=True)
class Question:
    """A "predict, then reveal" question: the prompt, the answer, and why it is the answer.

    answer: a number (compared with a relative tolerance of 1e-6), a tuple (a shape), or a string
    """

    key: str
    prompt: str
    answer: Any
    why: str

    def is_right(self, given: Any) -> bool:
        if isinstance(self.answer, (int, float)) and not isinstance(self.answer, bool):
            try:
                return math.isclose(float(given), float(self.answer), rel_tol=1e-6, abs_tol=1e-12)
            except (TypeError, ValueError):
                return False
        if isinstance(self.answer, tuple):
            try:
                return tuple(given) == self.answer
            except TypeError:
                return False
        return str(given).strip().lower() == str(self.answer).strip().lower()


@dataclass(frozen=True)
class Requirement:
    """Something a passing program must also do that the values alone cannot show.

    unmet: the run -> None when met, or why not (one sentence for the student)
    """

    what: str
    unmet: Callable[[RunResult], str | None]


@dataclass
class Grade:
    """The outcome of one try: the verdict, in the checker's three words, and what to read."""

    verdict: str  # "passed", "FAILED" or "not verified"
    text: str
    report: CheckReport | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.verdict == "passed"

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.text)


@dataclass
class Exercise:
    """One exercise: the world its program runs in, the single-device reference, questions, hints.

    run:          the student's program -> its run (e.g. ``World(2).run(program, x)``); an exercise whose
                  answer is data (a schedule) turns it into a run here
    reference:    the single-device run(s) the checker compares with
    hints:        from a nudge to the answer: each failed try shows the next
    requirements: what a passing program must also do (see ``Requirement``)
    """

    name: str
    title: str
    run: Callable[[Any], RunResult]
    reference: Callable[[], References]
    questions: Sequence[Question]
    hints: Sequence[str]
    requirements: Sequence[Requirement] = ()
    tries: int = 0
    hints_shown: int = 0
    answered: dict[str, bool] = field(default_factory=dict)
    passed_on: int | None = None  # the try that passed, once one has

    def __post_init__(self) -> None:
        keys = [q.key for q in self.questions]
        if len(set(keys)) != len(keys):
            raise ValueError(f"exercise {self.name!r}: two questions share a key among {keys}")
        if not self.hints:
            raise ValueError(f"exercise {self.name!r} needs at least one hint")

    # ---- predict, then reveal -----------------------------------------------------------------
    def question(self, key: str) -> Question:
        for q in self.questions:
            if q.key == key:
                return q
        raise KeyError(
            f"exercise {self.name!r} has no question {key!r}; its questions: {[q.key for q in self.questions]}"
        )

    def predict(self, key: str, answer: Any = NOT_ANSWERED) -> None:
        """Check a prediction and reveal the answer, printed; whether it was right is kept in
        ``answered[key]`` (nothing is returned, so a notebook cell shows the printed words alone)."""
        q = self.question(key)
        if answer is NOT_ANSWERED:
            print(fit_lines(f"{q.prompt}\nWrite your prediction in place of ... and run this cell again."))
            return
        right = q.is_right(answer)
        self.answered[key] = right
        verdict = "Right" if right else f"Not quite: you said {answer!r}, the answer is {q.answer!r}"
        print(fit_lines(f"{verdict}. {q.why}"))

    # ---- grading ------------------------------------------------------------------------------
    def grade(self, program: Any) -> Grade:
        """Run ``program``, check it against the single-device reference, print and return the verdict.

        A failed or unverified try prints the next hint as well.
        """
        self.tries += 1
        grade = self._grade(program)
        if grade.ok and self.passed_on is None:
            self.passed_on = self.tries
        text = f"try {self.tries}: {grade.text}"
        if not grade.ok:
            text += "\n\n" + self._next_hint()
        grade.text = fit_lines(text)
        print(grade.text)
        return grade

    def _grade(self, program: Any) -> Grade:
        try:
            run = self.run(program)
        except Exception as exc:  # noqa: BLE001 (any error in a student's program is a FAILED try, explained)
            return Grade("FAILED", f"FAILED: the run stopped with {type(exc).__name__}: {exc}{_where(exc)}", error=exc)
        report = check(run, self.reference())
        if report.verdict != "passed":
            return Grade(report.verdict, report.text(width=None), report)  # wrapped with the try's own words
        for req in self.requirements:
            why = req.unmet(run)
            if why is not None:
                return Grade("FAILED", f"FAILED: the values match the single-device run, but {why}", report)
        done = f" ({', '.join(r.what for r in self.requirements)})" if self.requirements else ""
        return Grade("passed", f"{report.text(width=None).removeprefix('check ')}{done}", report)  # "passed: ..."

    def hint(self) -> str:
        """Print and return the next hint (each is more specific than the last); a notebook cell shows it once."""
        if self.passed_on is not None:  # the hints are about the bug: after a pass they would mislead
            text = fit_lines(
                f"try {self.passed_on} passed: there is nothing left to fix (the hints are for a failing try)"
            )
        else:
            text = fit_lines(self._next_hint())
        print(text)
        return _Printed(text)

    def _next_hint(self) -> str:
        k = min(self.hints_shown, len(self.hints) - 1)
        self.hints_shown = k + 1
        last = " (the last hint)" if k == len(self.hints) - 1 else ""
        return f"hint {k + 1} of {len(self.hints)}{last}: {self.hints[k]}"

    def __repr__(self) -> str:
        return f"<Exercise {self.name!r}: {self.title}; {len(self.questions)} questions, {self.tries} tries so far>"


class _Printed(str):
    """Text a call has printed already: a notebook does not show it a second time as the cell's value."""

    def _ipython_display_(self) -> None:
        pass


def _where(exc: BaseException) -> str:
    """The line of the student's code (a notebook cell) where an error was raised, if it is theirs."""
    cause = exc.__cause__ or exc  # a RankError carries the program's own exception as its cause
    frames = [f for f in traceback.extract_tb(cause.__traceback__) if _students(f.filename) and f.line]
    if not frames:
        return ""
    f = frames[-1]
    return f" (in your code: line {f.lineno}, `{f.line.strip()}`)"


def _students(filename: str) -> bool:
    """Whether a traceback frame is the student's code: a notebook cell or a script, not a library."""
    path = filename.replace("\\", "/")
    if path.startswith("<"):
        return path.startswith(("<ipython-input", "<cell"))
    ours = "/simulator/" in path
    installed = any(path.startswith(p) for p in {sys.prefix, sys.base_prefix}) and "ipykernel" not in path
    return not ours and not installed


def held_bytes(run: RunResult, rank: int, names: Callable[[str], bool]) -> int:
    """The most bytes device ``rank`` held at once under names that ``names`` accepts."""
    live: dict[str, int] = {}
    peak = 0
    for kind, rec in run.trace.events:
        if kind in ("hold", "op") and rec.rank == rank and names(rec.name) and (kind == "hold" or rec.keep):
            live[rec.name] = rec.nbytes
        elif kind == "free" and rec.rank == rank:
            live.pop(rec.name, None)
        elif kind == "recv" and rec.dst == rank and rec.name is not None and names(rec.name):
            live[rec.name] = rec.nbytes
        peak = max(peak, sum(live.values()))
    return peak


def returns_whole(shape: tuple[int, ...], name: str) -> Requirement:
    """Every device returns the whole value (not only its own block)."""

    def unmet(run: RunResult) -> str | None:
        for rank, out in enumerate(run.outputs):
            if np.shape(out) != shape:
                return (
                    f"device {rank} returns {'nothing' if out is None else f'an array of shape {np.shape(out)}'}; "
                    f"every device should return the whole {name}, of shape {shape}"
                )
        return None

    return Requirement(f"every device returns the whole {name}", unmet)


def exchanges_messages(why: str, *, by_hand: bool = False) -> Requirement:
    """The devices exchange messages: a program that computes the whole answer on every device, with no split
    and nothing sent, matches every value and still is not the exercise. ``by_hand``: the messages must be the
    program's own sends, not a collective's (an exercise that writes the collective itself)."""

    def unmet(run: RunResult) -> str | None:
        own = [m for m in run.trace.messages if not by_hand or message_kind(m.label) not in ALGORITHMS]
        if own:
            return None
        if by_hand and run.trace.messages:
            return f"its messages all come from a collective call: {why}"
        return f"no message crossed between the devices: {why}"

    return Requirement(
        "the devices exchange what the others need" + (", with their own sends" if by_hand else ""), unmet
    )


def world_run(world: World, *args: Any) -> Callable[[Any], RunResult]:
    """``program -> world.run(program, *args)``: how most exercises run a student's program."""
    return lambda program: world.run(program, *args)
