"""``grade(exercise, program)``: run a program against an exercise and say passed, FAILED or not verified.

A pure function (it prints nothing and keeps no state), so a notebook's session and a command that grades a
folder of students' files call the same thing. A grade:

1. refuses to run if the grader was changed since it loaded (``integrity``);
2. runs the program on the notebook's inputs, then on ``exercise.trials`` random ones, then on the notebook's
   with half the devices' own data drawn again (a device's cache kept from an earlier run then answers stale
   values: ``_mixed_sets``), each set written into the same arrays (a cache kept by the inputs' identity answers
   stale values too: ``_written_into``), each device given only its part (``Exercise.run_program``); any error,
   ``SystemExit`` and bare ``BaseException`` included, is a FAILED try with the error and the student's line (only
   Ctrl-C, KeyboardInterrupt, stops the grade);
3. refuses a run that changed what it is graded against (the inputs, the split, the exercise: a program can find
   them in the grader's frames; ``_held``), then checks it against the single-device reference *and* the exercise's
   declared split, with the student's own names for intermediates allowed (``check(..., split=...,
   own_names=True)``), and that nothing reaches a device outside messages: the program runs again with each
   device's own part of the inputs changed (``isolation=``, ``simulator.checker.isolation``); then the exercise's
   requirements;
4. stops at the first input set that does not pass, and says which inputs they were.

The result, ``Grade``, holds the verdict, the reason in words, the diagnosis (``hints.diagnosis``), the
student's line it points at, and the check report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ...checker import CheckReport, Differential, check, mixed, owned_elements
from ...core.values import value_text
from .callsites import CallSites, error_line
from .core import AnswerElsewhere, Exercise
from .hints import diagnosis, error_diagnosis
from .integrity import Snapshot

PASSED, FAILED, NOT_VERIFIED = "passed", "FAILED", "not verified"


@dataclass(frozen=True)
class Grade:
    """The outcome of one grade: the verdict, why in words, and what it points at."""

    exercise: str
    verdict: str  # "passed", "FAILED" or "not verified"
    reason: str  # the checker's words (or the error's, or the requirement's)
    diagnosis: str  # what kind of thing went wrong (hints.diagnosis), "passed" for a pass
    where: str | None = None  # the student's line it points at ("your line 7: `dev.send(x, dst=1)`")
    report: CheckReport | None = None
    error: BaseException | None = None
    inputs: str | None = None  # the inputs it failed on, in words (None: the notebook's own)

    @property
    def ok(self) -> bool:
        return self.verdict == PASSED

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """The verdict in words, without a hint (one paragraph per line: the caller wraps it)."""
        text = self.reason
        if self.inputs is not None:
            text += f"\n  (this is with other inputs than the notebook's: {self.inputs})"
        if self.where is not None and not self.ok:
            text += f"\n  look at {self.where}"
        return text


def grade(exercise: Exercise, program: Any, *, seed: int | None = None, snapshot: Snapshot | None = None) -> Grade:
    """Grade ``program`` against ``exercise`` (see the module docstring); ``seed`` fixes the random inputs."""
    if snapshot is not None:
        refused = _tampered(exercise, snapshot)
        if refused is not None:
            return refused
    rng = np.random.default_rng(seed)
    base = exercise.inputs(None)
    drawn = [exercise.inputs(rng) for _ in range(exercise.trials)]
    halves = _mixed_sets(exercise, base, rng)
    sets = [_own_copies(s) for s in (base, *drawn, *halves)]
    first: Grade | None = None
    inputs = sets[0]
    for k, numbers in enumerate(sets):
        inputs = _written_into(inputs, numbers)
        result = _one(exercise, program, inputs, snapshot)
        if not result.ok:
            if k == 0:
                return result
            return _with_inputs(result, exercise, inputs)
        first = first or result
    head, sep, notes = first.reason.partition("\n  note: ")
    also = f" and {len(halves)} with half the devices' own data drawn again" if halves else ""
    reason = f"{head} (with the notebook's inputs, {len(drawn)} random ones{also}){sep}{notes}"
    return Grade(exercise.name, PASSED, reason, "passed", report=first.report)


def _own_copies(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """An input set whose arrays are its own (a set of mixed halves shares the arrays it took from the notebook's)."""
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _written_into(previous: dict[str, Any], numbers: dict[str, Any]) -> dict[str, Any]:
    """The next input set, as the previous set's own dict and arrays holding its numbers (where shape and dtype
    allow). The isolation check's reruns change the inputs in place, so a program that keeps what it worked out from
    the inputs it found (in the grader's frames) under their identity answers each rerun as it did the first run,
    as if it used nothing of another device's; with the next set written into the same objects, it answers the next
    set with numbers made from the last one, and the values are checked."""
    for name, value in numbers.items():
        old = previous.get(name)
        if (
            type(old) is np.ndarray
            and type(value) is np.ndarray
            and old.shape == value.shape
            and old.dtype == value.dtype
            and old.flags.writeable
        ):
            old[...] = value
        else:
            previous[name] = value
    return previous


def _mixed_sets(exercise: Exercise, base: Mapping[str, Any], rng: np.random.Generator) -> list[dict[str, Any]]:
    """The notebook's inputs with the own data of half the devices (even ranks, then odd) drawn again, the rest as
    they were: each device then meets data of its own it has seen before while other devices' data is new. A device
    that answers from a cache kept from an earlier run (keyed on its own data, which the isolation check's reruns
    hold equal) answers with stale values, and the values are checked. None for an answer that is not a rank
    program, or whose devices hold nothing of their own."""
    if exercise.run is not None:
        return []
    split = exercise.split(base)
    owners = sorted({r for masks in owned_elements(exercise.size, base, split).values() for r in masks})
    halves = [frozenset(r for r in owners if r % 2 == parity) for parity in (0, 1)]
    return [mixed(exercise.size, base, exercise.inputs(rng), split, half) for half in halves if half]


def _one(exercise: Exercise, program: Any, inputs: Mapping[str, Any], snapshot: Snapshot | None) -> Grade:
    name = exercise.name
    split = exercise.split(inputs)
    held = _held(exercise, inputs, split)
    sites = CallSites()
    try:
        with sites:
            run = exercise.run_program(program, inputs, split)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 (any error, SystemExit too, is a FAILED try, explained)
        kind = getattr(exc, "diagnosis", None) or error_diagnosis(exc)
        where = getattr(exc, "where", None) or error_line(exc) or None  # a remote answer's error names its line
        return Grade(name, FAILED, f"FAILED: the run stopped with {type(exc).__name__}: {exc}", kind, where, error=exc)
    if snapshot is not None:  # the program itself may have changed the grader while it ran
        refused = _tampered(exercise, snapshot)
        if refused is not None:
            return refused
    if _held(exercise, inputs, split) != held:
        return refused_set(name)
    if isinstance(program, AnswerElsewhere):  # its lines were noted where it ran (before any rerun)
        sites.calls = program.calls()
    report = check(
        run,
        exercise.reference(inputs),
        split=split,
        own_names=True,
        isolation=_differential(exercise, program, inputs, split),
    )
    if snapshot is not None:  # the isolation check ran the program again: it may have changed the grader then
        refused = _tampered(exercise, snapshot)
        if refused is not None:
            return refused
    if _held(exercise, inputs, split) != held:
        return refused_set(name)
    if report.verdict != PASSED:
        kind = diagnosis(report)
        record = _pointed(report)
        call = sites.line_of(record, run.trace) if record is not None else None
        where = call.words() if call is not None else None
        return Grade(name, report.verdict, report.text(width=None), kind, where, report)
    for req in exercise.requirements:
        why = req.unmet(run, inputs)
        if why is not None:
            text = f"FAILED: the values match the single-device run and the split is kept, but {why}"
            return Grade(name, FAILED, text, f"requirement:{req.key}", report=report)
    done = f" ({', '.join(r.what for r in exercise.requirements)})" if exercise.requirements else ""
    head, sep, notes = report.text(width=None).removeprefix("check ").partition("\n  note: ")
    return Grade(name, PASSED, f"{head}{done}{sep}{notes}", "passed", report=report)


def _held(exercise: Exercise, inputs: Mapping[str, Any], split: Any) -> tuple:
    """What a run may not change, as values no program can reach: the inputs' numbers (bytes), the split (its text)
    and the exercise's definition (which objects it holds). A program that finds the originals in the grader's frames
    and zeroes the inputs (the model's result is then zero, as its own is), or lets its split allow any collective,
    changes these."""
    numbers = tuple(
        (k, v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else (k, repr(v)) for k, v in inputs.items()
    )
    return numbers, repr(split), tuple(id(getattr(exercise, f.name)) for f in fields(exercise))


def refused_set(name: str) -> Grade:
    """The grade of a try whose run changed what it is graded against."""
    return Grade(
        name,
        FAILED,
        "FAILED: the program changed the exercise's inputs, its split or its definition while it ran (found through "
        "the grader's frames), so this try was not graded: a program reads only its arguments and what it receives.",
        "grader",
    )


def _differential(exercise: Exercise, program: Any, inputs: Mapping[str, Any], split: Any) -> Differential | bool:
    """How the isolation check reruns the program: each device's own part of the inputs changed in turn (an
    exercise whose answer is not a rank program, a schedule, or whose devices are all given everything, has
    no device's own data to change)."""
    if exercise.run is not None:
        return False
    differential = Differential.of_inputs(
        exercise.size, inputs, split, lambda new: exercise.start_program(program, new, split)
    )
    return differential if differential.own else False  # every device given all (zero-1-step): nothing to change


def _pointed(report: CheckReport) -> Any:
    """The record (op or message) the verdict points at first."""
    if report.leaks:
        return report.leaks[0].record
    if report.broken and (report.first is None or report.split_first):
        return report.broken[0].record
    if report.first is not None:
        return report.first.record
    return None


def _with_inputs(result: Grade, exercise: Exercise, inputs: Mapping[str, Any]) -> Grade:
    words = exercise.describe(inputs) if exercise.describe else _describe(inputs)
    return Grade(
        result.exercise,
        result.verdict,
        result.reason,
        result.diagnosis,
        result.where,
        result.report,
        result.error,
        words,
    )


def _describe(inputs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {value_text(np.asarray(v), 60)}" for k, v in inputs.items())


_CHANGED = Snapshot.changed  # the snapshot's comparison as loaded (``Snapshot.changed`` rebound is then named)


def _tampered(exercise: Exercise, snapshot: Snapshot) -> Grade | None:
    changed = _CHANGED(snapshot)
    if not changed:
        return None
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return refused(exercise.name, shown)


def refused(name: str, what: str) -> Grade:
    """The grade of a try the grader would not run: what was changed, and how to start clean."""
    return Grade(
        name,
        FAILED,
        f"FAILED: the grader was changed after it loaded ({what}), so this try was not graded. Restart the "
        "kernel and run the notebook from the top.",
        "grader",
    )
