"""A communication summary of a run, in the spirit of PyTorch's CommDebugMode.

From a trace it counts collectives by kind (one all-reduce over four devices is one collective, as a
reader counts it; ``calls[rank]`` says how many each device took part in, as CommDebugMode counts per
rank), and messages and bytes sent and received per device. Collective messages
are recognised by their label (``"all_reduce#3 ring step 2 chunk 5"``, see simulator/collectives/call.py);
other messages count as point-to-point ("p2p"), or by the first word of their label ("distribute").

    summary = comm_summary(result.trace)
    summary.collectives     {"all_reduce": 1, ...}  collectives run (each once, however many devices took part)
    summary.calls[r]        {"all_reduce": 1, ...}  the collectives device r took part in
    summary.sent_bytes[r]   bytes device r sent
    print(summary)          a table
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ..core.trace import Trace
from ..core.values import part_text
from ..cost.units import inline

_PIPELINE = re.compile(r"^\d+(SEND|RECV)_[FB]\d+$")  # a pipeline schedule's action, "0SEND_F1"


def message_kind(label: str | None) -> str:
    """The collective (or other activity) a message belongs to, from its label: ``all_reduce``,
    ``pipeline`` (a schedule's sends), ``bucket all_reduce`` (data parallelism's gradient buckets), ..."""
    if not label:
        return "p2p"
    if label.startswith("bucket("):
        return "bucket all_reduce"
    if _PIPELINE.match(label):
        return "pipeline"
    head = label.split(" ", 1)[0]
    return head.split("#", 1)[0]


def _call(label: str | None) -> str | None:
    """The one collective call a message belongs to (``all_reduce#3``, ``bucket(dW2,db2)@tp0``), or None."""
    if not label:
        return None
    if label.startswith("bucket("):
        return label.split(" step ", 1)[0]
    head = label.split(" ", 1)[0]
    return head if "#" in head else None


@dataclass
class CommSummary:
    """Collective calls by kind, and per-device message and byte counts."""

    world_size: int
    collectives: Counter = field(default_factory=Counter)  # kind -> collectives run (one per call of the group)
    calls: dict[int, Counter] = field(default_factory=dict)  # rank -> kind -> calls
    sent_messages: list[int] = field(default_factory=list)
    sent_bytes: list[int] = field(default_factory=list)
    recv_messages: list[int] = field(default_factory=list)
    recv_bytes: list[int] = field(default_factory=list)
    bytes_by_kind: Counter = field(default_factory=Counter)  # kind -> bytes sent (all devices)

    @property
    def total_bytes(self) -> int:
        return sum(self.sent_bytes)

    @property
    def total_messages(self) -> int:
        return sum(self.sent_messages)

    def __str__(self) -> str:
        lines = ["collectives (each counted once, with the devices that took part):"]
        if self.collectives:
            for kind, n in sorted(self.collectives.items()):
                members = sum(1 for c in self.calls.values() if c.get(kind))
                lines.append(f"  {kind:<18} {n:>6}   on {members} device{'s' if members != 1 else ''}")
        else:
            lines.append("  none")
        lines.append("bytes sent, by kind:")
        lines += [f"  {kind:<18} {_bytes(n):>12}" for kind, n in sorted(self.bytes_by_kind.items())]
        lines.append(f"{'device':>6} {'sent msgs':>10} {'sent bytes':>12} {'recv msgs':>10} {'recv bytes':>12}")
        for r in range(self.world_size):
            lines.append(
                f"{r:>6} {self.sent_messages[r]:>10} {_bytes(self.sent_bytes[r]):>12} "
                f"{self.recv_messages[r]:>10} {_bytes(self.recv_bytes[r]):>12}"
            )
        lines.append(f"{'total':>6} {self.total_messages:>10} {_bytes(self.total_bytes):>12}")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def comm_summary(trace: Trace) -> CommSummary:
    """Summarise every message of ``trace`` (see module docstring).

    Args:
        trace: a run's trace.

    Examples:
        >>> import numpy as np
        >>> from simulator import World, comm_summary
        >>> print(comm_summary(World(2).run(lambda dev: dev.all_reduce(np.ones(4))).trace))
        collectives (each counted once, with the devices that took part):
          all_reduce              1   on 2 devices
        bytes sent, by kind:
          all_reduce                 64 B
        device  sent msgs   sent bytes  recv msgs   recv bytes
             0          2         32 B          2         32 B
             1          2         32 B          2         32 B
         total          4         64 B
    """
    n = trace.world_size
    s = CommSummary(n, sent_messages=[0] * n, sent_bytes=[0] * n, recv_messages=[0] * n, recv_bytes=[0] * n)
    seen: set[tuple[int, str, object]] = set()  # (rank, call label, tag): one device's part in one collective
    runs: set[tuple[str, object]] = set()  # (call label, tag): one collective, whichever devices took part
    for m in trace.messages:
        kind = message_kind(m.label)
        s.sent_messages[m.src] += 1
        s.sent_bytes[m.src] += m.nbytes
        s.recv_messages[m.dst] += 1
        s.recv_bytes[m.dst] += m.nbytes
        s.bytes_by_kind[kind] += m.nbytes
        call = _call(m.label)
        if call is not None:
            if (call, m.tag) not in runs:
                runs.add((call, m.tag))
                s.collectives[kind] += 1
            for rank in (m.src, m.dst):
                key = (rank, call, m.tag)
                if key not in seen:
                    seen.add(key)
                    s.calls.setdefault(rank, Counter())[kind] += 1
    return s


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def message_table(trace: Trace, kind: str | None = None, limit: int | None = None, width: int = 110) -> str:
    """One line per message (optionally only one kind, e.g. "all_reduce"), in the order they were sent:
    label, source -> destination, what it carries (the receiver's name for it) and the payload. A payload
    that would take the line past ``width`` goes on the line below, under what it is."""
    rows = []
    for m in trace.messages:
        if kind is not None and message_kind(m.label) != kind:
            continue
        what = f"{m.name}" + (f" {part_text(m.index)}" if m.index is not None else "") if m.name else ""
        rows.append(
            (m.label or "p2p", f"{m.src:>3} -> {m.dst:<3}", what, "" if m.payload is None else _payload(m.payload))
        )
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        return ""
    wide = [max(len(row[k]) for row in rows) for k in (0, 2)]
    lines = []
    for label, route, what, value in rows:
        line = f"{label:<{wide[0]}} {route} {what:<{wide[1]}}"
        if len(line) + 1 + len(value) > width:
            lines += [line.rstrip(), " " * (len(line) - wide[1]) + value]
        else:
            lines.append(f"{line} {value}".rstrip())
    if limit is not None and len(rows) >= limit:
        lines.append("...")
    return "\n".join(lines)


def _payload(x) -> str:
    import numpy as np

    a = np.asarray(x)
    return inline(a, precision=4) if a.size <= 8 else f"array{a.shape}"
