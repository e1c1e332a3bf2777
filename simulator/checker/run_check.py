"""``check``: the walk over a run's events in order, comparing every value it can place in the reference.

Messages, held values, op outputs and op inputs are compared as they come (partial sums once every
member has its term); then the result (results.py), what no device computed, and the explanation of
the first divergence (explain.py). The verdict it returns is in verdict.py.
"""

from __future__ import annotations

import copy
import gc
import re
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

import numpy as np

from ..core.columnar import ColumnarTrace
from ..core.trace import Message, Op, Trace
from . import diagnose
from .causal import CausalOrder
from .compare import plainly_close, same, same_bytes, structured
from .differential import Differential
from .expected import _Expectations
from .explain import _Explanations, _floaty
from .isolation import check_isolation
from .partial_sums import _Partial, _PartialSums
from .reference import Reference
from .results import _ResultChecks
from .split import Split
from .split_check import violations
from .terms import before_bias
from .unnamed import _Unnamed
from .value_columns import GuessedWrong, LateOrigins, _ValueColumns
from .verdict import CheckReport, Divergence, Unchecked, _message

References = Reference | Mapping[int, Reference]
_NO_EXTRA = (None, None, None)  # an op's (index, doc, partial) where its row has none
_BIASED = (
    "output",
    "partial sums",
    "message",
)  # where a module's own value may stand before its bias (terms.before_bias)


def check(
    run: Any,
    reference: References | Callable[[int], Reference],
    *,
    rtol: float | None = None,
    atol: float | None = None,
    split: Split | None = None,
    own_names: bool = False,
    isolation: bool | Differential = False,
) -> CheckReport:
    """Compare a run with single-device reference(s); say passed, FAILED (first divergence) or not verified.

    Args:
        run: a ``RunResult`` (or a real run's result, or a ``Trace``); it must have kept its payloads.
        reference: one ``Reference`` for every device, a mapping rank -> Reference (e.g. replicas fed
            different inputs), or a function of the rank.
        rtol: the relative tolerance for floats (default: by dtype, see ``simulator.checker.compare``).
        atol: the absolute tolerance for floats (default: by dtype and the values' scale).
        split: the declared split (``simulator.checker.split.Split``): who computes what, what each device is
            given, what may cross, the collectives and the budget; a run that breaks it FAILS, whatever its
            values.
        own_names: values under names the model does not have, and unnamed messages, equal to none of its
            values, are the program's own intermediates (a sum before it is divided, a running sum on its way
            round a ring): noted, not held against the verdict. Every value of the model and the result are
            still compared (an exercise's grade sets it).
        isolation: also check that nothing reached a device outside messages (``simulator.checker.isolation``):
            True runs the program again with each device's ``PerDevice`` part changed (at most N more runs, and
            one more only when something is found); a ``Differential`` says what each device holds alone and how
            to rerun.

    Returns:
        The verdict, a ``CheckReport``: passed, FAILED or not verified, with the first divergence.

    The first divergence is the first by cause (``simulator.checker.causal``), so a real run, whose events
    come in measured order, is blamed where its simulation is.

    Examples:
        >>> import numpy as np
        >>> from simulator import Reference, World, check
        >>> def model(dev, x):
        ...     h = dev.compute("A", lambda v: 2 * v + 1, x)
        ...     return dev.compute("B", np.square, h)
        >>> def split(dev, x):
        ...     if dev.rank == 0:
        ...         dev.send(dev.compute("A", lambda v: 2 * v + 1, x), 1)
        ...     else:
        ...         return dev.compute("B", np.square, dev.recv(0, name="A"))
        >>> x = np.array([3.0])
        >>> check(World(2).run(split, x), Reference.of(model, x)).verdict
        'passed'
    """
    trace = run if isinstance(run, Trace) else run.trace
    outputs = getattr(run, "outputs", None) if not isinstance(run, Trace) else None
    if outputs is None:
        outputs = trace.outputs
    if split is not None and not isinstance(split, Split):
        raise TypeError(f"check(split={split!r}): give a Split (simulator.checker.split)")
    ref_of = _resolver(reference)
    # The walk makes many small records and makes no reference cycles: pausing the cyclic garbage collector
    # saves its full scans of everything the process holds (a large trace), as the engine's run does.
    collecting = gc.isenabled()
    gc.disable()
    try:
        checker = _Checker(trace, outputs, ref_of, rtol, atol, own_names)
        report = checker.report()
        if split is not None:
            broken = sorted(
                violations(
                    trace,
                    split,
                    checker._ref,
                    rtol,
                    atol,
                    outputs,
                    checker._identify_value,
                    checker.column_lists(),
                    checker.exact_rows,
                ),  # fmt: skip
                key=lambda v: checker.order.key(v.event),
            )
            report.broken, report.split_checked = broken, True
            if broken and report.first is not None:
                report.split_first = checker.order.key(broken[0].event) < checker.first_key
    finally:
        if collecting:
            gc.enable()
    if isolation is not False and isolation is not None:
        differential = Differential.of_run(run) if isolation is True else isolation
        found = check_isolation(run, differential)
        report.leaks, report.isolation_runs = found.leaks, found.runs
        report.unchecked += found.unchecked
        report.notes += found.notes
    return report


