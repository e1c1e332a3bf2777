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
from numpy import abs as _abs  # the grader's own NumPy, taken before any student code loads
from numpy import errstate as _errstate
from numpy import flatnonzero as _flatnonzero
from numpy import isfinite as _isfinite
from numpy import maximum as _maximum

from ..core.trace import Trace
from ..core.world import World
from .compare import EXACT_BY_BYTES, RTOL, floor_share, same, show, structured


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

    def memo(self, what: str, key: Any, owner: Any = None) -> dict:
        """A dict the checker keeps with this reference for answers that depend on its values and on ``key`` (the
        tolerances; and on ``owner``, a split, where one is given): a grader checking many runs of one exercise asks
        each question once. Only the last key and owner are kept for each ``what``: another, or a value added to the
        model, starts it anew. A key that cannot be hashed gets a dict of its own, kept nowhere."""
        memos = self.__dict__.setdefault("_memos", {})
        full = (len(self.values), id(owner), key)
        try:
            hash(full)
        except TypeError:  # (a tolerance that is not a plain number: nothing kept)
            return {}
        kept = memos.get(what)
        if kept is not None and kept[0] == full and kept[1] is owner:
            return kept[2]
        answers: dict = {}
        memos[what] = (full, owner, answers)
        return answers

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
        group = self._group(a.shape)
        if group is None:
            return []
        names, arrays, samples, allowed, unscaled, exact = group
        if type(a) is np.ndarray and a.nbytes <= _EXACT_MOST:
            k = exact.get((a.dtype.str, a.tobytes()))
            if k is not None:  # the same bytes as one of the model's values: the same answer as that value's
                return [n for n in self._identified_as(a.shape, k, rtol, atol) if n != exclude]
        return self._scan(a, group, rtol, atol, exclude)

    def identify_exact(
        self, found: np.ndarray, rtol: float | None = None, atol: float | None = None
    ) -> list[str] | None:
        """``identify(found)`` of an array with the dtype and bytes of one of the model's values: the answer for that
        value, worked out once per tolerance; None for any other array (then only ``identify`` can say)."""
        group = self._group(found.shape)
        if group is None or found.nbytes > _EXACT_MOST:
            return None
        k = group[5].get((found.dtype.str, found.tobytes()))
        return None if k is None else list(self._identified_as(found.shape, k, rtol, atol))

    def _identified_as(self, shape: tuple, k: int, rtol: Any, atol: Any) -> list[str]:
        """``identify`` of the ``k``-th value of this shape, worked out once per tolerance (``_group``): a found
        value of the same dtype and bytes is indistinguishable from it, so it is equal to the same values."""
        memo = self.__dict__.setdefault("_identified", {})
        try:
            key = (len(self.values), shape, rtol, atol)
            answers = memo.get(key)
        except TypeError:  # a tolerance that is not hashable: worked out each time
            group = self._group(shape)
            return self._scan(group[1][k], group, rtol, atol, None)
        if answers is None:
            group = self._group(shape)
            answers = memo[key] = _answers(group, rtol, atol) if len(group[0]) <= _ANSWERED_AT_ONCE else {}
        names = answers.get(k)
        if names is None:  # (a group too large to answer at once: each value as it is met)
            group = self._group(shape)
            names = answers[k] = self._scan(group[1][k], group, rtol, atol, None)
        return names

    def _scan(self, a: np.ndarray, group: tuple, rtol: Any, atol: Any, exclude: str | None) -> list[str]:
        """``identify`` the long way: the few sampled elements of every same-shaped value, then those near in full."""
        names, arrays, samples, allowed, unscaled, _ = group
        candidates: Any = range(len(names))
        if a.size and a.dtype.kind in "biuf" and len(names) > 1:
            # a cheap look at a few elements first (one NumPy expression over all the candidates), with twice the
            # most each candidate's comparison could allow there (compare.tolerances: the median of its magnitudes is
            # at most the largest): most candidates of the same shape differ there plainly already
            mine = a.reshape(-1)[_sample_at(a.size)].astype(np.float64)
            with _errstate(all="ignore"):
                if rtol is not None or atol is not None:  # the caller's tolerances, in place of each dtype's
                    allowed = _allowed(samples, allowed[1], allowed[2], allowed[3], rtol, atol)
                else:
                    allowed = allowed[0]
                near = (_abs(mine - samples) <= allowed).all(axis=1)
            candidates = _flatnonzero(near | unscaled).tolist()
        return [names[k] for k in candidates if names[k] != exclude and same(a, arrays[k], rtol, atol)]

    def has_shape(self, shape: tuple) -> bool:
        """Whether some named value (not a tuple of several) has this shape: if none has, ``identify`` finds no
        plain array of it."""
        return shape in self._by_shape()[1]

    def _by_shape(self) -> tuple[int, dict[tuple, tuple[list, list]], dict[tuple, tuple]]:
        """Per shape, the names and values of it (not tuples of several: ``identify``'s own loop finds those), and
        the groups ``identify`` has needed so far (``_group``); made again if the model gained values."""
        index = self.__dict__.get("_shapes")
        if index is None or index[0] != len(self.values):
            lists: dict[tuple, tuple[list, list]] = {}
            for n, v in self.values.items():
                if structured(v):
                    continue
                arr = np.asarray(v)
                names, arrays = lists.setdefault(arr.shape, ([], []))
                names.append(n)
                arrays.append(arr)
            index = self.__dict__["_shapes"] = (len(self.values), lists, {})
            self.__dict__.pop("_identified", None)  # (each one's answer, by the positions of its group)
        return index

    def _group(self, shape: tuple) -> tuple | None:
        """The values of one shape, as ``identify`` looks at them (``_group_of``), made when first asked: a check
        meets values of only some shapes, and a fresh reference pays for those alone."""
        _, lists, groups = self._by_shape()
        group = groups.get(shape)
        if group is None:
            found = lists.get(shape)
            if found is None:
                return None
            group = groups[shape] = _group_of(*found)
        return group

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


