"""The numbered rules a pipeline schedule must keep (``schedules.RULES``), checked in order: ``validate``
names the first one broken, with the fix where there is one."""

from __future__ import annotations

from .actions import KINDS, RECV_B, RECV_F, Action, ActionLists, B, F, I, ScheduleError, W, add_comms, peer
from .timing import execute


def validate(schedule: ActionLists, *, blocking_sends: bool = False) -> None:
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


def _check_placement(schedule: ActionLists) -> None:
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


def _check_complete(schedule: ActionLists) -> None:
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


def _check_local_order(schedule: ActionLists) -> None:
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


def _needed_comms(schedule: ActionLists) -> dict[Action, Action]:
    """Every send or receive the compute actions need, mapped to the compute action it serves."""
    need = {}
    for acts in add_comms(schedule.compute_only()).actions.values():
        for k, a in enumerate(acts):
            if not a.is_compute:
                need[a] = acts[k + 1] if a.kind in (RECV_F, RECV_B) else acts[k - 1]
    return need


def _check_comms(schedule: ActionLists) -> None:
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
