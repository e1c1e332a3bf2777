"""What each device did, as arrays, and thinned to what a viewer can show: exports and figures of huge runs.

``track_spans`` gives, for a whole run, every compute span (an op), send span (bytes leaving a device)
and receive span (bytes arriving) as NumPy arrays, with exactly the times of ``simulator.views.activity``
(which makes one Python object per span, fine for a classroom run and far too slow for millions).

``thin`` merges each device's spans on one track into at most ``per_device`` slices: spans that overlap
or touch always merge (a slice never overlaps the next), then the smallest gaps close until the count
fits, so every device keeps its compute and its communication visible, each slice covering exactly the
stretch from its first span's start to its last span's end and saying how many spans it holds and how
long they were busy. Everything is vectorized over all devices at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.columnar import ColumnarTrace
from ...cost.model import TwoLevel

if TYPE_CHECKING:
    from ...core.trace import Trace
    from ...cost.model import CostModel


@dataclass
class Spans:
    """One track's spans: device, start, end, which op or message (its number) each is, and its name (an op's
    name as an index into the names; -1 for messages)."""

    rank: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    item: np.ndarray
    name: np.ndarray

    def __len__(self) -> int:
        return len(self.rank)


def columns(trace: Trace, numbered: bool = True) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """A trace's messages and ops (not holds or frees) as arrays, with their numbers (``id``), and the op
    names by index.

    Works for the engine's columnar traces and for list-built ones (the torch backend's, small) alike.
    Messages: src, dst, nbytes, t_start, t_arrive (NaN: never matched); ops: rank, t_start, t_end, name
    (an index into the names). A finished columnar trace's rows come in the order recorded, viewed in
    place (no copy of every row); ``numbered=False`` skips the numbers (``id`` -1) and leaves holds and
    frees among the ops (they take no time): for sums and pictures.
    """
    if isinstance(trace, ColumnarTrace):
        if trace.finished:  # the rows in recorded order, viewed in place, with their numbers beside them
            table = trace.recorder.table("msgs", copy=False)
            m = {k: table[k] for k in ("src", "dst", "t_start", "t_arrive")}
            m["nbytes"] = trace.sig_nbytes()[table["sig"]]
            m["id"] = trace.numbers("msgs") if numbered else np.full(len(table), -1)
            ops = trace.recorder.table("ops", copy=False)
            if numbered:  # the ops proper
                rows = trace.op_rows
                o = {k: ops[k][rows] for k in ("rank", "t_start", "t_end", "name")}
                o["id"] = trace.numbers("ops")[rows]
            else:  # holds and frees too: they take no time, so add nothing to sums and pictures
                o = {k: ops[k] for k in ("rank", "t_start", "t_end", "name")}
                o["id"] = np.full(len(ops), -1)
            return m, o, list(trace.recorder.names.values)
        return trace.message_columns(), trace.op_columns(only_ops=True), list(trace.recorder.names.values)
    names: dict[str, int] = {}
    ops = list(trace.ops)
    msgs = list(trace.messages)

    def num(v: Any) -> float:
        return np.nan if v is None else v

    m = {
        "src": np.array([x.src for x in msgs], dtype=np.int64),
        "dst": np.array([x.dst for x in msgs], dtype=np.int64),
        "nbytes": np.array([x.nbytes for x in msgs], dtype=np.int64),
        "t_start": np.array([num(x.t_start) for x in msgs], dtype=np.float64),
        "t_arrive": np.array([num(x.t_arrive) for x in msgs], dtype=np.float64),
        "id": np.array([x.id for x in msgs], dtype=np.int64),
    }
    o = {
        "rank": np.array([x.rank for x in ops], dtype=np.int64),
        "t_start": np.array([x.t_start for x in ops], dtype=np.float64),
        "t_end": np.array([x.t_end for x in ops], dtype=np.float64),
        "name": np.array([names.setdefault(x.name, len(names)) for x in ops], dtype=np.int64),
        "id": np.array([x.id for x in ops], dtype=np.int64),
    }
    return m, o, list(names)


def wire_times(cost: CostModel | None, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """``cost.wire_time`` of every message at once (n / B of the link it takes)."""
    if cost is None:
        return np.zeros(len(nbytes))
    topo = cost.topology
    if isinstance(topo, TwoLevel):
        same = src // topo.node_size == dst // topo.node_size
        return np.where(same, nbytes / cost.bandwidth, nbytes / topo.inter_bandwidth)
    if type(topo).wire_time.__qualname__.split(".")[0] in ("FullyConnected", "Ring"):
        return nbytes / cost.bandwidth
    return np.array([cost.wire_time(float(n), int(s), int(d)) for s, d, n in zip(src, dst, nbytes)])


def track_spans(trace: Trace, cost: CostModel | None, numbered: bool = True) -> tuple[dict[str, Spans], list[str]]:
    """Every span of the run by track ("compute", "send", "recv"), and the op names (see the module docstring;
    ``numbered`` as in ``columns``)."""
    m, o, names = columns(trace, numbered)
    flying = ~np.isnan(m["t_arrive"])  # a rendezvous send never matched has no flight
    keys = ("src", "dst", "nbytes", "t_start", "t_arrive", "id")
    src, dst, nbytes, t0, t1, ids = (m[k] for k in keys) if flying.all() else (m[k][flying] for k in keys)
    del flying
    wire = np.where(nbytes == 0, np.nan, wire_times(cost, src, dst, nbytes)) if cost is not None else None
    unnamed = np.broadcast_to(np.int64(-1), (len(ids),))  # (messages have no op name; takes no memory)
    if wire is None:
        send = Spans(src, t0, t1, ids, unnamed)
        recv = Spans(dst, t0, t1, ids, unnamed)
    else:  # a zero-byte message occupies no link: its spans cover its flight, to stay visible
        none = np.isnan(wire)
        send = Spans(src, t0, np.where(none, t1, t0 + wire), ids, unnamed)
        recv = Spans(dst, np.where(none, t0, t1 - wire), t1, ids, unnamed)
    compute = Spans(o["rank"], o["t_start"], o["t_end"], o["id"], o["name"])
    return {"compute": compute, "send": send, "recv": recv}, names


@dataclass
class Slices:
    """Merged spans: device, start, end, how many spans, their busy seconds, the first and last item, and the
    first one's name."""

    rank: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    count: np.ndarray
    busy: np.ndarray
    first: np.ndarray
    last: np.ndarray
    name: np.ndarray

    def __len__(self) -> int:
        return len(self.rank)


