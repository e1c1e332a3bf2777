"""Exercise: the 1F1B pipeline schedule, written as data, for any number of stages and microbatches.

p devices, one stage each (an MLP of 2p layers, two per stage), m microbatches. The answer is a function
``schedule(p, m)`` that returns one line of actions per rank: ``0F2`` is stage 0's forward of microbatch 2,
``1B0`` stage 1's backward of microbatch 0. GPipe runs every forward, then every backward, so each device holds
the activations of all m microbatches at its peak; 1F1B starts each backward as soon as it can, so device r
holds at most p - r. The grade calls the function for the notebook's p = 2, m = 4 and for random p and m,
runs each schedule with real arithmetic, checks every value against one device, and checks that bound and the
bubble. A function that hands back the library's own schedule (``simulator.parallel.schedules``) is not an
answer: the grade watches what it calls.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ...checker import Reference, Split
from ...core.engine import RunResult
from ...parallel.measure import bubble, peak_activation_microbatches
from ...parallel.mlp import MLP, mlp_reference
from ...parallel.pipeline import ActionCosts, Pipeline
from ...parallel.schedules import Schedule
from .core import AnswerElsewhere, Exercise, Question, Requirement

STAGES, MICROBATCHES = 2, 4  # the notebook's
COSTS = ActionCosts.equal(1e-6, 2e-6)  # a forward 1 us, a backward 2 us; messages take no time

__all__ = [
    "COSTS", "MICROBATCHES", "STAGES", "NotAnAnswer", "model_of", "one_f_one_b_by_hand", "pipeline_of", "run_schedule",
    "stage_split",
]  # fmt: skip


class NotAnAnswer(TypeError):
    """The answer is not a schedule the student wrote: the wrong kind of thing, or the library's own."""

    def __init__(self, text: str, diagnosis: str) -> None:
        super().__init__(text)
        self.diagnosis = diagnosis


def model_of(p: int) -> MLP:
    """An MLP of 2p layers (two per stage), widths 3 -> 4 ... -> 2."""
    return MLP((3, *([4] * (2 * p - 1)), 2))


def pipeline_of(rows: Iterable[str] | Mapping[int, str], p: int = STAGES, m: int = MICROBATCHES) -> Pipeline:
    """The pipeline a hand-written schedule (one line of actions per rank) drives."""
    schedule = Schedule.from_text(rows, microbatches=m, name="your schedule")
    # checked as written first: a broken rule then names positions in the student's own row, before the
    # pipeline inserts its sends and receives
    return Pipeline(model_of(p), schedule.validate(), costs=COSTS)


def run_schedule(rows: Iterable[str] | Mapping[int, str], p: int = STAGES, m: int = MICROBATCHES) -> RunResult:
    """Validate a hand-written schedule and run one training step with it."""
    model = model_of(p)
    x, t = model.data(2 * m, seed=1)
    return pipeline_of(rows, p, m).run(model.init(seed=0), x, t)


def inputs(rng: np.random.Generator | None) -> dict[str, Any]:
    if rng is None:
        return {"p": STAGES, "m": MICROBATCHES}
    p = int(rng.integers(2, 5))  # 2 to 4 stages, p to 2p microbatches: the rule, not one case, in a few seconds
    return {"p": p, "m": int(rng.integers(p, 2 * p + 1))}


def reference(inputs: Mapping[str, Any]) -> Reference:
    p, m = inputs["p"], inputs["m"]
    model = model_of(p)
    x, t = model.data(2 * m, seed=1)
    return mlp_reference(model, model.init(seed=0), x, t, m)


def stage_split(inputs: Mapping[str, Any]) -> Split:
    """Stage s (layers 2s+1, 2s+2) on device s: its weights, activations and gradients; only the activation
    of its last layer crosses forward, and its gradient backward."""
    p = inputs["p"]
    compute: dict[str, Any] = {"x.*": 0, "t.*": p - 1, "loss*": p - 1, f"dh{2 * p}.*": p - 1}
    crosses: dict[str, Any] = {}
    for s in range(p):
        for k in (2 * s + 1, 2 * s + 2):
            for pre in ("W", "b", "h", "dz", "dW", "db"):
                compute[f"{pre}{k}"] = s
                compute[f"{pre}{k}.*"] = s
            if k > 1:  # the gradient of layer k's input is computed where layer k is
                compute[f"dh{k - 1}.*"] = s
        if s + 1 < p:
            crosses[f"h{2 * s + 2}.*"] = (s, s + 1)
            crosses[f"dh{2 * s + 2}.*"] = (s + 1, s)
    return Split(compute=compute, given={"x.*": 0, "t.*": p - 1}, crosses=crosses, collectives=())


def run_answer(answer: Any, inputs: Mapping[str, Any]) -> RunResult:
    """Call the student's ``schedule(p, m)`` (watching that it does not call the library's schedules) and run it."""
    if not callable(answer):
        raise NotAnAnswer(
            f"ex.grade takes your function schedule(p, m), which returns one line of actions per device; got "
            f"{type(answer).__name__}. Define def schedule(p, m): ... and grade it with ex.grade(schedule)",
            "answer",
        )
    p, m = inputs["p"], inputs["m"]
    rows = _call_watched(answer, p, m)
    return run_schedule(rows, p, m)


