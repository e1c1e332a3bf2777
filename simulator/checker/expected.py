"""What each name of the model should hold, worked out once per check: the walk's memory of expected values.

A check compares thousands of values with a few hundred of the model's: the expected value of each name and
index (a running sum ``x[0]+x[1]+x[2]`` is the sum before it plus one term), its tolerance (worked out on the
first value that differs from it in its bytes, and only if that value is neither plainly within nor plainly
past it: ``compare.bounded``), whether the reference knows a name, and the names a small value equals.
``_Checker`` (run_check.py) holds these as a mixin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensors.placements import FlatSlice
from .compare import bounded, downcast, identical, same, structured, tolerances
from .reference import Reference, part


class _Expectations:
    """The expected values, tolerances and names a check remembers (mixed into ``_Checker``)."""

    rtol: float | None
    atol: float | None

    def _start_expectations(self) -> None:
        # per (reference, name, index): [the expected value, its tolerance once needed, whether it is ambiguous]
        self._expectations: dict[tuple, list] = {}
        self._known: dict[tuple[int, str], bool] = {}  # (reference, name) -> ref.knows(name)
        self._kept: dict[tuple[int, str], dict] = {}  # (reference, what) -> what it keeps for us (_ref_memo)
        self._identified: dict[tuple, list[str]] = {}  # (reference, small value's bytes) -> ref.identify(value)
        self._unambiguous: dict[tuple[int, int], Any] = {}  # (reference, id) -> a value found to equal no two others

    def remember(self, other: _Expectations) -> None:
        """Start from what another check of the same run worked out: expected values, tolerances, names (each a
        function of the model, the tolerances and a value's bytes, so the same in both)."""
        self._expectations, self._known, self._kept = other._expectations, other._known, other._kept
        self._identified, self._unambiguous = other._identified, other._unambiguous

    def _knows(self, ref: Reference, name: str) -> bool:
        """``ref.knows(name)``, once per name; a sum ``A+B+C`` is known when ``A+B`` is and ``C`` is a value (a ring's
        running sums grow by one term a step: each name is then one more look-up, not a split of the whole)."""
        key = (id(ref), name)
        known = self._known.get(key)
        if known is None:
            if "+" in name and name not in ref.values and name not in ref.aliases:
                known = self._terms_known(ref, name)
            else:
                known = ref.knows(name)
            self._known[key] = known
        return known

    def _terms_known(self, ref: Reference, name: str) -> bool:
        """Whether every term of ``A+B+C`` is a value of the model (as ``Reference.knows`` asks of a sum), by its
        first terms (remembered) and its last."""
        head, _, last = name.rpartition("+")
        if last not in ref.values:
            return False
        if "+" not in head:
            return head in ref.values
        known_sums = self._ref_memo(ref, "sums known", None)  # (kept with the reference: a function of its names)
        known = known_sums.get(head)
        if known is None:
            known = known_sums[head] = self._terms_known(ref, head)
        return known

    def _ref_memo(self, ref: Reference, what: str, key: Any = ...) -> dict:
        """``ref.memo(what, key)`` (by default this check's tolerances), looked up once per check."""
        memo = self._kept.get((id(ref), what))
        if memo is None:
            memo = self._kept[(id(ref), what)] = ref.memo(what, (self.rtol, self.atol) if key is ... else key)
        return memo

    def _expect(self, ref: Reference, name: str, index: Any, at: Any = None) -> list | None:
        """[the expected value of ``name`` at ``index``, its tolerance, whether it is ambiguous (None: not known yet)]:
        worked out once per name and index (a running sum's name adds the model's values up), None where an index
        cannot be a key (a function). ``at``: ``_index_key(index)``, where the caller has it."""
        if at is None:
            at = _index_key(index)
            if at is None:
                return None
        key = (id(ref), name, at)
        slot = self._expectations.get(key)
        if slot is None:
            if "+" not in name or name in ref.values or name in ref.aliases:
                value = ref.expected(name, index)
            else:  # a running sum: the sum of its first terms (worked out for the message before) plus its last
                value = self._running_sum(ref, name, index, at)
            slot = self._expectations[key] = [value, None, None]
        return slot

    def _running_sum(self, ref: Reference, name: str, index: Any, at: Any) -> Any:
        """The model's values named ``A+B+C`` at ``index``, added in that order as ``Reference.expected`` adds them
        (the same operations, so the same bits), each sum of the first terms kept: a ring's running sums grow by
        one term a step, and each is then one addition."""
        sums = self._ref_memo(ref, "running sums", None)  # (kept with the reference: a function of its values)
        key = (name, at)
        total = sums.get(key)
        if total is None:
            head, plus, last = name.rpartition("+")
            term = part(ref.values[last], index)
            total = term if not plus else self._running_sum(ref, head, index, at) + term
            sums[key] = total
        return total

    def _same(self, found: Any, slot: list) -> bool:
        """``same(found, expected)``, with the expected value's tolerance worked out on its first mismatch only."""
        expected = slot[0]
        if slot[1] is None:
            if structured(found) or structured(expected):
                return same(found, expected, self.rtol, self.atol)
            a, b = np.asarray(found), np.asarray(expected)
            if a.shape == b.shape and a.dtype == b.dtype and b.dtype.kind in "biufc" and identical(a, b):
                return True
            if b.dtype.kind not in "fc":
                return same(found, expected, self.rtol, self.atol)
            if a.shape != b.shape or downcast(a, b) or a.dtype.kind not in "biufc":
                return same(found, expected, self.rtol, self.atol)
            verdict = bounded(a, b, self.rtol, self.atol)
            if verdict is not None:
                return verdict  # within the tolerance's lower bound, or past its upper: no median taken
            slot[1] = tolerances(b, self.rtol, self.atol)
        return same(found, expected, tol=slot[1])

    def _identify_value(self, ref: Reference, value: Any) -> list[str]:
        """``_identify_names`` of any value that is not several (a scalar too): what the split check asks."""
        return self._identify_names(ref, np.asarray(value))

    def _identify_names(self, ref: Reference, a: np.ndarray) -> list[str]:
        """``ref.identify(a)``, remembered for small values by their bytes (a ring passes the same values round); the
        model's own bytes answered as the reference keeps them for that value (``identify_exact``)."""
        if type(a) is np.ndarray:
            names = ref.identify_exact(a, self.rtol, self.atol)
            if names is not None:
                return names
        if a.size > 64:
            return ref.identify(a, rtol=self.rtol, atol=self.atol)
        key = (id(ref), a.shape, a.dtype.str, a.tobytes())
        names = self._identified.get(key)
        if names is None:
            names = self._identified[key] = ref.identify(a, rtol=self.rtol, atol=self.atol)
        return names


_ARRAY_KEY_SIZE = 1 << 12  # an index array up to this many elements is remembered by its bytes


def _index_key(index: Any) -> Any:
    """A key for an index made of integers, slices of integers, None and small arrays of integers or booleans (the
    positions a balanced context-parallel split holds), or a ``FlatSlice`` (a collective's chunk); slices and arrays
    are not hashable, so each becomes what it selects by (an array: its dtype, shape and bytes). None for any other
    index (a function), not remembered."""
    if index is None:
        return ()
    if type(index) is FlatSlice:  # a chunk of a collective's flattened value: a function of its two ends alone
        a, b = index.start, index.stop
        return ("flat", a, b) if type(a) is int and type(b) is int else None
    if type(index) is slice:  # (the common case, a chunk: np.s_[2:4])
        a, b, c = index.start, index.stop, index.step
        if (a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int):
            return (False, (a, b, c))
        return None
    key: list = [type(index) is tuple]
    for p in index if type(index) is tuple else (index,):
        kind = type(p)
        if kind is slice:
            a, b, c = p.start, p.stop, p.step
            if not ((a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int)):
                return None
            key.append((a, b, c))
        elif kind is int or p is None or p is Ellipsis:
            key.append(p)
        elif kind is np.ndarray and p.dtype.kind in "biu" and p.size <= _ARRAY_KEY_SIZE:
            key.append((p.dtype.str, p.shape, p.tobytes()))
        else:
            return None
    return tuple(key)