_F64 = np.dtype(np.float64)
_EXACT_MOST = 1 << 16  # bytes of a value identify looks up by its bytes first (past it, hashing costs a comparison)


def _group_of(names: list[str], arrays: list[np.ndarray]) -> tuple:
    """The named values of one shape, for ``identify``: (names, values, a few elements of each (at ``_sample_at``),
    (what the default tolerances could allow there, each one's largest magnitude, the relative tolerance its dtype is
    compared with by default), whether each is never passed over (not numbers, empty, or holding a NaN or an
    infinity), and (dtype, bytes) -> the first value of them)."""
    exact: dict[tuple[str, bytes], int] = {}
    for k, arr in enumerate(arrays):
        if arr.dtype.kind in "biufcb" and arr.nbytes <= _EXACT_MOST:  # (no objects: their bytes are pointers)
            exact.setdefault((arr.dtype.str, arr.tobytes()), k)
    if len(arrays) > 1 and arrays[0].size and all(a.dtype == _F64 for a in arrays):
        # all float64 (the common case): each one's finiteness, samples and scale in one go, the same numbers
        rows = np.stack([a.reshape(-1) for a in arrays])
        numeric = _isfinite(rows).all(axis=1)
        at = np.where(numeric[:, None], rows[:, _sample_at(rows.shape[1])], np.nan)
        scale = np.where(numeric, _abs(rows).max(axis=1), np.nan)
        rtol = np.full(len(arrays), RTOL[8])
        share = np.full(len(arrays), floor_share(_F64))
    else:
        samples, scales, rtols, shares = [], [], [], []
        for arr in arrays:
            numeric = arr.size and arr.dtype.kind in "biuf" and _isfinite(arr).all()
            where = _sample_at(arr.size)
            samples.append(arr.reshape(-1)[where].astype(np.float64) if numeric else np.full(len(where), np.nan))
            scales.append(float(_abs(arr).max()) if numeric else np.nan)
            rtols.append(RTOL.get(arr.dtype.itemsize, 1e-7) if arr.dtype.kind in "fc" else 0.0)
            shares.append(floor_share(arr.dtype))
        scale, at = np.array(scales, dtype=np.float64), np.array(samples)
        rtol, share = np.array(rtols), np.array(shares)
    with _errstate(all="ignore"):  # (the default tolerances' bounds, worked out once)
        allowed = (_allowed(at, scale, rtol, share, None, None), scale, rtol, share)
    return names, arrays, at, allowed, np.isnan(scale), exact


