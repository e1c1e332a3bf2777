"""Pipeline schedules as data: what each rank runs, in order, and where each stage lives.

A schedule never imports a strategy: the pipeline (``simulator.parallel.pipeline``) runs it, the text grid
and the timeline draw it. One concept per module, each building only on those above it in this list:

| module | holds |
| --- | --- |
| labels.py | short labels for ops in timelines (``F3``, ``I3``, ``W3``), as the papers draw them |
| actions.py | actions (``2F0``), their kinds, the numbered rules, and the comm pass (``add_comms``) |
| timing.py | a schedule run on an idealised machine (``execute``), its text grid, its peak activations |
| rules.py | ``validate``: the numbered rules, checked in order |
| schedule.py | ``Schedule``: actions per rank and the placement of stages |
| record.py | ``ScheduleRecord``: one schedule's generator, stages per rank, bubble, torch class, what-if support |
| classic.py | one stage per rank: GPipe, 1F1B, ZB-H1 (and their records) |
| looped.py | several stages per rank, looped: interleaved 1F1B, interleaved zero bubble, looped BFS |
| v.py | two stages per rank in a V: ZB-V, DualPipeV |
| catalog.py | ``SCHEDULES``: every record by name; ``make_schedule("1f1b", 4, 8)`` |
| bubbles.py | ``bubble_ratio``: the bubble of each schedule in closed form, read from its record |

A new schedule is one ``ScheduleRecord`` beside its generator, listed in ``catalog.py`` (CONTRIBUTING.md).
"""

from __future__ import annotations

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
from .bubbles import bubble_ratio
from .catalog import SCHEDULES, make_schedule, schedule_record
from .classic import gpipe, one_f_one_b, zb_h1
from .looped import interleaved_1f1b, interleaved_zero_bubble, looped_bfs
from .record import ScheduleRecord
from .rules import validate
from .schedule import Schedule
from .timing import UNIT_COSTS, execute, grid, peak_activations
from .v import dualpipe_v, zbv

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
    "ScheduleRecord",
    "add_comms",
    "bubble_ratio",
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
    "schedule_record",
    "validate",
    "zb_h1",
    "zbv",
]