def _call_watched(answer: Callable[[int, int], Any], p: int, m: int) -> Any:
    """Call the answer with a profile hook on this thread and on any thread it starts, that notes every call into
    the library's schedules; an answer that turns the hook off is refused too. (In a notebook the library is loaded
    and a schedule made before the grade cannot be seen; ``grade FOLDER`` refuses the library however it is reached:
    ``simulator.teach.student_process``.)"""
    if isinstance(answer, AnswerElsewhere):  # its own process refuses the library however reached
        return answer(p, m)
    library = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and "/simulator/parallel/schedules/" in frame.f_code.co_filename.replace("\\", "/"):
            library.append(f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}")

    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(watch)
    threading.setprofile(watch)
    try:
        rows = answer(p, m)
        watched = sys.getprofile() is watch and threading.getprofile() is watch
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
    if not watched:
        raise NotAnAnswer(
            "your schedule(p, m) turns off the grade's watch on the library (sys.setprofile): write the rows "
            "yourself, from the rule, and grade again",
            "copied",
        )
    if library:
        raise NotAnAnswer(
            f"your schedule(p, m) calls {library[0]}, the library's own schedule: the exercise is to write the rows "
            "yourself, from the rule (p - r - 1 warm-up forwards on rank r, then one forward and one backward in turn)",
            "copied",
        )
    return rows


def _memory_bound(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
    peaks = peak_activation_microbatches(run.trace)
    p = run.trace.world_size
    for r, peak in enumerate(peaks):
        if peak > p - r:
            return (
                f"this is not 1F1B yet: device {r} holds the activations of {peak} microbatches at once, and "
                f"1F1B holds at most p - r = {p - r} on device {r} (start each backward as soon as you can)"
            )
    return None


def _no_extra_idle(run: RunResult, inputs: Mapping[str, Any]) -> str | None:
    ratio = max(bubble(run.trace).ratio)
    p = run.trace.world_size
    best = (p - 1) / inputs["m"]
    if ratio > best * (1 + 1e-9):
        return (
            f"a device idles {ratio:.3g} of its busy time, more than 1F1B's (p - 1)/m = {best:g}: a device waits "
            "where it could run a forward or a backward that is ready"
        )
    return None


def one_f_one_b_by_hand() -> Exercise:
    name = "1f1b-schedule"
    return Exercise(
        name=name,
        title="Write the 1F1B schedule as data",
        size=STAGES,
        inputs=inputs,
        arguments=(),
        reference=reference,
        split=stage_split,
        run=run_answer,
        describe=lambda inputs: f"p = {inputs['p']} stages, m = {inputs['m']} microbatches",
        questions=(
            Question(
                name,
                "bubble",
                "With a forward taking 1 us and a backward 2 us, what is 1F1B's bubble (a device's "
                "idle time divided by its busy time) for p = 2 stages and m = 4 microbatches?",
                "84202850c82bde88469156d6926b8ef3",
                "4p8CCRK6D5rMRwZGvfvWEwKCsWX7Fcl/nSjVdg5HWSpx85UpZoUeQvW8tdtphayscfwMU4aESNljGELI5b4DyJD8OOzXcPSx/0V2kTZaGi7eyhRqijGQZINULp5CiCRO97bQaAxVwzrdYOVrslnvbj/HpzXpe8T7h+xaeahPi664sXtFKFyhF1yow9kUmBxLtOkyuafKh9CRvl31qX1dWc5gbQ==",
                "How long does the last device wait before its first forward, and at the end? Divide by its busy time.",
            ),
            Question(
                name,
                "peak",
                "At most how many microbatches' activations does device 0 hold at once in 1F1B?",
                "5a3a11e8f57434e6e127f58e72721f12",
                "NnoSbH0gEvkVGqe9PLZKI2iq42i79WxngQA07S8jFYWCuTweXZTwPTbl+OOJzGHDqNWhCSlv54a7FivINo1/nHKxd+r0EVCwNsfFqNHyUmI1ONc4Ob5cEXgM",
                "Count device 0's forwards before its first backward.",
            ),
        ),  # fmt: skip
        hints={
            "requirement:memory": (
                "Count, for device r, how many forwards run before its first backward: 1F1B allows p - r.",
                "Device r: p - r - 1 warm-up forwards, then alternate one forward and one backward, then the "
                "remaining backwards. The last device alternates from the start: F0 B0 F1 B1 ...",
            ),
            "requirement:idle": ("A device waits where an action is ready: run each backward as soon as it can.",),
            "stopped": (
                "The schedule breaks a rule (the error names it and the position in your row): every microbatch's "
                "forward and backward on every stage, a forward before its backward.",
            ),
            "copied": ("Write the rows from the rule, with loops over r and i: no library schedule.",),
            "answer": ("Grade the function itself: ex.grade(schedule), where schedule(p, m) returns the rows.",),
        },
        requirements=(
            Requirement("memory", "at most p - r microbatches' activations on device r", _memory_bound),
            Requirement("idle", "no more idle time than (p - 1)/m", _no_extra_idle),
        ),
        trials=3,
    )
