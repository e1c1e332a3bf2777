"""The checker: a parallel run against the same model on one device, with one of three verdicts.

``check(run, reference)`` walks the run's events in order and compares every value it can place in the
single-device run:

- a message whose receiver named what it carries (``recv(..., name="A")``), or, with no name, the
  reference value it equals (so an unnamed message is placed by its value);
- each held value and op output of a name the reference knows (``index=`` selects the block a device
  holds; ``partial=`` says the device holds one term of a sum over a group, and the terms are added up
  and compared once every member has computed its own);
- each op's inputs, for ops computed whole;
- what each device returns, against what the model returns (a returned shard is compared with its
  part of the result, and the parts must cover the whole result).

The verdict is one of three:

- **passed**: every named value and the result were compared and are equal, and nothing was left out;
- **FAILED**: the first place the run differs, with what was expected, what was found and, where it
  can tell, why ("[3.] is x, the model's raw input"; "4 times what it should be"; "a partial sum");
- **not verified**: nothing differs, but something could not be compared: a name the reference does
  not know, a reference value no device computed, a message that carries no value of the model, a
  result no device returned, or an input for which a correct value also equals another named value.
  ``ok`` is True only for passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import diagnose
from ..compare import difference, same, show, structured
from ..reference import NO_RESULT, Reference, part
from ..trace import Message, Op, Trace

References = Reference | Mapping[int, Reference]

PASSED, FAILED, NOT_VERIFIED = "passed", "FAILED", "not verified"


@dataclass
class Divergence:
    """The first place a parallel run differs from the single-device run."""

    where: str  # "message", "input", "output", "held value", "partial sums", "result"
    rank: int  # the device that holds the wrong value
    event: int  # index into trace.events (for a result: the device's last event)
    record: Message | Op | None
    name: str
    expected: Any
    found: Any
    is_also: list[str]  # other reference values equal to the found one
    reference: Reference
    position: int | None = None  # which input of an op
    part_of: list[str] = field(default_factory=list)  # reference values whose same part equals the found one
    hint: str | None = None  # a pattern in the difference (scaled, blocks reordered, a partial sum), in words
    path: str = ""  # for a result: which part of a structured result ("['dW1']")

    def explain(self) -> str:
        exp, got = show(self.expected), show(self.found)
        what = self.reference.describe(self.name)
        rec = self.record
        if self.where == "message":
            head = (
                f"{_message(rec)} carried {got}, but device {rec.dst} should have received {what} = {exp}."
                if rec.name is not None
                else f"{_message(rec)} carried {got}, but it should carry {what} = {exp}."
            )
        elif self.where == "input":
            head = (
                f"op {rec.name} on device {rec.rank} got {got} as input {self.position}, but on one device it is {exp}."
            )
        elif self.where == "held value":
            head = f"device {rec.rank} holds {got} as {what}, but it should hold {exp}."
        elif self.where == "partial sums":
            head = f"the partial sums of {self.name} on devices {self.path} add up to {got}, but {what} is {exp} on one device."
        elif self.where == "result":
            head = f"device {self.rank} returned {got} as the result{self.path}, but on one device it is {exp}."
        else:
            head = f"op {rec.name} on device {rec.rank} computed {got}, but {what} is {exp} on one device."
        if self.is_also:
            small = structured(self.found) or np.asarray(self.found).size <= 16
            value = show(self.found) if small else "The value found"
            head += " " + value + " is " + " and ".join(self.reference.describe(n) for n in self.is_also) + "."
        elif self.part_of:
            head += (
                f" What arrived is the same part ({diagnose.show_index(getattr(rec, 'index', None))}) of "
                + " and ".join(self.reference.describe(n) for n in self.part_of)
                + "."
            )
        if self.hint:
            head += " " + self.hint
        more = None if structured(self.found) or structured(self.expected) else difference(self.found, self.expected)
        if more and np.asarray(self.found).shape == np.asarray(self.expected).shape:
            head += " " + more
        return head


@dataclass
class Unchecked:
    """Something the checker could not compare, and what to do about it."""

    kind: str  # "unknown name", "never computed", "unplaced message", "result", "partial sums"
    text: str
    name: str | None = None  # the name in question, for an unknown name


@dataclass
class CheckReport:
    """The verdict of ``check``: passed, FAILED (with the first divergence), or not verified (with why)."""

    first: Divergence | None
    checked: int  # values compared
    divergent: int  # values that differ (the first and everything downstream)
    unchecked: list[Unchecked] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # values these inputs cannot tell apart (see _ambiguous)

    @property
    def verdict(self) -> str:
        if self.first is not None:
            return FAILED
        return NOT_VERIFIED if self.unchecked else PASSED

    @property
    def ok(self) -> bool:
        """True only when the run passed: every value compared and equal, nothing left unchecked."""
        return self.verdict == PASSED

    @property
    def unknown(self) -> list[str]:
        """Names in the run that the reference does not have."""
        return [u.name for u in self.unchecked if u.kind == "unknown name"]

    def __str__(self) -> str:
        return self._verdict_text() + _notes(self.notes)

    def _verdict_text(self) -> str:
        if self.verdict == PASSED:
            return f"check passed: {self.checked} values and the result match the single-device run"
        if self.verdict == FAILED:
            text = f"check FAILED at the first divergence: {self.first.explain()}"
            if self.divergent > 1:
                text += f"\n  ({self.divergent - 1} later value(s) differ too, downstream of it)"
            if self.unchecked:
                text += "\n  also not checked:" + _bullets(self.unchecked, limit=3)
            return text
        n = len(self.unchecked)
        return (
            f"check NOT VERIFIED: the {self.checked} values compared match the single-device run, but "
            f"{n} thing{'s' if n > 1 else ''} could not be checked:" + _bullets(self.unchecked)
        )

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def _bullets(items: list[Unchecked], limit: int = 12) -> str:
    lines = [f"\n  - {u.text}" for u in items[:limit]]
    if len(items) > limit:
        lines.append(f"\n  - ... and {len(items) - limit} more")
    return "".join(lines)


def _notes(notes: list[str], limit: int = 3) -> str:
    if not notes:
        return ""
    more = f"\n  (and {len(notes) - limit} more like it)" if len(notes) > limit else ""
    return "\n  note: " + "\n  note: ".join(notes[:limit]) + more


def _message(rec: Message) -> str:
    via = f"({rec.label})" if rec.label else f"(tag {rec.tag})"
    return f"message #{rec.id} from device {rec.src} to device {rec.dst} {via}"


def check(
    run: Any,
    reference: References | Callable[[int], Reference],
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> CheckReport:
    """Compare a run with single-device reference(s); say passed, FAILED (first divergence) or not verified.

    run: a ``RunResult`` (or a real run's result, or a ``Trace``); it must have kept its payloads.
    reference: one ``Reference`` for every device, a mapping rank -> Reference (e.g. replicas fed
    different inputs), or a function of the rank.
    rtol, atol: the tolerance for floats (default: by dtype, see ``simulator.compare``).
    """
    trace = run if isinstance(run, Trace) else run.trace
    outputs = getattr(run, "outputs", None) if not isinstance(run, Trace) else None
    if outputs is None:
        outputs = trace.outputs
    return _Checker(trace, outputs, _resolver(reference), rtol, atol).report()


@dataclass
class _Partial:
    """One device's term of a sum over a group (an op or hold with ``partial=``)."""

    rank: int
    event: int
    record: Op


class _Checker:
    def __init__(self, trace: Trace, outputs: list | None, ref_of: Callable[[int], Reference], rtol, atol):
        self.trace, self.outputs, self.ref_of = trace, outputs, ref_of
        self.rtol, self.atol = rtol, atol
        self.world_size = trace.world_size
        self.checked = 0
        self.diverged: list[Divergence] = []
        self.unchecked: list[Unchecked] = []
        self.notes: list[str] = []
        self._seen_unknown: set[tuple[int, str]] = set()
        self.produced: dict[int, set[str]] = {}  # id(reference) -> names some device computed
        self.refs: dict[int, Reference] = {}
        self.origin: list[dict[int, Op | Message]] = [{} for _ in range(trace.world_size)]  # id(value) -> record
        self.partials: dict[tuple, list[list[_Partial]]] = {}  # (name, index, group) -> terms per member
        self.partial_records: list[list[Op]] = [[] for _ in range(trace.world_size)]  # per device
        self.last_event = [-1] * trace.world_size
        self._block_searches = 64

    # ---- the walk ---------------------------------------------------------------------------
    def report(self) -> CheckReport:
        if not self.trace.payloads:
            raise ValueError("check needs the payloads: run the world with keep_payloads=True")
        handlers = {"send": self._send, "recv": self._recv, "op": self._op, "hold": self._hold}
        for i, (kind, rec) in enumerate(self.trace.events):
            handler = handlers.get(kind)
            if handler is not None:
                handler(i, rec)
        self._results()
        self._unfinished_partials()
        self._never_computed()
        first = min(self.diverged, key=lambda d: d.event) if self.diverged else None
        if first is not None:
            self._explain(first)
        return CheckReport(first, self.checked, len(self.diverged), self.unchecked, self.notes)

    def _ref(self, rank: int) -> Reference:
        ref = self.ref_of(rank)
        self.refs[id(ref)] = ref
        return ref

    def _compare(self, where, rank, i, rec, name, expected, found, position=None, path="") -> bool:
        self.checked += 1
        if same(found, expected, self.rtol, self.atol):
            return True
        self.diverged.append(
            Divergence(where, rank, i, rec, name, expected, found, [], self._ref(rank), position, path=path)
        )
        return False

    def _send(self, i: int, msg: Message) -> None:
        self.last_event[msg.src] = i
        if msg.name is None:
            if msg.label is None:  # a collective's chunks are checked where the collective ends
                self._place(i, msg)
            return
        ref = self._ref(msg.dst)
        if not ref.knows(msg.name):
            self._unknown(msg.dst, msg.name, msg.payload, f"(what message #{msg.id} from device {msg.src} carries)")
            return
        self.produced.setdefault(id(ref), set()).add(msg.name)
        expected = ref.expected(msg.name, msg.index)
        if self._compare("message", msg.dst, i, msg, msg.name, expected, msg.payload):
            self._ambiguous(ref, msg.payload, msg.name, f"{_message(msg)} carries {msg.name} =")

    def _recv(self, i: int, msg: Message) -> None:
        self.last_event[msg.dst] = i
        self.origin[msg.dst][id(msg.payload)] = msg

    def _hold(self, i: int, rec: Op) -> None:
        self._op(i, rec, "held value")

    def _op(self, i: int, rec: Op, where: str = "output") -> None:
        self.last_event[rec.rank] = i
        self.origin[rec.rank][id(rec.output)] = rec
        ref = self._ref(rec.rank)
        if not ref.knows(rec.name):
            if rec.label is None:  # a collective's own reductions are checked through its result
                self._unknown(rec.rank, rec.name, rec.output, "")
            return
        self.produced.setdefault(id(ref), set()).add(rec.name)
        if rec.partial is not None:
            self.partial_records[rec.rank].append(rec)
            self._add_partial(i, rec)
            return
        wrong_before = len(self.diverged)
        output_right = self._compare(where, rec.rank, i, rec, rec.name, ref.expected(rec.name, rec.index), rec.output)
        ref_inputs = ref.inputs.get(rec.name) if rec.index is None and rec.inputs is not None else None
        if ref_inputs is None or len(ref_inputs) != len(rec.inputs):
            return
        if not output_right and not all(_same_role(f, e) for f, e in zip(rec.inputs, ref_inputs)):
            return  # another way to compute it (other inputs, other shapes): the output says it all
        # A wrong output is explained at the first wrong input (B got x, not A), where the input has the
        # shape of the model's, or is a block of it (an op on a shard). A right output from other inputs is
        # another way to compute the same value, not a bug: its inputs are not held against it.
        inputs_wrong = []
        for pos, (found, exp) in enumerate(zip(rec.inputs, ref_inputs)):
            self.checked += 1
            if same(found, exp, self.rtol, self.atol):
                self._ambiguous(ref, found, None, f"input {pos} of op {rec.name} on device {rec.rank} is")
            elif not output_right:
                inputs_wrong.append(Divergence("input", rec.rank, i, rec, rec.name, exp, found, [], ref, pos))
        self.diverged[wrong_before:wrong_before] = inputs_wrong

    # ---- values the reference cannot name --------------------------------------------------------
    def _unknown(self, rank: int, name: str, value: Any, context: str) -> None:
        if (rank, name) in self._seen_unknown:
            return
        self._seen_unknown.add((rank, name))
        ref = self._ref(rank)
        hint = self._identify(ref, value)
        if hint:
            advice = f", but it equals {hint[0]}: name it {hint[1]}"
        else:
            advice = (
                ", and its value is none of the reference's (if it is one term of a sum, name it after the sum "
                "and say partial=True)"
            )
        context = f" {context}" if context else ""
        self.unchecked.append(
            Unchecked("unknown name", f"{name} on device {rank}{context} is not a name in the reference{advice}", name)
        )

    def _place(self, i: int, msg: Message) -> None:
        """An unnamed message: find the reference value it carries, or say that none fits."""
        ref = self._ref(msg.dst)
        if self._identify(ref, msg.payload) or self._partial_of(msg.src, msg.payload):
            self._ambiguous(ref, msg.payload, None, f"{_message(msg)}, with no name, carries")
            return
        self.unchecked.append(
            Unchecked(
                "unplaced message",
                f"{_message(msg)} has no name and carries {show(msg.payload)}, which is no value of the "
                f"single-device run: say what it carries, recv(..., name=...), so it can be checked",
            )
        )

    def _identify(self, ref: Reference, value: Any) -> tuple[str, str] | None:
        """('S1 on one device', 'S1'), or a block of a value with the index= to say, for a value under no name."""
        names = ref.identify(value, rtol=self.rtol, atol=self.atol)
        if names:
            return " and ".join(f"{n} on one device" for n in names[:3]), " or ".join(names[:3])
        if structured(value):
            return None
        a = np.asarray(value)
        if self._block_searches <= 0:  # each search scans every value: a few dozen explain plenty
            return None
        self._block_searches -= 1
        for n, v in ref.values.items():
            b = np.asarray(v)
            if b.dtype.kind in "biuf" and a.dtype.kind in "biuf" and a.ndim == b.ndim and a.size < b.size:
                block = diagnose.block_of(a, b)
                if block is not None:
                    at = diagnose.show_index(block)
                    return f"the block {at} of {n} on one device", f"{n} with index=np.s_{at}"
        return None

    def _ambiguous(self, ref: Reference, value: Any, name: str | None, where: str) -> None:
        """A correct value that also equals another named value: this input cannot tell the two apart.

        ``name`` is the value the slot should hold, where known (a message's name); an op's input or a
        result is ambiguous when two different named values equal it.
        """
        if structured(value):
            return
        a = np.asarray(value)
        if a.dtype.kind not in "biuf" or not np.any(a):
            return  # zeros (fresh buffers, zero gradients) equal each other in every model
        names = ref.identify(value, rtol=self.rtol, atol=self.atol)
        others = [n for n in names if n != name]
        if len(others) >= (1 if name in names else 2):
            self.notes.append(
                f"{where} {show(value)}, but with these inputs "
                + " and ".join(names[:4])
                + " are equal: a program that used one for the other would look the same; try another input"
            )

    # ---- partial sums ----------------------------------------------------------------------------
    def _add_partial(self, i: int, rec: Op) -> None:
        group = rec.partial
        key = (rec.name, repr(rec.index), group)
        terms = self.partials.setdefault(key, [[] for _ in group])
        if rec.rank not in group:
            raise ValueError(f"device {rec.rank} holds a partial sum of {rec.name} over {group}, which omits it")
        terms[group.index(rec.rank)].append(_Partial(rec.rank, i, rec))
        if all(terms):  # every member has its next term: add them up in member order
            parts = [t.pop(0) for t in terms]
            total = parts[0].record.output
            for p in parts[1:]:
                total = total + p.record.output
            ref = self._ref(rec.rank)
            members = ", ".join(map(str, group))
            self._compare(  # the path field says over which devices
                "partial sums", rec.rank, i, rec, rec.name, ref.expected(rec.name, rec.index), total, path=members
            )

    def _partial_of(self, rank: int, value: Any) -> Op | None:
        """The partial-sum record on ``rank`` whose value this is (by identity, then by value)."""
        rec = self.origin[rank].get(id(value))
        if isinstance(rec, Op) and rec.partial is not None:
            return rec
        if structured(value):
            return None
        shape = np.shape(value)
        for rec in self.partial_records[rank]:
            if np.shape(rec.output) == shape and same(value, rec.output, self.rtol, self.atol):
                return rec
        return None

    def _unfinished_partials(self) -> None:
        for (name, _, group), terms in self.partials.items():
            have = [m for m, t in zip(group, terms) if t]
            if have:
                missing = [m for m, t in zip(group, terms) if not t]
                self.unchecked.append(
                    Unchecked(
                        "partial sums",
                        f"the partial sums of {name} over devices {list(group)} were computed on devices {have} "
                        f"only (not on {missing}), so they could not be added up and compared with {name}",
                    )
                )

    # ---- the result ----------------------------------------------------------------------------
    def _results(self) -> None:
        if self.outputs is None:
            self.unchecked.append(Unchecked("result", "the run's return values were not recorded, so not compared"))
            return
        covered: dict[tuple[int, tuple], np.ndarray | bool] = {}
        returned = False
        for rank, out in enumerate(self.outputs):
            if out is None:
                continue
            returned = True
            ref = self._ref(rank)
            if ref.result is NO_RESULT:
                self.unchecked.append(Unchecked("result", f"device {rank} returned a value, but the reference "
                                                          "does not know what the model returns: build it with "
                                                          "Reference.of(model, ...)"))  # fmt: skip
                continue
            for path, leaf, whole in _pairs(out, ref.result):
                self._result_leaf(rank, ref, path, leaf, whole, covered)
        self._coverage(covered, returned)

    def _result_leaf(self, rank, ref: Reference, path: tuple, leaf: Any, whole: Any, covered: dict) -> None:
        label = _path(path)
        if whole is _ABSENT:
            self.unchecked.append(
                Unchecked("result", f"device {rank} returns result{label}, which the model's result does not have")
            )
            return
        event = self.last_event[rank]
        origin = self.origin[rank].get(id(leaf))
        if isinstance(origin, Op) and origin.partial is not None and len(origin.partial) > 1:
            self.checked += 1
            d = Divergence("result", rank, event, origin, origin.name, whole, leaf, [], ref, path=label)
            d.hint = _partial_words(origin, "returned as the result")
            self.diverged.append(d)
            covered[(id(ref), path)] = True  # compared (and wrong)
            return
        index = getattr(origin, "index", None)
        expected = part(whole, index)
        if index is None and np.shape(leaf) != np.shape(whole) and _floaty(leaf, whole):
            block = diagnose.block_of(np.asarray(leaf), np.asarray(whole))
            if block is not None:
                self.unchecked.append(
                    Unchecked(
                        "result",
                        f"device {rank} returns {show(leaf)}{label}, the block {diagnose.show_index(block)} of the "
                        "model's result, without saying which part it is: return the output of an op or hold with "
                        "index=, so the checker knows which part to compare",
                    )
                )
                return
        self._compare("result", rank, event, origin, getattr(origin, "name", "the result"), expected, leaf, None, label)
        key = (id(ref), path)
        if index is None:
            covered[key] = True
        elif covered.get(key) is not True:
            ids = np.arange(np.size(whole)).reshape(np.shape(whole))
            mask = covered.get(key)
            if not isinstance(mask, np.ndarray):
                mask = covered[key] = np.zeros(np.shape(whole), dtype=bool)
            mask.reshape(-1)[np.ravel(part(ids, index))] = True

    def _coverage(self, covered: dict, returned: bool) -> None:
        for ref in self.refs.values():
            if ref.result is NO_RESULT or ref.result is None:
                continue
            if not returned:
                self.unchecked.append(
                    Unchecked(
                        "result",
                        "no device returned a value, so the model's result was not compared: "
                        "return the result from the device(s) that compute it",
                    )  # fmt: skip
                )
                return
            for path, _ in _leaves(ref.result):
                got = covered.get((id(ref), path))
                if got is True:
                    continue
                if got is None:
                    what = f"the model's result{_path(path)}" if path else "the model's result"
                    self.unchecked.append(Unchecked("result", f"no device returned {what}, so it was not compared"))
                elif not got.all():
                    self.unchecked.append(
                        Unchecked(
                            "result",
                            f"the parts of the result{_path(path)} the devices returned cover {int(got.sum())} of "
                            f"its {got.size} elements; the rest was not compared",
                        )
                    )

    def _never_computed(self) -> None:
        for key, ref in self.refs.items():
            made = self.produced.get(key, set())
            missing = [n for n in ref.computed if n not in made]
            if missing:
                shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
                self.unchecked.append(
                    Unchecked(
                        "never computed",
                        f"no device computed {shown} under that name (the single-device run does), so "
                        f"{'they were' if len(missing) > 1 else 'it was'} not compared",
                    )
                )

    # ---- the explanation of the first divergence ----------------------------------------------------
    def _explain(self, d: Divergence) -> None:
        ref, found = d.reference, d.found
        if d.hint is None:
            d.is_also = ref.identify(found, rtol=self.rtol, atol=self.atol, exclude=d.name)
            if not d.is_also and d.where not in ("result", "partial sums"):
                d.part_of = ref.identify_part(found, getattr(d.record, "index", None), exclude=d.name)
            d.hint = self._partial_hint(d) or self._hint(d)

    def _partial_hint(self, d: Divergence) -> str | None:
        """A partial sum used where the complete value is needed: sent, fed to an op, or returned."""
        rec = d.record
        if d.where == "message":
            p = self._partial_of(rec.src, d.found)
            return _partial_words(p, f"sent to device {rec.dst} as {d.name}") if p else None
        if d.where == "input":
            p = self._partial_of(rec.rank, d.found)
            return _partial_words(p, f"fed to op {rec.name}") if p else None
        if d.where == "output" and rec.inputs:
            for pos, x in enumerate(rec.inputs):
                p = self._partial_of(rec.rank, x)
                if p is not None:
                    return _partial_words(p, f"input {pos} of op {rec.name}")
        return None

    def _shard_advice(self, d: Divergence, block: str) -> str:
        """An op fed a block of its input: it computes a block of its output (index=) or a partial sum (partial=)."""
        rec, name = d.record, d.name
        head = f"It is the block {block} of that input, so this op works on a shard"
        whole, out = d.reference.values[name], rec.output
        if structured(whole) or structured(out):
            return f"{head}: say which part of {name} it computes with index= (or partial=True for one term of a sum)."
        whole = np.asarray(whole)
        out = np.asarray(out) if out is not None else None
        if out is not None and out.shape == whole.shape:
            return (
                f"{head} and computes a value of {name}'s full shape {whole.shape}: one term of a sum (a row-parallel "
                f"matmul). Say so with partial=True (or the group's ranks), dev.compute({name!r}, fn, ..., "
                f"partial=True), and add the terms with an all-reduce; the checker adds them up and compares with {name}."
            )
        at = diagnose.block_of(out, whole) if out is not None and _floaty(out, whole) else None
        where = f"np.s_{diagnose.show_index(at)}" if at is not None else "np.s_[...]"
        return (
            f"{head}: if op {name} computes only part of {name}, say which part with index=, e.g. "
            f"dev.compute({name!r}, fn, ..., index={where}), and the checker compares it with that part of {name}."
        )

    def _hint(self, d: Divergence) -> str | None:
        if structured(d.found) or structured(d.expected):
            return None
        found, expected = np.asarray(d.found), np.asarray(d.expected)
        if d.where == "result" and self._results_add_up(d):
            return (
                "The devices' results add up to the model's result: each device returned a partial sum "
                "(the all-reduce that adds them is missing?)."
            )
        if d.where == "input" and _floaty(found, expected):
            block = diagnose.block_of(found, expected)
            if block is not None:
                return self._shard_advice(d, diagnose.show_index(block))
        return self._wrong_block(d) or diagnose.explain(found, expected, self._group_sizes(d))

    def _results_add_up(self, d: Divergence) -> bool:
        """Whether what the devices returned (at this place in the result) sums to the expected value."""
        leaves = []
        for out in self.outputs or []:
            for path, leaf, _ in _pairs(out, d.reference.result) if out is not None else ():
                if _path(path) == d.path:
                    leaves.append(np.asarray(leaf))
        if structured(d.expected) or len(leaves) < 2 or any(leaf.shape != np.shape(d.expected) for leaf in leaves):
            return False
        return same(sum(leaves[1:], leaves[0]), d.expected, self.rtol, self.atol)

    def _group_sizes(self, d: Divergence) -> list[int]:
        """The sizes of the groups this device sums over (collectives, partial sums): k times too big names one."""
        sizes = {len(g) for g in self.trace.groups if d.rank in g} | {self.world_size}
        partial = getattr(d.record, "partial", None)
        return sorted(sizes | ({len(partial)} if partial else set()))

    def _wrong_block(self, d: Divergence) -> str | None:
        """A shard that is another block of the same value: taken from the wrong device, or an index off by one."""
        index = getattr(d.record, "index", None)
        if index is None or callable(index) or d.name not in d.reference.values:
            return None
        found, whole = np.asarray(d.found), np.asarray(d.reference.values[d.name])
        if not _floaty(found, whole) or found.shape == whole.shape:
            return None
        block = diagnose.block_of(found, whole)
        if block is None:
            return None
        return (
            f"It is the block {diagnose.show_index(block)} of {d.name}, not the block {diagnose.show_index(index)} "
            "this device should hold: a shard taken from another device, or an index off by one?"
        )


def _partial_words(p: Op, how: str) -> str:
    group = ", ".join(map(str, p.partial))
    return (
        f"That is device {p.rank}'s partial sum of {p.name} (one term of a sum over devices {group}), {how} as if "
        f"it were the complete {p.name}: the all-reduce that adds the partial sums is missing?"
    )


def _same_role(found: Any, expected: Any) -> bool:
    """Whether an op's input plays the model's input's part: the same shape, or a block of it."""
    if structured(found) or structured(expected):
        return structured(found) and structured(expected)
    a, b = np.asarray(found), np.asarray(expected)
    return a.shape == b.shape or (_floaty(a, b) and diagnose.block_of(a, b) is not None)


def _floaty(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype.kind in "biuf" and b.dtype.kind in "biuf" and a.size > 0


_ABSENT: Any = object()  # a part of a returned structure that the model's result does not have


def _leaves(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, leaf) for every array or number in a structure of dicts, lists and tuples."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, (list, tuple)):
        for k, v in enumerate(value):
            yield from _leaves(v, (*path, k))
    else:
        yield path, value


def _pairs(found: Any, model: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any, Any]]:
    """(path, found leaf, model's leaf) down the model's structure: where the model has an array, the
    returned value is compared whole (a list of numbers against an array); a key or position the
    model does not have pairs with ``_ABSENT``."""
    if isinstance(model, Mapping) and isinstance(found, Mapping):
        for k, v in found.items():
            yield from _pairs(v, model[k], (*path, k)) if k in model else [((*path, k), v, _ABSENT)]
    elif isinstance(model, (list, tuple)) and isinstance(found, (list, tuple)):
        for k, v in enumerate(found):
            yield from _pairs(v, model[k], (*path, k)) if k < len(model) else [((*path, k), v, _ABSENT)]
    else:
        yield path, found, model


def _path(path: tuple) -> str:
    return "".join(f"[{k!r}]" for k in path)


def _resolver(reference) -> Callable[[int], Reference]:
    if isinstance(reference, Reference):
        return lambda rank: reference
    if isinstance(reference, Mapping):

        def by_rank(rank: int) -> Reference:
            if rank not in reference:
                raise KeyError(f"no reference for device {rank}; the mapping covers devices {sorted(reference)}")
            return reference[rank]

        return by_rank
    if callable(reference):
        return reference
    raise TypeError(
        f"reference must be a Reference, a mapping rank -> Reference, or a function; got {type(reference).__name__}"
    )
