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
from .units import inline


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

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a reference value, or a sum of them written 'A+B' (partial sums)."""
        return name in self.values or ("+" in name and all(p in self.values for p in name.split("+")))

    def expected(self, name: str, index: Any = None) -> Any:
        """The value ``name`` (or its part ``index``: a numpy index, or a function of the value).

        A name 'A+B+C' that is not itself a value means the sum of those values, added in that order:
        how a collective names the partial sums it carries on the way to a reduction.
        """
        if name not in self.values and "+" in name:
            parts = [_part(self.values[p], index) for p in name.split("+")]
            total = parts[0]
            for p in parts[1:]:
                total = total + p
            return total
        return _part(self.values[name], index)

    def describe(self, name: str) -> str:
        if name not in self.values and "+" in name:
            return f"{name} (the sum of {len(name.split('+'))} partial values, on the way to the reduction)"
        doc = self.docs.get(name)
        return f"{name} ({doc})" if doc and doc != name else name

    def identify(
        self, found: Any, *, rtol: float = 1e-7, atol: float = 0.0, exclude: str | None = None, index: Any = None
    ) -> list[str]:
        """Names of reference values equal to ``found`` (the 'this is x' in an explanation)."""
        return [n for n, v in self.values.items() if n != exclude and same(found, v, rtol, atol)]

    def identify_part(
        self, found: Any, index: Any, *, rtol: float = 1e-7, atol: float = 0.0, exclude: str | None = None
    ) -> list[str]:
        """Names of reference values whose part ``index`` equals ``found`` ('the same part of Z')."""
        if index is None:
            return []
        hits = []
        for n, v in self.values.items():
            if n == exclude:
                continue
            try:
                part = _part(v, index)
            except (IndexError, TypeError, ValueError):
                continue
            if same(found, part, rtol, atol):
                hits.append(n)
        return hits


def _part(value: Any, index: Any) -> Any:
    if index is None:
        return value
    if callable(index):
        return index(value)
    return np.asarray(value)[index]


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
    part_of: list[str] = field(default_factory=list)  # reference values whose same part equals the found one
    hint: str | None = None  # a pattern in the difference (scaled, blocks reordered), in words

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
            value = _show(self.found) if np.asarray(self.found).size <= 16 else "The value found"
            head += " " + value + " is " + " and ".join(self.reference.describe(n) for n in self.is_also) + "."
        elif self.part_of:
            where = getattr(self.record, "index", None)
            head += (
                f" What arrived is the same part ({_show_index(where)}) of "
                + " and ".join(self.reference.describe(n) for n in self.part_of)
                + "."
            )
        if self.hint:
            head += " " + self.hint
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
    trace = run if isinstance(run, Trace) else run.trace  # a RunResult, or a real run's result
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
        if not ref.knows(rec.name):
            unknown.append(rec.name)
            return
        yield _verdict(
            "message",
            rec.dst,
            i,
            rec,
            rec.name,
            ref.expected(rec.name, rec.index),
            rec.payload,
            ref,
            rtol,
            atol,
            rec.index,
        )
    elif kind in ("op", "hold"):
        ref = ref_of(rec.rank)
        if not ref.knows(rec.name):
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
            where, rec.rank, i, rec, rec.name, ref.expected(rec.name, rec.index), rec.output, ref, rtol, atol, rec.index
        )


def _verdict(where, rank, i, rec, name, expected, found, ref, rtol, atol, index=None):
    if same(found, expected, rtol, atol):
        return True
    is_also = ref.identify(found, rtol=rtol, atol=atol, exclude=name)
    part_of = [] if is_also else ref.identify_part(found, index, rtol=rtol, atol=atol, exclude=name)
    hint = _shard_hint(name, found, expected, rtol, atol) if where == "input" else None
    return Divergence(
        where,
        rank,
        i,
        rec,
        name,
        expected,
        found,
        is_also,
        ref,
        part_of=part_of,
        hint=hint or _diagnose(found, expected),
    )


def _shard_hint(name: str, found: Any, expected: Any, rtol: float, atol: float) -> str | None:
    """When an op's input is one block of the single-device input, the op most likely works on a shard."""
    block = _block_of(np.asarray(found), np.asarray(expected), rtol, atol)
    if block is None:
        return None
    where = _show_index(block)
    return (
        f"It is the block {where} of that input, so this op works on a shard: if op {name} computes only part of "
        f"{name}, say which part with index=, e.g. dev.compute({name!r}, fn, ..., index=np.s_{where}), and the "
        f"checker compares it with that part of {name}."
    )


def _block_of(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple | None:
    """The slices of b (along the one axis where the sizes differ) that equal a, if any."""
    if a.ndim != b.ndim or a.shape == b.shape or a.size == 0:
        return None
    differing = [d for d in range(a.ndim) if a.shape[d] != b.shape[d]]
    if len(differing) != 1 or a.shape[differing[0]] > b.shape[differing[0]]:
        return None
    axis, n = differing[0], a.shape[differing[0]]
    for start in range(b.shape[axis] - n + 1):
        index = tuple(slice(start, start + n) if d == axis else slice(None) for d in range(b.ndim))
        if same(a, b[index], rtol, atol):
            return index
    return None


def _diagnose(found: Any, expected: Any) -> str | None:
    """Say in words how ``found`` relates to ``expected``, for the two patterns students meet most."""
    a, b = np.asarray(found), np.asarray(expected)
    if a.shape != b.shape or a.size == 0 or a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return None
    nz = b != 0
    if nz.sum() >= 2 and np.array_equal(a == 0, ~nz):  # one element is a multiple of any other: say nothing
        ratio = a[nz] / b[nz]
        k = float(ratio.flat[0])
        if k >= 2 and k == round(k) and np.allclose(ratio, k, rtol=1e-9):
            return (
                f"Every element is {k:g} times what it should be: a sum taken once too often "
                "(a reduction applied twice?) or a value counted twice."
            )
    for axis in range(a.ndim):
        n = a.shape[axis]
        for parts in range(2, min(n, 8) + 1):
            if n % parts:
                continue
            fa, fb = np.split(a, parts, axis=axis), np.split(b, parts, axis=axis)
            order = []
            for blk in fa:
                hit = [j for j, ref in enumerate(fb) if j not in order and np.array_equal(blk, ref)]
                if not hit:
                    break
                order.append(hit[0])
            if len(order) == parts and order != list(range(parts)):
                return (
                    f"It holds the right blocks in the wrong order: split into {parts} blocks along axis {axis}, "
                    f"the blocks found are blocks {order} of the expected value (assembled in the wrong order?)."
                )
    return None


def _show_index(index: Any) -> str:
    if isinstance(index, tuple):
        return "[" + ", ".join(_show_slice(i) for i in index) + "]"
    return _show_slice(index) if isinstance(index, slice) else repr(index)


def _show_slice(s: Any) -> str:
    if isinstance(s, slice):
        return f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
    return repr(s)


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
    if a.size <= 16:
        return inline(a)
    return f"an array of shape {a.shape} ({a.dtype.name})"
