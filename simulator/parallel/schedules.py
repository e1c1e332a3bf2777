"""Pipeline schedules as data: actions, per-rank action lists, the generators, the comm pass (the rules'
checks live in ``schedule_rules``, the idealised run and the text grid in ``schedule_timing``).

An action is ``(stage, kind, microbatch)``, written ``2F0`` (stage 2, forward, microbatch 0). Kinds:

    F        forward of one microbatch through one stage
    B        full backward of one microbatch through one stage (input and weight gradients)
    I        backward, input-gradient part only: what the previous stage is waiting for
    W        backward, weight-gradient part only: nobody waits for it, so it can fill a bubble
    SEND_F   send the stage's forward output to the next stage    RECV_F  receive the stage's input
    SEND_B   send the stage's input gradient to the previous stage RECV_B  receive its output gradient

A schedule is a list of actions per rank, plus where each stage lives (``placement[stage] = rank``).
The generators write compute actions only; ``add_comms`` inserts the sends and receives, each send
right after the action that produces the value and each receive right before the action that needs
it. ``validate`` checks the numbered rules in ``RULES`` and names the first broken one.

The same ``Schedule`` object drives the simulation (``simulator.parallel.pipeline``), the text grid
(``grid``) and the timeline figure (drawn from the simulation's trace).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from ..errors import SimulationError
from ..oplabels import schedule_tag

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


@dataclass(frozen=True)
class Schedule:
    """Actions per rank for ``microbatches`` microbatches through ``stages`` stages on ``ranks`` ranks."""

    name: str
    ranks: int
    stages: int
    microbatches: int
    actions: Mapping[int, tuple[Action, ...]]
    placement: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        for key in self.actions:
            if not (isinstance(key, int) and 0 <= key < self.ranks):
                raise ValueError(
                    f"schedule {self.name!r} has actions for rank {key!r}, but its ranks are 0..{self.ranks - 1}"
                )
        placement = tuple(self.placement) or tuple(s % self.ranks for s in range(self.stages))
        object.__setattr__(self, "placement", placement)
        object.__setattr__(self, "actions", {r: tuple(self.actions.get(r, ())) for r in range(self.ranks)})

    # ---- reading and writing ------------------------------------------------------------------
    @classmethod
    def from_text(
        cls,
        rows: Mapping[int, str] | Iterable[str],
        *,
        microbatches: int,
        stages: int | None = None,
        placement: Iterable[int] | None = None,
        name: str = "hand-written",
    ) -> Schedule:
        """A schedule from one line of short forms per rank, e.g. ``["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"]``."""
        rows = dict(rows) if isinstance(rows, Mapping) else dict(enumerate(rows))
        actions = {r: tuple(Action.parse(tok) for tok in line.split()) for r, line in rows.items()}
        ranks = max(rows) + 1 if rows else 0
        if placement is not None:
            placement = tuple(placement)
        if stages is None:
            stages = (
                len(placement)
                if placement
                else max((a.stage for acts in actions.values() for a in acts), default=0) + 1
            )
        return cls(name, ranks, stages, microbatches, actions, placement or ())

    def __repr__(self) -> str:  # one short line: the actions are what str() and a notebook show
        return f"<Schedule {self.name}: {self.ranks} ranks, {self.stages} stages, {self.microbatches} microbatches>"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def __str__(self) -> str:
        lines = [f"{self.name}: {self.ranks} ranks, {self.stages} stages, {self.microbatches} microbatches"]
        for r, acts in self.actions.items():  # a long rank goes on over lines within 110 columns
            head = f"  rank {r}: "
            lines.append(
                textwrap.fill(" ".join(map(str, acts)), 110, initial_indent=head, subsequent_indent=" " * len(head))
            )
        return "\n".join(lines)

    def rank_of(self, stage: int) -> int:
        return self.placement[stage]

    @cached_property  # (a schedule is immutable; execute asks for every action)
    def has_comms(self) -> bool:
        return any(not a.is_compute for acts in self.actions.values() for a in acts)

    @property
    def splits_backward(self) -> bool:
        """True when the schedule runs the backward as separate I and W actions."""
        return any(a.kind in (I, W) for acts in self.actions.values() for a in acts)

    def op_tag(self, name: str) -> str:
        """How a timeline labels an op of a run of this schedule: ``F3``, and ``B3`` for the whole backward
        (``I3``/``W3`` where the schedule splits it), as the pipeline papers draw them."""
        return schedule_tag((I,) if self.splits_backward else (F, B))(name)

    def compute_only(self) -> Schedule:
        """The same schedule without its send and receive actions."""
        acts = {r: tuple(a for a in acts if a.is_compute) for r, acts in self.actions.items()}
        return Schedule(self.name, self.ranks, self.stages, self.microbatches, acts, self.placement)

    def with_comms(self) -> Schedule:
        """This schedule with sends and receives inserted (see ``add_comms``)."""
        return add_comms(self)

    def validate(self, *, blocking_sends: bool = False) -> Schedule:
        """Check every rule in ``RULES``; raise ``ScheduleError`` naming the first broken one."""
        validate(self, blocking_sends=blocking_sends)
        return self

    def grid(self, costs: Mapping[str, float] | None = None, width: int = 110) -> str:
        """The schedule as a text grid, one row per rank, one column per time unit (see ``grid``)."""
        return grid(self, costs, width)


# ---- generators ---------------------------------------------------------------------------------
def gpipe(ranks: int, microbatches: int) -> Schedule:
    """GPipe: every rank runs all its forwards, then all its backwards (in microbatch order)."""
    _check_sizes(ranks, microbatches)
    acts = {
        r: tuple(Action(r, F, i) for i in range(microbatches)) + tuple(Action(r, B, i) for i in range(microbatches))
        for r in range(ranks)
    }
    return Schedule("GPipe", ranks, ranks, microbatches, acts)


def one_f_one_b(ranks: int, microbatches: int) -> Schedule:
    """1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then one forward and one backward in turn.

    Rank r never holds more than p - r microbatches' activations, against m for GPipe, with the
    same bubble.
    """
    _check_sizes(ranks, microbatches)
    acts = {}
    for r in range(ranks):
        warmup = min(ranks - r - 1, microbatches)
        seq = [Action(r, F, i) for i in range(warmup)]
        for j in range(microbatches - warmup):
            seq += [Action(r, F, warmup + j), Action(r, B, j)]
        seq += [Action(r, B, j) for j in range(microbatches - warmup, microbatches)]
        acts[r] = tuple(seq)
    return Schedule("1F1B", ranks, ranks, microbatches, acts)


def zb_h1(ranks: int, microbatches: int) -> Schedule:
    """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): 1F1B with the backward split in I and W.

    The input-gradient pass I is what the previous stage waits for; the weight-gradient pass W only
    feeds the optimizer. Rank r runs 1F1B's order with I in place of B, and holds back its first r
    W passes: the input gradients then reach rank 0 sooner, and the held-back W fill the tail where
    1F1B idles. With equal F, I and W times and m >= p the bubble drops from 1F1B's (p-1)(F+I+W) to
    (p-1)F, a ratio of (p-1)/(3m) to the useful work. Rank r keeps at most p microbatches in flight
    (forward done, W not yet): the peak activation memory of 1F1B's first rank.
    """
    _check_sizes(ranks, microbatches)
    acts = {}
    for r in range(ranks):
        warmup = min(ranks - r, microbatches)
        seq = [Action(r, F, i) for i in range(warmup)]
        held_w = 0
        for k in range(microbatches):
            seq.append(Action(r, I, k))
            if k >= r:  # the first r weight passes wait until the end
                seq.append(Action(r, W, held_w))
                held_w += 1
            if warmup + k < microbatches:
                seq.append(Action(r, F, warmup + k))
        seq += [Action(r, W, j) for j in range(held_w, microbatches)]
        acts[r] = tuple(seq)
    return Schedule("ZB-H1", ranks, ranks, microbatches, acts)


def _check_sizes(ranks: int, microbatches: int) -> None:
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"a pipeline needs at least 1 rank, got {ranks!r}")
    if not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"a pipeline step needs at least 1 microbatch, got {microbatches!r}")


# Several stages per rank: generated in their own modules (they build on the types above).
from .schedules_looped import interleaved_1f1b, interleaved_zero_bubble, looped_bfs  # noqa: E402
from .schedules_v import dualpipe_v, zbv  # noqa: E402

SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved-1f1b": interleaved_1f1b,
    "zb-h1": zb_h1,
    "looped-bfs": looped_bfs,
    "interleaved-zb": interleaved_zero_bubble,
    "zbv": zbv,
    "dualpipe-v": dualpipe_v,
}


def make_schedule(name: str, ranks: int, microbatches: int, **options: int) -> Schedule:
    """A schedule by name (see ``SCHEDULES``), e.g. ``make_schedule("1f1b", 4, 8)``."""
    if name not in SCHEDULES:
        raise KeyError(f"no schedule named {name!r}; choose one of {', '.join(SCHEDULES)}")
    return SCHEDULES[name](ranks, microbatches, **options)


# ---- the comm pass ------------------------------------------------------------------------------
def add_comms(schedule: Schedule) -> Schedule:
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
    return Schedule(schedule.name, schedule.ranks, schedule.stages, schedule.microbatches, out, place)


def peer(schedule: Schedule, action: Action) -> tuple[int, Action]:
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


# The rules and the abstract execution that checks rule 5 and times the grid: their own modules (they build
# on the types above).
from .schedule_rules import validate  # noqa: E402
from .schedule_timing import UNIT_COSTS, execute, grid  # noqa: E402, F401 (part of this module's interface)
