"""Chrome Trace export of runs too large to show event by event: each device's tracks thinned to fit.

A run with millions of messages makes millions of slices, more than Perfetto or chrome://tracing can
open. Here each device keeps its three tracks (compute, send, recv), each thinned to at most ``k``
slices (``simulator.views.plot.thin``: spans that touch always merge, then the shortest gaps close), with k
chosen so the whole file fits the event budget; each slice says how many ops or messages it holds and
how long they kept the device busy. Memory counters keep, per device, the highest value in each of a
few hundred time bins. Message arrows are left out (a merged slice has no one peer). All of it works
on the trace's columns and yields events one by one, so the export streams to the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..memory_columns import memory_steps
from .thin import thin, track_spans

if TYPE_CHECKING:
    from ...core.trace import Trace
    from ...cost.model import CostModel

US = 1e6
TRACKS = (("compute", 0, "compute"), ("send", 1, "comm"), ("recv", 2, "comm"))  # track, tid, category
MEMORY_SHARE = 4  # at most a quarter of the budget goes to memory counters


def thinned_events(
    trace: Trace, cost: CostModel | None, budget: int, full: int, memory: bool
) -> tuple[Iterator[dict[str, Any]], str]:
    """The run's events, thinned to about ``budget`` (see the module docstring), and the note saying so."""
    p = trace.world_size
    spans, names = track_spans(trace, cost)
    fixed = 8 * p + 1  # process and track names, and the instant that says the export is collapsed
    counters = _memory_counters(trace, max(0, budget // MEMORY_SHARE)) if memory else None
    room = budget - fixed - (len(counters[0]) if counters is not None else 0)
    k = max(1, room // (3 * p))
    ops, msgs = len(spans["compute"]), len(spans["send"])
    slices = {track: thin(spans.pop(track), k) for track, _, _ in TRACKS}  # (each track's arrays freed in turn)
    count = sum(len(s) for s in slices.values())
    note = (
        f"collapsed: the run has about {full:,} trace events, more than the {budget:,} this export allows "
        f"(viewers struggle above about a million), so each device's compute, send and recv tracks are merged "
        f"into at most {k:,} slices each (spans that touch always, then across the shortest gaps); "
        f"{ops:,} ops and {msgs:,} messages are shown as {count:,} slices, each saying how many it holds and how "
        "long they kept the device busy; message arrows are left out"
        + ("; memory counters keep the highest value in each time bin" if counters is not None else "")
    )
    return _stream(p, slices, names, counters), note


def _stream(p: int, slices: dict, names: list[str], counters) -> Iterator[dict[str, Any] | str]:
    """Metadata as dicts; slices and counters as JSON text already (formatted here, a million events take a
    second or two, where ``json.dumps`` of each would take several)."""
    quoted: dict[str, str] = {}  # name -> its JSON string (names are few, slices many)

    def q(name: str) -> str:
        text = quoted.get(name)
        if text is None:
            text = quoted[name] = json.dumps(name)
        return text

    for r in range(p):
        yield {"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"device {r}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}}
        for track, tid, _ in TRACKS:
            yield {"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": track}}
            yield {"ph": "M", "name": "thread_sort_index", "pid": r, "tid": tid, "args": {"sort_index": tid}}
    yield {"ph": "i", "s": "g", "name": "per-chunk events collapsed (see otherData)", "ts": 0, "pid": 0, "tid": 0}
    for track, tid, cat in TRACKS:
        s = slices[track]
        for r, t0, t1, n, busy, first, last, named in zip(
            s.rank.tolist(), s.t0.tolist(), s.t1.tolist(), s.count.tolist(), s.busy.tolist(),
            s.first.tolist(), s.last.tolist(), s.name.tolist(),
        ):  # fmt: skip
            ts = t0 * US
            if track == "compute":
                name = q(names[named]) if n == 1 else q(f"{n} ops ({names[named]} ..)")
                args = f'"ops":{n},"first_op":{first},"last_op":{last}'
            else:
                name = f'"message {first}"' if n == 1 else f'"{n} messages"'
                args = f'"messages":{n},"first_message":{first},"last_message":{last}'
            yield (
                f'{{"ph":"X","name":{name},"cat":"{cat}","ts":{ts!r},"dur":{t1 * US - ts!r},"pid":{r},'
                f'"tid":{tid},"args":{{{args},"busy_us":{busy * US!r}}}}}'
            )
    if counters is not None:
        for r, t, held in zip(*(a.tolist() for a in counters)):
            yield f'{{"ph":"C","name":"memory","pid":{r},"tid":0,"ts":{t * US!r},"args":{{"bytes":{held}}}}}'


def _memory_counters(trace: Trace, budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each device's memory steps; with too many, the highest in each of ``budget / devices`` time bins."""
    rank, t, held = memory_steps(trace)
    if len(rank) <= budget:
        return rank, t, held
    bins = budget // max(trace.world_size, 1)
    if bins < 1:
        return None
    end = max(float(t.max()), 1e-30)
    b = np.minimum((t / end * bins).astype(np.int64), bins - 1)
    order = np.lexsort((held, b, rank))  # within each (device, bin), the highest last
    keep = np.ones(len(order), dtype=bool)
    keep[:-1] = (rank[order][1:] != rank[order][:-1]) | (b[order][1:] != b[order][:-1])
    chosen = np.sort(order[keep])
    return rank[chosen], t[chosen], held[chosen]