_ANSWERED_AT_ONCE = 256  # values of one shape whose identify answers are all worked out in one go (n * n samples)


def _answers(group: tuple, rtol: Any, atol: Any) -> dict[int, list[str]]:
    """``Reference._scan`` of each value of one shape, all at once: the sampled elements of every value against
    those of every other in one NumPy expression (a row per value, as ``_scan`` compares one), then in full only
    the pairs near there."""
    names, arrays, samples, allowed, unscaled, _ = group
    n = len(names)
    if n > 1:
        at = _sample_at(arrays[0].size)
        with _errstate(all="ignore"):
            if rtol is not None or atol is not None:
                allowed = _allowed(samples, allowed[1], allowed[2], allowed[3], rtol, atol)
            else:
                allowed = allowed[0]
            mine = np.array([a.reshape(-1)[at].astype(np.float64) if a.size and a.dtype.kind in "biuf" else
                             np.zeros(len(at)) for a in arrays])  # fmt: skip
            near = (_abs(mine[:, None, :] - samples[None, :, :]) <= allowed[None, :, :]).all(axis=2)
        near |= unscaled[None, :]
        for k, a in enumerate(arrays):
            if not (a.size and a.dtype.kind in "biuf"):
                near[k] = True  # (as _scan: a value that is not numbers, or empty, is compared with every one)
    else:
        near = np.ones((n, n), dtype=bool)
    # (a value of numbers no larger than identical() compares by its bytes is the same as itself: no call)
    own = [a.dtype.kind in "biufc" and a.size <= EXACT_BY_BYTES for a in arrays]
    answers: dict[int, list[str]] = {k: [] for k in range(n)}
    rows, cols = np.nonzero(near)  # (row by row, each row's in order: as a scan of each row finds them)
    for k, j in zip(rows.tolist(), cols.tolist()):
        if (j == k and own[k]) or same(arrays[k], arrays[j], rtol, atol):
            answers[k].append(names[j])
    return answers


def _allowed(
    samples: np.ndarray,
    scales: np.ndarray,
    rtols: np.ndarray,
    shares: np.ndarray,
    rtol: float | None,
    atol: float | None,
):
    """Twice the most a comparison could allow at each sampled element of each candidate (``compare.tolerances``:
    the relative tolerance, and an absolute one of at most its floor's share of the largest magnitude (``shares``
    under the default rtol, ``compare.floor_share``), or ``atol``)."""
    r = (rtols if rtol is None else np.full(len(rtols), float(rtol)))[:, None]
    if rtol is not None:  # (as floor_share: a caller's rtol below the dtype's default takes its own share alone)
        shares = np.where(rtol < rtols, float(rtol) * 1e-2, _maximum(float(rtol) * 1e-2, shares))
    share = shares[:, None]
    return 2.0 * (_maximum(atol or 0.0, share * scales[:, None]) + r * _abs(samples))


def _sample_at(size: int) -> list[int]:
    """Where ``identify`` looks first in a value of this many elements: the first, the middle and the last."""
    return sorted({0, size // 2, size - 1}) if size else []


def part(value: Any, index: Any) -> Any:
    """The part ``index`` of a value: a numpy index, or a function of the value (None: all of it)."""
    if index is None:
        return value
    if callable(index):
        return index(value)
    return np.asarray(value)[index]


__all__ = ["NO_RESULT", "Reference", "part", "same"]
