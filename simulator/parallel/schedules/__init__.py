"""Pipeline schedules as data: what each rank runs, in order, and where each stage lives.

A schedule never imports a strategy: the pipeline (``simulator.parallel.pipeline``) runs it, the text grid
and the timeline draw it. One concept per module, each building only on those above it in this list:

=============  ======================================================================================
labels.py      short labels for ops in timelines (``F3``, ``I3``, ``W3``), as the papers draw them
actions.py     actions (``2F0``), their kinds, the numbered rules, and the comm pass (``add_comms``)
timing.py      a schedule run on an idealised machine (``execute``), its text grid, its peak activations
rules.py       ``validate``: the numbered rules, checked in order
schedule.py    ``Schedule``: actions per rank and the placement of stages
classic.py     one stage per rank: GPipe, 1F1B, ZB-H1
looped.py      several stages per rank, looped: interleaved 1F1B, interleaved zero bubble, looped BFS
v.py           two stages per rank in a V: ZB-V, DualPipeV
bubbles.py     the bubble of each schedule in closed form
=============  ======================================================================================

This package's ``SCHEDULES`` lists every generator by name (``make_schedule("1f1b", 4, 8)``).
"""

from __future__ import annotations

from collections.abc import Callable

from .actions import (
    COMM_KINDS,
    COMPUTE_KINDS,
    KINDS,
    RECV_B,
    RECV_F,
    RULES,
    SEND_B,
    SEND_F,
    Action,
    B,
    F,
    I,
    ScheduleError,
    W,
    add_comms,
    peer,
)
from .classic import gpipe, one_f_one_b, zb_h1
from .looped import interleaved_1f1b, interleaved_zero_bubble, looped_bfs
from .rules import validate
from .schedule import Schedule
from .timing import UNIT_COSTS, execute, grid, peak_activations
from .v import dualpipe_v, zbv

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


__all__ = [
    "B",
    "COMM_KINDS",
    "COMPUTE_KINDS",
    "F",
    "I",
    "KINDS",
    "RECV_B",
    "RECV_F",
    "RULES",
    "SCHEDULES",
    "SEND_B",
    "SEND_F",
    "UNIT_COSTS",
    "W",
    "Action",
    "Schedule",
    "ScheduleError",
    "add_comms",
    "dualpipe_v",
    "execute",
    "gpipe",
    "grid",
    "interleaved_1f1b",
    "interleaved_zero_bubble",
    "looped_bfs",
    "make_schedule",
    "one_f_one_b",
    "peak_activations",
    "peer",
    "validate",
    "zb_h1",
    "zbv",
]
