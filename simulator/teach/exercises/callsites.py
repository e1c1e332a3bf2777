"""The student's own lines: which line of their program made each device call, so a hint can point at it.

While a grade runs a program, ``CallSites`` (a profile hook, for that run only) notes every device call made
from the student's code (a notebook cell or their own file, not the library): the device, the method
(``compute``, ``send``, ``all_reduce``, ...), its name or destination, and the line. ``line_of(record,
trace)`` then finds the line that made an op, a held value or a message of the run.
"""

from __future__ import annotations

import linecache
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from ...checker.causal import op_kind
from ...collectives.methods import NAMES as COLLECTIVES
from ...core.device import Device
from ...core.trace import Message, Op, Trace

_METHODS = frozenset({"compute", "hold", "send", "isend", "recv", "irecv", *COLLECTIVES})


@dataclass(frozen=True)
class Call:
    """One device call from the student's code."""

    rank: int
    method: str
    name: str | None
    peer: int | None  # a send's dst, a recv's src
    lineno: int
    line: str

    def words(self) -> str:
        return f"your line {self.lineno}: `{self.line}`" if self.line else f"your line {self.lineno}"


class CallSites:
    """A context manager that records the student's device calls while a program runs (see the module docstring)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._previous: Any = None

    def __enter__(self) -> CallSites:
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(self._previous)

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name not in _METHODS:
            return
        caller = frame.f_back
        if caller is None or not students(caller.f_code.co_filename):
            return
        dev = frame.f_locals.get("self")
        if not isinstance(dev, Device):
            return
        local = frame.f_locals
        peer = local.get("dst", local.get("src"))
        name = local.get("name")
        text = linecache.getline(caller.f_code.co_filename, caller.f_lineno).strip()
        self.calls.append(
            Call(
                dev.rank,
                frame.f_code.co_name,
                name if isinstance(name, str) else None,
                peer if isinstance(peer, int) else None,
                caller.f_lineno,
                text,
            )
        )

    def line_of(self, record: Any, trace: Trace | None) -> Call | None:
        """The call that made ``record`` (an op, a held value or a message), if the student's code made it."""
        if isinstance(record, Op):
            kind = op_kind(record.label)
            if kind is not None:
                return self._first(record.rank, kind)
            for c in self.calls:
                if c.rank == record.rank and c.method in ("compute", "hold") and c.name == record.name:
                    return c
            return None
        if isinstance(record, Message):
            kind = op_kind(record.label)
            if kind is not None:
                return self._first(record.src, kind)
            nth = 0
            if trace is not None:  # the k-th message on this route is the k-th send to that device
                nth = sum(
                    1
                    for m in trace.messages
                    if m.src == record.src and m.dst == record.dst and m.id < record.id and op_kind(m.label) is None
                )
            sends = [
                c for c in self.calls if c.rank == record.src and c.method in ("send", "isend") and c.peer == record.dst
            ]
            return sends[nth] if nth < len(sends) else (sends[-1] if sends else None)
        return None

    def _first(self, rank: int, method: str) -> Call | None:
        return next((c for c in self.calls if c.rank == rank and c.method == method), None)


def students(filename: str) -> bool:
    """Whether code in this file is the student's: a notebook cell or a file of their own, not a library."""
    path = filename.replace("\\", "/")
    if path.startswith("<"):
        return path.startswith(("<ipython-input", "<cell", "<string>", "<stdin>"))
    ours = "/simulator/" in path
    installed = any(path.startswith(p) for p in {sys.prefix, sys.base_prefix}) and "ipykernel" not in path
    return not ours and not installed


def error_line(exc: BaseException) -> str:
    """The line of the student's code where an error was raised, in words, if it is theirs."""
    cause = exc.__cause__ or exc  # a RankError carries the program's own exception as its cause
    frames = [f for f in traceback.extract_tb(cause.__traceback__) if students(f.filename) and f.line]
    if not frames:
        return ""
    f = frames[-1]
    return f"your line {f.lineno}: `{f.line.strip()}`"