def thin(spans: Spans, per_device: int) -> Slices:
    """Merge each device's spans into at most ``per_device`` slices (see the module docstring)."""
    n = len(spans)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Slices(empty, np.zeros(0), np.zeros(0), empty, np.zeros(0), empty, empty, empty)
    order = np.lexsort((spans.t1, spans.t0, spans.rank))
    rank, t0, t1, item, name = (a[order] for a in (spans.rank, spans.t0, spans.t1, spans.item, spans.name))
    new_device = np.ones(n, dtype=bool)
    new_device[1:] = rank[1:] != rank[:-1]
    # the latest end so far on the device: a running maximum, device by device (exact: no offsets)
    reach = np.empty(n)
    bounds = np.append(np.flatnonzero(new_device), n).tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        np.maximum.accumulate(t1[a:b], out=reach[a:b])
    gap = np.full(n, np.inf)
    gap[1:] = t0[1:] - reach[:-1]
    gap[new_device] = np.inf  # a device's first span always starts a slice
    cut = gap > 0
    # keep only each device's (per_device - 1) widest gaps as cuts
    candidates = np.flatnonzero(cut & ~new_device)
    if len(candidates):
        by = np.lexsort((-gap[candidates], rank[candidates]))
        ranked = candidates[by]
        group_start = np.ones(len(ranked), dtype=bool)
        group_start[1:] = rank[ranked][1:] != rank[ranked][:-1]
        first_of_group = np.maximum.accumulate(np.where(group_start, np.arange(len(ranked)), 0))
        within = np.arange(len(ranked)) - first_of_group
        cut[ranked[within >= per_device - 1]] = False
    starts = np.flatnonzero(cut)
    ends = np.append(starts[1:], n) - 1
    return Slices(
        rank=rank[starts],
        t0=t0[starts],
        t1=np.maximum.reduceat(t1, starts),
        count=np.diff(np.append(starts, n)),
        busy=np.add.reduceat(t1 - t0, starts),
        first=item[starts],
        last=item[ends],
        name=name[starts],
    )
