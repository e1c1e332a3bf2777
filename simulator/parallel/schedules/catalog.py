"""``SCHEDULES``: every schedule's record by name, gathered from the generator modules, and ``make_schedule``.

Adding a schedule is one ``ScheduleRecord`` beside its generator (in ``classic.py``, ``looped.py``, ``v.py`` or a
new module of the family), listed here: the commands, the bubble table, the explorer page, the what-if and the
comparison with torch all read it from ``SCHEDULES``.
"""

from __future__ import annotations

from . import classic, looped, v
from .record import ScheduleRecord
from .schedule import Schedule

_ORDER = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "looped-bfs", "interleaved-zb", "zbv", "dualpipe-v")
_RECORDS = {record.name: record for record in (*classic.RECORDS, *looped.RECORDS, *v.RECORDS)}
SCHEDULES: dict[str, ScheduleRecord] = {name: _RECORDS[name] for name in _ORDER} | {
    name: record for name, record in _RECORDS.items() if name not in _ORDER
}


def schedule_record(name: str) -> ScheduleRecord:
    """The record of schedule ``name``; a ``KeyError`` naming the known ones if there is none.

    Examples:
        >>> from simulator.parallel.schedules import schedule_record
        >>> schedule_record("zbv").stages_per_rank
        2
    """
    if name not in SCHEDULES:
        raise KeyError(f"no schedule named {name!r}; choose one of {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def make_schedule(name: str, ranks: int, microbatches: int, **options: int) -> Schedule:
    """A schedule by name (see ``SCHEDULES``).

    Args:
        name: a key of ``SCHEDULES`` (``"gpipe"``, ``"1f1b"``, ``"interleaved-1f1b"``, ...).
        ranks: pipeline ranks, p.
        microbatches: microbatches per step, m.
        **options: the generator's own options (``virtual=2`` for the looped schedules).

    Examples:
        >>> from simulator.parallel.schedules import make_schedule
        >>> make_schedule("1f1b", 2, 3).actions[1]
        (1F0, 1B0, 1F1, 1B1, 1F2, 1B2)
    """
    return schedule_record(name).make(ranks, microbatches, **options)
