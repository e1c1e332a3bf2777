"""Memory held by each device over time, as arrays: ``simulator.views.memory``'s rules, vectorized for huge runs.

The rules are ``simulator.views.memory``'s (a hold, or an op whose output is kept, stores bytes under a name
at its start; a named receive stores the message's bytes; storing under a name replaces what it held;
a free drops it). ``memory_timeline`` replays them event by event, making a record per event; this
works on the trace's columns in a few sorts: each change's size less what its name held before, then
a running sum per device. ``memory_steps(trace)`` gives every change; ``peaks`` each device's peak.
"""

from __future__ import annotations

import numpy as np

from ..core.columnar import ColumnarTrace
from ..core.ordering import CODE_OP, CODE_RECV
from ..core.rows import FREE, HOLD, OP_KEPT
from ..core.trace import Trace
from .memory import memory_timeline


def memory_steps(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every change of a device's memory: (device, time, bytes held from then on), by device, then in event
    order; several changes at one instant count as one (the last)."""
    if not isinstance(trace, ColumnarTrace):
        mem = memory_timeline(trace)
        ranks = np.concatenate([np.full(len(t), r) for r, t in enumerate(mem.times)]) if mem.times else np.zeros(0)
        return ranks.astype(np.int64), np.concatenate(mem.times or [[]]), np.concatenate(mem.held or [[]])
    codes = trace.event_codes
    kinds, rows = codes & 3, codes >> 2
    ops = trace.recorder.table("ops", copy=not trace.finished)
    at = np.flatnonzero(kinds == CODE_OP)
    op = ops[rows[at]]
    changes = (op["kind"] == HOLD) | (op["kind"] == FREE) | ((op["kind"] == OP_KEPT) & (op["nbytes"] > 0))
    at, op = at[changes], op[changes]
    position, rank, t = at, op["rank"].astype(np.int64), op["t_start"]
    key, size = op["name"].astype(np.int64), np.where(op["kind"] == FREE, 0, op["nbytes"])
    named = trace.recorder.msg_extra
    if named:  # receives that name what they carry (a few: the checker's runs)
        recv = np.flatnonzero(kinds == CODE_RECV)
        views = [(i, trace.message_at_row(int(r))) for i, r in zip(recv.tolist(), rows[recv].tolist())]
        views = [(i, m) for i, m in views if m.name is not None]
        if views:
            ids = trace.recorder.names.ids  # the same name as an op's or a free's is the same value
            keys = {name: ids.get(name, len(ids) + k) for k, name in enumerate(sorted({m.name for _, m in views}))}
            position = np.concatenate([position, [i for i, _ in views]])
            rank = np.concatenate([rank, [m.dst for _, m in views]])
            t = np.concatenate([t, [m.t_recv for _, m in views]])
            key = np.concatenate([key, [keys[m.name] for _, m in views]])
            size = np.concatenate([size, [m.nbytes for _, m in views]])
    if not len(position):
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    # what each change adds: its size less what its name held before it on that device
    by_name = np.lexsort((position, key, rank))
    size_sorted = size[by_name]
    before = np.zeros(len(size_sorted), dtype=np.int64)
    same = (rank[by_name][1:] == rank[by_name][:-1]) & (key[by_name][1:] == key[by_name][:-1])
    before[1:] = np.where(same, size_sorted[:-1], 0)
    delta = np.empty(len(size), dtype=np.int64)
    delta[by_name] = size_sorted - before
    # a running sum per device, in event order
    order = np.lexsort((position, rank))
    rank, t, delta = rank[order], t[order], delta[order]
    held = np.cumsum(delta)
    first = np.ones(len(rank), dtype=bool)
    first[1:] = rank[1:] != rank[:-1]
    base = np.maximum.accumulate(np.where(first, np.arange(len(rank)), 0))
    held = held - (held[base] - delta[base])
    # several changes at one instant: only the last counts (as in ``memory_timeline``)
    last = np.ones(len(rank), dtype=bool)
    last[:-1] = (rank[1:] != rank[:-1]) | (t[1:] != t[:-1])
    return rank[last], t[last], held[last]


def peaks(trace: Trace) -> np.ndarray:
    """Each device's peak memory in bytes (0 where it never held anything)."""
    rank, _, held = memory_steps(trace)
    out = np.zeros(trace.world_size, dtype=np.int64)
    np.maximum.at(out, rank, held)
    return out
