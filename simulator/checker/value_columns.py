"""The value check's walk over a columnar trace: the trace's columns read in order, a record made only for an event
that must be looked at, and the hot path of every op and named message with no record and few calls.

Most values a run holds are, byte for byte, the model's: a message under its name, an op's output and its inputs.
Those are compared here by their bytes (the same bytes are equal under any tolerance) and counted as the walk over
records counts them. Float64 values off in their last bits (sums added in another order) are taken as right as the
walk meets them and held to the tolerance's lower bound together, in one NumPy expression per shape (``_close``);
a guess found wrong makes the check again, each value compared as it comes (``_Checker.report``). Anything else
(another value, a partial sum, a name the model lacks, an input equal to two of its values) goes to the record's
handlers in run_check.py (``_send``, ``_op_values``), which say what they always said. ``_Checker`` holds this as a
mixin; what the walk finds of each op (its output the model's byte for byte: ``exact_rows``) the split walk reads.

A long stretch of events that compare nothing (a ring all-reduce booked whole: its receives, unnamed chunks and
reductions of names the model lacks) only says who acted last and where each value came from: that is worked out for
the whole stretch in a few NumPy steps (``_bookkeeping``), leaving what the walk one event at a time would leave; for a
ring whose payloads' objects are not made yet, where each value came from is kept by row (``LateOrigins``), so that
the check makes none of them unless something it reports needs them.
"""

from __future__ import annotations

from collections import defaultdict
from operator import itemgetter
from typing import Any

import numpy as np

from ..core.ordering import CODE_OP, CODE_RECV, CODE_SEND
from ..core.rows import FREE, HOLD, MSG
from .compare import _within, lower_tolerance, plainly_close, same, same_bytes
from .expected import _index_key

_OUTPUT = itemgetter(1)  # an op's output in its payloads (inputs, output)
_NO_EXTRA = (None, None, None)  # an op's (index, doc, partial) where its row has none
_F64 = np.dtype(np.float64)
_INF = float("inf")
_DEFERRED_MOST = 32  # pairs taken as right before they are held to it together
_SPAN_LEAST = 256  # events of bookkeeping alone in a row that are done in whole-array steps (fewer: one by one)


class GuessedWrong(Exception):
    """A pair of values the columnar walk took as plainly close is not (``_ValueColumns._close``): the check is made
    again, each value compared as it comes."""


