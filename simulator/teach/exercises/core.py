"""What an exercise is: the world its program runs in, its inputs, the single-device reference, the declared
split, questions, hints and requirements. Frozen: student code cannot loosen an exercise.

An ``Exercise`` is a definition; ``grade`` (grading.py) runs a program against it, and a notebook's ``Session``
(session.py) keeps its tries. In a notebook::

    ex = start("split-the-seed")
    ex.predict("messages", ...)   # replace ... with a prediction, run the cell: right or not
    ex.grade(split)               # passed / FAILED / not verified, and a hint chosen by what went wrong
    ex.hint()                     # the hint again, for the last try

Each exercise draws its inputs: the notebook's own (``inputs(None)``, what the notebook prints) and random
ones (``inputs(rng)``), and gives each device only its part of them (``Split.given``, through
``simulator.core.PerDevice``): a program that hard-codes an answer, reads the inputs from the package, or
computes on a device what belongs to another gets FAILED.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy import isclose as _isclose  # the grader's own, taken before any student code loads

from ...checker import References, Split
from ...core.arguments import PerDevice
from ...core.engine import Engine, RunResult
from ...core.world import World
from . import sealed

NOT_ANSWERED = Ellipsis  # what a prediction cell holds until the student writes an answer


@dataclass(frozen=True)
class Question:
    """A "predict, then reveal" question. The answer is not kept: only its digest, and the explanation sealed
    with it (``sealed``), so a right prediction opens it and nothing in the package prints it before a try.

    nudge: what to look at, shown after a wrong prediction (never the answer)
    """

    exercise: str
    key: str
    prompt: str
    digest: str
    why: str  # sealed with the answer
    nudge: str

    def is_right(self, given: Any) -> bool:
        return sealed.digest(self.exercise, self.key, given) == self.digest

    def reveal(self, given: Any) -> str | None:
        """Why the answer is what it is, for a right prediction; None otherwise."""
        return sealed.reveal(self.exercise, self.key, given, self.why) if self.is_right(given) else None


@dataclass(frozen=True)
class Requirement:
    """Something a passing program must also do that its values and its split cannot show (a memory bound).

    key:   short, for the diagnosis ``requirement:<key>`` (and its hints)
    unmet: (the run, its inputs) -> None when met, or why not (one sentence for the student)
    """

    key: str
    what: str
    unmet: Callable[[RunResult, Mapping[str, Any]], str | None]


class AnswerElsewhere(ABC):
    """An answer that runs in another process (``simulator.teach.remote_answer``: the grader never runs student
    code). ``start`` starts it as a rank program on ``size`` devices, each given its part of ``args`` (a
    ``PerDevice`` is a part per device), as ``World.start`` does: what it returns has ``replay`` (what the
    isolation check hands the devices a rerun does not change, ``Engine.replay``) and ``finish()``, which runs it
    there and returns the run's record, checked like a run made here. Calling it calls the answer there (the
    schedule exercise's ``schedule(p, m)``). Every run a grade needs, the isolation check's reruns too, goes
    through ``Exercise.start_program``, which asks this."""

    @abstractmethod
    def start(self, size: int, args: Sequence[Any]) -> Any: ...

    @abstractmethod
    def __call__(self, *args: Any) -> Any: ...

    @abstractmethod
    def calls(self) -> list[Any]:
        """The student's device calls in the last run (``callsites.Call``), for the hint's line."""


@dataclass(frozen=True)
class Exercise:
    """One exercise (see the module docstring). Fields are read-only; sequences are tuples.

    size:       devices
    inputs:     rng -> the inputs by name (None: the notebook's own)
    arguments:  the inputs the program takes, in order; each device gets its part of those the split gives
    reference:  inputs -> the single-device run(s) to compare with
    split:      inputs -> the declared split (who computes what, what each device is given, what may cross)
    run:        for an exercise whose answer is not a rank program (a schedule): (answer, inputs) -> run
    hints:      diagnosis -> hints for it, each more specific than the last (``hints.diagnosis``)
    trials:     random input sets a passing program must also pass, after the notebook's own
    """

    name: str
    title: str
    size: int
    inputs: Callable[[np.random.Generator | None], dict[str, Any]]
    arguments: tuple[str, ...]
    reference: Callable[[Mapping[str, Any]], References]
    split: Callable[[Mapping[str, Any]], Split]
    questions: tuple[Question, ...]
    hints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    requirements: tuple[Requirement, ...] = ()
    run: Callable[[Any, Mapping[str, Any]], RunResult] | None = None
    trials: int = 3
    describe: Callable[[Mapping[str, Any]], str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "questions", tuple(self.questions))
        object.__setattr__(self, "requirements", tuple(self.requirements))
        object.__setattr__(self, "hints", MappingProxyType({k: tuple(v) for k, v in self.hints.items()}))
        keys = [q.key for q in self.questions]
        if len(set(keys)) != len(keys):
            raise ValueError(f"exercise {self.name!r}: two questions share a key among {keys}")

    def question(self, key: str) -> Question:
        for q in self.questions:
            if q.key == key:
                return q
        raise KeyError(
            f"exercise {self.name!r} has no question {key!r}; its questions: {[q.key for q in self.questions]}"
        )

    def run_program(self, program: Any, inputs: Mapping[str, Any], split: Split) -> RunResult:
        """Run the program on these inputs, each device given its part of them."""
        if self.run is not None:
            return self.run(program, inputs)
        return self.start_program(program, inputs, split).finish()

    def start_program(self, program: Any, inputs: Mapping[str, Any], split: Split) -> Engine | Any:
        """The program started on these inputs (not yet run), each device given its part of them (an answer that
        runs elsewhere: its ``start``)."""
        args = []
        for name in self.arguments:
            value = inputs[name]
            if name in split.given:
                args.append(PerDevice(lambda r, n=name, v=value: split.part(n, r, v)))
            else:
                args.append(value)
        if isinstance(program, AnswerElsewhere):
            return program.start(self.size, args)
        return World(self.size).start(program, *args)


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

    def unmet(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
        for rank, out in enumerate(run.outputs):
            if np.shape(out) != shape or out is None:
                got = "nothing" if out is None else f"an array of shape {np.shape(out)}"
                return f"device {rank} returns {got}; every device should return the whole {name}, of shape {shape}"
        return None

    return Requirement("whole", f"every device returns the whole {name}", unmet)


def received(what: str, forms: Callable[[Mapping[str, Any], int], list[np.ndarray]]) -> Requirement:
    """Every device received, in its messages, each element of what it cannot compute alone: ``forms(inputs,
    rank)`` gives the arrays (of one shape) each element may arrive as (another device's term, or the finished
    sum, say); element i has arrived when some received message holds element i of one of them, wherever the
    message has it. Without it a device returned the whole value made from data read through a variable the
    devices share, out of the trace's sight, however its messages were filled."""

    def unmet(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
        for rank in range(run.trace.world_size):
            got = [_numbers(rec.payload) for kind, rec in run.trace.events if kind == "recv" and rec.dst == rank]
            values = np.concatenate(got) if got else np.zeros(0)
            arrays = [np.asarray(f, dtype=np.float64) for f in forms(inputs, rank)]
            for i in range(arrays[0].size):
                if not any(_isclose(values, a.flat[i]).any() for a in arrays):
                    return (
                        f"device {rank} never received {what} in a message (element {i} of it is in none), yet "
                        "returned the whole result: it read the other device's data another way, which real devices "
                        "cannot (a variable the devices share works only in this simulation)"
                    )
        return None

    return Requirement("received", f"each device receives {what} in a message", unmet)


def _numbers(payload: Any) -> np.ndarray:
    try:
        return np.ravel(np.asarray(payload, dtype=np.float64))
    except (TypeError, ValueError):  # not numbers: carries none of the values looked for
        return np.zeros(0)


def rounded(rng: np.random.Generator, shape: Sequence[int] | int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """Random numbers with two decimals (easy to read in a verdict), none of them zero."""
    x = np.round(rng.uniform(low, high, size=shape), 2)
    return np.where(x == 0, 0.5, x)
