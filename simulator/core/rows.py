"""What the engine writes while a run goes: packed rows, one per message, receive and op.

The hot path records a message with one ``struct`` pack appended to a ``bytearray`` (about as cheap
in Python as appending one tuple to a list, and 48 bytes instead of several hundred), a completed
receive with another (the message's row and when), an op likewise, and one byte per event in a log
that keeps the order events happened in. Nothing else is made per event: no record objects, no
strings (names and labels are interned to numbers, a collective part's label is its call's label
plus two numbers, step and chunk, made into text only when shown), no payloads unless the run keeps them.

Why bytearrays and not NumPy arrays written in place: a NumPy element write from Python costs about
three times a packed append, and growing a ``bytearray`` reallocates in place (``mremap`` for large
ones), so memory is what the rows take plus at most an eighth. NumPy reads the rows without copying
(``np.frombuffer`` with the structured dtypes below) whenever the trace is settled or exported; such
a view must not outlive the call that makes it while the run can still append (a bytearray with a
view on it cannot grow), so ``Recorder.table`` copies for live runs.

Rows are numbered in the order they were written (raw order), which is not the trace's canonical
order; ``simulator.core.ordering.settle`` numbers them canonically and ``simulator.core.columnar`` serves them
as ``Message``/``Op`` views.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable
from itertools import repeat
from typing import Any

import numpy as np

# A message's row, written at its send (src, dst, tag, signature, label, chunk step, chunk, times).
MSG = struct.Struct("<HHiiiiiddd")
MSG_DTYPE = np.dtype(
    [
        ("src", "<u2"),
        ("dst", "<u2"),
        ("tag", "<i4"),
        ("sig", "<i4"),  # (shape, dtype) interned: see Recorder.sig
        ("label", "<i4"),  # interned label, or -1
        ("step", "<i4"),  # a collective part's step, or -1 (then the label is whole); see Recorder.part
        ("chunk", "<i4"),  # ... and its chunk
        ("t_send", "<f8"),
        ("t_start", "<f8"),  # NaN until a rendezvous send is matched
        ("t_arrive", "<f8"),
    ]
)
T_START_AT = MSG_DTYPE.fields["t_start"][1]  # where a rendezvous match writes (t_start, t_arrive) late
_TIMES = struct.Struct("<dd")
# A completed receive: the message's raw row, and when the receiver had it.
RECV = struct.Struct("<id")
RECV_DTYPE = np.dtype([("row", "<i4"), ("t", "<f8")])
# An op, hold or free: its kind (OP_KEPT ...), device, name, label, times, flops, bytes held.
OP = struct.Struct("<BHiidddq")
OP_DTYPE = np.dtype(
    [
        ("kind", "u1"),
        ("rank", "<u2"),
        ("name", "<i4"),
        ("label", "<i4"),
        ("t_start", "<f8"),
        ("t_end", "<f8"),
        ("flops", "<f8"),
        ("nbytes", "<i8"),
    ]
)
assert MSG.size == MSG_DTYPE.itemsize and OP.size == OP_DTYPE.itemsize and RECV.size == RECV_DTYPE.itemsize

# Kinds of op row; the event kind they are recorded as.
OP_KEPT, OP_DROPPED, HOLD, FREE = 0, 1, 2, 3
OP_EVENT = ("op", "op", "hold", "free")
# Kinds in the event log (one byte per event, in the order events happened).
EV_SEND, EV_RECV, EV_OP = 0, 1, 2
# The engine settles what no device can still precede every sixth more recorded events, and at least this
# many (bounds the log, and what a settle makes beside the trace).
SETTLE_EVERY = 1 << 14


class Interner:
    """Strings (or other hashable values) to small ints and back: 0, 1, 2 ... in first-seen order."""

    __slots__ = ("ids", "values")

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any) -> int:
        i = self.ids.get(value)
        if i is None:
            i = self.ids[value] = len(self.values)
            self.values.append(value)
        return i

    def __len__(self) -> int:
        return len(self.values)


class Recorder:
    """The rows of one run, in the order written, and the interned values they refer to.

    msgs, recvs, ops: packed rows (MSG, RECV, OP); log: one byte per event (EV_*), in execution order,
    holding only the events not settled yet (see ``simulator.core.ordering.settle``).
    msg_payloads, op_payloads: each message's payload by row, and each op's (inputs, output), only when kept; a
    ring booked whole makes its own objects when either list is first read (``keep_later``), or when one of its rows
    is read (``msg_payload``, ``op_payload``, ``make_rows``). The engine's hot paths append through
    ``add_msg_payload`` and ``add_op_payload``.
    msg_extra: row -> (name, index) of messages received with a name or an index.
    op_extra: row -> (index, doc, partial) of ops that have any of them.
    """

    def __init__(self, keep_payloads: bool) -> None:
        self.msgs = bytearray()
        self.recvs = bytearray()
        self.ops = bytearray()
        self.log = bytearray()
        self.n_msgs = 0
        self.n_ops = 0
        self.names = Interner()  # op names, message names
        self.labels = Interner()
        self.sigs: dict[tuple, tuple[int, int]] = {}  # (shape, dtype) -> (id, bytes)
        self.sig_values: list[tuple[tuple[int, ...], np.dtype, int]] = []  # id -> (shape, dtype, nbytes)
        self.keep_payloads = keep_payloads
        self._msg_payloads: list[Any] = []
        self._op_payloads: list[Any] = []
        self.add_msg_payload = self._msg_payloads.append  # (bound once: the hot paths call them for every event)
        self.add_op_payload = self._op_payloads.append
        # see keep_later: each block's make (None once made), its (first message row, messages, first op row, ops),
        # and how many blocks wait
        self._later: list[Callable[[], tuple[list, list]] | None] = []
        self._later_rows: list[tuple[int, int, int, int]] = []
        self._waiting = 0
        self._bounds: tuple[np.ndarray, ...] | None = None  # the blocks' bounds and which wait (see _block_bounds)
        self.blocks_made = 0  # how many blocks of later payloads were made so far (a reader's cue to look again)
        # ... and each one's (first message row, messages, first op row, ops), in the order made (what to look at again)
        self.made_blocks: list[tuple[int, int, int, int]] = []
        self.msg_extra: dict[int, tuple[Any, Any]] = {}
        self.op_extra: dict[int, tuple[Any, Any, Any]] = {}

    @property
    def msg_payloads(self) -> list[Any]:
        """Each message's payload, by row (where the run keeps payloads)."""
        if self._waiting:
            self._make_places(range(len(self._later)))
        return self._msg_payloads

    @property
    def op_payloads(self) -> list[Any]:
        """Each op's ``(inputs, output)``, by row (where the run keeps payloads)."""
        if self._waiting:
            self._make_places(range(len(self._later)))
        return self._op_payloads

    @property
    def all_made(self) -> bool:
        """Whether every payload kept is made (no block of later payloads waits)."""
        return not self._waiting

    def msg_payload(self, row: int) -> Any:
        """Message ``row``'s payload (None where not kept), making only the block of later payloads it is in."""
        p = self._msg_payloads
        if row >= len(p):
            return None
        if p[row] is None and self._waiting:  # (a placeholder: a payload kept is never None)
            self._make_block_of(row, 0)
        return p[row]

    def op_payload(self, row: int) -> tuple[Any, Any]:
        """Op ``row``'s ``(inputs, output)`` (``(None, None)`` where not kept), making only its block of later
        payloads."""
        p = self._op_payloads
        if row >= len(p):
            return (None, None)
        if p[row] is None and self._waiting:
            self._make_block_of(row, 2)
        return p[row]

    def keep_later(self, msgs: int, ops: int, make: Callable[[], tuple[list, list]]) -> None:
        """The payloads of the next ``msgs`` message rows and ``ops`` op rows, made by ``make()`` (two lists) when
        either list is first read: until then each row has a placeholder, so rows written after them keep their
        places. A ring booked whole keeps its payloads so: a run that nobody reads the payloads of (a benchmark's,
        a what-if's) does not make its thousands of views and tuples."""
        self._later.append(make)
        self._later_rows.append((len(self._msg_payloads), msgs, len(self._op_payloads), ops))
        self._waiting += 1
        self._bounds = None
        self._msg_payloads += repeat(None, msgs)
        self._op_payloads += repeat(None, ops)

    def unmade(self, msg_rows: np.ndarray, op_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of these message rows and op rows have payloads not made yet (two boolean arrays): a reader that
        needs only what those payloads are, not the objects, can work it out without making them."""
        return self._inside(msg_rows, 0), self._inside(op_rows, 2)

    def make_rows(self, msg_rows: np.ndarray, op_rows: np.ndarray) -> tuple[list[Any], list[Any]]:
        """The two payload lists with the payloads of these message rows and op rows made (and their blocks'); rows
        of a block of later payloads not asked for hold None until they are made."""
        if self._waiting:
            places = np.concatenate([self._holding(msg_rows, 0), self._holding(op_rows, 2)])
            if len(places):
                self._make_places(np.unique(places[places >= 0]).tolist())
        return self._msg_payloads, self._op_payloads

    def __getstate__(self) -> dict[str, Any]:
        """Pickled or deep-copied with every payload made: a copy holds the objects, not how to make them."""
        if self._waiting:
            self._make_places(range(len(self._later)))
        return self.__dict__.copy()

    def _holding(self, rows: np.ndarray, field: int) -> np.ndarray:
        """For each row (message rows: ``field`` 0, op rows: 2), the place in ``_later`` of the block of later
        payloads not made yet that it is in, or -1 (the blocks stand in row order: one binary search a row)."""
        if not self._waiting:
            return np.full(len(rows), -1)
        starts, ends = self._block_bounds(field)
        at = np.searchsorted(starts, rows, side="right") - 1
        return np.where((at >= 0) & (rows < ends[at]) & self._bounds[4][at], at, -1)

    def _inside(self, rows: np.ndarray, field: int) -> np.ndarray:
        """Whether each row is in a block of later payloads (``_holding`` >= 0): with a few blocks, row against bounds."""
        inside = np.zeros(len(rows), bool)
        if not self._waiting:
            return inside
        if len(self._later) > 8:
            return self._holding(rows, field) >= 0
        starts, ends = self._block_bounds(field)
        for first, past, waits in zip(starts, ends, self._bounds[4]):
            if waits:
                inside |= (rows >= first) & (rows < past)
        return inside

    def _block_bounds(self, field: int) -> tuple[np.ndarray, np.ndarray]:
        """The blocks' first rows and past-last rows (message rows: ``field`` 0, op rows: 2), kept until a block is
        kept (``_bounds[4]``: which blocks wait, kept up to date as they are made)."""
        if self._bounds is None:
            b = np.array(self._later_rows, np.int64).reshape(-1, 4)
            waits = np.array([make is not None for make in self._later], bool)
            self._bounds = (b[:, 0], b[:, 0] + b[:, 1], b[:, 2], b[:, 2] + b[:, 3], waits)
        return self._bounds[field], self._bounds[field + 1]

    def _make_block_of(self, row: int, field: int) -> None:
        """Make the block of later payloads that one row is in, if any (``_holding`` for one row, without arrays)."""
        starts, ends = self._block_bounds(field)
        at = bisect_right(starts, row) - 1
        if at >= 0 and row < ends[at]:
            self._make_places([at])

    def _make_places(self, places: Any) -> None:
        """Make the blocks of later payloads at these places in ``_later`` that wait (each in its rows). A block made
        leaves None at its place, so that no other block moves (reading a run's rings one by one costs what making
        them at once does); once none waits, the lists are let go."""
        for i in places:
            make = self._later[i]
            if make is None:
                continue
            msg_at, _, op_at, _ = self._later_rows[i]
            msgs, ops = make()
            self._msg_payloads[msg_at : msg_at + len(msgs)] = msgs
            self._op_payloads[op_at : op_at + len(ops)] = ops
            self._later[i] = None
            if self._bounds is not None:
                self._bounds[4][i] = False
            self._waiting -= 1
            self.blocks_made += 1
            self.made_blocks.append(self._later_rows[i])
        if not self._waiting:
            self._later, self._later_rows, self._bounds = [], [], None

    def sig(self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> tuple[int, int]:
        """The id of a (shape, dtype) pair, and its byte count."""
        key = (shape, dtype)
        sig = self.sigs.get(key)
        if sig is None:
            sig = self.sigs[key] = (len(self.sig_values), nbytes)
            self.sig_values.append((shape, dtype, nbytes))
        return sig

    def part(self, value: Any) -> int:
        """A collective part's step or chunk as its column holds it: a number as it is, a text (``"fold"``,
        ``"all"``, ``"0-3"``) interned with the labels, as ``-2 - id`` (-1 is "no part")."""
        return value if type(value) is int and value >= 0 else -2 - self.labels(str(value))

    def part_text(self, code: int) -> Any:
        """What ``part`` stored: the number, or the text."""
        return code if code >= 0 else self.labels.values[-2 - code]

    def write_times(self, row: int, start: float, arrive: float) -> None:
        """A rendezvous message is matched: its transfer's start and arrival go into its row."""
        _TIMES.pack_into(self.msgs, row * MSG.size + T_START_AT, start, arrive)

    def table(self, which: str, copy: bool) -> np.ndarray:
        """The rows of ``which`` ("msgs", "ops", "recvs") as a structured array (a copy when ``copy``)."""
        buf = getattr(self, which)
        dtype = {"msgs": MSG_DTYPE, "ops": OP_DTYPE, "recvs": RECV_DTYPE}[which]
        view = np.frombuffer(buf, dtype=dtype) if len(buf) else np.empty(0, dtype)
        return view.copy() if copy else view

    def nbytes(self) -> int:
        """Bytes the rows and logs take (the payloads and interned values not counted)."""
        return sum(len(b) for b in (self.msgs, self.recvs, self.ops, self.log))


class Growable:
    """A NumPy array that grows at its end, by a quarter when full, in place where the allocator can (a large
    array's ``realloc`` remaps its pages rather than copying them), and ``trim`` gives the spare capacity
    back once the run is over: a trace's arrays never take much more than they hold, even while they grow.

    ``values`` is the filled part (a view; take it anew after each ``extend``).
    """

    __slots__ = ("_data", "n")

    def __init__(self, dtype: Any, capacity: int = 1024) -> None:
        self._data = np.empty(capacity, dtype)
        self.n = 0

    @property
    def values(self) -> np.ndarray:
        return self._data[: self.n]

    def __len__(self) -> int:
        return self.n

    def reserve(self, n: int, fill: Any = None) -> None:
        """Grow the filled part to ``n`` elements, new ones set to ``fill`` (or left unset for None)."""
        if n > len(self._data):
            capacity = max(n, len(self._data) + len(self._data) // 4)
            try:
                self._data.resize(capacity)  # refuses (ValueError) while a view exists
            except ValueError:  # something holds a view of it: copy instead
                grown = np.empty(capacity, self._data.dtype)
                grown[: self.n] = self._data[: self.n]
                self._data = grown
        if fill is not None and n > self.n:
            self._data[self.n : n] = fill
        self.n = max(self.n, n)

    def extend(self, values: np.ndarray) -> None:
        start = self.n
        self.reserve(start + len(values))
        self._data[start : self.n] = values

    def trim(self) -> None:
        """Give back the unused capacity (in place where the allocator can)."""
        if len(self._data) > self.n:
            try:
                self._data.resize(self.n)  # refuses (ValueError) while a view exists
            except ValueError:  # something holds a view of it: copy instead
                self._data = self._data[: self.n].copy()
