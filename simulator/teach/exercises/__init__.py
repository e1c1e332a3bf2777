"""Exercises that grade themselves: the notebooks in ``notebooks/exercises/`` import them from here.

Each exercise is a function that makes a fresh ``Exercise`` (so a notebook's tries and hints are its
own); ``start(name)`` makes one by name. What each has, and how grading works: ``core``. The solutions
are not here: they live in ``instructor/exercises/``, apart from what students open.

=====================  ============================================================================
split-the-seed         split the two-stage seed model over two devices                     (seeds)
raw-input-bug          find and fix the message that carries the raw input                 (seeds)
column-split           Y = X @ W with W split by columns, then an all-gather               (tensor)
row-split              W split by rows: partial sums, then an all-reduce                   (tensor)
ring-all-reduce        a ring all-reduce by hand, with send and recv                       (ring)
1f1b-schedule          the 1F1B pipeline schedule written as data                          (schedule)
data-parallel-average  two replicas' gradients, averaged (not summed)                      (data)
zero-1-step            a momentum step with the optimizer state sharded (ZeRO stage 1)     (data)
=====================  ============================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from .core import Exercise, Grade, Question, Requirement
from .data import data_parallel_average, zero_one_step
from .ring import ring_all_reduce
from .schedule import one_f_one_b_by_hand
from .seeds import raw_input_bug, split_the_seed
from .tensor import column_split, row_split

EXERCISES: dict[str, Callable[[], Exercise]] = {
    "split-the-seed": split_the_seed,
    "raw-input-bug": raw_input_bug,
    "column-split": column_split,
    "row-split": row_split,
    "ring-all-reduce": ring_all_reduce,
    "1f1b-schedule": one_f_one_b_by_hand,
    "data-parallel-average": data_parallel_average,
    "zero-1-step": zero_one_step,
}

__all__ = ["EXERCISES", "Exercise", "Grade", "Question", "Requirement", "start"]


def start(name: str) -> Exercise:
    """A fresh exercise (no tries yet) by name; see ``EXERCISES``."""
    try:
        return EXERCISES[name]()
    except KeyError:
        raise KeyError(f"no exercise named {name!r}; choose one of: {', '.join(EXERCISES)}") from None
