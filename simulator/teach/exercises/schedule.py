"""Exercise: the 1F1B pipeline schedule, written as data.

Two devices, one stage each (a four-layer MLP, two layers per stage), four microbatches. A schedule is
one line of actions per rank: ``0F2`` is stage 0's forward of microbatch 2, ``1B0`` stage 1's backward
of microbatch 0. GPipe runs every forward, then every backward, so each device holds the activations
of all four microbatches at its peak; 1F1B starts each backward as soon as it can, so device r holds at
most p - r. The grade runs the schedule with real arithmetic, checks every value against one device,
and checks that bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...core.engine import RunResult
from ...parallel.measure import bubble, peak_activation_microbatches
from ...parallel.mlp import mlp_reference
from ...parallel.pipeline import ActionCosts, Pipeline
from ...parallel.schedules import Schedule
from ..examples.training import MODEL, PARAMS, T, X
from .core import Exercise, Question, Requirement

STAGES, MICROBATCHES = 2, 4
COSTS = ActionCosts.equal(1e-6, 2e-6)  # a forward 1 us, a backward 2 us; messages take no time

__all__ = ["MICROBATCHES", "STAGES", "one_f_one_b_by_hand", "pipeline_of", "run_schedule"]


def pipeline_of(rows: Iterable[str] | Mapping[int, str]) -> Pipeline:
    """The pipeline a hand-written schedule (one line of actions per rank) drives."""
    schedule = Schedule.from_text(rows, microbatches=MICROBATCHES, name="your schedule")
    # checked as written first: a broken rule then names positions in the student's own row, before the
    # pipeline inserts its sends and receives
    return Pipeline(MODEL, schedule.validate(), costs=COSTS)


def run_schedule(rows: Iterable[str] | Mapping[int, str]) -> RunResult:
    """Validate a hand-written schedule and run one training step with it."""
    return pipeline_of(rows).run(PARAMS, X, T)


def _memory_bound(run: RunResult) -> str | None:
    peaks = peak_activation_microbatches(run.trace)
    for r, peak in enumerate(peaks):
        if peak > STAGES - r:
            return (
                f"this is not 1F1B yet: device {r} holds the activations of {peak} microbatches at once, and "
                f"1F1B holds at most p - r = {STAGES - r} on device {r} (start each backward as soon as you can)"
            )
    return None


def _no_extra_idle(run: RunResult) -> str | None:
    ratio = max(bubble(run.trace).ratio)
    best = (STAGES - 1) / MICROBATCHES
    if ratio > best * (1 + 1e-9):
        return (
            f"a device idles {ratio:.3g} of its busy time, more than 1F1B's (p - 1)/m = {best:g}: a device waits "
            "where it could run a forward or a backward that is ready"
        )
    return None


def one_f_one_b_by_hand() -> Exercise:
    return Exercise(
        name="1f1b-schedule",
        title="Write the 1F1B schedule as data",
        run=run_schedule,
        reference=lambda: mlp_reference(MODEL, PARAMS, X, T, MICROBATCHES),
        questions=[
            Question(
                "bubble",
                "With a forward taking 1 us and a backward 2 us, what is 1F1B's bubble (a device's idle time "
                "divided by its busy time) for p = 2 stages and m = 4 microbatches?",
                0.25,
                "(p - 1)/m = 1/4: each device idles for p - 1 forwards and p - 1 backwards in all, and is busy "
                "for m of each. GPipe's bubble is the same; what 1F1B saves is memory.",
            ),
            Question(
                "peak",
                "At most how many microbatches' activations does device 0 hold at once in 1F1B?",
                2,
                "p - r = 2 for device 0: after its warm-up forwards it runs one backward for every forward.",
            ),
        ],
        hints=[
            "Count, for device 0, how many forwards run before its first backward. 1F1B allows p - r = 2.",
            "Device 0: two forwards (warm-up), then alternate one backward and one forward, then the last "
            "backward. Device 1 (the last stage) alternates from the start: F0 B0 F1 B1 ...",
            'rows = ["0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"]',
        ],
        requirements=[
            Requirement("at most p - r microbatches' activations on device r", _memory_bound),
            Requirement("no more idle time than (p - 1)/m", _no_extra_idle),
        ],
    )