class _Checker(_ValueColumns, _ResultChecks, _Explanations, _Expectations, _PartialSums, _Unnamed):
    """One check: the walk over the trace's events, then the result (results.py) and the explanation of
    the first divergence (explain.py); what each name should hold is worked out once (expected.py)."""

    def __init__(
        self,
        trace: Trace,
        outputs: list | None,
        ref_of: Callable[[int], Reference],
        rtol,
        atol,
        own_names=False,
        defer: bool = True,
    ):
        self.trace, self.outputs, self.ref_of = trace, outputs, ref_of
        self.rtol, self.atol = rtol, atol
        self.own_names = own_names
        self.first_key: tuple[int, int, int, int] | None = None
        self.world_size = trace.world_size
        self.checked = 0
        self.diverged: list[Divergence] = []
        self.unchecked: list[Unchecked] = []
        self.notes: list[str] = []
        self.columns: dict[str, list] | None = None  # a columnar trace's event columns as lists, once asked
        self._event_arrays: dict[str, np.ndarray] | None = None  # ... and as arrays, once walked
        self._dsts: list[int] | None = None  # a columnar trace's messages' destinations, once a walk needs them
        self._extra_rows: np.ndarray | None = None  # ... which of its messages have a name or index, once asked
        # a columnar trace's op rows (no index, no partial sum) holding, byte for byte, what the model says their name
        # holds: True where that is the model's whole value of the name (not a sum of its values, not an alias's)
        self.exact_rows: dict[int, bool] = {}
        # float64 pairs the columnar walk took as plainly close, all held to it at its end (value_columns._close)
        self._deferred: list[tuple[Any, Any]] | None = [] if defer else None
        self._seen_unknown: set[tuple[int, str]] = set()
        self.produced: dict[int, set[str]] = {}  # id(reference) -> names some device computed
        self.refs: dict[int, Reference] = {}
        self.origin = [_Origins(trace) for _ in range(trace.world_size)]  # id(value) -> record (see origin_of)
        self._late = LateOrigins(getattr(trace, "recorder", None))  # ... for objects not made yet, by row
        self.partials: dict[tuple, list[list[_Partial]]] = {}  # (name, index, group) -> terms per member
        self.partial_records: list[list[Op]] = [[] for _ in range(trace.world_size)]  # per device
        self.last_event = [-1] * trace.world_size
        self._rank_refs: list[Reference | None] = [None] * trace.world_size  # each device's reference, once asked
        self._block_searches = 64
        self._start_expectations()
        self._unplaced: list[Message] = []  # unnamed messages no value placed (in the order of their Unchecked)

    @cached_property
    def order(self) -> CausalOrder:
        """The events' causal order, worked out when first asked for: only to rank divergences or broken rules
        (a run that passes never needs it)."""
        return CausalOrder(self.trace)

    # ---- the walk ---------------------------------------------------------------------------
    def report(self) -> CheckReport:
        """The verdict. Where a value the columnar walk took as right is not (``value_columns._close``), the check is
        made again, each value compared as it comes, from what the first attempt worked out (``remember``)."""
        try:
            return self._report()
        except GuessedWrong:
            guessed = copy.copy(self)  # (its memos: the walk's own state is made anew)
            args = (self.trace, self.outputs, self.ref_of, self.rtol, self.atol, self.own_names)
            self.__dict__.clear()
            self.__init__(*args, defer=False)
            self.remember(guessed)
            return self._report()

    def _report(self) -> CheckReport:
        if not self.trace.payloads:
            raise ValueError("check needs the payloads: run the world with keep_payloads=True")
        handlers = {"send": self._send, "recv": self._recv, "op": self._op, "hold": self._hold}
        if isinstance(self.trace, ColumnarTrace):
            self._walk_columns()
            if self._deferred and not self.deferred_hold():
                raise GuessedWrong
        else:
            for i, (kind, rec) in enumerate(self.trace.events):
                handler = handlers.get(kind)
                if handler is not None:
                    handler(i, rec)
        for rank in range(self.trace.world_size):  # a device that did nothing still owes the model's values
            self._ref(rank)
        self._results()
        self._unfinished_partials()
        self._never_computed()
        self._summed_by_hand()
        first = min(self.diverged, key=self._cause) if self.diverged else None
        if first is not None:
            self.first_key = self._cause(first)
            self._explain(first)
        return CheckReport(first, self.checked, len(self.diverged), self.unchecked, self.notes)

    def _cause(self, d: Divergence) -> tuple[int, int, int, int]:
        """Where a divergence stands by cause: a result after its device's last event, anything else at its event."""
        return self.order.after_last(d.rank) if d.where == "result" else self.order.key(d.event)

    def _ref(self, rank: int) -> Reference:
        ref = self.ref_of(rank)
        self.refs[id(ref)] = ref
        return ref

    def _compare(self, where, rank, i, rec, name, expected, found, position=None, path="", slot=None) -> bool:
        """Count and compare a value; a difference is kept as a divergence. slot: ``_expect``'s, if there is one."""
        self.checked += 1
        if self._same(found, slot) if slot is not None else same(found, expected, self.rtol, self.atol):
            return True
        rec = self._record_of(rec)
        index = getattr(rec, "index", None)
        bias = before_bias(self._ref(rank), name, index, found, self.rtol, self.atol) if where in _BIASED else None
        if bias is not None:  # a row-parallel layer's sum, its bias added after (the result is compared with it)
            note = f"{name} was found less its bias {bias}, added after the sum (as Megatron's RowParallelLinear does)"
            if note not in self.notes:
                self.notes.append(note)
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
        if not self._knows(ref, msg.name):
            # a collective names its members' terms f"{partials}[m]" (partials=): the model must have them
            term = msg.label is not None and re.fullmatch(r"(.+)\[\d+\]", msg.name)
            self._unknown(
                msg.dst,
                msg.name,
                msg.payload,
                f"(what message #{msg.id} from device {msg.src} carries)",
                partials=term.group(1) if term else None,
            )
            return
        self.produced.setdefault(id(ref), set()).add(msg.name)
        slot = self._expect(ref, msg.name, msg.index)
        expected = slot[0] if slot is not None else ref.expected(msg.name, msg.index)
        if self._compare("message", msg.dst, i, msg, msg.name, expected, msg.payload, slot=slot):
            self._ambiguous(ref, msg.payload, msg.name, lambda: f"{_message(msg)} carries {msg.name} =")

    def _recv(self, i: int, msg: Message) -> None:
        self.last_event[msg.dst] = i
        self.origin[msg.dst][id(msg.payload)] = msg

    def _hold(self, i: int, rec: Op) -> None:
        self._op(i, rec, "held value")

    def _op(self, i: int, rec: Op, where: str = "output") -> None:
        self._op_values(
            i, rec, rec.rank, rec.name, rec.output, rec.inputs, rec.index, rec.partial, rec.label is not None, where
        )

    def _op_values(
        self, i: int, rec: Op | int, rank: int, name: str, output: Any, inputs: Any, index: Any,
        partial: tuple | None, labelled: bool, where: str = "output",
    ) -> None:  # fmt: skip
        """An op's or held value's output (and inputs) against the model's. ``rec``: its record, or, from the walk
        over a columnar trace, its row, made a record only where one is kept (a divergence, a partial sum)."""
        self.last_event[rank] = i
        self.origin[rank][id(output)] = rec if type(rec) is not int else rec << 1 | 1
        ref = self._ref(rank)
        if not self._knows(ref, name):
            if not labelled:  # a collective's own reductions are checked through its result
                self._unknown(rank, name, output, "", partial=partial is not None)
            return
        produced = self.produced.get(id(ref))
        if produced is None:
            produced = self.produced[id(ref)] = set()
        produced.add(name)
        if partial is not None:
            rec = self._record_of(rec)
            self.partial_records[rank].append(rec)
            self._add_partial(i, rec)
            return
        wrong_before = len(self.diverged)
        slot = self._expect(ref, name, index)
        expected = slot[0] if slot is not None else ref.expected(name, index)
        if same_bytes(output, expected):  # equal under any tolerance, as _compare would say
            self.checked += 1
            output_right = True
            if type(rec) is int and expected is ref.values.get(name):  # the model's whole value of its name
                self.exact_rows[rec] = True
        elif plainly_close(output, expected, self.rtol, self.atol):  # as _compare would say, with fewer calls
            self.checked += 1
            output_right = True
        else:
            output_right = self._compare(where, rank, i, rec, name, expected, output, slot=slot)
        ref_inputs = ref.inputs.get(name) if index is None and inputs is not None else None
        if ref_inputs is None or len(ref_inputs) != len(inputs):
            return
        if not output_right and not all(_same_role(f, e) for f, e in zip(inputs, ref_inputs)):
            return  # another way to compute it (other inputs, other shapes): the output says it all
        # A wrong output is explained at the first wrong input (B got x, not A), where the input has the
        # shape of the model's, or is a block of it (an op on a shard). A right output from other inputs is
        # another way to compute the same value, not a bug: its inputs are not held against it.
        inputs_wrong = []
        for pos, (found, exp) in enumerate(zip(inputs, ref_inputs)):
            self.checked += 1
            exact = self._exact_input(ref, found, exp)
            if exact:
                continue  # the model's bytes, equal to no other of its values: nothing to note
            if (
                exact is False
                or plainly_close(found, exp, self.rtol, self.atol)
                or same(found, exp, self.rtol, self.atol)
            ):
                self._ambiguous(ref, found, None, lambda pos=pos: f"input {pos} of op {name} on device {rank} is")
            elif not output_right:
                rec = self._record_of(rec)
                inputs_wrong.append(Divergence("input", rank, i, rec, name, exp, found, [], ref, pos))
        self.diverged[wrong_before:wrong_before] = inputs_wrong

    def origin_of(self, rank: int, value: Any) -> Any:
        """The record of the last event that gave ``value`` (this very object) to device ``rank``, or None."""
        found = self.origin[rank].get(id(value))
        if found is None and self._late.settle(self.origin):  # (objects made since a stretch kept their rows)
            found = self.origin[rank].get(id(value))
        return found

    def _record_of(self, rec: Any) -> Any:
        """A record; or the row of an op of a columnar trace, made its record now."""
        return self.trace.op_at_row(rec) if type(rec) is int else rec

    # ---- names no device computed ----------------------------------------------------------------
    def _never_computed(self) -> None:
        said = set()  # the replicas' references (one per device) name the same values: say each once
        for key, ref in self.refs.items():
            made = self.produced.get(key, set())
            missing = [n for n in ref.computed if n not in made]
            if missing and tuple(missing) not in said:
                said.add(tuple(missing))
                shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
                self.unchecked.append(
                    Unchecked(
                        "never computed",
                        f"no device computed {shown} under that name (the single-device run does), so "
                        f"{'they were' if len(missing) > 1 else 'it was'} not compared: {_how_to_name(ref, missing)}",
                    )
                )


