"""The single-device reference: the same model run on one device, every named value kept.

The reference is literally a one-device run: write the model as a rank program that names its ops
(``dev.compute("A", ...)``) and inputs (``dev.hold("x", ...)``), and ``Reference.of(model, *args)``
runs it on ``World(1)`` and keeps every named value, each op's inputs, and what the model returns.
``check`` (simulator/checker/, re-exported here) compares a parallel run with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.trace import Trace
from ..core.world import World
from .compare import same, show, structured


class _NoResult:
    def __repr__(self) -> str:
        return "NO_RESULT"


NO_RESULT: Any = _NoResult()  # a reference built from a trace alone does not know what the model returns
# Builders of references from other kinds of model, lent by layers above this one (the root package registers
# "torch": simulator.torchsim.reference), so that the checker never imports them.
BUILDERS: dict[str, Callable[..., Any]] = {}


@dataclass
class Reference:
    """The named values of a single-device run: what each op, input and message should hold.

    Examples:
        >>> import numpy as np
        >>> from simulator import Reference
        >>> ref = Reference.of(lambda dev, x: dev.compute("y", np.add, x, 1.0), np.array([1.0]))
        >>> ref.values["y"], ref.result
        (array([2.]), array([2.]))
    """

    values: dict[str, Any] = field(default_factory=dict)  # name -> value
    inputs: dict[str, tuple] = field(default_factory=dict)  # op name -> its inputs
    docs: dict[str, str] = field(default_factory=dict)  # name -> words for a student
    result: Any = NO_RESULT  # what the model returns
    # The ops every parallel run must compute under these names: the model's ops, less labelled ones (values
    # only one way of splitting makes); a strategy that makes some of them under other names drops them here.
    computed: list[str] = field(default_factory=list)
    # Other names of values: a torch module's input "b:in0" is the value that feeds it ("a"). A found value is
    # compared with the value an alias stands for, and is never said to *be* an alias (only the value's own name).
    aliases: dict[str, str] = field(default_factory=dict)
    # Named by torch module paths (Reference.of_torch): advice then speaks of module paths, which a torch program
    # can change, not of dev.compute's name= and index=, which it cannot write.
    modules: bool = False

    @classmethod
    def from_trace(cls, trace: Trace, result: Any = NO_RESULT) -> Reference:
        """The named values of a one-device trace (and the model's return value, if the trace recorded it)."""
        if result is NO_RESULT and trace.outputs is not None:
            result = trace.outputs[0]
        ref = cls(result=result)
        for kind, rec in trace.events:
            if kind not in ("op", "hold") or rec.output is None:
                continue
            earlier = ref.values.get(rec.name, NO_RESULT)
            if earlier is not NO_RESULT and not same(rec.output, earlier):
                raise ValueError(
                    f"the model gives the name {rec.name!r} two different values ({show(earlier)} and then "
                    f"{show(rec.output)}): a name stands for one value, so the checker could not tell which one a "
                    f"device should hold. Give each its own name, e.g. {rec.name + '[0]'!r}, {rec.name + '[1]'!r} for "
                    "each microbatch or step."
                )
            ref.values[rec.name] = rec.output
            if rec.doc:
                ref.docs[rec.name] = rec.doc
            if kind == "op":
                ref.inputs[rec.name] = rec.inputs
                if rec.label is None and rec.name not in ref.computed:
                    ref.computed.append(rec.name)
        return ref

    @classmethod
    def of(cls, model: Callable[..., Any], *args: Any, **kwargs: Any) -> Reference:
        """Run ``model(dev, *args)`` on a single device and collect its named values and its result."""
        result = World(1).run(model, *args, **kwargs)
        return cls.from_trace(result.trace, result.outputs[0])

    @classmethod
    def of_torch(cls, model: Any, *args: Any, **kwargs: Any) -> Reference:
        """Run a torch function or ``nn.Module`` on one device and name what its modules compute by their path
        (``simulator.torchsim.reference``: this layer never imports torch, the root package lends it here)."""
        builder = BUILDERS.get("torch")
        if builder is None:
            raise RuntimeError("Reference.of_torch needs torch and `import simulator` (which registers it)")
        return builder(model, *args, **kwargs)

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a reference value, or a sum of them written 'A+B' (partial sums)."""
        if name in self.values or name in self.aliases:
            return True
        return "+" in name and self.values.keys() >= set(name.split("+"))  # every term a value

    def expected(self, name: str, index: Any = None) -> Any:
        """The value ``name`` (or its part ``index``: a numpy index, or a function of the value).

        A name 'A+B+C' that is not itself a value means the sum of those values, added in that order:
        how a collective names the partial sums it carries on the way to a reduction.
        """
        name = self.aliases.get(name, name)
        if name not in self.values and "+" in name:
            parts = [part(self.values[p], index) for p in name.split("+")]
            total = parts[0]
            for p in parts[1:]:
                total = total + p
            return total
        return part(self.values[name], index)

    def describe(self, name: str) -> str:
        if name in self.aliases and name not in self.docs:
            return f"{name} (that is, {self.describe(self.aliases[name])})"
        if name not in self.values and "+" in name:
            return f"{name} (the sum of {len(name.split('+'))} partial values, on the way to the reduction)"
        doc = self.docs.get(name)
        return f"{name} ({doc})" if doc and doc != name else name

    def identify(
        self, found: Any, *, rtol: float | None = None, atol: float | None = None, exclude: str | None = None
    ) -> list[str]:
        """Names of reference values equal to ``found`` (the 'this is x' in an explanation)."""
        if structured(found):
            return [n for n, v in self.values.items() if n != exclude and structured(v) and same(found, v, rtol, atol)]
        a = np.asarray(found)
        first = a.flat[0] if a.size and a.dtype.kind in "biuf" else None
        hits = []
        for n, v, scale in self._by_shape().get(a.shape, ()):
            # a cheap look at one element first, far looser than any tolerance: most candidates of the
            # same shape differ there plainly already
            if n == exclude or (first is not None and scale is not None and not _near(first, v.flat[0], scale)):
                continue
            if same(a, v, rtol, atol):
                hits.append(n)
        return hits

    def has_shape(self, shape: tuple) -> bool:
        """Whether some named value (not a tuple of several) has this shape: if none has, ``identify`` finds no
        plain array of it."""
        return shape in self._by_shape()

    def _by_shape(self) -> dict[tuple, list[tuple[str, np.ndarray, float | None]]]:
        """(name, value, its largest magnitude) grouped by shape; built once, as identify runs for every value."""
        index = self.__dict__.get("_shapes")
        if index is None or index[0] != len(self.values):
            groups: dict[tuple, list] = {}
            for n, v in self.values.items():
                if structured(v):
                    continue  # an op's several outputs: found by identify's own loop
                arr = np.asarray(v)
                numeric = arr.size and arr.dtype.kind in "biuf" and np.all(np.isfinite(arr))
                scale = float(np.abs(arr).max()) if numeric else None
                groups.setdefault(arr.shape, []).append((n, arr, scale))
            index = self.__dict__["_shapes"] = (len(self.values), groups)
        return index[1]

    def identify_part(
        self,
        found: Any,
        index: Any,
        *,
        rtol: float | None = None,
        atol: float | None = None,
        exclude: str | None = None,
    ) -> list[str]:
        """Names of reference values whose part ``index`` equals ``found`` ('the same part of Z')."""
        if index is None:
            return []
        hits = []
        for n, v in self.values.items():
            if n == exclude:
                continue
            try:
                value = part(v, index)
            except (IndexError, TypeError, ValueError):
                continue
            if same(found, value, rtol, atol):
                hits.append(n)
        return hits


def _near(a: Any, b: Any, scale: float) -> bool:
    """Whether two elements may be equal under any comparison's tolerance (compare.py's are all tighter)."""
    return bool(abs(float(a) - float(b)) <= 0.02 * (abs(float(b)) + scale))


def part(value: Any, index: Any) -> Any:
    """The part ``index`` of a value: a numpy index, or a function of the value (None: all of it)."""
    if index is None:
        return value
    if callable(index):
        return index(value)
    return np.asarray(value)[index]


__all__ = ["NO_RESULT", "Reference", "part", "same"]
