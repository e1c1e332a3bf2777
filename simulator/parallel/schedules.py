"""Pipeline schedules as data: actions, per-rank action lists, the generators, the comm pass, the validator.

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

from ..engine import find_cycle
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


# ---- the validator ------------------------------------------------------------------------------
def validate(schedule: Schedule, *, blocking_sends: bool = False) -> None:
    """Raise ``ScheduleError`` at the first broken rule (rules 1 to 5, checked in order).

    blocking_sends: check rule 5 as if every send waits for its receive (rendezvous sends run one
    after another, as in naive hand-written code); by default sends are asynchronous, as when a
    runtime posts them with isend and waits at the end.
    """
    _check_placement(schedule)
    _check_complete(schedule)
    _check_local_order(schedule)
    if schedule.has_comms:
        _check_comms(schedule)
    execute(schedule, blocking_sends=blocking_sends)


def _check_placement(schedule: Schedule) -> None:
    S, m, p = schedule.stages, schedule.microbatches, schedule.ranks
    if len(schedule.placement) != S:
        raise ScheduleError(1, f"placement lists {len(schedule.placement)} stages, the schedule has {S}")
    for s, r in enumerate(schedule.placement):
        if not 0 <= r < p:
            raise ScheduleError(1, f"stage {s} is placed on rank {r}, but ranks are 0..{p - 1}")
    for r, acts in schedule.actions.items():
        for pos, a in enumerate(acts):
            if a.kind not in KINDS:
                raise ScheduleError(1, f"rank {r}, position {pos}: {a} has unknown kind {a.kind!r}")
            if not 0 <= a.stage < S:
                raise ScheduleError(1, f"rank {r}, position {pos}: {a} names stage {a.stage}; stages are 0..{S - 1}")
            if not 0 <= a.microbatch < m:
                raise ScheduleError(
                    1, f"rank {r}, position {pos}: {a} names microbatch {a.microbatch}; microbatches are 0..{m - 1}"
                )
            if schedule.rank_of(a.stage) != r:
                raise ScheduleError(
                    1,
                    f"{a} is in rank {r}'s list, but stage {a.stage} lives on rank {schedule.rank_of(a.stage)}; "
                    f"move it to rank {schedule.rank_of(a.stage)}'s list",
                )


def _check_complete(schedule: Schedule) -> None:
    seen: dict[Action, int] = {}
    for acts in schedule.actions.values():
        for a in acts:
            if a.is_compute:
                seen[a] = seen.get(a, 0) + 1
    for a, n in seen.items():
        if n > 1:
            raise ScheduleError(2, f"{a} appears {n} times; each stage runs each microbatch's {a.kind} once")
    for s in range(schedule.stages):
        for i in range(schedule.microbatches):
            if Action(s, F, i) not in seen:
                raise ScheduleError(2, f"{Action(s, F, i)} is missing: stage {s} never runs microbatch {i}'s forward")
            full, inp, wgt = (Action(s, k, i) in seen for k in (B, I, W))
            if full and (inp or wgt):
                raise ScheduleError(
                    2, f"stage {s} runs microbatch {i}'s backward twice: as {Action(s, B, i)} and as I/W parts"
                )
            if not full and not (inp and wgt):
                missing = Action(s, B, i) if not (inp or wgt) else Action(s, W if inp else I, i)
                raise ScheduleError(2, f"{missing} is missing: stage {s} never finishes microbatch {i}'s backward")


def _check_local_order(schedule: Schedule) -> None:
    for r, acts in schedule.actions.items():
        pos = {a: k for k, a in enumerate(acts)}
        for a, k in pos.items():
            if a.kind in (B, I):
                f = Action(a.stage, F, a.microbatch)
                if pos[f] > k:
                    raise ScheduleError(
                        3,
                        f"on rank {r}, {a} (position {k}) comes before {f} (position {pos[f]}): a backward needs "
                        f"the activations its forward saves; move {a} after {f}",
                    )
            if a.kind == W:
                i = Action(a.stage, I, a.microbatch)
                if pos[i] > k:
                    raise ScheduleError(
                        3, f"on rank {r}, {a} (position {k}) comes before {i} (position {pos[i]}): W needs I's dz"
                    )


def _needed_comms(schedule: Schedule) -> dict[Action, Action]:
    """Every send or receive the compute actions need, mapped to the compute action it serves."""
    need = {}
    for acts in add_comms(schedule.compute_only()).actions.values():
        for k, a in enumerate(acts):
            if not a.is_compute:
                need[a] = acts[k + 1] if a.kind in (RECV_F, RECV_B) else acts[k - 1]
    return need


def _check_comms(schedule: Schedule) -> None:
    need = _needed_comms(schedule)
    present: dict[Action, tuple[int, int]] = {}
    for r, acts in schedule.actions.items():
        for k, a in enumerate(acts):
            if a.is_compute:
                continue
            if a in present:
                raise ScheduleError(4, f"{a} appears twice (rank {r}); each value crosses once")
            if a not in need:
                raise ScheduleError(
                    4,
                    f"rank {r} has {a}, but nothing crosses there: stage {a.stage} and its neighbour share a "
                    f"rank or do not exist; remove it",
                )
            present[a] = (r, k)
    for a, (r, k) in present.items():
        peer_rank, other = peer(schedule, a)
        if other not in present:
            what = "recv" if a.kind.startswith("RECV") else "send"
            raise ScheduleError(
                4, f"rank {r}'s {what} {a} has no matching {other} on rank {peer_rank}; add {other} to rank {peer_rank}"
            )
        user = need[a]
        at = schedule.actions[r].index(user)
        if a.kind.startswith("RECV") and at < k:
            raise ScheduleError(4, f"on rank {r}, {a} comes after {user}, which needs what it receives")
        if a.kind.startswith("SEND") and at > k:
            raise ScheduleError(4, f"on rank {r}, {a} comes before {user}, which computes what it sends")
    for a in need:
        if a not in present:
            raise ScheduleError(
                4,
                f"{need[a]} on rank {schedule.rank_of(a.stage)} needs {a}, which is missing; "
                "insert it (add_comms does this for a compute-only schedule)",
            )


# ---- abstract execution: rule 5, and the times the grid shows ------------------------------------
UNIT_COSTS: dict[str, float] = {F: 1.0, B: 2.0, I: 1.0, W: 1.0}


def execute(
    schedule: Schedule, costs: Mapping[str, float] | None = None, *, blocking_sends: bool = False
) -> dict[int, list[tuple[float, float, Action]]]:
    """Run every rank's list in order on an idealised machine; return (start, end, action) per rank.

    Compute actions take ``costs[kind]`` time units (``UNIT_COSTS`` by default); messages take no
    time. A compute action waits for its inputs: the previous stage's forward (or its receive), the
    next stage's backward (or its receive). A receive waits for its send; with ``blocking_sends`` a
    send also waits until its receiver has reached the matching receive. Raises ``ScheduleError``
    (rule 5) naming the cycle of waiting ranks when the ranks can never finish.
    """
    costs = dict(UNIT_COSTS, **(costs or {}))
    present = {a for acts in schedule.actions.values() for a in acts if a.is_compute}
    finish: dict[Action, float] = {}
    clock = [0.0] * schedule.ranks
    pos = [0] * schedule.ranks
    out: dict[int, list[tuple[float, float, Action]]] = {r: [] for r in range(schedule.ranks)}

    def blocker(r: int, a: Action) -> tuple[Action, int] | None:
        """What ``a`` on rank r still waits for (an action and its rank), or None if it can run."""
        if blocking_sends and a.kind in (SEND_F, SEND_B):
            peer_rank, other = peer(schedule, a)
            acts = schedule.actions[peer_rank]
            if not (pos[peer_rank] < len(acts) and acts[pos[peer_rank]] == other):
                return other, peer_rank
        for d in _inputs(schedule, present, r, a):
            if d not in finish:
                return d, schedule.rank_of(d.stage)
        return None

    progress = True
    while progress:
        progress = False
        for r in range(schedule.ranks):
            acts = schedule.actions[r]
            while pos[r] < len(acts) and blocker(r, acts[pos[r]]) is None:
                a = acts[pos[r]]
                start = max([clock[r], *(finish[d] for d in _inputs(schedule, present, r, a))])
                if blocking_sends and a.kind in (SEND_F, SEND_B):
                    start = max(start, clock[peer(schedule, a)[0]])
                end = start + (costs[a.kind] if a.is_compute else 0.0)
                finish[a] = clock[r] = end
                out[r].append((start, end, a))
                pos[r] += 1
                progress = True
    stuck = {r: acts[pos[r]] for r, acts in schedule.actions.items() if pos[r] < len(acts)}
    if stuck:
        raise _deadlock(stuck, {r: blocker(r, a) for r, a in stuck.items()}, blocking_sends)
    return out


def _inputs(schedule: Schedule, present: set[Action], r: int, a: Action) -> list[Action]:
    """The actions whose results ``a`` (on rank r) consumes."""
    s, i = a.stage, a.microbatch
    comms, place = schedule.has_comms, schedule.placement
    if a.kind in (RECV_F, RECV_B):
        return [peer(schedule, a)[1]]
    if a.kind == F:
        if s == 0:
            return []
        return [Action(s, RECV_F, i) if comms and place[s - 1] != r else Action(s - 1, F, i)]
    if a.kind in (B, I):
        deps = [Action(s, F, i)]
        if s < schedule.stages - 1:
            if comms and place[s + 1] != r:
                deps.append(Action(s, RECV_B, i))
            else:
                deps.append(Action(s + 1, I if Action(s + 1, I, i) in present else B, i))
        return deps
    if a.kind == W:
        return [Action(s, I, i)]
    return []  # a send: its value was made by the action just before it


def _deadlock(stuck, waiting, blocking_sends) -> ScheduleError:
    lines = []
    graph = {}
    for r, a in stuck.items():
        dep = waiting[r]
        if dep is None:
            continue
        d, dr = dep
        graph[r] = dr
        lines.append(f"rank {r} waits at {a} for {d} on rank {dr}")
    cycle = find_cycle(graph)
    text = "; ".join(lines)
    if cycle:
        text += ". Wait-for cycle: " + " -> ".join(f"rank {r}" for r in cycle + cycle[:1])
        if blocking_sends and any(stuck[r].kind.startswith("SEND") for r in cycle):
            text += (
                ". With rendezvous sends a send waits for its receive, so two ranks that both send first wait "
                "forever: let one side receive first, or post sends asynchronously (isend) and wait later"
            )
    return ScheduleError(5, text, cycle)


# ---- the text grid ------------------------------------------------------------------------------
def grid(schedule: Schedule, costs: Mapping[str, float] | None = None, width: int = 110) -> str:
    """One row per rank, one column per time unit; a cell shows the action running then, ``.`` if idle.

    Times come from ``execute`` with whole-number costs (``UNIT_COSTS`` by default: a backward
    takes two units, its I and W parts one each). Sends and receives take no time and are not shown.
    A grid wider than ``width`` characters comes in bands of time units, one under the other.
    """
    timing = execute(schedule, costs)
    cell = max((len(str(a)) for rows in timing.values() for _, _, a in rows), default=3)
    end = int(round(max((e for rows in timing.values() for _, e, _ in rows), default=0)))
    cells = {}
    for r, rows in timing.items():
        cells[r] = ["."] * end
        for start, stop, a in rows:
            if a.is_compute:
                for u in range(int(round(start)), int(round(stop))):
                    cells[r][u] = str(a)
    head = len(f"rank {max(cells, default=0)} | ")
    fit = max(1, (width - head + 1) // (cell + 1))  # time units a line has room for
    per_band = -(-end // -(-end // fit)) if end else 1  # as many bands as needed, of even widths
    bands = range(0, max(end, 1), per_band)
    lines = []
    for lo in bands:
        hi = min(end, lo + per_band)
        if len(bands) > 1:
            lines += ([""] if lo else []) + [f"time units {lo} to {hi - 1}:"]
        for r, row in cells.items():
            lines.append(f"rank {r} | ".ljust(head) + " ".join(c.ljust(cell) for c in row[lo:hi]).rstrip())
    return "\n".join(lines)