def _how_to_name(ref: Reference, missing: list[str]) -> str:
    """The fix for values no device computed under their names, in the words the program is written in."""
    each, name = "each" if len(missing) > 1 else "it", missing[0]
    if ref.modules:  # a torch program names a value by calling the module that makes it
        return (f"call the module itself where a rank computes {each} (model.{name}(...), as parallelize_module "
                "leaves it: a module's output is named by its path; tensor arithmetic written in its place is not)")  # fmt: skip
    return (f"compute {each} with dev.compute({name!r}, ...) on the device that makes it (with index= for a block, "
            "partial=True for a term of a sum)")  # fmt: skip


class _Origins(dict):
    """id(value) -> the record a device got it from; a columnar walk stores the row instead (``row << 1``, and
    1 for an op), made into the record when looked up."""

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace

    def get(self, key: Any, default: Any = None) -> Any:
        found = dict.get(self, key, default)
        if type(found) is int:
            return self.trace.op_at_row(found >> 1) if found & 1 else self.trace.message_at_row(found >> 1)
        return found


def _same_role(found: Any, expected: Any) -> bool:
    """Whether an op's input plays the model's input's part: the same shape, or a block of it."""
    if structured(found) or structured(expected):
        return structured(found) and structured(expected)
    a, b = np.asarray(found), np.asarray(expected)
    return a.shape == b.shape or (_floaty(a, b) and diagnose.block_of(a, b) is not None)


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
        made: dict[int, Reference] = {}  # one Reference per rank: a function is asked at every event

        def once(rank: int) -> Reference:
            if rank not in made:
                made[rank] = reference(rank)
            return made[rank]

        return once
    raise TypeError(
        f"reference must be a Reference, a mapping rank -> Reference, or a function; got {type(reference).__name__}"
    )
