"""The engine's trace: rows in columns, and ``Message``/``Op`` objects made from them on access.

A ``ColumnarTrace`` holds what the engine recorded (``simulator.core.columns.Recorder``: packed rows in the
order written) and the canonical numbering that ``simulator.core.ordering.settle`` gave them: each event's
code in canonical order, and maps between a row and its message or op number. It has the API of a
``Trace``: ``events`` (a sequence of ``(kind, record)``), ``messages`` and ``ops`` (sequences indexed
by number), and records with every attribute a ``Message`` or ``Op`` has. The records are views,
made when asked for and kept only while someone holds them (the same row gives the same object
meanwhile, so ``is`` works); they are instances of ``Message`` and ``Op``.

Code that reads whole runs (exports, figures, summaries) should not make a view per row:
``message_columns()`` and ``op_columns()`` give NumPy arrays in number order.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .columns import MSG, MSG_DTYPE, OP, OP_DROPPED, OP_DTYPE, OP_EVENT, Growable, Recorder
from .ordering import CODE_OP, CODE_RECV, CODE_SEND
from .tags import TAG_BASE, CollectiveTag
from .trace import Message, Op, Trace

KIND_OF_CODE = {CODE_SEND: "send", CODE_RECV: "recv"}


class ColumnarTrace(Trace):
    """A trace whose records live in columns (see the module docstring); built by the engine."""

    def __init__(self, world_size: int, payloads: bool, recorder: Recorder, wide_codes: bool = False) -> None:
        self.world_size = world_size
        self.payloads = payloads
        self.outputs: list[Any] | None = None
        self.groups: set[tuple[int, ...]] = set()
        self._rec = recorder
        self._codes = Growable(np.int64 if wide_codes else np.int32)  # canonical order: row << 2 | kind
        self._msg_row = Growable(np.int32)  # number -> row (and back, made when asked: see numbers)
        self._op_row = Growable(np.int32)
        self._numbers: dict[str, tuple[np.ndarray, int]] = {}  # "msgs"/"ops" -> (row -> number, how many numbered)
        self._op_list = Growable(np.int32)  # rows of the ops proper (not holds and frees), in number order
        self._t_recv = Growable(np.float64)  # message row -> when received (NaN: not yet)
        self._pending: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # held back by a settle
        self._seen_msgs = 0  # rows whose events have been taken from the log
        self._seen_ops = 0
        self._views: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.finished = False  # no more rows will come: NumPy views of the buffers are safe

    # ---- the Trace API ---------------------------------------------------------------------------
    @property
    def events(self) -> EventList:
        return EventList(self)

    @property
    def messages(self) -> RecordList:
        return RecordList(self._msg_row, self.message_at_row)

    @property
    def ops(self) -> RecordList:
        return RecordList(self._op_list, self.op_at_row)

    def __len__(self) -> int:
        return self._codes.n

    @property
    def end_time(self) -> float:
        t = 0.0
        rows = self._msg_row.values
        if len(rows):  # a message ends when received, or else when it arrives (0 if it never left); by row
            arrive = self._rec.table("msgs", copy=not self.finished)["t_arrive"]
            t_recv = np.full(len(arrive), np.nan)
            t_recv[: self._t_recv.n] = self._t_recv.values
            done = np.where(np.isnan(t_recv), np.nan_to_num(arrive), t_recv)
            t = max(t, float(done.max() if len(rows) == len(arrive) else done[rows].max()))
        ops = self._op_list.values
        if len(ops):
            ends = self._rec.table("ops", copy=not self.finished)["t_end"]
            t = max(t, float(ends[ops].max()))
        return t

    def unreceived(self) -> list[Message]:
        return [self.message(int(i)) for i in np.flatnonzero(np.isnan(self.receive_times()))]

    def receive_times(self) -> np.ndarray:
        """When each settled message was received, in number order (NaN: not received)."""
        rows = self._msg_row.values
        t_recv = np.full(len(rows), np.nan)
        have = rows < self._t_recv.n
        t_recv[have] = self._t_recv.values[rows[have]]
        return t_recv

    # ---- records ---------------------------------------------------------------------------------
    def message(self, number: int) -> Message:
        return self.message_at_row(int(self._msg_row.values[number]))

    def message_at_row(self, row: int) -> Message:
        view = self._views.get((0, row))
        if view is None:
            view = self._views[(0, row)] = MessageView(self, row)
        return view

    def op_at_row(self, row: int) -> Op:
        view = self._views.get((1, row))
        if view is None:
            view = self._views[(1, row)] = OpView(self, row)
        return view

    def event(self, i: int) -> tuple[str, Any]:
        code = int(self._codes.values[i])
        kind, row = code & 3, code >> 2
        if kind == CODE_OP:
            view = self.op_at_row(row)
            return OP_EVENT[view._kind()], view
        return KIND_OF_CODE[kind], self.message_at_row(row)

    # ---- columns ---------------------------------------------------------------------------------
    def message_columns(self) -> dict[str, np.ndarray]:
        """Every settled message's fields as arrays in number order (times in seconds; t_recv NaN if not
        received, t_start and t_arrive NaN for a rendezvous send never matched), plus ``nbytes``."""
        rows = self._msg_row.values
        table = self._rec.table("msgs", copy=not self.finished)[rows]
        out = {name: table[name] for name in MSG_DTYPE.names}
        out["id"] = np.arange(len(rows))
        out["nbytes"] = self.sig_nbytes()[table["sig"]] if len(rows) else np.zeros(0, np.int64)
        out["t_recv"] = self.receive_times()
        return out

    def op_columns(self, only_ops: bool = False) -> dict[str, np.ndarray]:
        """Every settled op's (and hold's and free's, unless ``only_ops``) fields as arrays in number order."""
        rows = (self._op_list if only_ops else self._op_row).values
        table = self._rec.table("ops", copy=not self.finished)[rows]
        out = {name: table[name] for name in OP_DTYPE.names}
        out["id"] = self.numbers("ops")[rows] if len(rows) else np.zeros(0, np.int32)
        return out

    def numbers(self, which: str) -> np.ndarray:
        """Row -> number of the messages ("msgs") or ops ("ops") numbered so far (-1: not yet): the inverse of
        the number -> row map, made when first asked and again once more are numbered (views need it, a run
        does not, so it takes no memory while one goes)."""
        rows = (self._msg_row if which == "msgs" else self._op_row).values
        known = self._numbers.get(which)
        if known is None or known[1] != len(rows):
            inverse = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, dtype=np.int32)
            inverse[rows] = np.arange(len(rows), dtype=np.int32)
            known = self._numbers[which] = (inverse, len(rows))
        return known[0]

    def sig_nbytes(self) -> np.ndarray:
        return np.array([s[2] for s in self._rec.sig_values] or [0], dtype=np.int64)

    def label_text(self, label: int, step: int, chunk: int) -> str | None:
        if label < 0:
            return None
        base = self._rec.labels.values[label]
        return base if step < 0 else f"{base} step {step} chunk {chunk}"

    def name_text(self, name: int) -> str | None:
        return None if name < 0 else self._rec.names.values[name]

    def nbytes(self) -> int:
        """Host bytes the trace's metadata takes: rows, numbering and codes (not payloads or interned text)."""
        parts = (self._codes, self._msg_row, self._op_row, self._op_list, self._t_recv)
        return self._rec.nbytes() + sum(g._data.nbytes for g in parts)

    def finish(self) -> None:
        """No more rows will come: give back spare capacity, and let exports view the buffers directly."""
        for g in (self._codes, self._msg_row, self._op_row, self._op_list, self._t_recv):
            g.trim()
        self.finished = True


