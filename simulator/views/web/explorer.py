"""The schedule explorer: one self-contained page where a student picks a pipeline schedule, p, m, v and the
costs of F, B and W (and a second schedule to set beside the first, on one time axis), and sees each
timeline, its bubble as idle / busy and as idle / total (measured, and the closed forms), and the activations
each device keeps, at most and over time.

The orders are the project's own (``simulator.parallel.schedules.SCHEDULES``, the ones checked against
torch's classes), made in the page by ``schedules.js``, a port of the generators (with their own words where
they refuse a case): p from 2 to 64 and m from 1 to 512 would be millions of stored cases. The page runs the
order on the idealised machine of ``schedules.execute`` (its port in ``explorer.js``). The browser tests hold
both ports to Python: every order and time for p 2..8, m 1..16, and large cases up to p = 64, m = 512. A
schedule added by its record alone, not yet ported, still has its page: its orders for p 2..8, m 1..16 are
made here and stored in the page (``offered``)::

    python -m simulator explore -o schedules.html
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...parallel.schedules import SCHEDULES, UNIT_COSTS, Schedule, make_schedule
from .assets import EXPLORER, asset
from .page import tool_page, write_text

SCHEMA = "parallelism-simulator/views/web/explorer/2"
LIMITS = {"p": (2, 64), "m": (1, 512), "v": (1, 4)}  # what a student may pick, and a link may ask for
COSTS = {"F": (1.0, 2.0), "B": (1.0, 2.0, 3.0, 4.0), "W": (0.5, 1.0, 1.5, 2.0)}  # time units; I = B - W
# A schedule schedules.js does not generate (a record added in Python only) still reaches the page: its orders
# are made here and stored in the page, for these sizes only.
STORED = {"p": (2, 8), "m": (1, 16)}


def virtual_choices(name: str) -> tuple[int, ...]:
    """The stages per rank the page offers for a schedule."""
    record, (lo, hi) = SCHEDULES[name], LIMITS["v"]
    return tuple(range(lo, hi + 1)) if record.looped else (record.stages_per_rank,)


def ported() -> set[str]:
    """The schedules the page generates itself: the names in schedules.js's ``GENERATORS`` table."""
    table = re.search(r"const GENERATORS = \{(.*?)\n\};", asset("schedules.js"), re.S)
    return set(re.findall(r'^\s*"?([\w-]+)"?:', table.group(1), re.M)) if table else set()


def offered() -> list[tuple[str, int, int, int]]:
    """Every (schedule, p, m, v) whose order the page stores, made here, whether or not the schedule accepts it:
    the schedules schedules.js does not port, over the sizes of ``STORED``."""
    (p_lo, p_hi), (m_lo, m_hi), made = STORED["p"], STORED["m"], ported()
    return [
        (name, p, m, v)
        for name in SCHEDULES
        if name not in made
        for v in virtual_choices(name)
        for p in range(p_lo, p_hi + 1)
        for m in range(m_lo, m_hi + 1)
    ]


def stored_case(name: str, p: int, m: int, v: int) -> dict[str, Any]:
    """One stored case, as schedules.js's ``makeCase`` returns it: each rank's compute actions, the stages and
    the bubble's closed form (or the generator's words where it refuses the case)."""
    try:
        schedule = schedule_of(name, p, m, v)
    except ValueError as exc:
        return {"error": str(exc)}
    ratio = SCHEDULES[name].bubble(p, m, v) if schedule.stages > 0 else None
    return {
        "ranks": [
            [[a.kind, a.stage, a.microbatch] for a in acts if a.is_compute] for acts in schedule.actions.values()
        ],
        "stages": schedule.stages,
        "formula": None if ratio is None else [ratio.numerator, ratio.denominator],
    }


def schedule_of(name: str, p: int, m: int, v: int) -> Schedule:
    """The schedule of one case, from the project's generators (raises their ValueError where they refuse)."""
    return make_schedule(name, p, m, virtual=v) if SCHEDULES[name].looped else make_schedule(name, p, m)


def explorer_data() -> dict[str, Any]:
    """What the page holds: the schedules, the choices and their limits (the page makes each case's order)."""
    schedules = [
        {
            "name": name,
            "title": record.title,
            "virtual": list(virtual_choices(name)),
            "formula": record.formula,
        }
        for name, record in SCHEDULES.items()
    ]
    return {
        "schema": SCHEMA,
        "schedules": schedules,
        "limits": {k: list(v) for k, v in LIMITS.items()},
        "stored": {
            "p": list(STORED["p"]),
            "m": list(STORED["m"]),
            "cases": {"|".join(map(str, case)): stored_case(*case) for case in offered()},
        },
        "costs": {k: list(v) for k, v in COSTS.items()},
        "unit": {k: UNIT_COSTS[k] for k in ("F", "B", "W")},
        "start": {"schedule": "1f1b", "p": 4, "m": 8, "v": 1, **{k: UNIT_COSTS[k] for k in ("F", "B", "W")}},
    }


def explorer_page(data: dict[str, Any] | None = None) -> str:
    """The explorer as one HTML page: its module, styles and data inline, nothing to fetch."""
    data = explorer_data() if data is None else data
    return tool_page(
        "explorer",
        "Pipeline schedules: pick one and see its bubble",
        "python -m simulator explore",
        EXPLORER,
        data,
        "window.explorer = explore(ROOT, DATA)",
        "This page draws pipeline schedules; it needs JavaScript.",
    )


def write_explorer(path: str | Path) -> Path:
    """Write the explorer page to ``path`` (whole or not at all); returns the path."""
    return write_text(explorer_page(), path)