class _ValueColumns:
    """The columnar walk (mixed into ``run_check._Checker``, whose handlers and memory it uses)."""

    def _walk_columns(self) -> None:
        """The walk over a columnar trace, reading its columns (``event_columns``): a record is made only for an
        event a handler must look at. A collective's unnamed chunk and its own reductions (labelled, a name
        the reference does not know) and every receive only say who acted last and where a value came from,
        as ``_send``, ``_op`` and ``_recv`` would, without a record per event; a long stretch of nothing else (a
        ring all-reduce booked whole) says it in a few whole-array steps (``_bookkeeping``)."""
        t = self.trace
        arrays = self._event_arrays = t.event_columns()
        spans = _bookkeeping_spans(arrays, t.recorder.msg_extra)
        if not spans:  # (a program's own messages and ops throughout: the walk event by event, as ever)
            self._walk_events(self.column_lists(), 0, t.recorder.msg_payloads, t.recorder.op_payloads)
            return
        at = 0
        for a, b in spans:
            if at < a:
                self._walk_stretch(at, a)
            if not self._bookkeeping(a, b):  # (a reduction of a name the model knows: looked at event by event)
                self._walk_stretch(a, b)
            at = b
        if at < len(arrays["kind"]):
            self._walk_stretch(at, len(arrays["kind"]))

    def column_lists(self) -> dict[str, list] | None:
        """The walked trace's event columns as lists (the split walk reads them too), made once when first asked."""
        if self.columns is None and self._event_arrays is not None:
            self.columns = {k: v.tolist() for k, v in self._event_arrays.items()}
        return self.columns

    def _walk_stretch(self, a: int, b: int) -> None:
        """Events ``a`` to ``b`` one at a time, with the payloads of their rows made (and no others: a ring booked
        whole that only a stretch of bookkeeping reads makes none of its objects)."""
        arrays, rec = self._event_arrays, self.trace.recorder
        if rec.all_made:
            payloads, op_payloads = rec.msg_payloads, rec.op_payloads
        else:
            kind, row = arrays["kind"][a:b], arrays["row"][a:b]
            reads = kind == CODE_RECV  # (what the walk reads a payload of: receives, named sends, ops but frees)
            if rec.msg_extra:
                if self._extra_rows is None:  # (which messages have a name or an index, by row: asked once)
                    self._extra_rows = np.zeros(len(rec.msgs) // MSG.size, bool)
                    self._extra_rows[np.fromiter(rec.msg_extra, np.int64, len(rec.msg_extra))] = True
                sends = np.flatnonzero(kind == CODE_SEND)
                reads[sends] = self._extra_rows[row[sends]]
            ops = row[(kind == CODE_OP) & (arrays["op_kind"][a:b] != FREE)]
            payloads, op_payloads = rec.make_rows(row[reads], ops)
        self._walk_events(_lists(arrays, a, b), a, payloads, op_payloads)

    def _walk_events(self, cols: dict[str, list], start: int, payloads: list, op_payloads: list) -> None:
        """Events ``start``, ``start + 1``, ... of a columnar trace, one at a time, from their columns ``cols``
        (``payloads``, ``op_payloads``: the recorder's, with these events' made)."""
        t = self.trace
        rec = t.recorder
        extra, names = rec.msg_extra, rec.names.values
        op_extra = rec.op_extra
        last, origin = self.last_event, self.origin
        dsts = self._dsts  # (each message's destination, read once per check where one is named)
        plain_op = self._plain_op
        columns = (cols[k] for k in ("kind", "row", "rank", "label", "name", "op_kind"))
        for i, (kind, row, rank, label, name, op_kind) in enumerate(zip(*columns), start):
            if kind == CODE_RECV:
                last[rank] = i
                origin[rank][id(payloads[row])] = row << 1  # (made a record if looked up: _Origins)
            elif kind == CODE_SEND:
                named = extra.get(row)
                if named is not None and named[0] is not None:
                    if dsts is None:
                        dsts = self._dsts = rec.table("msgs", copy=not t.finished)["dst"].tolist()
                    if not self._named_message(i, rank, dsts[row], named[0], named[1], payloads[row]):
                        self._send(i, t.message_at_row(row))
                elif label < 0:
                    self._send(i, t.message_at_row(row))
                else:  # a collective's chunk, unnamed: checked where the collective ends
                    last[rank] = i
            elif op_kind != FREE:
                text = names[name]
                if op_kind != HOLD and label >= 0 and not self._knows(self._ref(rank), text):
                    last[rank] = i  # a collective's own reduction: checked through its result
                    origin[rank][id(op_payloads[row][1])] = row << 1 | 1
                    continue
                inputs, output = op_payloads[row] if row < len(op_payloads) else (None, None)
                extra_row = op_extra.get(row)
                if extra_row is None:
                    if plain_op(i, row, rank, text, output, inputs):
                        continue
                elif extra_row[2] is None and plain_op(i, row, rank, text, output, inputs, extra_row[0]):
                    continue
                index, _, partial = extra_row or _NO_EXTRA
                if op_kind == HOLD:
                    self._op_values(i, row, rank, text, output, inputs, index, partial, label >= 0, "held value")
                else:
                    self._op_values(i, row, rank, text, output, inputs, index, partial, label >= 0)

    def _bookkeeping(self, a: int, b: int) -> bool:
        """Events ``a`` to ``b`` (receives, a collective's unnamed chunks, its reductions, frees: ``_bookkeeping_spans``)
        done as ``_walk_events`` does them, in a few whole-array steps: each device's last event, and where each value
        a device got came from (the last event that gave it, as one after another would leave it; for payloads not
        made yet, kept by row until they are: ``LateOrigins``). False, with nothing done, where one of its reductions
        has a name the model knows (then the walk looks at each)."""
        rec, arrays = self.trace.recorder, self._event_arrays
        kind, row, rank = arrays["kind"][a:b], arrays["row"][a:b], arrays["rank"][a:b]
        is_op = (kind == CODE_OP) & (arrays["op_kind"][a:b] != FREE)
        if is_op.any() and self._knows_some(rank[is_op], arrays["name"][a:b][is_op]):
            return False
        acting = (kind != CODE_OP) | is_op  # (a free says nothing)
        latest = np.full(self.world_size, -1)
        np.maximum.at(latest, rank[acting], np.flatnonzero(acting) + a)
        last = self.last_event
        for r in np.flatnonzero(latest >= 0).tolist():
            last[r] = int(latest[r])
        gives = np.flatnonzero((kind == CODE_RECV) | is_op)  # what each gives: the payload received, the op's output
        took, rows, by = is_op[gives], row[gives], rank[gives]
        late = _unmade(rec, rows, took)
        if late.all():  # (their objects not made: none of them can be looked up until they are)
            self._late.add(by, rows, took)
            return True
        if late.any():
            self._late.add(by[late], rows[late], took[late])
            now = ~late
            took, rows, by = took[now], rows[now], by[now]
        _put_origins(self.origin, by, rows, took, _ids(rec, rows, took), self.world_size)
        return True

    def _knows_some(self, ranks: np.ndarray, names: np.ndarray) -> bool:
        """Whether a device's reference knows the name of one of these reductions (devices ``ranks``, interned names
        ``names``, in event order). Each device's reference is asked for in the order the walk would ask for it."""
        first = np.full(self.world_size, len(ranks))  # each device's first reduction here (none: len(ranks))
        np.minimum.at(first, ranks, np.arange(len(ranks)))
        members = np.flatnonzero(first < len(ranks))
        refs: dict[int, Any] = {}
        for r in members[np.argsort(first[members], kind="stable")].tolist():
            ref = self._ref(r)
            refs[id(ref)] = ref
        texts = self.trace.recorder.names.values
        # (every device's reference asked of every name: one knowing it will do; a ring's reductions share one name)
        asked = [int(names[0])] if names.min() == names.max() else np.unique(names).tolist()
        return any(self._knows(ref, texts[n]) for ref in refs.values() for n in asked)

    def _named_message(self, i: int, src: int, dst: int, name: str, index: Any, payload: Any) -> bool:
        """A named message read off the columns, with no record made: True when it carries the model's value (its
        bytes, or plainly close: ``_close``) and that value equals no other named one (then it is counted as ``_send``
        would count it); False leaves it to ``_send`` (an unknown name, another value, a value to note as ambiguous).
        The hot path of a program that names every receive: a few dictionary look-ups and one comparison of bytes."""
        ref = self.ref_of(dst)
        rid = id(ref)
        if rid not in self.refs:
            self.refs[rid] = ref
        at = _index_key(index)
        if at is None:
            return False
        slot = self._expectations.get((rid, name, at))
        if slot is None:  # (a slot is made for a name the model knows only)
            if not self._knows(ref, name):
                return False
            slot = self._expect(ref, name, index, at)
        expected = slot[0]
        if not same_bytes(payload, expected):
            # other bytes: right if plainly close (as _send's comparison says), and then as ambiguous as it is itself
            if not self._close(payload, expected) or self._ambiguous_now(ref, payload, name, None):
                return False
            ambiguous = False
        else:
            ambiguous = slot[2]  # the same bytes as the expected value: as ambiguous as it is, worked out once
        if ambiguous is None:  # (kept with the reference, per tolerance: a function of its values)
            memo = self._ref_memo(ref, "ambiguous messages")
            ambiguous = memo.get((name, at))
            if ambiguous is None:
                ambiguous = memo[(name, at)] = self._ambiguous(ref, expected, name, None)
            slot[2] = ambiguous
        if ambiguous:
            return False  # it makes a note: said by _send, with the message's words
        self.last_event[src] = i
        produced = self.produced.get(rid)
        if produced is None:
            produced = self.produced[rid] = set()
        produced.add(name)
        self.checked += 1
        return True

    def _plain_op(self, i: int, row: int, rank: int, name: str, output: Any, inputs: Any, index: Any = None) -> bool:
        """An op or held value of a columnar trace, not a partial sum, whose output is, byte for byte, what the model
        says its name (and index) holds, or plainly within its tolerance (``plainly_close``): counted, and its inputs
        compared, as ``_op_values`` counts and compares them, with no call for an input that is the model's byte for
        byte and known to equal no two of its values (a weight read by every microbatch). False, with nothing done,
        leaves it to ``_op_values``."""
        ref = self._rank_refs[rank]
        if ref is None:
            ref = self._rank_refs[rank] = self._ref(rank)
        rid = id(ref)
        if index is None:
            at: Any = ()
            expected = ref.values.get(name)
            whole = expected is not None and name not in ref.aliases  # then ref.expected(name) is this value itself
        else:
            at, whole = _index_key(index), False
            if at is None:
                return False
        if not whole:
            known = self._known.get((rid, name))
            if known is None:
                known = self._knows(ref, name)
            if not known:
                return False
            slot = self._expectations.get((rid, name, at))
            if slot is None:
                slot = self._expect(ref, name, index, at)
            expected = slot[0]
        exact = same_bytes(output, expected)
        if not exact and not self._close(output, expected):
            return False  # (within the tolerance's lower bound: right, whatever its bits, as _compare says)
        self.last_event[rank] = i
        self.origin[rank][id(output)] = row << 1 | 1
        produced = self.produced.get(rid)
        if produced is None:
            produced = self.produced[rid] = set()
        produced.add(name)
        self.checked += 1
        if index is not None:
            return True  # (an op on a block: its inputs are not compared, as _op_values says)
        if exact:
            self.exact_rows[row] = whole  # (what the split check knows of this value: split_columns.py)
        ref_inputs = ref.inputs.get(name) if inputs is not None else None
        if ref_inputs is None or len(ref_inputs) != len(inputs):
            return True
        for pos, (found, exp) in enumerate(zip(inputs, ref_inputs)):
            self.checked += 1
            known = self._exact_input(ref, found, exp)
            if known:
                continue
            if known is False or self._close(found, exp) or same(found, exp, self.rtol, self.atol):
                self._ambiguous(ref, found, None, lambda pos=pos: f"input {pos} of op {name} on device {rank} is")
        return True

    def _exact_input(self, ref: Any, found: Any, expected: Any) -> bool | None:
        """An op's input against the model's: True when it has the model's bytes and they equal at most one of the
        model's values (then ``same`` says True and ``_ambiguous`` says nothing), False when it has its bytes but they
        equal two (a note to make), None for other bytes (``same`` decides). Whether the model's input is plain is
        asked once per reference and tolerance (``_plain_inputs``)."""
        if not same_bytes(found, expected):
            return None
        plain = self._plain_inputs(ref)
        known = plain.get(id(expected))
        if known is None or known[0] is not expected:
            names = ref.identify_exact(expected, self.rtol, self.atol)  # (the model's own bytes, mostly)
            if names is not None:  # as _ambiguous_now says: plain unless it equals two values and is not all zeros
                answer = len(names) < 2 or not expected.any()
            else:
                answer = not self._ambiguous_now(ref, expected, None, None)
            known = plain[id(expected)] = (expected, answer)
        return known[1]

    def _plain_inputs(self, ref: Any) -> dict[int, tuple[Any, bool]]:
        """id of one of the model's op inputs -> (that input, whether it equals at most one of the model's values):
        a found input with its bytes is as plain as it is. Kept with the reference per tolerance, so that a check of
        another run of the same exercise asks nothing again (each answer holds its input: an id is never another's)."""
        return self._ref_memo(ref, "plain inputs")

    def _close(self, found: Any, expected: Any) -> bool:
        """``plainly_close(found, expected)``; for two float64 arrays of one shape, taken as so for now and held to it
        with every other such pair once the walk is done, in one NumPy expression per shape (``deferred_hold``): a
        check whose guess was wrong is made again comparing each as it comes (``check``), so that its report is the
        one the walk would have made."""
        deferred = self._deferred
        if (
            deferred is not None
            and type(found) is np.ndarray
            and type(expected) is np.ndarray
            and found.dtype == _F64
            and expected.dtype == _F64
            and found.shape == expected.shape
            and found.size
            and _near(found.item(0), expected.item(0))
            and _near(found.item(-1), expected.item(-1))
            and _near(found.item(found.size // 2), expected.item(found.size // 2))
            and _near(found.item(found.size // 4), expected.item(found.size // 4))
            and _near(found.item(3 * found.size // 4), expected.item(3 * found.size // 4))
        ):  # (a value off at its first, last, middle or quarter elements is compared now: a wrong program's check is
            # seldom made twice)
            deferred.append((found, expected))
            if len(deferred) >= _DEFERRED_MOST:  # (held to it now and then: a wrong guess is found early)
                if not self.deferred_hold():
                    raise GuessedWrong
                deferred.clear()
            return True
        return plainly_close(found, expected, self.rtol, self.atol)

    def deferred_hold(self) -> bool:
        """Whether every pair ``_close`` took as right is: all within ``lower_tolerance`` at once, element for element;
        or, where some pair of a shape is not, each pair of it the same under its own tolerance (``same``, as the walk
        comparing each as it comes would have found it, and then done just what the guess did)."""
        by_shape: dict[tuple, tuple[list, list]] = {}
        for found, expected in self._deferred or ():
            founds, expecteds = by_shape.setdefault(found.shape, ([], []))
            founds.append(found)
            expecteds.append(expected)
        for founds, expecteds in by_shape.values():
            tol = lower_tolerance(expecteds[0], self.rtol, self.atol)  # (the same for every float64 value)
            if _within(np.stack(founds), np.stack(expecteds), tol) is True:
                continue
            for found, expected in zip(founds, expecteds):
                if _within(found, expected, tol) is not True and not same(found, expected, self.rtol, self.atol):
                    return False
        return True


class LateOrigins:
    """Where values came from whose objects are not made yet (a ring booked whole makes its payloads' objects when
    they are first read): the devices, rows and kinds of a stretch's receives and reductions, by row, in event
    order. Until a block of payloads is made no object of it exists, so no look-up by identity can be for one; once
    made (by whatever read it: a record of a divergence, an explanation), ``settle`` puts its objects' origins in
    the devices' maps, as the walk would have, under what later events put there (a later event's word stands; an
    object is in one block only)."""

    def __init__(self, recorder: Any) -> None:
        self.rec = recorder
        # (devices, rows, took, their rows' span: first and last message row, first and last op row) per stretch
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int, int, int]]] = []
        self.seen = -1  # the recorder's count of blocks made when last settled

    def add(self, by: np.ndarray, rows: np.ndarray, took: np.ndarray) -> None:
        if not len(rows):
            return
        if not self.pending:
            self.seen = self.rec.blocks_made  # (they are not made now: nothing to settle until another block is)
        msgs, ops = rows[~took], rows[took]
        span = (
            int(msgs.min()) if len(msgs) else _NO_ROW,
            int(msgs.max()) if len(msgs) else -1,
            int(ops.min()) if len(ops) else _NO_ROW,
            int(ops.max()) if len(ops) else -1,
        )
        self.pending.append((by, rows, took, span))

    def settle(self, origin: list[dict]) -> bool:
        """Put in ``origin`` (one map per device) what has been made since last asked; True where anything was."""
        if not self.pending or self.rec.blocks_made == self.seen:
            return False
        made = self.rec.made_blocks[self.seen :]  # the blocks made since: only stretches with rows among them can
        self.seen = self.rec.blocks_made  # ... have anything made (no stretch's rows asked again each time)
        m_lo, m_hi = min(b[0] for b in made), max(b[0] + b[1] for b in made)
        o_lo, o_hi = min(b[2] for b in made), max(b[2] + b[3] for b in made)
        ready, still = [], []
        for stretch in self.pending:
            by, rows, took, (first_msg, last_msg, first_op, last_op) = stretch
            if (last_msg < m_lo or first_msg >= m_hi) and (last_op < o_lo or first_op >= o_hi):
                still.append(stretch)
                continue
            late = _unmade(self.rec, rows, took)
            if late.any():
                still.append((by[late], rows[late], took[late], stretch[3]))
            if not late.all():
                ready.append((by[~late], rows[~late], took[~late]))
        self.pending = still
        if not ready:
            return False
        by, rows, took = (np.concatenate(parts) for parts in zip(*ready))  # (in event order: a later word stands)
        found: dict[int, dict] = defaultdict(dict)
        _put_origins(found, by, rows, took, _ids(self.rec, rows, took), len(origin))
        for r, kept in found.items():  # ... and what the walk put there since stands over it
            mine = origin[r]
            for key in [key for key in kept if key in mine]:  # (only what is settled is walked, never the whole map)
                del kept[key]
            mine.update(kept)
        return True


_NO_ROW = 1 << 62  # a stretch's first row of a kind it has none of (past every block)


def _unmade(rec: Any, rows: np.ndarray, took: np.ndarray) -> np.ndarray:
    """Which of these rows (op rows where ``took``, message rows elsewhere) have payloads not made yet."""
    msgs, ops = rec.unmade(rows, rows)  # (each row asked both ways, then the right answer taken: no gathers)
    return np.where(took, ops, msgs)


def _ids(rec: Any, rows: np.ndarray, took: np.ndarray) -> np.ndarray:
    """The identity of what each row gives (made): a message's payload, an op's output (``took``)."""
    msgs, ops = rec.make_rows(rows[~took], rows[took])
    got, made = rows[~took].tolist(), rows[took].tolist()
    ids = np.empty(len(rows), np.uint64)
    ids[~took] = np.fromiter(map(id, map(msgs.__getitem__, got)), np.uint64, len(got))
    ids[took] = np.fromiter(map(id, map(_OUTPUT, map(ops.__getitem__, made))), np.uint64, len(made))
    return ids


def _put_origins(
    origin: Any, by: np.ndarray, rows: np.ndarray, took: np.ndarray, ids: np.ndarray, world_size: int
) -> None:
    """Each device's map of origins given, in event order, what each row gave it (a later one's word stands)."""
    by = by.astype(np.int32 if world_size > 1 << 15 else np.int16)  # (sorted in linear time)
    order = np.argsort(by, kind="stable")  # by device, each device's in event order
    codes, ids, by = (rows << 1 | took)[order].tolist(), ids[order].tolist(), by[order]
    starts = np.flatnonzero(np.diff(by, prepend=-1)).tolist()  # where each device's entries begin
    for s, e in zip(starts, [*starts[1:], len(rows)]):
        origin[int(by[s])].update(zip(ids[s:e], codes[s:e]))


def _near(a: float, b: float) -> bool:
    """Whether two numbers agree to about nine digits (sums added in another order differ in their last two or three):
    whether a guess that two arrays are plainly close is worth taking."""
    if a == b:
        return True
    d = abs(a - b)
    return d <= 1e-9 * (abs(a) + abs(b)) and d != _INF  # (one infinite, the other not: far apart)


def _bookkeeping_spans(arrays: dict[str, np.ndarray], extra: dict) -> list[tuple[int, int]]:
    """Where a columnar trace has at least ``_SPAN_LEAST`` events in a row that each only say who acted last and where
    a value came from, by their columns alone: receives, a collective's (labelled) messages that carry no name, its
    reductions (labelled ops, not held values), and frees; as (first, past the last) event. Whether a reduction's
    name is one the model knows is asked of each span (``_bookkeeping``)."""
    kind, label, op_kind = arrays["kind"], arrays["label"], arrays["op_kind"]
    if len(kind) < _SPAN_LEAST:
        return []
    send = kind == CODE_SEND
    plain = (kind == CODE_RECV) | (send & (label >= 0)) | ((kind == CODE_OP) & (op_kind == FREE))
    plain |= (kind == CODE_OP) & (label >= 0) & (op_kind != HOLD)
    spans = _runs(plain)
    named = [r for r, (name, _) in extra.items() if name is not None] if spans else None
    if named:  # a named message is the walk's to compare: it ends a stretch
        plain[send & np.isin(arrays["row"], named)] = False
        spans = _runs(plain)
    return spans


def _runs(plain: np.ndarray) -> list[tuple[int, int]]:
    """Each run of at least ``_SPAN_LEAST`` True values in a row, as (first, past the last)."""
    edges = np.flatnonzero(np.diff(plain.view(np.int8), prepend=0, append=0))  # each run's start and end
    starts, ends = edges[::2], edges[1::2]
    long = ends - starts >= _SPAN_LEAST
    return list(zip(starts[long].tolist(), ends[long].tolist()))


def _lists(arrays: dict[str, np.ndarray], a: int, b: int) -> dict[str, list]:
    """Events ``a`` to ``b``'s columns as lists."""
    return {k: v[a:b].tolist() for k, v in arrays.items()}
