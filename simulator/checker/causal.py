"""Which place in a run comes first by cause, not by clock: the order the checker names "the first divergence" in.

A simulated trace is in simulated-time order; a real run's trace (``simulator.real.recording``) is in
measured-time order, and on real processes two events with no cause between them (device 0's all-reduce
call, device 1 holding a wrong shard) come in whatever order the machine ran them. So the checker orders
the places it finds by what each event depended on:

- a device's events follow each other (program order);
- a receive follows its send;
- a collective's result follows every member's call (simulated: through its messages; native, on real
  ranks: one op per member, labelled ``all_reduce#3 native on 0,1``, joined here).

Each event gets a causal depth (a Lamport clock), one more than the deepest event it depends on, as a pair
(steps, inner): a step of the program itself (an op, a held value, a message of its own, a collective's named
result) adds one step; an event inside a collective (its labelled messages and reductions, or a native
collective's unnamed op) adds one to ``inner`` only. So what follows a collective is as many steps deep
whether the collective ran message by message or natively, and a cause still comes before what it caused
inside a collective. A place is ordered by (steps, inner, device, position on the device): a cause always
comes before what it caused, and two places with no cause between them come in the same order on every
backend. (Two places equally deep on different devices are told apart by the device, lowest first: neither
caused the other.)
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from ..core.trace import Trace
from .comm_summary import message_kind

# collectives whose events are steps inside one call (simulator/collectives labels, buckets, native calls)
COLLECTIVE_KINDS = frozenset(
    {
        "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "scatter", "gather", "all_to_all",
        "barrier", "bucket all_reduce",
    }
)  # fmt: skip
_NATIVE = re.compile(r"^(\w+)#(\d+) native on ([\d,]+)$")


def op_kind(label: str | None) -> str | None:
    """The collective a message's or op's label belongs to (``all_reduce#0 ring step 1 chunk 0``,
    ``bucket(dW1,db1) ...``), or None: a label of the program's own ("my ring"), even one that names a
    collective, has no call number after a ``#``."""
    if not label:
        return None
    kind = message_kind(label)
    numbered = label.startswith("bucket(") or "#" in label.split(" ", 1)[0]
    return kind if numbered and kind in COLLECTIVE_KINDS else None


def disguised_call(label: str | None) -> str:
    """What the split calls a message that carries a collective's tag (from ``TAG_BASE``, which no program's send may
    use) under a label that names no collective (the library's ring called through its internals under a name of the
    program's own): still a collective's message."""
    call = (label or "").split(" step ", 1)[0]
    return f"a collective under the label {call!r}" if call else "a collective without a label"


def native_call(label: str | None) -> tuple[str, int, tuple[int, ...]] | None:
    """(kind, number, members) of a native collective's op (``all_reduce#0 native on 0,1``), or None."""
    m = _NATIVE.match(label or "")
    if m is None:
        return None
    return m.group(1), int(m.group(2)), tuple(int(r) for r in m.group(3).split(","))


