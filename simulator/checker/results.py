"""The result: what each device returns, compared with the model's result, leaf by leaf.

A result may be a structure (dicts, lists, tuples of arrays); ``_pairs`` walks the returned structure
down the model's, and ``_coverage`` says which parts of the model's result no device returned.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core.trace import Op
from . import diagnose
from .compare import same, show, structured
from .explain import _floaty, _partial_words
from .reference import NO_RESULT, Reference, part
from .verdict import Divergence, Unchecked


class _ResultChecks:
    """What the devices return, against the model's result (mixed into ``_Checker``; run after the walk).

    A returned shard is compared with its part of the result, and the parts must cover the whole result.
    It uses the checker's ``outputs``, ``origin``, ``last_event``, ``refs``, ``_ref`` and ``_compare``,
    and adds to its ``checked``, ``diverged``, ``unchecked`` and ``produced`` (a result compared equal counts as
    its model value compared).
    """

    def _results(self) -> None:
        if self.outputs is None:
            self.unchecked.append(Unchecked("result", "the run's return values were not recorded, so not compared"))
            return
        covered: dict[tuple[int, tuple], np.ndarray | bool] = {}
        returned = False
        for rank, out in enumerate(self.outputs):
            if out is None or (structured(out) and all(leaf is None for _, leaf in _leaves(out))):
                continue  # holds none of the result
            returned = True
            ref = self._ref(rank)
            if ref.result is None:  # the model returns nothing: there is nothing to compare a returned value with
                self.unchecked.append(
                    Unchecked(
                        "result",
                        f"device {rank} returned {show(out)}, but the model returns nothing, so it was not compared: "
                        "return the result from the model too (its last op, e.g. return dev.compute(...))",
                    )
                )
                continue
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
        if leaf is None and path:
            return  # a place of a structured result this device does not hold (another device returns it)
        event = self.last_event[rank]
        if _other_form(leaf, whole):
            self.checked += 1
            d = Divergence("result", rank, event, None, "the result", whole, leaf, [], ref, path=label)
            d.hint = _structure_words(leaf, whole, label)
            self.diverged.append(d)
            covered[(id(ref), path)] = True  # compared (and wrong)
            return
        origin = self.origin_of(rank, leaf)
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
        # a received, unnamed value has no name of its own (a message's name is None): call it the result
        name = getattr(origin, "name", None) or "the result"
        equal = self._compare("result", rank, event, origin, name, expected, leaf, None, label)
        key = (id(ref), path)
        if index is None:
            covered[key] = True
            if equal and not path:  # the model's value that is its result was compared, here, whatever its name
                self.produced.setdefault(id(ref), set()).update(ref.identify(whole, rtol=self.rtol, atol=self.atol))
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

    def _results_add_up(self, d: Divergence) -> bool:
        """Whether what the devices returned (at this place in the result) sums to the expected value."""
        leaves = []
        for out in self.outputs or []:
            for path, leaf, _ in _pairs(out, d.reference.result) if out is not None else ():
                if _path(path) == d.path:
                    leaves.append(np.asarray(leaf))
        if structured(d.expected) or len(leaves) < 2 or any(leaf.shape != np.shape(d.expected) for leaf in leaves):
            return False
        if all(same(leaf, leaves[0], self.rtol, self.atol) for leaf in leaves[1:]):
            return False  # one value on every device, 1/p of the result: an average, not p partial sums
        return same(sum(leaves[1:], leaves[0]), d.expected, self.rtol, self.atol)


_ABSENT: Any = object()  # a part of a returned structure that the model's result does not have


def _other_form(found: Any, model: Any) -> bool:
    """A returned value whose form is not the model's: a dict where a list is, or a structure where an array is
    that is not a plain list of numbers (``[49.0]`` for ``array([49.])`` is compared as the array it is)."""
    if isinstance(found, Mapping) != isinstance(model, Mapping):
        return True
    if structured(found) and not structured(model):
        try:
            return np.asarray(found).dtype.kind not in "biufc"
        except ValueError:  # ragged: a list holding None and an array
            return True
    return structured(model) and not structured(found)


def _structure_words(found: Any, model: Any, label: str) -> str | None:
    """A returned value whose form is not the model's (a list where the model has one array), in words, with
    the rule for what a device returns."""
    if isinstance(found, (list, tuple)) and not structured(model):
        try:
            pieces = [np.asarray(p) for p in found]
        except ValueError:
            pieces = []
        if pieces and all(p.dtype.kind in "biufc" and p.ndim == np.ndim(model) for p in pieces):
            return None  # pieces of the array: the explanation says how to join them
    return (
        f"It is {_form(found)}, where the model's result{label} is {_form(model)}: a device returns the model's "
        "result in the model's form, or its own block of it (an op's output with index=), or None where it holds "
        "none of it; in a list, tuple or dict, None in the places it does not hold."
    )


def _form(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"a dict with keys {list(value)[:6]}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} item{'s' if len(value) != 1 else ''}"
    if value is None:
        return "None"
    return f"an array of shape {np.shape(value)}"


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
