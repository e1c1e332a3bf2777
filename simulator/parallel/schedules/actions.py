"""Pipeline schedules as data, the vocabulary: actions, the numbered rules, and the comm pass.

An action is ``(stage, kind, microbatch)``, written ``2F0`` (stage 2, forward, microbatch 0). Kinds:

    F        forward of one microbatch through one stage
    B        full backward of one microbatch through one stage (input and weight gradients)
    I        backward, input-gradient part only: what the previous stage is waiting for
    W        backward, weight-gradient part only: nobody waits for it, so it can fill a bubble
    SEND_F   send the stage's forward output to the next stage    RECV_F  receive the stage's input
    SEND_B   send the stage's input gradient to the previous stage RECV_B  receive its output gradient

A schedule (``schedule.Schedule``) is a list of actions per rank, plus where each stage lives
(``placement[stage] = rank``). The generators write compute actions only; ``add_comms`` inserts the sends
and receives, each send right after the action that produces the value and each receive right before the
action that needs it. The rules in ``RULES`` are checked by ``rules.validate``.

This module knows schedules only by what they hold (``ActionLists``), so the rules and the timing that
``Schedule``'s methods call can build on it without importing ``Schedule`` back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import NamedTuple, Protocol, TypeVar

from ...core.errors import SimulationError

F, B, I, W = "F", "B", "I", "W"  # noqa: E741 (I is the zero-bubble papers' name for the input-gradient pass)
SEND_F, RECV_F, SEND_B, RECV_B = "SEND_F", "RECV_F", "SEND_B", "RECV_B"
COMPUTE_KINDS = (F, B, I, W)
COMM_KINDS = (SEND_F, RECV_F, SEND_B, RECV_B)
KINDS = COMPUTE_KINDS + COMM_KINDS

RULES = {
    1: "every action names a stage and microbatch that exist, and sits on the rank that holds its stage",
    2: "every stage runs each microbatch's forward once and its backward once (B, or I and W)",
    3: "on its rank, a microbatch's forward comes before its backward, and I comes before W",
    4: "every recv has its send and every send its recv, each on the right side of the computation",
    5: "run in order on every rank, the schedule finishes: no ranks wait for each other in a cycle",
}


class ScheduleError(SimulationError):
    """A schedule breaks one of the numbered rules in ``RULES``; ``rule`` says which."""

    def __init__(self, rule: int, message: str, cycle: list[int] | None = None) -> None:
        super().__init__(f"schedule breaks rule {rule} ({RULES[rule]}): {message}")
        self.rule = rule
        self.cycle = cycle


class Action(NamedTuple):
    """One step of a rank's program: ``Action(2, "F", 0)`` is ``2F0``."""

    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    def __repr__(self) -> str:
        return str(self)

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    @classmethod
    def parse(cls, text: str) -> Action:
        """``Action.parse("2F0")``; also ``1SEND_F3``, ``0W2``."""
        match = _ACTION_RE.match(text.strip())
        if not match:
            raise ValueError(
                f"cannot read {text!r} as an action: write stage, kind, microbatch, e.g. 2F0, 1B3, 0W2 or 1SEND_F0 "
                f"(kinds: {', '.join(KINDS)})"
            )
        return cls(int(match[1]), match[2], int(match[3]))


_ACTION_RE = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W)(\d+)$")


class ActionLists(Protocol):
    """What the rules, the timing and the comm pass read of a schedule (``Schedule`` has all of it)."""

    name: str
    ranks: int
    stages: int
    microbatches: int
    actions: Mapping[int, tuple[Action, ...]]
    placement: tuple[int, ...]

    @property
    def has_comms(self) -> bool: ...

    def rank_of(self, stage: int) -> int: ...


S = TypeVar("S", bound=ActionLists)


# ---- the comm pass ------------------------------------------------------------------------------
def add_comms(schedule: S) -> S:
    """Insert the sends and receives a compute-only schedule needs.

    A value crosses only between stages on different ranks: the forward output of stage s goes to
    stage s + 1, and the input gradient of stage s goes back to stage s - 1. Each send comes right
    after the action that produces the value, each receive right before the action that uses it.
    """
    if schedule.has_comms:
        return schedule
    S, place = schedule.stages, schedule.placement
    out: dict[int, tuple[Action, ...]] = {}
    for r, acts in schedule.actions.items():
        seq: list[Action] = []
        for a in acts:
            s, i = a.stage, a.microbatch
            before = after = None
            if a.kind == F:
                if s > 0 and place[s - 1] != r:
                    before = Action(s, RECV_F, i)
                if s < S - 1 and place[s + 1] != r:
                    after = Action(s, SEND_F, i)
            elif a.kind in (B, I):
                if s < S - 1 and place[s + 1] != r:
                    before = Action(s, RECV_B, i)
                if s > 0 and place[s - 1] != r:
                    after = Action(s, SEND_B, i)
            seq += [x for x in (before, a, after) if x is not None]
        out[r] = tuple(seq)
    return replace(schedule, actions=out)  # a Schedule stays a Schedule


def peer(schedule: ActionLists, action: Action) -> tuple[int, Action]:
    """The rank and action at the other end of a send or receive."""
    s, i = action.stage, action.microbatch
    other = {
        SEND_F: Action(s + 1, RECV_F, i),
        RECV_F: Action(s - 1, SEND_F, i),
        SEND_B: Action(s - 1, RECV_B, i),
        RECV_B: Action(s + 1, SEND_B, i),
    }[action.kind]
    if not 0 <= other.stage < schedule.stages:
        raise ScheduleError(1, f"{action} has no stage {other.stage} to talk to (stages are 0..{schedule.stages - 1})")
    return schedule.rank_of(other.stage), other
