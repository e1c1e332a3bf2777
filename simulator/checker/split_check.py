"""A run held to its declared split (``simulator.checker.split``): who computed what, what each device was
given, what crossed, which collectives ran, and how much each device sent.

``violations(trace, split, ref_of)`` walks the events once and returns what broke, each in the lesson's
words and at the event where it happened (the checker orders them with the value divergences by cause,
``simulator.checker.causal``):

- an op or held value of a name the split gives to other devices: "device 1 computed A, which belongs to
  device 0: A's output should have crossed, but x did";
- a held value, or an op's input, that is more of an input than the device was given (and did not
  receive): "device 0 was given all of X; its part is rows 0:4";
- an op's input, or a returned value, that is a value the split gives to other devices and that never
  reached this one (read through an object the devices share): "device 1 computed B from A, which belongs
  to device 0 and never arrived in a message";
- an op given no inputs (its value written into the program) where none of the model's inputs to it, nor a
  part of one, was ever on the device;
- a program's own message carrying a value that may not cross that boundary, named by what it is;
- a collective the split does not allow (its messages' labels say which, or a native call's op; a message with a
  collective's tag under a label of no collective's is a collective's all the same);
- a device that sends more bytes or messages than the budget: "device 2 sent 192 bytes, 2x the 96 bytes
  a ring all-reduce sends".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.columnar import ColumnarTrace
from ..core.tags import TAG_BASE
from ..core.trace import Message, Op, Trace
from ..cost.meta import MetaArray
from . import diagnose
from .causal import disguised_call, native_call, op_kind
from .compare import show, structured
from .reference import Reference
from .split import Split
from .split_columns import _KnownOp, _SplitColumns
from .split_presence import _listed, _Presence
from .verdict import Violation


def violations(
    trace: Trace,
    split: Split,
    ref_of: Callable[[int], Reference],
    rtol: float | None = None,
    atol=None,
    outputs: list | None = None,
    identify: Callable[[Reference, Any], list[str]] | None = None,
    columns: dict[str, list] | None = None,
    exact_rows: dict[int, bool] | None = None,
) -> list[Violation]:
    """Everything in the run that breaks ``split``, in trace order (at most one of each kind per device and name);
    ``outputs``, what each device returned, are held to it too. ``identify``: ``ref.identify(value)`` with this
    check's tolerances, as the value check remembers it (the two walks meet the same values); None: its own.
    ``columns``: a columnar trace's event columns as lists, where the value check has them (None: read here).
    ``exact_rows``: the op rows of a columnar trace whose output the value check found to be, byte for byte, what the
    model says the op's name holds (True: the model's whole value of it, which is then known to be the device's own
    where it may hold it; split_columns.py), so that what it equals is what that is."""
    walk = _SplitWalk(trace, split, ref_of, rtol, atol, identify)
    walk.columns, walk.exact_rows = columns, exact_rows
    return walk.walk(outputs)


class _SplitWalk(_SplitColumns, _Presence):
    """One walk of a run against a split; the walk over a columnar trace's columns is in split_columns.py."""

    def __init__(self, trace: Trace, split: Split, ref_of, rtol, atol, identify=None) -> None:
        self.trace, self.split, self.ref_of, self.rtol, self.atol = trace, split, ref_of, rtol, atol
        self._names_of = identify or (lambda ref, value: ref.identify(value, rtol=rtol, atol=atol))
        n = trace.world_size
        self.found: list[Violation] = []
        self.said: set[tuple] = set()
        self.received: list[list[Message]] = [[] for _ in range(n)]  # per device, in order (read them with _got)
        self._received_rows: list[list[int]] = [[] for _ in range(n)]  # a columnar walk's, not yet made records
        self.collected: list[list[Any]] = [[] for _ in range(n)]  # per device, what its collectives' ops made
        self.own: list[list[tuple[str, Any]]] = [[] for _ in range(n)]  # per device, (name, value) it held or computed
        self.own_names: list[set[str]] = [set() for _ in range(n)]  # per device, those names
        self._carried: dict[int, list[str]] = {}  # message id -> the model's values it equals (found when asked)
        self.sent_bytes, self.sent_messages = [0] * n, [0] * n
        self.over: dict[tuple[int, str], int] = {}  # (device, "bytes"/"messages") -> event where it went over
        # per device, the collective calls ("all_reduce#0") whose messages it sent or received: an op labelled as
        # one of those is the call's own reduction; one labelled as a call it had no message of is the program's
        self.calls: list[set[str]] = [set() for _ in range(n)]
        self._identified: dict[tuple[int, int], tuple[Any, list[str]]] = {}  # see _identify
        self._settled: dict[tuple[int, int], Any] = {}  # (device, id) -> a value _foreign has looked at there
        self._carried_by: dict[int, tuple[set[str], int]] = {}  # device -> (names its messages carry, how many)
        self._looked: dict[tuple, int | bool] = {}  # (device, name) -> _arrived's messages looked at; _among's too
        self.columns: dict[str, list] | None = None  # the event columns as lists, if given (violations)
        self.exact_rows: dict[int, bool] | None = None  # op rows holding the model's value of their name (violations)
        self._wholes: dict[tuple[int, int], tuple[Any, list]] = {}  # (device, id) -> (value, _wholes_of's answer)
        self._plain: dict[tuple[int, int], Any] = {}  # (device, id) -> an op's input no rule says anything of there
        self._memos: dict[tuple[int, str], dict] = {}  # (reference, what) -> what it keeps (_memo)
        self._model_of: dict[tuple[int, int], str] = {}  # (reference, id) -> the name whose model value it is, exactly
        self._rules: dict[tuple, Any] = {}  # what the split says of a name (a pattern's look-up), once: _owners, ...

    def walk(self, outputs: list | None = None) -> list[Violation]:
        last = self._walk_columns() if isinstance(self.trace, ColumnarTrace) else self._walk_records()
        for rank, out in enumerate(outputs or ()):
            if out is not None and not structured(out):
                self._foreign(max(last[rank], 0), rank, out, None, "returned")
        self._budget()
        return self.found

    def _walk_records(self) -> list[int]:
        """The walk over the trace's records, one per event; returns each device's last event."""
        last = [-1] * self.trace.world_size
        for i, (kind, rec) in enumerate(self.trace.events):
            if kind == "send":
                self._message(i, rec)
            elif kind == "recv":
                self.received[rec.dst].append(rec)
                last[rec.dst] = i
            elif kind in ("op", "hold"):
                self._record(i, kind, rec)
                last[rec.rank] = i
        return last

    # ---- what the split says of a name, asked once per walk (a name may match a pattern: "h1.*") ------------
    def _owners(self, name: str) -> Any:
        key = ("owners", name)
        if key not in self._rules:
            self._rules[key] = self.split.owners(name)
        return self._rules[key]

    def _gives(self, name: str) -> bool:
        key = ("gives", name)
        if key not in self._rules:
            self._rules[key] = self.split.gives(name)
        return self._rules[key]

    def _part_of(self, name: str, rank: int) -> Any:
        key = ("part", name, rank)
        if key not in self._rules:
            self._rules[key] = self.split.part_of(name, rank)
        return self._rules[key]

    def _add(self, key: tuple, kind: str, rank: int, event: int, text: str, record: Any) -> None:
        if key not in self.said:
            self.said.add(key)
            if type(record) is _KnownOp:  # (the column walk's op: the violation keeps the trace's record)
                record = record.record()
            self.found.append(Violation(kind, rank, event, text, record))

    # ---- what a message carries ----------------------------------------------------------------------
    def _what(self, msg: Message) -> list[str]:
        """The model's names for what a message carries: its name (and the value that name stands for: a torch
        module's input ``b:in0`` is ``a``), else the values (or blocks) it equals."""
        if msg.name is not None:
            alias = self.ref_of(msg.dst).aliases.get(msg.name)
            return [msg.name] if alias is None else [msg.name, alias]
        if msg.payload is None or structured(msg.payload):
            return []
        ref = self.ref_of(msg.dst)
        return ref.identify(msg.payload, rtol=self.rtol, atol=self.atol) or _blocks_of(
            ref, msg.payload, self.rtol, self.atol
        )

    def _message(self, i: int, msg: Message) -> None:
        self._count(i, msg.src, msg.nbytes)
        kind = op_kind(msg.label)
        if kind is None and int(msg.tag) >= TAG_BASE:  # a collective's tag, under a label of no collective's
            kind = disguised_call(msg.label)
        if kind is not None:  # a collective's message
            call = _call_of(msg.label)
            self.calls[msg.src].add(call)
            self.calls[msg.dst].add(call)
            self._collective(i, msg.src, kind, msg)
            return
        self._crossing(i, msg)

    def _count(self, i: int, src: int, nbytes: int) -> None:
        """A message's bytes and count against its sender's budget."""
        self.sent_bytes[src] += nbytes
        self.sent_messages[src] += 1
        budget = self.split.budget
        if budget is not None:
            for what, total, limit in (
                ("bytes", self.sent_bytes, budget.bytes),
                ("messages", self.sent_messages, budget.messages),
            ):
                if limit is not None and total[src] > limit:
                    self.over.setdefault((src, what), i)

    def _crossing(self, i: int, msg: Message) -> None:
        """A message of the program's own, held to what may cross its boundary."""
        split = self.split
        if split.crosses is None:
            return
        names = self._what(msg)
        if any(split.may_cross(n, msg.src, msg.dst) for n in names):
            return
        allowed = split.crossing_names(msg.src, msg.dst)
        rule = (
            f"only {_listed(allowed)} may cross from device {msg.src} to device {msg.dst}"
            if allowed
            else f"nothing may cross from device {msg.src} to device {msg.dst} in this split"
        )
        ref = self.ref_of(msg.dst)
        what = (
            " and ".join(ref.describe(n) for n in names[: 1 if names[0] in ref.aliases else 2])
            if names
            else f"{show(msg.payload)}, which is none of the model's values{_cast(ref, msg.payload)}"
        )
        via = f" ({msg.label})" if msg.label else ""
        self._add(
            ("cross", msg.id),
            "cross",
            msg.src,
            i,
            f"message #{msg.id} from device {msg.src} to device {msg.dst}{via} carried {what}, but {rule}",
            msg,
        )

    def _collective(self, i: int, rank: int, kind: str, rec: Any) -> None:
        split = self.split
        if split.allows(kind):
            return
        allowed = split.collectives or ()
        rule = (
            f"this split allows only {_listed(allowed)}"
            if allowed
            else "this split allows no collective: write it with dev.send and dev.recv"
        )
        self._add(("collective", rank, kind), "collective", rank, i, f"device {rank} called {kind}, but {rule}", rec)

    # ---- ops and held values -------------------------------------------------------------------------
    def _record(self, i: int, kind: str, rec: Op) -> None:
        output = rec.output  # (each field read once: a record of a columnar trace unpacks its row per field)
        if type(output) is MetaArray:  # a torch op priced by its shapes: its module's output has the values
            return
        label, rank = rec.label, rec.rank
        if label is not None:  # (native_call and op_kind say None to no label)
            call = native_call(label)
            if call is not None:
                self.collected[rank].append(output)  # what a native collective brought
                self._collective(i, rank, call[0], rec)
                return
            if op_kind(label) is not None and _call_of(label) in self.calls[rank]:
                self.collected[rank].append(output)
                return  # a collective's own reduction: its messages say what ran
        name = rec.name
        if kind == "hold" and self._gives(name):
            self._held_input(i, rec)
        else:
            self._owner(i, kind, rec)
        self.own[rank].append((name, output))
        self.own_names[rank].add(name)
        inputs = rec.inputs if kind == "op" else None
        if inputs:
            self._inputs(i, rec)
            for x in inputs:
                self._foreign(i, rank, x, rec, f"computed {name} from")
        elif inputs is not None:
            self._from_nothing(i, rec)

    def _identify(self, ref: Reference, value: Any) -> list[str]:
        """``ref.identify(value)``, once per value: an op's inputs are other ops' outputs, looked at again and again.
        Kept by identity, with the value (so that its id is not given to another while the walk goes on)."""
        key = (id(ref), id(value))
        known = self._identified.get(key)
        if known is None:
            name = self._model_of.get(key)
            if name is None:
                names = self._names_of(ref, value)
            else:  # what the model says ``name`` holds, byte for byte: it equals what that equals (kept with ref)
                memo = self._memo(ref, "names of a name")
                names = memo.get(name)
                if names is None:
                    names = memo[name] = self._names_of(ref, value)
            known = self._identified[key] = (value, names)
        return known[1]

    def _owner(self, i: int, kind: str, rec: Op) -> None:
        split, name, rank = self.split, rec.name, rec.rank
        owners = self._owners(name)
        if owners is None or owners(rank):
            return
        belongs = split.owner_text(name, self.trace.world_size)
        verb = "computed" if kind == "op" else "holds"
        what = f"{name}'s output" if kind == "op" else name
        owner_ranks = [r for r in range(self.trace.world_size) if owners(r)]
        came = [
            (msg, names)
            for msg in self._got(rank)
            if msg.src in owner_ranks and op_kind(msg.label) is None
            for names in [self._carries(msg)]
            if names and name not in names
        ]
        if came:
            first = came[0][0]
            crossed = [n for _, names in came for n in names]
            why = (
                f"{what} should have crossed, but {_listed(sorted(set(crossed), key=crossed.index))} did "
                f"(message #{first.id} from device {first.src} to device {rank})"
            )
            # the message that crossed instead is this same fault, told here, where it stands first
            folded = [v for v in self.found if v.kind == "cross" and getattr(v.record, "id", None) == first.id]
            for v in folded:
                self.found.remove(v)
            i = min([i, *(v.event for v in folded)])
        else:
            why = f"{belongs} computes it{' and sends it' if kind == 'op' else ''}, not device {rank}"
        text = f"device {rank} {verb} {name}, which belongs to {belongs}: {why}"
        self._add(("compute", rank, name), "compute", rank, i, text, rec)

    def _from_nothing(self, i: int, rec: Op) -> None:
        """An op given no inputs whose value the model computes from inputs: a result written into the program
        (``dev.compute("B", lambda: np.array([49.0]))``), or read through a variable the devices share. It breaks
        the split where none of those inputs, nor a part of one, was ever on the device. Fine: a closure over
        what the device holds (``lambda: a @ b``), and a collective's result named after it arrived."""
        rank, ref = rec.rank, self.ref_of(rec.rank)
        wanted = ref.inputs.get(rec.name)
        if not wanted or any(structured(w) for w in wanted):
            return
        names = [ns for ns in (self._identify(ref, w) for w in wanted) if ns]
        held = self.own_names[rank]  # (asked first: the cheapest way to be fine, the same answer)
        if (
            any(n in held for ns in names for n in ns)
            or self._brought(rank, rec.name)
            or any(self._present(rank, n) for ns in names for n in ns)
        ):
            return  # a collective's result named after it arrived, or a closure over what the device holds
        missing = [ns[0] for ns in names if all(self._never_had(rank, n) for n in ns)]
        model = f"the model computes it from {_listed(ns[0] for ns in names) or 'its inputs'}"
        if missing:
            why = f"{missing[0]} never reached device {rank}"
        elif not (self._got(rank) or self.collected[rank]):
            why = f"nothing had reached device {rank} yet"
        else:
            why = f"none of {_listed(ns[0] for ns in names)}, nor a part of one, was ever on device {rank}"
        text = (
            f"device {rank} computed {rec.name} from no inputs, but {model}, and {why}: a value written into the "
            "program, or read through a variable the devices share, shows nothing of where it was computed (pass "
            f"the op what it computes from: dev.compute({rec.name!r}, fn, *inputs))"
        )
        self._add(("from nothing", rank, rec.name), "compute", rank, i, text, rec)

    # ---- the budget ----------------------------------------------------------------------------------
    def _budget(self) -> None:
        budget = self.split.budget
        for (rank, what), event in sorted(self.over.items(), key=lambda kv: kv[1]):
            total = self.sent_bytes[rank] if what == "bytes" else self.sent_messages[rank]
            limit = budget.bytes if what == "bytes" else budget.messages
            times = f"{total / limit:.3g}x" if limit else "more than"
            text = f"device {rank} sent {total} {what}, {times} the {limit} {what} {budget.what} sends per device"
            self._add(("budget", rank, what), "budget", rank, event, text, self.trace.events[event][1])


def _blocks_of(ref: Reference, value: Any, rtol, atol, limit: int = 64) -> list[str]:
    """The names of the model's values this one is a block of (a shard sent on its own)."""
    a = np.asarray(value)
    if a.dtype.kind not in "biuf" or a.size == 0:
        return []
    hits = []
    for n, v in list(ref.values.items())[: limit * 8]:
        if structured(v):
            continue
        b = np.asarray(v)
        if b.dtype.kind in "biuf" and b.ndim == a.ndim and a.size < b.size and diagnose.block_of(a, b) is not None:
            hits.append(n)
            if len(hits) >= 2:
                break
    return hits


def _call_of(label: str) -> str:
    """The collective call a step's label belongs to: ``all_reduce#0`` of ``all_reduce#0 ring step 1 chunk 0``."""
    return label.split(" ", 1)[0]


def _cast(ref: Reference, payload: Any) -> str:
    """' (it is A cast down to float32 ...)' for a payload that is a model value in lower precision; else ''."""
    cast = None if payload is None or structured(payload) else diagnose.cast_down(ref, payload)
    return f" (it is {cast})" if cast else ""
