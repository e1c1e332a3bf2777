"""The split check's walk over a columnar trace: the trace's columns read in order, a record made only for an event
that one of the split's rules must look at.

Most events of a run break no rule by their kind alone: a receive only adds to what its device has (its record is
made if a rule asks what arrived), a collective's message only counts against the budget and names its call, an op
of a name the split gives to no device in particular, with inputs, only adds to what its device holds. Those are
done here from the columns; every other event goes to the walk over records (``split_check._SplitWalk``) with its
record, so each rule says exactly what it says there. ``_SplitWalk`` holds this as a mixin.
"""

from __future__ import annotations

from typing import Any

from ..core.ordering import CODE_RECV, CODE_SEND
from ..core.rows import FREE, HOLD, OP_EVENT
from ..core.tags import TAG_BASE
from ..cost.meta import MetaArray
from .causal import disguised_call, native_call, op_kind


class _SplitColumns:
    """The columnar walk (mixed into ``split_check._SplitWalk``, whose rules and state it uses)."""

    def _walk_columns(self) -> list[int]:
        """The walk over a ``ColumnarTrace``'s columns, as ``_walk_records`` walks its records; returns each device's
        last event."""
        t, split = self.trace, self.split
        rec = t.recorder
        cols = self.columns or {k: v.tolist() for k, v in t.event_columns().items()}
        names, op_payloads, payloads, extra = rec.names.values, rec.op_payloads, rec.msg_payloads, rec.msg_extra
        msgs = rec.table("msgs", copy=not t.finished)
        dsts, sigs, tags = msgs["dst"].tolist(), msgs["sig"].tolist(), msgs["tag"]
        sizes = [s[2] for s in rec.sig_values]
        last = [-1] * t.world_size
        rows_got, calls, collected = self._received_rows, self.calls, self.collected
        own, own_names = self.own, self.own_names
        settled, exact, model_of, plain = self._settled, self.exact_rows or {}, self._model_of, self._plain
        rank_refs: list[Any] = [None] * t.world_size
        labels: dict[int, tuple[Any, str | None, str]] = {}  # label -> (native call, collective kind, call)
        rules = split.owners_and_gives  # a name's (owners' test or None, whether the split gives it)
        crosses = split.crosses is not None
        inputs_free = not split.compute and not split.given  # no rule looks at an op's inputs (_inputs, _foreign)
        passed_over = self._passed_over
        columns = (cols[k] for k in ("kind", "row", "rank", "label", "name", "op_kind"))
        for i, (kind, row, rank, label, name, code) in enumerate(zip(*columns)):
            if kind == CODE_RECV:
                rows_got[rank].append(row)
                last[rank] = i
                # what a device received is never foreign there (the names it equals arrived with it: _foreign)
                payload = payloads[row] if row < len(payloads) else None
                settled[(rank, id(payload))] = payload
            elif kind == CODE_SEND:
                found = labels.get(label) if label >= 0 else (None, None, "")
                if found is None:
                    found = labels[label] = _label_of(t.label_text(label, -1, -1))
                coll = found[1]
                if coll is None and tags[row] >= TAG_BASE:  # a collective's tag under another label (as _message)
                    coll = disguised_call(t.label_text(label, -1, -1) if label >= 0 else None)
                if coll is None and crosses:  # a message of the program's own, on a boundary with rules
                    named = extra.get(row)
                    if named is None or named[0] is None or not self._may_cross(named[0], rank, dsts[row]):
                        self._message(i, t.message_at_row(row))
                    else:  # a name that may cross here: only counted (as _message and _crossing say it)
                        self._count(i, rank, sizes[sigs[row]])
                    continue
                self._count(i, rank, sizes[sigs[row]])
                if coll is not None:  # a collective's message (as _message says it)
                    call = found[2]
                    calls[rank].add(call)
                    calls[dsts[row]].add(call)
                    if not split.allows(coll):
                        self._collective(i, rank, coll, t.message_at_row(row))
            elif code != FREE:
                last[rank] = i
                inputs, output = op_payloads[row] if row < len(op_payloads) else (None, None)
                if type(output) is MetaArray:
                    continue
                if label >= 0:  # a collective's own step (as _record says it)
                    found = labels.get(label)
                    if found is None:
                        found = labels[label] = _label_of(t.label_text(label, -1, -1))
                    native, coll, call = found
                    if native is not None or (coll is not None and call in calls[rank]):
                        if native is None or split.allows(native[0]):
                            collected[rank].append(output)
                            continue
                        self._record(i, OP_EVENT[code], t.op_at_row(row))  # a native collective the split forbids
                        continue
                text = names[name]
                test, given = rules(text)
                if code == HOLD:
                    inputs = None
                if inputs and not inputs_free:  # each input plain already (a weight, a value read twice) or asked now
                    for x in inputs:
                        if (rank, id(x)) not in plain:
                            free = passed_over(rank, inputs)
                            break
                    else:
                        free = True
                else:
                    free = inputs_free
                if (
                    (test is not None and not test(rank))
                    or (given and code == HOLD)
                    or (inputs is not None and not (inputs and free))
                ):  # a rule to look at: the record's walk, with what the columns said
                    label_text = t.label_text(label, -1, -1)
                    self._record(i, OP_EVENT[code], _KnownOp(t, row, rank, text, label_text, inputs, output))
                else:
                    own[rank].append((text, output))
                    own_names[rank].add(text)
                whole = exact.get(row)
                if whole is not None:  # what the model says this name holds, byte for byte (_identify, _wholes_of)
                    ref = rank_refs[rank]
                    if ref is None:
                        ref = rank_refs[rank] = self.ref_of(rank)
                    model_of[(id(ref), id(output))] = text
                    if whole and (test is None or given or test(rank)):
                        # the model's own value of a name this device may hold: never foreign here (_foreign)
                        settled[(rank, id(output))] = output
        return last

    def _passed_over(self, rank: int, inputs: Any) -> bool:
        """Whether no rule on an op's inputs can say anything of these, so that the op needs no record: none foreign
        on this device (``_foreign``: each asked once, and most are settled before, as what the device received or
        the model's own value of a name it may hold) and none the whole of an input given to it in part
        (``_wholes_of``). Each input found plain is remembered (a weight is read by every microbatch)."""
        settled, plain = self._settled, self._plain
        ref = None
        for x in inputs:
            key = (rank, id(x))
            if key in plain:
                continue
            if key not in settled:
                if self.split.compute and self._foreign_names(rank, x):
                    return False  # (left unsettled: the record's walk tells it)
                settled[key] = x
            if ref is None:
                ref = self.ref_of(rank)
            if self._parts_given(rank, ref) and self._wholes_of(rank, ref, x):
                return False
            plain[key] = x
        return True

    def _may_cross(self, name: str, src: int, dst: int) -> bool:
        """Whether a message received under ``name`` may cross from ``src`` to ``dst`` (``_crossing``: by its name, or
        by the value the name stands for)."""
        if self.split.may_cross(name, src, dst):
            return True
        alias = self.ref_of(dst).aliases.get(name)
        return alias is not None and self.split.may_cross(alias, src, dst)


def _label_of(text: str) -> tuple[Any, str | None, str]:
    """What a label says for the split: (the native collective it calls, the collective it belongs to, its call).
    The same for a message's label with its step and chunk after it (``op_kind`` and the call read its first word)."""
    return native_call(text), op_kind(text), text.split(" ", 1)[0]


class _KnownOp:
    """An op as the rules read it, with the fields the column walk has read already (its device, name, label, inputs
    and output), not read from its row again for each; the rest, and the record a violation keeps, made from its
    row when asked (``record``)."""

    __slots__ = ("_trace", "_row", "rank", "name", "label", "inputs", "output")

    def __init__(self, trace: Any, row: int, rank: int, name: str, label: str | None, inputs: Any, output: Any):
        self._trace, self._row = trace, row
        self.rank, self.name, self.label, self.inputs, self.output = rank, name, label, inputs, output

    @property
    def index(self) -> Any:
        return self.record().index

    def record(self) -> Any:
        """The trace's own record of this op (``ColumnarTrace.op_at_row``)."""
        return self._trace.op_at_row(self._row)
