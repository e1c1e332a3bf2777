"""The schedule explorer: one self-contained page where a student picks a pipeline schedule, p, m, v and the
costs of F, B and W, and sees its timeline, its bubble (measured, and the closed form) and the activations
each device keeps at most.

The orders are the project's own (``simulator.parallel.schedules.SCHEDULES``, the ones checked against
torch's classes): every case the page offers (p from 2 to 8, m from 1 to 16, v from 1 to 4 where the
schedule loops) is generated here and stored in the page, three characters an action (kind, stage and
microbatch in base 36), with the generator's own words where it refuses a case. The page runs the order on
the idealised machine of ``schedules.execute`` (its port in ``explorer.js``; the browser tests hold the two
to each other for every case and cost offered)::

    python -m simulator explore -o schedules.html
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from ...parallel.schedules import SCHEDULES, UNIT_COSTS, Schedule, bubble_ratio, make_schedule
from .assets import EXPLORER, asset, module
from .page import CSP, write_text

SCHEMA = "parallelism-simulator/views/web/explorer/1"
RANKS = range(2, 9)
MICROBATCHES = range(1, 17)
VIRTUAL = range(1, 5)
COSTS = {"F": (1.0, 2.0), "B": (1.0, 2.0, 3.0, 4.0), "W": (0.5, 1.0, 1.5, 2.0)}  # time units; I = B - W
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def virtual_choices(name: str) -> tuple[int, ...]:
    """The stages per rank the page offers for a schedule."""
    record = SCHEDULES[name]
    return tuple(VIRTUAL) if record.looped else (record.stages_per_rank,)


def offered() -> list[tuple[str, int, int, int]]:
    """Every (schedule, p, m, v) the page offers, whether or not the schedule accepts it."""
    return [(name, p, m, v) for name in SCHEDULES for v in virtual_choices(name) for p in RANKS for m in MICROBATCHES]


def schedule_of(name: str, p: int, m: int, v: int) -> Schedule:
    """The schedule of one case, from the project's generators (raises their ValueError where they refuse)."""
    return make_schedule(name, p, m, virtual=v) if SCHEDULES[name].looped else make_schedule(name, p, m)


def case_key(name: str, p: int, m: int, v: int) -> str:
    return f"{name}|{p}|{m}|{v}"


def encode(schedule: Schedule) -> list[str]:
    """Each rank's compute actions, three characters each: kind, stage and microbatch in base 36."""
    return [
        "".join(f"{a.kind}{DIGITS[a.stage]}{DIGITS[a.microbatch]}" for a in acts if a.is_compute)
        for acts in schedule.actions.values()
    ]


def explorer_data() -> dict[str, Any]:
    """What the page holds: the schedules, the choices, and every case's order (or why there is none)."""
    cases: dict[str, Any] = {}
    for name, p, m, v in offered():
        try:
            schedule = schedule_of(name, p, m, v)
        except ValueError as exc:
            cases[case_key(name, p, m, v)] = {"error": str(exc)}
            continue
        ratio = bubble_ratio(name, p, m, v)
        cases[case_key(name, p, m, v)] = {
            "ranks": encode(schedule),
            "stages": schedule.stages,
            "placement": list(schedule.placement),
            "formula": None if ratio is None else [ratio.numerator, ratio.denominator],
        }
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
        "ranks": list(RANKS),
        "microbatches": list(MICROBATCHES),
        "costs": {k: list(v) for k, v in COSTS.items()},
        "unit": {k: UNIT_COSTS[k] for k in ("F", "B", "W")},
        "start": {"schedule": "1f1b", "p": 4, "m": 8, "v": 1, **{k: UNIT_COSTS[k] for k in ("F", "B", "W")}},
        "cases": cases,
    }


def explorer_page(data: dict[str, Any] | None = None) -> str:
    """The explorer as one HTML page: its module, styles and data inline, nothing to fetch."""
    data = explorer_data() if data is None else data
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="parallelism-simulator (python -m simulator explore)">
<link rel="icon" href="data:,">
<title>{html.escape("Pipeline schedules: pick one and see its bubble")}</title>
<style>
body {{ margin: 0; background: #fff; }}
{asset("explorer.css")}
</style>
</head>
<body>
<div id="explorer"></div>
<noscript>This page draws pipeline schedules; it needs JavaScript.</noscript>
<script type="application/json" id="explorer-data">{text}</script>
<script type="module">
{module(EXPLORER)}
window.explorer = explore(document.getElementById("explorer"), JSON.parse(document.getElementById("explorer-data").textContent));
</script>
</body>
</html>
"""


def write_explorer(path: str | Path) -> Path:
    """Write the explorer page to ``path`` (whole or not at all); returns the path."""
    return write_text(explorer_page(), path)