class _MadeOnAccess(Sequence):
    """A sequence of views made on access that compares and prints like the list it stands for."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:  # compares like the list it stands for (``trace.messages == []``)
        if isinstance(other, (list, tuple, Sequence)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} {type(self).__name__[:-4].lower()}s, made on access>"


class EventList(_MadeOnAccess):
    """``trace.events``: (kind, record) pairs in canonical order, made on access."""

    __slots__ = ("_trace",)

    def __init__(self, trace: ColumnarTrace) -> None:
        self._trace = trace

    def __len__(self) -> int:
        return self._trace._codes.n

    def __getitem__(self, i):
        t = self._trace
        if isinstance(i, slice):
            return [t.event(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("event index out of range")
        return t.event(i)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        t = self._trace
        for j in range(len(self)):
            yield t.event(j)


class RecordList(_MadeOnAccess):
    """``trace.messages`` or ``trace.ops``: records by number, made on access."""

    __slots__ = ("_rows", "_make")

    def __init__(self, rows: Growable, make: Callable[[int], Any]) -> None:
        self._rows, self._make = rows, make  # numbers -> rows; a row -> its view

    def __len__(self) -> int:
        return self._rows.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = self._rows.n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("record index out of range")
        return self._make(int(self._rows.values[i]))

    def __iter__(self) -> Iterator[Any]:
        make = self._make
        for r in self._rows.values.tolist():
            yield make(r)


class MessageView(Message):
    """A message of a ``ColumnarTrace``: every ``Message`` attribute, read from its row."""

    __slots__ = ("_trace", "_row", "__weakref__")

    def __init__(self, trace: ColumnarTrace, row: int) -> None:
        self._trace = trace
        self._row = row

    def _fields(self) -> tuple:
        return MSG.unpack_from(self._trace._rec.msgs, self._row * MSG.size)

    @property
    def id(self) -> int:
        return int(self._trace.numbers("msgs")[self._row])

    @property
    def src(self) -> int:
        return self._fields()[0]

    @property
    def dst(self) -> int:
        return self._fields()[1]

    @property
    def tag(self) -> int:
        tag = self._fields()[2]
        return CollectiveTag(tag) if tag >= TAG_BASE else tag

    @property
    def shape(self) -> tuple[int, ...]:
        return self._trace._rec.sig_values[self._fields()[3]][0]

    @property
    def dtype(self) -> np.dtype:
        return self._trace._rec.sig_values[self._fields()[3]][1]

    @property
    def nbytes(self) -> int:
        return self._trace._rec.sig_values[self._fields()[3]][2]

    @property
    def label(self) -> str | None:
        f = self._fields()
        return self._trace.label_text(f[4], f[5], f[6])

    @property
    def t_send(self) -> float:
        return self._fields()[7]

    @property
    def t_start(self) -> float | None:
        t = self._fields()[8]
        return None if t != t else t

    @property
    def t_arrive(self) -> float | None:
        t = self._fields()[9]
        return None if t != t else t

    @property
    def t_recv(self) -> float | None:
        t_recv = self._trace._t_recv
        if self._row >= t_recv.n:
            return None
        t = float(t_recv.values[self._row])
        return None if t != t else t

    @property
    def payload(self) -> Any:
        p = self._trace._rec.msg_payloads
        return p[self._row] if self._row < len(p) else None

    @property
    def name(self) -> str | None:
        extra = self._trace._rec.msg_extra.get(self._row)
        return None if extra is None else extra[0]

    @property
    def index(self) -> Any:
        extra = self._trace._rec.msg_extra.get(self._row)
        return None if extra is None else extra[1]


class OpView(Op):
    """An op (or hold, or free) of a ``ColumnarTrace``: every ``Op`` attribute, read from its row."""

    __slots__ = ("_trace", "_row", "__weakref__")

    def __init__(self, trace: ColumnarTrace, row: int) -> None:
        self._trace = trace
        self._row = row

    def _fields(self) -> tuple:
        return OP.unpack_from(self._trace._rec.ops, self._row * OP.size)

    def _kind(self) -> int:
        return self._trace._rec.ops[self._row * OP.size]

    @property
    def id(self) -> int:
        return int(self._trace.numbers("ops")[self._row])

    @property
    def rank(self) -> int:
        return self._fields()[1]

    @property
    def name(self) -> str:
        return self._trace._rec.names.values[self._fields()[2]]

    @property
    def label(self) -> str | None:
        return self._trace.label_text(self._fields()[3], -1, -1)

    @property
    def t_start(self) -> float:
        return self._fields()[4]

    @property
    def t_end(self) -> float:
        return self._fields()[5]

    @property
    def flops(self) -> float | int | None:
        f = self._fields()[6]
        if f != f:  # NaN: given seconds= and no flops
            return None
        return int(f) if f.is_integer() else f

    @property
    def nbytes(self) -> int:
        return self._fields()[7]

    @property
    def keep(self) -> bool:
        return self._kind() != OP_DROPPED

    @property
    def inputs(self) -> Any:
        p = self._trace._rec.op_payloads
        return p[self._row][0] if self._row < len(p) else None

    @property
    def output(self) -> Any:
        p = self._trace._rec.op_payloads
        return p[self._row][1] if self._row < len(p) else None

    @property
    def index(self) -> Any:
        extra = self._trace._rec.op_extra.get(self._row)
        return None if extra is None else extra[0]

    @property
    def doc(self) -> str | None:
        extra = self._trace._rec.op_extra.get(self._row)
        return None if extra is None else extra[1]

    @property
    def partial(self) -> tuple[int, ...] | None:
        extra = self._trace._rec.op_extra.get(self._row)
        return None if extra is None else extra[2]
