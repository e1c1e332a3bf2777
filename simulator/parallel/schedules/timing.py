"""A schedule run on an idealised machine: ``execute`` gives every action's start and end in time units
(and finds rule 5's deadlocks), ``grid`` draws the result as text, one row per rank; ``peak_activations``
counts what each rank keeps alive at most."""

from __future__ import annotations

from collections.abc import Mapping

from ...core.run_errors import find_cycle
from .actions import RECV_B, RECV_F, SEND_B, SEND_F, Action, ActionLists, B, F, I, ScheduleError, W, peer

UNIT_COSTS: dict[str, float] = {F: 1.0, B: 2.0, I: 1.0, W: 1.0}


def execute(
    schedule: ActionLists, costs: Mapping[str, float] | None = None, *, blocking_sends: bool = False
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


def _inputs(schedule: ActionLists, present: set[Action], r: int, a: Action) -> list[Action]:
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


def peak_activations(schedule: ActionLists) -> list[int]:
    """Per rank, the most stage-microbatch activations alive at once: a forward keeps its activations until
    the last pass of its backward (B, or W where the backward is split in I and W) has run, in the rank's
    order. On a rank with v stages each is 1/v of a one-stage rank's; 1F1B's rank r peaks at min(p - r, m)."""
    peaks = []
    for acts in schedule.actions.values():
        alive = peak = 0
        for a in acts:
            alive += (a.kind == F) - (a.kind in (B, W))
            peak = max(peak, alive)
        peaks.append(peak)
    return peaks


def grid(schedule: ActionLists, costs: Mapping[str, float] | None = None, width: int = 110) -> str:
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
