"""Checking a parallel run against the same model on one device.

The reference is literally a one-device run: write the model as a rank program that names its ops
(``dev.compute("A", ...)``) and inputs (``dev.hold("x", ...)``), run it on ``World(1)``, and the
trace holds every named value. ``check`` then walks the parallel trace in event order and compares

- each message whose receiver named what it carries (``recv(..., name="A")``) with that value,
- each held value and each op output of the same name (``index`` selects the device's shard),
- each op's inputs, for ops computed whole (no ``index``),

and reports the FIRST divergence: where, what was expected, what was found, and, when the found
value equals another reference value, which one ("this is x, the model's raw input").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .engine import RunResult, World
from .trace import Message, Op, Trace


@dataclass
class Reference:
    """The named values of a single-device run: what each op, input and message should hold."""

    values: dict[str, Any] = field(default_factory=dict)  # name -> value
    inputs: dict[str, tuple] = field(default_factory=dict)  # op name -> its inputs
    docs: dict[str, str] = field(default_factory=dict)  # name -> words for a student

    @classmethod
    def from_trace(cls, trace: Trace) -> Reference:
        ref = cls()
        for kind, rec in trace.events:
            if kind not in ("op", "hold") or rec.output is None:
                continue
            ref.values[rec.name] = rec.output
            ref.docs[rec.name] = rec.doc or (f"the output of {rec.name}" if kind == "op" else f"the value {rec.name}")
            if kind == "op":
                ref.inputs[rec.name] = rec.inputs
        return ref

    @classmethod
    def of(cls, model: Callable[..., Any], *args: Any, **kwargs: Any) -> Reference:
        """Run ``model(dev, *args)`` on a single device and collect its named values."""
        result = World(1).run(model, *args, **kwargs)
        return cls.from_trace(result.trace)

    def expected(self, name: str, index: Any = None) -> Any:
        value = self.values[name]
        return value if index is None else np.asarray(value)[index]

    def describe(self, name: str) -> str:
        doc = self.docs.get(name)
        return f"{name} ({doc})" if doc and doc != name else name

    def identify(self, found: Any, *, rtol: float = 1e-7, atol: float = 0.0, exclude: str | None = None) -> list[str]:
        """Names of reference values equal to ``found`` (the 'this is x' in an explanation)."""
        return [n for n, v in self.values.items() if n != exclude and same(found, v, rtol, atol)]


References = Reference | Mapping[int, Reference]


@dataclass
class Divergence:
    """The first place a parallel run differs from the single-device run."""

    where: str  # "message", "input", "output", "held value"
    rank: int  # the device that holds the wrong value
    event: int  # index into trace.events
    record: Message | Op
    name: str
    expected: Any
    found: Any
    is_also: list[str]  # other reference values equal to the found one
    reference: Reference
    position: int | None = None  # which input of an op

    def explain(self) -> str:
        exp, got = _show(self.expected), _show(self.found)
        what = self.reference.describe(self.name)
        rec = self.record
        if self.where == "message":
            head = (
                f"message #{rec.id} from device {rec.src} to device {rec.dst} (tag {rec.tag}) carried {got}, "
                f"but device {rec.dst} should have received {what} = {exp}."
            )
        elif self.where == "input":
            head = (
                f"op {rec.name} on device {rec.rank} got {got} as input {self.position}, "
                f"but on one device that input is {exp}."
            )
        elif self.where == "held value":
            head = f"device {rec.rank} holds {got} as {what}, but it should hold {exp}."
        else:
            head = f"op {rec.name} on device {rec.rank} computed {got}, but {what} is {exp} on one device."
        if self.is_also:
            head += (
                " " + _show(self.found) + " is " + " and ".join(self.reference.describe(n) for n in self.is_also) + "."
            )
        return head


@dataclass
class CheckReport:
    """The result of ``check``: the first divergence (or None) and what was compared."""

    first: Divergence | None
    checked: int  # values compared
    divergent: int  # values that differ (the first and everything downstream)
    unknown: list[str]  # names in the run that the reference does not have

    @property
    def ok(self) -> bool:
        return self.first is None

    def __str__(self) -> str:
        if self.ok:
            text = f"check passed: {self.checked} values match the single-device run"
        else:
            text = f"check FAILED at the first divergence: {self.first.explain()}"
            if self.divergent > 1:
                text += f"\n  ({self.divergent - 1} later value(s) differ too, downstream of it)"
        if self.unknown:
            text += f"\n  not in the reference, so not checked: {', '.join(sorted(set(self.unknown)))}"
        return text

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def check(
    run: RunResult | Trace,
    reference: References | Callable[[int], Reference],
    *,
    rtol: float = 1e-7,
    atol: float = 0.0,
) -> CheckReport:
    """Compare a run with single-device reference(s); report the first divergence.

    reference: one ``Reference`` for every device, a mapping rank -> Reference (e.g. replicas fed
    different inputs), or a function of the rank. The run must have kept its payloads.
    """
    trace = run.trace if isinstance(run, RunResult) else run
    ref_of = _resolver(reference)
    first: Divergence | None = None
    checked = divergent = 0
    unknown: list[str] = []
    for i, (kind, rec) in enumerate(trace.events):
        for d in _compare(i, kind, rec, ref_of, rtol, atol, unknown):
            if d is True:
                checked += 1
                continue
            checked += 1
            divergent += 1
            if first is None:
                first = d
    return CheckReport(first, checked, divergent, unknown)


def _compare(i, kind, rec, ref_of, rtol, atol, unknown):
    """Yield True per matching value and a Divergence per differing one, for one event."""
    if kind == "send":
        if rec.name is None:
            return
        if rec.payload is None:
            raise ValueError("check needs the payloads: run the world with keep_payloads=True")
        ref = ref_of(rec.dst)
        if rec.name not in ref.values:
            unknown.append(rec.name)
            return
        yield _verdict(
            "message", rec.dst, i, rec, rec.name, ref.expected(rec.name, rec.index), rec.payload, ref, rtol, atol
        )
    elif kind in ("op", "hold"):
        ref = ref_of(rec.rank)
        if rec.name not in ref.values:
            unknown.append(rec.name)
            return
        if kind == "op" and rec.index is None and rec.inputs is not None:
            ref_inputs = ref.inputs.get(rec.name)
            if ref_inputs is not None and len(ref_inputs) == len(rec.inputs):
                for pos, (found, exp) in enumerate(zip(rec.inputs, ref_inputs)):
                    d = _verdict("input", rec.rank, i, rec, rec.name, exp, found, ref, rtol, atol)
                    if d is not True:
                        d.position = pos
                    yield d
        if rec.output is None:
            raise ValueError("check needs the payloads: run the world with keep_payloads=True")
        where = "output" if kind == "op" else "held value"
        yield _verdict(
            where, rec.rank, i, rec, rec.name, ref.expected(rec.name, rec.index), rec.output, ref, rtol, atol
        )


def _verdict(where, rank, i, rec, name, expected, found, ref, rtol, atol):
    if same(found, expected, rtol, atol):
        return True
    return Divergence(
        where, rank, i, rec, name, expected, found, ref.identify(found, rtol=rtol, atol=atol, exclude=name), ref
    )


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


def same(found: Any, expected: Any, rtol: float = 1e-7, atol: float = 0.0) -> bool:
    """Equal shape and value: exact for integers and booleans, allclose for floats."""
    a, b = np.asarray(found), np.asarray(expected)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        return bool(np.array_equal(a, b))
    try:
        return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    except TypeError:
        return bool(np.array_equal(a, b))


def _show(x: Any) -> str:
    a = np.asarray(x)
    if a.size <= 8:
        return np.array2string(a, separator=", ")
    return f"an array of shape {a.shape} ({a.dtype.name})"
