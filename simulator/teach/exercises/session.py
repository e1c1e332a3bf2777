"""A notebook's exercise: its predictions, its tries, and the hint each try earns (``start(name)`` makes one).

The session keeps only what the notebook did (tries, predictions, which hints it has seen); the exercise's
definition is made afresh from the registry for every grade, frozen, so a notebook cannot loosen it
(``ex.requirements = ()`` is refused). Grading itself is ``grading.grade``; a session prints its verdict with
a hint chosen by the diagnosis: the exercise's own hints for that kind of failure, each more specific on a
repeat, or a general one that says what to look at.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ...core.engine import RunResult
from ...core.values import fit_lines
from .core import NOT_ANSWERED, Exercise
from .grading import Grade, grade, refused
from .hints import generic
from .integrity import Snapshot


class Session:
    """One notebook's exercise (see the module docstring): ``predict``, ``grade`` and ``hint``."""

    __slots__ = ("name", "title", "tries", "answered", "passed_on", "last", "_seen", "_make", "_snapshot")

    def __init__(self, make: Callable[[], Exercise], snapshot: Snapshot) -> None:
        exercise = make()
        set_ = object.__setattr__
        set_(self, "name", exercise.name)
        set_(self, "title", exercise.title)
        set_(self, "tries", 0)
        set_(self, "answered", {})  # question key -> whether the first prediction was right
        set_(self, "passed_on", None)  # the try that passed, once one has
        set_(self, "last", None)  # the last Grade
        set_(self, "_seen", Counter())  # diagnosis -> tries that had it
        set_(self, "_make", make)
        set_(self, "_snapshot", snapshot)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"{name!r} cannot be set: an exercise's definition, tries and requirements are fixed (start a new one "
            "with start(name))"
        )

    @property
    def exercise(self) -> Exercise:
        """The exercise's definition (frozen), made afresh."""
        return self._make()

    # ---- predict, then reveal -----------------------------------------------------------------
    def predict(self, key: str, answer: Any = NOT_ANSWERED) -> None:
        """Check a prediction; a right one shows why. Printed; the first try of each question is kept in
        ``answered[key]`` (nothing is returned, so a notebook cell shows the printed words alone)."""
        q = self.exercise.question(key)
        if answer is NOT_ANSWERED:
            print(fit_lines(f"{q.prompt}\nWrite your prediction in place of ... and run this cell again."))
            return
        why = q.reveal(answer)
        self.answered.setdefault(key, why is not None)
        if why is not None:
            print(fit_lines(f"Right. {why}"))
        else:
            print(
                fit_lines(f"Not quite: you said {answer!r}. {q.nudge} Predict again (the why comes with the answer).")
            )

    # ---- running and grading ----------------------------------------------------------------
    def run(self, program: Any) -> RunResult:
        """Run ``program`` on the notebook's inputs as the grade runs it (each device given its part), to look at."""
        exercise = self.exercise
        inputs = exercise.inputs(None)
        return exercise.run_program(program, inputs, exercise.split(inputs))

    # ---- grading ------------------------------------------------------------------------------
    def grade(self, program: Any, *, seed: int | None = None) -> Grade:
        """Grade ``program`` (``grading.grade``), print the verdict and, for a try that does not pass, a hint."""
        if not self._snapshot.registered(self.name, self._make):  # the session's definition was swapped
            result = refused(self.name, f"this session's exercise is not the registry's {self.name!r}")
        else:
            result = grade(self.exercise, program, seed=seed, snapshot=self._snapshot)
        set_ = object.__setattr__
        set_(self, "tries", self.tries + 1)
        set_(self, "last", result)
        text = f"try {self.tries}: {result.text()}"
        if result.ok:
            if self.passed_on is None:
                set_(self, "passed_on", self.tries)
        else:
            text += "\n\n" + self._hint(result)
            self._seen[result.diagnosis] += 1
        print(fit_lines(text))
        return result

    def hint(self) -> str:
        """Print and return the hint for the last try (a notebook cell shows it once)."""
        if self.passed_on is not None:
            text = f"try {self.passed_on} passed: there is nothing left to fix (the hints are for a failing try)"
        elif self.last is None:
            text = "hint: grade your program first (ex.grade(...)): the hint is chosen by what its try shows."
        else:
            self._seen[self.last.diagnosis] += 1
            text = self._hint(self.last)
        text = fit_lines(text)
        print(text)
        return _Printed(text)

    def _hint(self, result: Grade) -> str:
        own = () if result.diagnosis == "grader" else self.exercise.hints.get(result.diagnosis, ())
        seen = self._seen[result.diagnosis]
        text = own[min(seen, len(own) - 1)] if own else generic(result.diagnosis)
        return f"hint: {text}"

    def __repr__(self) -> str:
        return f"<exercise {self.name!r}: {self.title}; {self.tries} tries so far>"


class _Printed(str):
    """Text a call has printed already: a notebook does not show it a second time as the cell's value."""

    def _ipython_display_(self) -> None:
        pass