class CausalOrder:
    """Each event's causal key (steps, inner, device, position on it); ``key(i)`` for event i of the trace."""

    def __init__(self, trace: Trace) -> None:
        self.keys: list[tuple[int, int, int, int]] = [(0, 0, 0, 0)] * len(trace.events)
        self.last: list[tuple[int, int, int, int]] = [(0, 0, r, -1) for r in range(trace.world_size)]
        self._order(trace)

    def key(self, i: int) -> tuple[int, int, int, int]:
        return self.keys[i]

    def after_last(self, rank: int) -> tuple[int, int, int, int]:
        """The key of what a device returns: one step after its last event."""
        steps, _, _, pos = self.last[rank]
        return (steps + 1, 0, rank, pos + 1)

    def _order(self, trace: Trace) -> None:
        kinds, ranks, msgs, labels, names = _event_lists(trace)
        n = trace.world_size
        per_rank: list[list[int]] = [[] for _ in range(n)]
        for i, r in enumerate(ranks):
            per_rank[r].append(i)
        inside = {label: op_kind(label) is not None for label in set(labels)}
        native = {label: native_call(label) for label in inside}
        depth = [(0, 0)] * n  # each device's depth so far
        at = [0] * n  # each device's next event (position in per_rank)
        sent: dict[int, tuple[int, int]] = {}  # message -> the depth of its send
        calls: dict[tuple, dict[int, tuple[int, int]]] = {}  # native call -> member -> its depth when it called
        waiting: dict[Any, list[int]] = {}  # what a blocked device waits for -> devices
        ready = deque(range(n))
        while ready:
            r = ready.popleft()
            while at[r] < len(per_rank[r]):
                i = per_rank[r][at[r]]
                kind, label = kinds[i], labels[i]
                before = depth[r]
                step = True
                if kind == RECV:
                    got = sent.get(msgs[i])
                    if got is None:  # its send is further on in another device's program: wait for it
                        waiting.setdefault(("msg", msgs[i]), []).append(r)
                        break
                    before = max(before, got)
                    step = not inside[label]
                elif kind == SEND:
                    step = not inside[label]
                else:
                    call = native[label]
                    if call is not None:
                        members = calls.setdefault(call, {})
                        members.setdefault(r, before)
                        if len(members) < len(call[2]):  # every member must have called
                            waiting.setdefault(("call", call), []).append(r)
                            break
                        before = max(members.values())
                        step = not (names[i].endswith("(native)") or names[i] == call[0])  # named: the result
                        for m in waiting.pop(("call", call), ()):
                            ready.append(m)
                    elif inside[label]:
                        step = False
                d = (before[0] + 1, 0) if step else (before[0], before[1] + 1)
                depth[r] = d
                self.keys[i] = self.last[r] = (*d, r, at[r])
                at[r] += 1
                if kind == SEND:
                    sent[msgs[i]] = d
                    for m in waiting.pop(("msg", msgs[i]), ()):
                        ready.append(m)
        # a trace whose dependencies never resolve (a receive with no send recorded) keeps its order for the rest
        for r in range(n):
            for pos in range(at[r], len(per_rank[r])):
                i = per_rank[r][pos]
                self.keys[i] = self.last[r] = (depth[r][0] + 1 + i, 0, r, pos)


SEND, RECV, OP = 0, 1, 2


def _event_lists(trace: Trace) -> tuple[list[int], list[int], list[int], list[str | None], list[str | None]]:
    """Per event: its kind (SEND, RECV, OP), device, message (a send and its receive share it), label (a
    collective's call, without step and chunk) and op name. A columnar trace gives them from its columns,
    making no record (the walk over a large run stays as cheap as the run)."""
    columns = getattr(trace, "event_columns", None)
    if columns is not None:
        cols = columns()
        rec = trace.recorder
        label_of, name_of = rec.labels.values, rec.names.values
        kinds = cols["kind"].tolist()  # CODE_SEND, CODE_RECV, CODE_OP are SEND, RECV, OP
        labels = [None if x < 0 else label_of[x] for x in cols["label"].tolist()]
        names = [None if x < 0 else name_of[x] for x in cols["name"].tolist()]
        return kinds, cols["rank"].tolist(), cols["row"].tolist(), labels, names
    kinds, ranks, msgs, labels, names = [], [], [], [], []
    for kind, rec in trace.events:
        kinds.append(SEND if kind == "send" else RECV if kind == "recv" else OP)
        ranks.append(_rank(kind, rec))
        msgs.append(rec.id if kind in ("send", "recv") else -1)
        labels.append(getattr(rec, "label", None))
        names.append(getattr(rec, "name", None))
    return kinds, ranks, msgs, labels, names


def _rank(kind: str, rec: Any) -> int:
    if kind == "send":
        return rec.src
    if kind == "recv":
        return rec.dst
    return rec.rank
