"""A communication summary of a run, in the spirit of PyTorch's CommDebugMode.

From a trace it counts collective calls by kind (each device's call counts once, as CommDebugMode
counts them per rank), and messages and bytes sent and received per device. Collective messages
are recognised by their label (``"all_reduce#3 ring step 2 chunk 5"``, see simulator/collectives.py);
other messages count as point-to-point ("p2p"), or by the first word of their label ("distribute").

    summary = comm_summary(result.trace)
    summary.collectives     {"all_reduce": 4, ...}  calls, summed over devices
    summary.sent_bytes[r]   bytes device r sent
    print(summary)          a table
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .trace import Trace
from .units import inline


def message_kind(label: str | None) -> str:
    """The collective (or other activity) a message belongs to, from its label."""
    if not label:
        return "p2p"
    head = label.split(" ", 1)[0]
    return head.split("#", 1)[0]


@dataclass
class CommSummary:
    """Collective calls by kind, and per-device message and byte counts."""

    world_size: int
    collectives: Counter = field(default_factory=Counter)  # kind -> calls (summed over devices)
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
        lines = ["collective calls (summed over devices):"]
        if self.collectives:
            lines += [f"  {kind:<16} {n:>8}" for kind, n in sorted(self.collectives.items())]
        else:
            lines.append("  none")
        lines.append("bytes sent, by kind:")
        lines += [f"  {kind:<16} {_bytes(n):>12}" for kind, n in sorted(self.bytes_by_kind.items())]
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
    """Summarise every message of ``trace`` (see module docstring)."""
    n = trace.world_size
    s = CommSummary(n, sent_messages=[0] * n, sent_bytes=[0] * n, recv_messages=[0] * n, recv_bytes=[0] * n)
    seen: set[tuple[int, str, object]] = set()  # (rank, call label, tag): one collective call on one device
    for m in trace.messages:
        kind = message_kind(m.label)
        s.sent_messages[m.src] += 1
        s.sent_bytes[m.src] += m.nbytes
        s.recv_messages[m.dst] += 1
        s.recv_bytes[m.dst] += m.nbytes
        s.bytes_by_kind[kind] += m.nbytes
        if m.label and "#" in m.label.split(" ", 1)[0]:
            call = m.label.split(" ", 1)[0]
            for rank in (m.src, m.dst):
                key = (rank, call, m.tag)
                if key not in seen:
                    seen.add(key)
                    s.collectives[kind] += 1
                    s.calls.setdefault(rank, Counter())[kind] += 1
    return s


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def message_table(trace: Trace, kind: str | None = None, limit: int | None = None) -> str:
    """One line per message (optionally only one kind, e.g. "all_reduce"), in the order they were sent:
    label, source -> destination, what it carries (the receiver's name for it) and the payload."""
    lines = []
    for m in trace.messages:
        if kind is not None and message_kind(m.label) != kind:
            continue
        what = f"{m.name}" + (f" {_index(m.index)}" if m.index is not None else "") if m.name else ""
        value = "" if m.payload is None else _payload(m.payload)
        lines.append(f"{m.label or 'p2p':<34} {m.src:>3} -> {m.dst:<3} {what:<28} {value}".rstrip())
        if limit is not None and len(lines) >= limit:
            lines.append("...")
            break
    return "\n".join(lines)


def _index(index: object) -> str:
    if isinstance(index, tuple):
        return (
            "["
            + ", ".join(
                f"{s.start or ''}:{'' if s.stop is None else s.stop}" if isinstance(s, slice) else repr(s)
                for s in index
            )
            + "]"
        )
    return repr(index)


def _payload(x) -> str:
    import numpy as np

    a = np.asarray(x)
    return inline(a, precision=4) if a.size <= 8 else f"array{a.shape}"
