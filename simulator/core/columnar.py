"""The engine's trace: rows in columns, and ``Message``/``Op`` objects made from them on access.

A ``ColumnarTrace`` holds what the engine recorded (``simulator.core.rows.Recorder``: packed rows in the
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

from .ordering import CODE_OP, CODE_RECV, CODE_SEND
from .rows import FREE, HOLD, MSG, MSG_DTYPE, OP, OP_DROPPED, OP_DTYPE, OP_EVENT, Growable, Recorder
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
        # number -> row of the messages, of the ops (holds and frees too), of the ops proper: read off the codes
        # when first asked (``_number_rows``), then kept up to date by each settle; a finished trace gives them up
        self._rows: dict[str, Growable] = {}
        self._numbers: dict[str, tuple[np.ndarray, int]] = {}  # "msgs"/"ops" -> (row -> number, how many numbered)
        self._t_recv = Growable(np.float64)  # message row -> when received (NaN: not yet)
        self._pending: list[tuple[np.ndarray, np.ndarray]] | None = None  # (codes, times) held back by a settle
        self._seen_msgs = 0  # rows whose events have been taken from the log
        self._seen_ops = 0
        self._views: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.finished = False  # no more rows will come: NumPy views of the buffers are safe

    # ---- what the checker and the views read in bulk ----------------------------------------------
    @property
    def recorder(self) -> Recorder:
        """The packed rows (``rows.Recorder``): ``recorder.table("msgs")``, the interned names and labels."""
        return self._rec

    @property
    def event_codes(self) -> np.ndarray:
        """Every settled event in canonical order, as ``row << 2 | kind`` (kind: ``ordering.CODE_SEND``, ...)."""
        return self._codes.values

    @property
    def op_rows(self) -> np.ndarray:
        """The rows of the ops proper (not holds and frees), in number order."""
        return self._op_list.values

    # ---- numbers and rows ------------------------------------------------------------------------
    @property
    def _msg_row(self) -> Growable:
        """Message number -> row."""
        rows = self._rows.get("msgs")
        return self._number_rows("msgs") if rows is None else rows

    @property
    def _op_row(self) -> Growable:
        """Op number (holds and frees numbered too) -> row."""
        rows = self._rows.get("ops")
        return self._number_rows("ops") if rows is None else rows

    @property
    def _op_list(self) -> Growable:
        """The rows of the ops proper (not holds and frees), in number order."""
        rows = self._rows.get("list")
        return self._number_rows("list") if rows is None else rows

    def _count(self, which: str) -> int:
        """How many messages ("msgs") or ops proper ("list") are numbered, without a number -> row map."""
        rows = self._rows.get(which)
        if rows is not None:
            return rows.n
        if which == "msgs" and self.finished:
            return self._rec.n_msgs
        return self._number_rows(which).n

    def _number_rows(self, which: str) -> Growable:
        """A number -> row map, read off the codes (the events in canonical order); kept up to date from now on."""
        known = self._rows.get(which)
        if known is not None:
            return known
        codes = self._codes.values
        kind = CODE_SEND if which == "msgs" else CODE_OP
        rows = Growable(np.int32, 1)
        rows.extend((codes[(codes & 3) == kind] >> 2).astype(np.int32))
        if which == "list":
            kinds = self._rec.table("ops", copy=not self.finished)["kind"][rows.values]
            proper = rows.values[(kinds != HOLD) & (kinds != FREE)]
            rows = Growable(np.int32, 1)
            rows.extend(proper)
        self._rows[which] = rows
        return rows

    # ---- the Trace API ---------------------------------------------------------------------------
    @property
    def events(self) -> EventList:
        return EventList(self)

    @property
    def messages(self) -> RecordList:
        return RecordList(self, "msgs", self.message_at_row)

    @property
    def ops(self) -> RecordList:
        return RecordList(self, "list", self.op_at_row)

    def __len__(self) -> int:
        return self._codes.n

    @property
    def end_time(self) -> float:
        t = 0.0
        if self.finished:  # every row is numbered: by rows, a slice at a time (no array as long as the trace)
            arrive, t_recv, step = self._rec.table("msgs", copy=False)["t_arrive"], self._t_recv.values, 1 << 16
            for i in range(0, len(arrive), step):  # a message ends when received, else when it arrives (0: never left)
                a, r = arrive[i : i + step], t_recv[i : i + step]
                got = ~np.isnan(r)
                if got.any():
                    t = max(t, float(r[got].max()))
                if len(r) < len(a) or not got.all():
                    late = np.concatenate([a[: len(r)][~got], a[len(r) :]])
                    t = max(t, float(np.nan_to_num(late).max()))
            ops = self._rec.table("ops", copy=False)
            for i in range(0, len(ops), step):  # the ops proper: holds and frees left out
                o = ops[i : i + step]
                ends = o["t_end"][(o["kind"] != HOLD) & (o["kind"] != FREE)]
                t = max(t, float(ends.max(initial=0.0)))
            return t
        rows = self._msg_row.values
        if len(rows):  # a message ends when received, or else when it arrives (0 if it never left); by row
            arrive = self._rec.table("msgs", copy=True)["t_arrive"]
            t_recv = np.full(len(arrive), np.nan)
            t_recv[: self._t_recv.n] = self._t_recv.values
            done = np.where(np.isnan(t_recv), np.nan_to_num(arrive), t_recv)
            t = max(t, float(done[rows].max()))
        ops = self._op_list.values
        if len(ops):
            ends = self._rec.table("ops", copy=True)["t_end"]
            t = max(t, float(ends[ops].max()))
        return t

    def unreceived(self) -> list[Message]:
        return [self.message(int(i)) for i in np.flatnonzero(np.isnan(self.receive_times()))]

    def all_received(self) -> bool:
        """Whether every settled message was received (read off the receive times by row, a slice at a time)."""
        t_recv, step = self._t_recv.values, 1 << 16
        numbered = self._rec.n_msgs if self.finished else self._msg_row.n  # (finished: every row is numbered)
        if len(t_recv) != numbered:  # some rows not settled, or never received: the general way
            return not np.isnan(self.receive_times()).any()
        return not any(np.isnan(t_recv[i : i + step]).any() for i in range(0, len(t_recv), step))

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

    def event_columns(self) -> dict[str, np.ndarray]:
        """Every settled event's columns in canonical order, for a walk over a whole run that makes a record only
        where it needs one: ``kind`` (CODE_SEND, CODE_RECV or CODE_OP), ``row`` (for ``message_at_row`` /
        ``op_at_row``), ``rank`` (a send's source, a receive's destination, an op's device), ``op_kind``
        (OP_KEPT ... FREE, a byte; 255 for messages), ``label`` (the interned label, -1 for none) and ``name`` (an op's
        interned name; -1 for messages, whose names are in ``_rec.msg_extra``)."""
        codes = self._codes.values
        kind, row = codes & 3, codes >> 2
        msgs, ops = self._rec.table("msgs", copy=not self.finished), self._rec.table("ops", copy=not self.finished)
        # every event's place in one table of the sends' fields, then the receives', then the ops': each column one
        # gather, with no masks or scatters (a mask per kind and column cost three times as much)
        n_msgs = len(msgs)
        at = row + np.array([0, n_msgs, 2 * n_msgs, 0])[kind]

        def column(send: str | None, recv: str | None, op: str, dtype: Any = np.int64) -> np.ndarray:
            none = np.full(n_msgs, np.array(-1).astype(dtype), dtype)  # (-1 as the dtype takes it: op_kind's 255)
            parts = [none if send is None else msgs[send], none if recv is None else msgs[recv], ops[op]]
            return np.concatenate(parts, dtype=dtype).take(at)

        return {
            "kind": kind,
            "row": row,
            "rank": column("src", "dst", "rank"),
            "label": column("label", "label", "label"),
            "name": column(None, None, "name"),
            "op_kind": column(None, None, "kind", ops.dtype["kind"] if len(ops) else np.int64),
        }

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
        """A message's or op's label as text, made from its columns (``all_reduce#0 ring step 1 chunk 2``)."""
        if label < 0:
            return None
        rec = self._rec
        base = rec.labels.values[label]
        return base if step == -1 else f"{base} step {rec.part_text(step)} chunk {rec.part_text(chunk)}"

    def name_text(self, name: int) -> str | None:
        return None if name < 0 else self._rec.names.values[name]

    def nbytes(self) -> int:
        """Host bytes the trace's metadata takes: rows, numbering and codes (not payloads or interned text)."""
        parts = (self._codes, self._t_recv, *self._rows.values())
        return self._rec.nbytes() + sum(g._data.nbytes for g in parts)

    def finish(self) -> None:
        """No more rows will come: give back spare capacity, and let exports view the buffers directly."""
        for g in (self._codes, self._t_recv):
            g.trim()
        self._rows.clear()  # (the codes hold them: made again when asked)
        self._numbers.clear()
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

    __slots__ = ("_trace", "_which", "_make")

    def __init__(self, trace: ColumnarTrace, which: str, make: Callable[[int], Any]) -> None:
        self._trace, self._which, self._make = trace, which, make  # "msgs" or "list"; a row -> its view

    def __len__(self) -> int:
        return self._trace._count(self._which)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        rows = self._trace._number_rows(self._which)
        n = rows.n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("record index out of range")
        return self._make(int(rows.values[i]))

    def __iter__(self) -> Iterator[Any]:
        make = self._make
        for r in self._trace._number_rows(self._which).values.tolist():
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
        return self._trace._rec.msg_payload(self._row)

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
        return self._trace._rec.op_payload(self._row)[0]

    @property
    def output(self) -> Any:
        return self._trace._rec.op_payload(self._row)[1]

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
