"""Exercises that grade themselves: the notebooks in ``notebooks/exercises/`` import them from here.

``start(name)`` gives a notebook its session (predictions, tries, hints: ``session``); ``grade(name,
program)`` grades one program and returns a structured ``Grade`` (verdict, reason, diagnosis, the student's
line) without printing, for a command that grades many files. What an exercise is: ``core``; how a grade
works (inputs drawn at random, each device given only its part, the declared split enforced, the grader
guarded against changes): ``grading``. The solutions, and the answers to the predictions, are not here:
they live in ``instructor/exercises/``, apart from what students open.

=====================  ============================================================================
split-the-seed         split the two-stage seed model over two devices                     (seeds)
raw-input-bug          find and fix the message that carries the raw input                 (seeds)
column-split           Y = X @ W with W split by columns, then an all-gather               (tensor)
row-split              W split by rows: partial sums, then an all-reduce                   (tensor)
ring-all-reduce        a ring all-reduce by hand, with send and recv                       (ring)
1f1b-schedule          the 1F1B pipeline schedule written as data, for any p and m          (schedule)
data-parallel-average  two replicas' gradients, averaged (not summed)                      (data)
zero-1-step            a momentum step with the optimizer state sharded (ZeRO stage 1)     (data)
=====================  ============================================================================

Modules: ``session`` (a notebook's exercise) over ``grading`` (one grade) over ``hints`` (by diagnosis),
``callsites`` (the student's lines), ``integrity`` (the grader as loaded), ``core`` (what an exercise is)
and ``sealed`` (answers kept as digests); one module per topic defines its exercises.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from .core import Exercise, Question, Requirement
from .data import data_parallel_average, zero_one_step
from .grading import Grade
from .grading import grade as _grade
from .integrity import Snapshot
from .ring import ring_all_reduce
from .schedule import one_f_one_b_by_hand
from .seeds import raw_input_bug, split_the_seed
from .session import Session
from .tensor import column_split, row_split

EXERCISES: MappingProxyType[str, Callable[[], Exercise]] = MappingProxyType(
    {
        "split-the-seed": split_the_seed,
        "raw-input-bug": raw_input_bug,
        "column-split": column_split,
        "row-split": row_split,
        "ring-all-reduce": ring_all_reduce,
        "1f1b-schedule": one_f_one_b_by_hand,
        "data-parallel-average": data_parallel_average,
        "zero-1-step": zero_one_step,
    }
)

__all__ = ["EXERCISES", "Exercise", "Grade", "Question", "Requirement", "Session", "grade", "start"]


def _made(name: str) -> Callable[[], Exercise]:
    try:
        return EXERCISES[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), EXERCISES, n=1)
        meant = f" did you mean {close[0]!r}?" if close else ""
        raise KeyError(f"no exercise named {name!r};{meant} choose one of: {', '.join(EXERCISES)}") from None


def start(name: str) -> Session:
    """A fresh session of the exercise ``name`` (no tries yet); see ``EXERCISES``."""
    return Session(_made(name), _SNAPSHOT)


def grade(name: str, program: Any, *, seed: int | None = None) -> Grade:
    """Grade ``program`` for the exercise ``name``: a ``Grade`` (verdict, reason, diagnosis, the student's line,
    the check report), nothing printed, no state kept: call it once per student's file."""
    return _grade(_made(name)(), program, seed=seed, snapshot=_SNAPSHOT)


# The grader as it is now, before any notebook code runs: every grade compares it again (see integrity).
_SNAPSHOT = Snapshot()
